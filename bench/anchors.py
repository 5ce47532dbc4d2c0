"""The implementations a workload is timed in: fusec (fused and unfused builds) and the anchors
users would pick instead. Each is optional: `prepare` returns an `Impl`, or raises `Skip` with a
note (not installed, no GPU, compile failure), and the suite goes on without it. See
docs/PERFORMANCE.md, "Benchmarks".
"""
from __future__ import annotations

import functools
import importlib.util
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from . import scratch_dir
from .workloads import NUMPY, Workload, array_fns, jax_fns, torch_fns, torch_out_fns

CPU_ANCHORS = ("numpy", "torch", "torch.compile", "jax.jit", "onnxruntime", "tvm")
GPU_ANCHORS = ("cupy", "torch", "torch.compile")


# The two memory modes every implementation is timed in (docs/PERFORMANCE.md, "Memory"):
# "default", as its users call it (fresh outputs for NumPy, torch, jax and onnxruntime's run(),
# fusec's planned pool of output buffers), and "equalised": the process started with huge pages
# for malloc and torch's allocator (bench/__main__.py), fusec handing back a fresh output each
# call (Executable.fresh_outputs), torch eager writing into a preallocated output where the
# last op takes out=, onnxruntime binding preallocated outputs (IOBinding).
MEMORY_MODES = ("default", "equalised")

# MetaSchedule's time bound for TVM's tuning, seconds (0: not tried); `python -m bench` sets it
TVM_TUNE = {"seconds": 0.0, "trials": 64}


class Skip(Exception):
    """This implementation cannot run here; the message says why."""


@dataclass
class Impl:
    """`call()` runs the workload once on prepared inputs and returns when the result is ready
    (synchronising devices); `result()` gives that output as a NumPy array. `cold_s` is the first
    call's time (compilation included) and `cached_s`, where the tool has a cache, the time of a
    first call that finds the cache filled."""
    name: str
    call: Callable[[], object]
    result: Callable[[], np.ndarray]
    cold_s: float | None = None
    cached_s: float | None = None
    notes: list[str] = field(default_factory=list)
    detail: dict = field(default_factory=dict)


