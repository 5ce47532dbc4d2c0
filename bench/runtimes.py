"""ONNX runtimes as the benchmark's anchors run them, for any ONNX model (the micro workloads'
graphs, bench/onnx_forms.py, and whole models): onnxruntime and TVM Relax, each configured as
its users deploy it (docs/PERFORMANCE.md, "onnxruntime and TVM").

    r = ort_runner(model_or_path, {"x": x}, threads)      # or tvm_runner(model, {"x": x}, threads)
    outs = r.call()                                        # list of NumPy arrays (ORT) / tensors (TVM)
    r.setup_s, r.notes, r.detail                           # session creation / build seconds, config

Both raise `RuntimeUnavailable` (a message saying why) when the runtime is not installed or
cannot take the model; the bench turns that into a recorded Skip.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

# onnxruntime reads models up to this IR version; graphs written by a newer onnx are lowered to
# it when ORT refuses them (their opsets are what ORT checks, not the IR version's features)
ORT_MAX_IR = 10


class RuntimeUnavailable(Exception):
    """This runtime cannot run the model here; the message says why."""


@dataclass
class Runner:
    """`call()` runs the model once on the bound inputs and returns its outputs; `result()`
    gives the last call's first output as a NumPy array. `setup_s`: ORT's session creation or
    TVM's import + build, seconds. `notes`: what was configured and what failed on the way."""
    name: str
    call: Callable[[], list]
    result: Callable[[], np.ndarray]
    setup_s: float
    notes: list[str] = field(default_factory=list)
    detail: dict = field(default_factory=dict)


def _load(model_or_path):
    import onnx
    if isinstance(model_or_path, (str, Path)):
        return onnx.load(str(model_or_path))
    return model_or_path


def host_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# ---- onnxruntime -------------------------------------------------------------------------------