def _have(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _timed_first(fn: Callable[[], object]) -> tuple[object, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


# ---- fusec ---------------------------------------------------------------------------------

def fusec_impls(w: Workload, binding: dict, inputs: list[np.ndarray], target: str,
                memory: str = "default") -> list[Impl]:
    """fusec's fused and unfused builds of the workload's chain (one compile gives both);
    memory "equalised": each call hands back a fresh output (Executable.fresh_outputs)."""
    import fusec
    from fusec.artifacts import load_chain
    from fusec.runtime import artifact as art

    t0 = time.perf_counter()
    prog = fusec.compile(str(w.fdsl), target=target)
    chain = prog.chains[w.chain]
    built = chain.compiled(binding)
    mlir_s = time.perf_counter() - t0
    stage_s = {k: round(v, 4) for k, v in built.compile_seconds.items()}
    impls = []
    for build in ("fused", "unfused"):
        getattr(built, build).fresh_outputs = memory == "equalised"
        impl, jit_s = _executable_impl(f"fusec {build}", getattr(built, build), inputs)
        impl.cold_s = (mlir_s if build == "fused" else 0.0) + jit_s
        impl.detail = {"kernels": built.kernel_counts.get(build), "jit_s": round(jit_s, 4)}
        if build == "fused":
            impl.detail.update(mlir_s=round(mlir_s, 4), stage_s=stage_s)
            impl.cached_s = _fusec_cached(built.artifact_dir, chain.typed, built.target, inputs, load_chain, art)
        impls.append(impl)
    return impls


def fusec_dynamic_impl(w: Workload, binding: dict, inputs: list[np.ndarray], target: str,
                       memory: str = "default") -> Impl:
    """fusec's fused build with the workload's DYNAMIC_SYMBOL taken at run time (--dynamic),
    planned for its size class; raises Skip with the user error when the chain cannot take it."""
    import fusec
    from fusec.dsl.diagnostics import FdslError
    from .workloads import DYNAMIC_SYMBOL
    sym = DYNAMIC_SYMBOL[w.name]
    t0 = time.perf_counter()
    prog = fusec.compile(str(w.fdsl), target=target, options={"dynamic": [sym], "baseline": False})
    chain = prog.chains[w.chain]
    try:
        built = chain.compiled(binding)
    except FdslError as e:
        raise Skip("refused: " + e.diagnostics[0].message) from None
    built.fused.fresh_outputs = memory == "equalised"
    impl, jit_s = _executable_impl("fusec dynamic", built.fused, inputs)
    impl.cold_s = time.perf_counter() - t0
    impl.detail = {"symbol": sym, "planned_at": built.plan["dynamic"][sym], "kernels": built.kernel_counts.get("fused"),
                   "jit_s": round(jit_s, 4)}
    return impl


def _executable_impl(name: str, exe, inputs: list[np.ndarray]) -> tuple[Impl, float]:
    """A build's Executable as an Impl on prepared inputs (its result kept for the agreement
    check), and the seconds of its first call (Numba's compile or cache load)."""
    args = exe.prepare(inputs)
    holder: dict = {}

    def call():
        holder["out"] = exe.run_prepared(args)
        exe.target.synchronize()
        return holder["out"]

    _, jit_s = _timed_first(call)
    return Impl(name, call, lambda: np.asarray(exe.target.to_host(holder["out"][0]))), jit_s


def _fusec_cached(directory: Path, typed, target, inputs, load_chain, art) -> float:
    """A later process's start from the persistent cache: the artifact loaded with no MLIR and
    Numba's machine code loaded from the artifact's own cache (cpu functions, cuda kernels).
    One copy is loaded and run first, to fill that cache, as the first process did; a copy of
    the copy (a new path: imported afresh, the cache files with it) is then loaded and run,
    timed."""
    root = Path(tempfile.mkdtemp(prefix="fusec-bench-cached-"))
    try:
        first = root / "first" / directory.name
        shutil.copytree(directory, first)
        load_chain(art.load(first), typed, target, numba_cache=True).fused(*inputs)
        again = root / "again" / directory.name
        shutil.copytree(first, again)
        t0 = time.perf_counter()
        built = load_chain(art.load(again), typed, target, numba_cache=True)
        built.fused(*inputs)
        return time.perf_counter() - t0
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ---- anchors -------------------------------------------------------------------------------

def prepare(anchor: str, w: Workload, inputs: list[np.ndarray], memory: str = "default") -> Impl:
    """An anchor's Impl for workload `w` in memory mode `memory` (MEMORY_MODES); raises Skip
    with the reason when it cannot run."""
    makers = {"numpy": _numpy, "torch": _torch_eager, "torch.compile": _torch_compile,
              "jax.jit": _jax, "cupy": _cupy, "torch.cuda": _torch_cuda,
              "torch.compile.cuda": _torch_compile_cuda, "onnxruntime": _onnxruntime, "tvm": _tvm}
    if anchor not in makers:
        raise Skip(f"unknown anchor {anchor!r}")
    if anchor in ("torch", "onnxruntime"):
        return makers[anchor](w, inputs, memory=memory)
    return makers[anchor](w, inputs)


def _numpy(w: Workload, inputs) -> Impl:
    fn = NUMPY[w.name]
    holder: dict = {}

    def call():
        holder["out"] = fn(*inputs)
        return holder["out"]
    _, cold = _timed_first(call)
    return Impl("numpy", call, lambda: np.asarray(holder["out"]), cold_s=cold)


def _import_torch():
    if not _have("torch"):
        raise Skip("PyTorch is not installed (pip install -e '.[bench]')")
    import torch
    return torch


def _torch_eager(w: Workload, inputs, device: str = "cpu", name: str = "torch", memory: str = "default") -> Impl:
    torch = _import_torch()
    fn = torch_fns(torch)[w.name]
    note = None
    if memory == "equalised":
        outs = torch_out_fns(torch)
        if w.name in outs:
            buf = torch.empty(w.output_shape(_binding_of(w, inputs)), device=device)
            fn = functools.partial(outs[w.name], out=buf)
            note = "equalised: the last op writes into a preallocated output (out=)"
        else:
            note = "equalised: no out= for this workload's last op; fresh output (huge pages)"
    impl = _torch_impl(torch, name, fn, inputs, device)
    if note:
        impl.notes.append(note)
    return impl


def _binding_of(w: Workload, inputs) -> dict:
    """The binding whose inputs these are (tiny or full): the one whose shapes they have."""
    for size in ("full", "tiny"):
        b = w.binding(size)
        if all(a.shape(b) == x.shape for a, x in zip(w.args, inputs)):
            return b
    raise Skip("inputs of neither size")


def _torch_compile(w: Workload, inputs, device: str = "cpu", name: str = "torch.compile",
                   cached: bool = True) -> Impl:
    torch = _import_torch()
    fn = torch_fns(torch)[w.name]
    compiled = torch.compile(fn)
    try:
        impl = _torch_impl(torch, name, compiled, inputs, device)
    except Exception as e:     # inductor needs a C++ compiler (CPU) or Triton (GPU)
        raise Skip(f"torch.compile failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}") from None
    if not cached:
        return impl
    # cached: a fresh dynamo trace that finds inductor's on-disk caches filled
    torch._dynamo.reset()
    again = torch.compile(fn)
    args = [torch.from_numpy(x).to(device) for x in inputs]
    _, impl.cached_s = _timed_first(lambda: _sync(torch, device, again(*args)))
    return impl


def _sync(torch, device: str, out):
    if device == "cuda":
        torch.cuda.synchronize()
    return out


def _torch_impl(torch, name: str, fn, inputs, device: str) -> Impl:
    args = [torch.from_numpy(x).to(device) for x in inputs]
    holder: dict = {}

    def call():
        with torch.no_grad():
            holder["out"] = fn(*args)
        return _sync(torch, device, holder["out"])
    _, cold = _timed_first(call)
    impl = Impl(name, call, lambda: holder["out"].detach().cpu().numpy(), cold_s=cold)
    impl.detail = {"torch": torch.__version__, "threads": torch.get_num_threads()}
    return impl


def _jax(w: Workload, inputs) -> Impl:
    if not _have("jax"):
        raise Skip("JAX is not installed (pip install -e '.[bench]')")
    import jax
    import jax.numpy as jnp
    fn = jax_fns(jax, jnp)[w.name]
    args = [jax.device_put(x) for x in inputs]
    holder: dict = {}
    jitted = jax.jit(fn)

    def call():
        holder["out"] = jitted(*args).block_until_ready()
        return holder["out"]
    _, cold = _timed_first(call)
    impl = Impl("jax.jit", call, lambda: np.asarray(holder["out"]), cold_s=cold)
    impl.cached_s = _jax_cached(jax, fn, args)
    impl.detail = {"jax": jax.__version__}
    return impl


def _jax_cached(jax, fn, args) -> float | None:
    """Re-jit after clearing the in-memory caches, with JAX's persistent cache filled."""
    try:
        jax.config.update("jax_compilation_cache_dir", scratch_dir("fusec-bench-jax-"))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        jax.jit(fn)(*args).block_until_ready()        # fills the persistent cache
        jax.clear_caches()
        _, s = _timed_first(lambda: jax.jit(fn)(*args).block_until_ready())
        return s
    except Exception:      # older JAX without these options: no cached number
        return None


def _onnxruntime(w: Workload, inputs, memory: str = "default") -> Impl:
    from .runtimes import ort_runner
    return _onnx_impl("onnxruntime", "onnxruntime", "onnxruntime is not installed (pip install -e '.[dev]')",
                      "session_s", w, inputs, lambda model, feed: ort_runner(model, feed,
                                                                            preallocate=memory == "equalised"))


def _tvm(w: Workload, inputs) -> Impl:
    from .runtimes import tvm_runner
    return _onnx_impl("tvm", "tvm", "apache-tvm is not installed (pip install -e '.[bench]')", "build_s", w, inputs,
                      lambda model, feed: tvm_runner(model, feed, tune_seconds=TVM_TUNE["seconds"],
                                                     tune_trials=TVM_TUNE["trials"]))


def _onnx_impl(name: str, module: str, missing: str, setup_key: str, w: Workload, inputs, run) -> Impl:
    """An anchor that runs the workload's ONNX form (bench/onnx_forms.py) through `run(model,
    feed)` (a bench/runtimes.py runner); its setup (session, build) counted in the cold time."""
    from .onnx_forms import onnx_form
    from .runtimes import RuntimeUnavailable
    if not _have(module):
        raise Skip(missing)
    try:
        model, feed, notes = onnx_form(w, inputs)
        r = run(model, feed)
    except (RuntimeError, RuntimeUnavailable) as e:
        raise Skip(str(e)) from None
    _, cold = _timed_first(r.call)
    impl = Impl(name, r.call, r.result, cold_s=r.setup_s + cold, notes=notes + r.notes)
    impl.detail = {**r.detail, setup_key: round(r.setup_s, 4)}
    return impl


def _cupy(w: Workload, inputs) -> Impl:
    if not _have("cupy"):
        raise Skip("CuPy is not installed")
    import cupy as cp
    try:
        cp.cuda.runtime.getDeviceCount()
    except Exception as e:
        raise Skip(f"no CUDA device for CuPy: {e}") from None
    fn = array_fns(cp)[w.name]
    args = [cp.asarray(x) for x in inputs]
    holder: dict = {}

    def call():
        holder["out"] = fn(*args)
        cp.cuda.get_current_stream().synchronize()
        return holder["out"]
    _, cold = _timed_first(call)
    return Impl("cupy", call, lambda: cp.asnumpy(holder["out"]), cold_s=cold)


def _torch_cuda(w: Workload, inputs) -> Impl:
    torch = _import_torch()
    if not torch.cuda.is_available():
        raise Skip("no CUDA device for PyTorch")
    return _torch_eager(w, inputs, "cuda", "torch")


def _torch_compile_cuda(w: Workload, inputs) -> Impl:
    torch = _import_torch()
    if not torch.cuda.is_available():
        raise Skip("no CUDA device for PyTorch")
    return _torch_compile(w, inputs, "cuda", "torch.compile", cached=False)   # time: one compile each