def ort_runner(model_or_path, inputs: dict[str, np.ndarray], threads: int | None = None,
               preallocate: bool = False) -> Runner:
    """An onnxruntime InferenceSession at ORT_ENABLE_ALL with `threads` intra-op threads (default:
    the host's cores), one inter-op thread and spinning off (its pools otherwise spin after each
    call and take the cores from whatever runs next). `preallocate`: outputs bound once to
    preallocated NumPy arrays through IOBinding (written in place every call, no fresh
    allocation), for the memory-equalised timing; default: `session.run`, fresh outputs per call
    as users call it."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise RuntimeUnavailable("onnxruntime is not installed (pip install -e '.[dev]')") from None
    threads = threads or host_cores()
    model = _load(model_or_path)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.add_session_config_entry("session.inter_op.allow_spinning", "0")
    notes = [f"onnxruntime {ort.__version__}, ORT_ENABLE_ALL, CPUExecutionProvider, intra-op {threads}, "
             f"inter-op 1, spinning off"]
    t0 = time.perf_counter()
    try:
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    except Exception as e:
        if "ir version" not in str(e).lower() or model.ir_version <= ORT_MAX_IR:
            raise RuntimeUnavailable(f"onnxruntime refused the model: {str(e).splitlines()[0][:200]}") from None
        import onnx
        lowered = onnx.ModelProto()
        lowered.CopyFrom(model)
        notes.append(f"ir_version {model.ir_version} lowered to {ORT_MAX_IR} (refused: {str(e).splitlines()[0][:120]})")
        lowered.ir_version = ORT_MAX_IR
        t0 = time.perf_counter()
        sess = ort.InferenceSession(lowered.SerializeToString(), so, providers=["CPUExecutionProvider"])
    setup_s = time.perf_counter() - t0
    feed = {k: np.ascontiguousarray(v) for k, v in inputs.items()}
    names = [o.name for o in sess.get_outputs()]
    holder: dict = {}
    if preallocate:
        first = sess.run(names, feed)              # the shapes, once
        binding = sess.io_binding()
        for k, v in feed.items():
            binding.bind_cpu_input(k, v)
        bufs = [np.empty_like(o) for o in first]
        for n, b in zip(names, bufs):
            binding.bind_output(n, "cpu", 0, b.dtype, list(b.shape), b.ctypes.data)
        notes.append("outputs preallocated (IOBinding)")

        def call():
            sess.run_with_iobinding(binding)
            holder["out"] = bufs
            return bufs
    else:
        def call():
            holder["out"] = sess.run(names, feed)
            return holder["out"]
    return Runner("onnxruntime", call, lambda: np.asarray(holder["out"][0]), setup_s, notes,
                  {"onnxruntime": ort.__version__, "threads": threads, "preallocated": preallocate})


# ---- TVM Relax ---------------------------------------------------------------------------------

def tvm_target(threads: int) -> dict:
    """The JSON target for this host: LLVM with the host's CPU (its vector ISA; the bare "llvm"
    target emits generic SSE) and its cores."""
    import tvm
    return {"kind": "llvm", "mcpu": str(tvm.target.codegen.llvm_get_system_cpu()), "num-cores": threads}


def tvm_runner(model_or_path, inputs: dict[str, np.ndarray], threads: int | None = None,
               tune_seconds: float = 0.0, tune_trials: int = 64) -> Runner:
    """TVM Relax as its documentation builds an imported ONNX model for a CPU: `from_onnx`, the
    fusing pipeline relax.get_pipeline("zero") (LegalizeOps, FoldConstant, FuseOps, FuseTIR: the
    default cpu build does not fuse), FastMathTransform, DLight's cpu rules (GEMV, Reduction),
    the host's JSON target, `tvm.compile`, the Relax VM, TVM_NUM_THREADS = `threads` (TVM's pool
    defaults to half the cores).

    `tune_seconds` > 0: MetaSchedule (which TVM needs for fast GEMMs) tunes the module first in
    a child process bounded by that time (it segfaulted in apache-tvm 0.27's wheel; a crash there
    cannot end the bench); its database is applied where it succeeds, and where it does not the
    build is the untuned one, detail["tuned"] is False and a note says why."""
    threads = threads or host_cores()
    os.environ["TVM_NUM_THREADS"] = str(threads)     # read when TVM's pool starts (first parallel call)
    try:
        import tvm
        from tvm import relax
        from tvm.relax.frontend.onnx import from_onnx
        from tvm.s_tir import dlight as dl
    except ImportError as e:
        raise RuntimeUnavailable(f"apache-tvm is not installed (pip install -e '.[bench]'): {e}") from None
    model = _load(model_or_path)
    target = tvm.target.Target(tvm_target(threads))
    notes = [f"apache-tvm {tvm.__version__}, target {json.dumps(tvm_target(threads))}, TVM_NUM_THREADS={threads}, "
             f"relax pipeline 'zero' + FastMathTransform + dlight cpu GEMV/Reduction"]
    detail: dict = {"tvm": tvm.__version__, "target": tvm_target(threads), "threads": threads, "tuned": False}
    t0 = time.perf_counter()
    try:
        mod = from_onnx(model)
    except Exception as e:
        raise RuntimeUnavailable(f"TVM's ONNX frontend refused the model: {type(e).__name__}: "
                                 f"{str(e).splitlines()[0][:200] if str(e) else ''}") from None
    with target:
        mod = relax.get_pipeline("zero")(mod)
        mod = relax.transform.FastMathTransform()(mod)
    setup_s = time.perf_counter() - t0
    database = None
    if tune_seconds > 0:
        t1 = time.perf_counter()
        database, why = _metaschedule(model, tvm_target(threads), tune_seconds, tune_trials)
        detail["tune_s"] = round(time.perf_counter() - t1, 2)
        if database is None:
            notes.append(f"untuned TVM: MetaSchedule {why}")
            detail["untuned_reason"] = why
        else:
            detail["tuned"] = True
            notes.append(f"MetaSchedule: {tune_trials} trials")
    else:
        notes.append("untuned TVM: MetaSchedule not asked for")
        detail["untuned_reason"] = "not asked for"
    t0 = time.perf_counter()
    with target:
        if database is not None:
            with database:
                mod = relax.transform.MetaScheduleApplyDatabase()(mod)
        mod = dl.ApplyDefaultSchedule(dl.cpu.GEMV(), dl.cpu.Reduction())(mod)
    try:
        ex = tvm.compile(mod, target)
    except Exception as e:
        raise RuntimeUnavailable(f"TVM's build failed: {type(e).__name__}: "
                                 f"{str(e).splitlines()[0][:200] if str(e) else ''}") from None
    dev = tvm.cpu()
    vm = relax.VirtualMachine(ex, dev)
    setup_s += time.perf_counter() - t0        # import + build, MetaSchedule's tuning not included
    order = [i.name for i in model.graph.input if i.name in inputs]
    args = [tvm.runtime.tensor(np.ascontiguousarray(inputs[n]), dev) for n in order]
    main = vm["main"]
    holder: dict = {}

    def call():
        out = main(*args)
        holder["out"] = list(out) if isinstance(out, (list, tuple)) or type(out).__name__ == "Array" else [out]
        return holder["out"]
    return Runner("tvm", call, lambda: holder["out"][0].numpy(), setup_s, notes, detail)


_TUNE_SCRIPT = r"""
import sys, onnx, tvm
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx
from tvm.s_tir import meta_schedule as ms
target = tvm.target.Target(sys.argv[2])
with target:
    mod = relax.get_pipeline("zero")(from_onnx(onnx.load(sys.argv[1])))
    mod = relax.transform.FastMathTransform()(mod)
ms.relax_integration.tune_relax(mod=mod, params={}, target=target, work_dir=sys.argv[3],
                                max_trials_global=int(sys.argv[4]))
print("tuned")
"""


# a MetaSchedule failure that is the wheel's, not the model's (a crash, a missing module): later
# models in the same process are not tuned again, the reason is kept
_MS_BROKEN: list[str] = []


def _metaschedule(model, target: dict, seconds: float, trials: int):
    """MetaSchedule's tuning of the model's module (imported and fused as tvm_runner does) in a
    child process bounded by `seconds` (the module goes by its ONNX file: tvm.ir.save_json
    itself crashed on these modules): (database, None) or (None, why it failed)."""
    if _MS_BROKEN:
        return None, _MS_BROKEN[0] + " (on an earlier model in this run; not tried again)"
    from tvm.s_tir import meta_schedule as ms
    import onnx
    work = tempfile.mkdtemp(prefix="fusec-bench-tvm-ms-")
    src = Path(work) / "model.onnx"
    onnx.save(model, str(src))
    try:
        p = subprocess.run([sys.executable, "-c", _TUNE_SCRIPT, str(src), json.dumps(target),
                            work, str(trials)], capture_output=True, text=True, timeout=seconds)
    except subprocess.TimeoutExpired:
        return None, f"did not finish in {seconds:g} s"
    if p.returncode != 0:
        tail = [ln.strip() for ln in (p.stderr or "").splitlines() if ln.strip()]
        if p.returncode < 0:
            frame = next((ln for ln in tail if "tvm::" in ln), "")
            _MS_BROKEN.append(f"crashed (signal {-p.returncode}){' in ' + frame[:160] if frame else ''}")
            return None, _MS_BROKEN[0]
        why = next((ln for ln in reversed(tail) if "Error" in ln), tail[-1] if tail else "")
        if "required" in why or "ModuleNotFoundError" in why or "ImportError" in why:
            _MS_BROKEN.append(f"failed: {why[:200]}")
            return None, _MS_BROKEN[0]
        return None, f"failed (exit {p.returncode}): {why[:200]}"
    try:
        return ms.database.JSONDatabase(work_dir=work), None
    except Exception as e:
        return None, f"its database could not be read: {type(e).__name__}: {e}"
