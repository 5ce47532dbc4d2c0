"""The suite on a lent GPU, in one call, from artifacts compiled here (no MLIR there).

Here (no GPU needed):
    python -m bench.gpu prepare build/gpu-bench        # fusec compile --target cuda, every workload
                                                        # at full size, plus the lark wheel
On the GPU machine (its image has numba, numba-cuda, cupy, torch, triton; not lark, ml_dtypes
or MLIR),
through the device tool with carry=["build/gpu-bench"]:
    python -m bench.gpu run build/gpu-bench --out "$OUT"

`run` installs the carried lark and ml_dtypes wheels if missing, loads each artifact with fusec's
runtime only, measures the device's copy bandwidth (a device-to-device copy timed with CUDA
events), times fusec fused/unfused/dynamic (the workload's rows or batch taken at run time), CuPy,
PyTorch eager and torch.compile interleaved, checks every output against the NumPy reference (on
the host, in float64), starts each workload's artifact in two fresh processes one after the
other (the second loads the kernels from Numba's cache, which the first filled) and writes
`$OUT/<machine>-<date>.json`, which `python -m bench table` turns into the table of
docs/PERFORMANCE.md once copied into bench/results/.

The tensor-core workloads (`TENSOR_CORE`, issue 37: f16 and bf16 GEMM 4096^3, the bench mlp,
attention at B·H=16, S=2048, D=64 and 128, plain and causal) are compiled the same way, with the
plan's predicted H200 time kept in the manifest; `run` times fusec's fused build against PyTorch
eager (cuBLAS, scaled_dot_product_attention) and torch.compile on the same 16-bit inputs, checks
each against PyTorch in float32 (fusec's NumPy reference where PyTorch is missing) and records
measured beside predicted under "tensor_core" in the JSON.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GPU_SECONDS = 1.0     # timing budget per implementation: the whole run must fit a few minutes


def prepare(out: Path, only: list[str] | None = None, size: str = "full") -> None:
    """Compile every workload for the cuda target into out/<name>/, and fetch the lark wheel."""
    import lark

    import fusec
    from fusec.compiler.pipeline import build_chain
    from fusec.artifacts import write_artifact
    from fusec.target_options import compile_options
    from fusec.runtime.targets import Target

    from .workloads import WORKLOADS
    out.mkdir(parents=True, exist_ok=True)
    manifest = {"size": size, "workloads": {}}
    for w in WORKLOADS:
        if only and w.name not in only:
            continue
        binding = w.binding(size)
        text = w.fdsl.read_text()
        typed = fusec.check(str(w.fdsl))
        chain = next(c for c in typed.chains if c.name == w.chain)
        t0 = time.perf_counter()
        target = Target("cuda")
        options = compile_options(target)          # without a GPU here: planned for the H200
        built = build_chain(chain, binding, options)
        write_artifact(out / w.name, target, f"bench/fdsl/{w.fdsl.name}", text, options, [built])
        meta = manifest["workloads"][w.name] = {"binding": binding, "compile_s": round(time.perf_counter() - t0, 3)}
        print(f"compiled {w.name} {binding} for cuda in {meta['compile_s']} s", flush=True)
        meta["dynamic"] = _prepare_dynamic(out / f"{w.name}.dynamic", w, chain, binding, text)
    manifest["tensor_core"] = _prepare_tensor_core(out, only, size)
    wheels = out / "wheels"
    wheels.mkdir(exist_ok=True)
    if not list(wheels.glob("lark-*.whl")):
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels),
                        f"lark=={lark.__version__}"], check=True)
    if not list(wheels.glob("ml_dtypes-*.whl")):      # fusec.dsl imports it; binary: one per Python
        for version in ("3.10", "3.11", "3.12", "3.13"):
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels),
                            "--only-binary=:all:", "--python-version", version,
                            "--platform", "manylinux2014_x86_64", "ml_dtypes"], check=False)
    (out / "gpu-manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"wrote {out}: carry it to the GPU and run `python -m bench.gpu run {out} --out $OUT`")


def _prepare_dynamic(out: Path, w, chain, binding: dict, text: str) -> dict:
    """The workload's `fusec dynamic` build for cuda (its DYNAMIC_SYMBOL taken at run time,
    planned for the size class), as the cpu suite has it: {"symbol", "planned_at"}, or
    {"symbol", "skipped"} with the user error when the chain cannot take the symbol."""
    from fusec.compiler.dynamic import planning_binding
    from fusec.compiler.pipeline import build_chain
    from fusec.dsl.diagnostics import FdslError
    from fusec.artifacts import write_artifact
    from fusec.target_options import compile_options
    from fusec.runtime.targets import Target

    from .workloads import DYNAMIC_SYMBOL
    sym = DYNAMIC_SYMBOL[w.name]
    target = Target("cuda")
    options = compile_options(target, {"dynamic": [sym], "baseline": False})
    planned = planning_binding(binding, (sym,))
    try:
        built = build_chain(chain, planned, options)
    except FdslError as e:
        print(f"  {w.name}: no dynamic build: {e.diagnostics[0].message}", flush=True)
        return {"symbol": sym, "skipped": "refused: " + e.diagnostics[0].message}
    write_artifact(out, target, f"bench/fdsl/{w.fdsl.name}", text, options, [built])
    return {"symbol": sym, "planned_at": planned[sym]}


def _attention_source(dtype: str, d: int, causal: bool) -> str:
    """softmax(q kᵀ / sqrt(D)) v over [B·H, S, D]; causal: query i sees keys j <= i, the mask an
    index comparison (no mask tensor)."""
    s = f"q @ transpose(k) * {1 / d ** 0.5!r}"
    if causal:
        s = f"where(reshape(arange(S), [S, 1]) >= arange(S), {s}, -inf)"
    return (f"chain attn(q: {dtype}[B, S, D], k: {dtype}[B, S, D], v: {dtype}[B, S, D]) -> {dtype}[B, S, D] {{\n"
            f"    return softmax({s}, axis=-1) @ v\n}}\n")


def _tensor_core_workloads() -> dict:
    """name -> (FDSL source, chain, full binding, tiny binding, kind, input scales): issue 37's
    f16/bf16 workloads."""
    out = {}
    for t in ("f16", "bf16"):
        out[f"gemm4096_{t}"] = (f"chain mm(a: {t}[M, K], b: {t}[K, N]) -> {t}[M, N] {{\n    return a @ b\n}}\n", "mm",
                                dict(M=4096, K=4096, N=4096), dict(M=32, K=32, N=32), "gemm", (1.0, 1.0))
        out[f"mlp_{t}"] = (f"chain mlp(x: {t}[M, K], w: {t}[K, N], b: {t}[N]) -> {t}[M, N] {{\n"
                           f"    return gelu(x @ w + b)\n}}\n", "mlp", dict(M=512, K=1024, N=4096),
                           dict(M=16, K=32, N=32), "mlp", (1.0, 1 / 32, 0.1))
        for d in (64, 128):
            for causal in (False, True):
                out[f"attn_d{d}{'_causal' if causal else ''}_{t}"] = (
                    _attention_source(t, d, causal), "attn", dict(B=16, S=2048, D=d), dict(B=2, S=16, D=d),
                    "causal" if causal else "attention", (1.0, 1.0, 1.0))
    return out


TENSOR_CORE = _tensor_core_workloads()


def _prepare_tensor_core(out: Path, only: list[str] | None, size: str) -> dict:
    """Each TENSOR_CORE workload compiled for cuda (planned for the H200) into out/<name>/, with
    the plan's predicted time: {name: {"binding", "compile_s", "predicted_us", "kernels"}}."""
    import fusec
    from fusec.artifacts import write_artifact
    from fusec.compiler.pipeline import build_chain
    from fusec.compiler.plan.cost import total_time
    from fusec.runtime.targets import Target
    from fusec.target_options import compile_options
    done = {}
    for name, (src, chain_name, full, tiny, kind, _) in TENSOR_CORE.items():
        if only and name not in only:
            continue
        binding = dict(full if size == "full" else tiny)
        chain = fusec.check(src).chain(chain_name)
        t0 = time.perf_counter()
        target = Target("cuda")
        options = compile_options(target)
        built = build_chain(chain, binding, options, unfused=False)
        write_artifact(out / name, target, f"bench/gpu.py:{name}", src, options, [built])
        plan = built.main.plan
        done[name] = {"binding": binding, "kind": kind, "compile_s": round(time.perf_counter() - t0, 3),
                      "predicted_us": round(1e6 * total_time(plan.costs), 2), "kernels": len(plan.kernels),
                      "hardware": options.hardware.name}
        print(f"compiled {name} {binding} for cuda in {done[name]['compile_s']} s: {len(plan.kernels)} kernel(s), "
              f"predicted {done[name]['predicted_us']} us on {options.hardware.name}", flush=True)
    return done


def _tensor_core_inputs(name: str, binding: dict, seed: int = 0) -> list:
    """The workload's 16-bit host inputs (float16, or ml_dtypes.bfloat16): N(0, 1) times its
    scale per input."""
    import ml_dtypes
    import numpy as np
    src, chain_name, _, _, kind, scales = TENSOR_CORE[name]
    dt = np.float16 if name.endswith("_f16") else ml_dtypes.bfloat16
    b = binding
    shapes = {"gemm": [(b.get("M"), b.get("K")), (b.get("K"), b.get("N"))],
              "mlp": [(b.get("M"), b.get("K")), (b.get("K"), b.get("N")), (b.get("N"),)]}.get(
        kind, [(b.get("B"), b.get("S"), b.get("D"))] * 3)
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(shape, dtype=np.float32) * np.float32(sc)).astype(dt) for shape, sc in zip(shapes, scales)]


def _torch_tensor_core(torch, kind: str, d: int | None):
    """The workload as a PyTorch user writes it: cuBLAS through matmul/addmm, SDPA (its flash
    kernel takes [N, H, S, D]: the B·H rows as heads)."""
    F = torch.nn.functional
    if kind == "gemm":
        return lambda a, b: a @ b
    if kind == "mlp":
        return lambda x, w, b: F.gelu(torch.addmm(b, x, w), approximate="tanh")
    causal = kind == "causal"
    return lambda q, k, v: F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=causal,
                                                          scale=1 / d ** 0.5)[0]


def _run_tensor_core(directory: Path, manifest: dict, only, target, budget) -> list[dict]:
    """The TENSOR_CORE workloads timed: fusec fused, torch eager, torch.compile; each output
    checked against PyTorch in float32 on the same inputs (fusec's NumPy reference, in float64,
    without PyTorch); measured beside the plan's predicted time."""
    import numpy as np

    import fusec
    from fusec.runtime.compare import compare

    from .anchors import Impl
    from .suite import _failure
    from .timing import measure
    torch = None
    if importlib.util.find_spec("torch") is not None and target.name == "cuda":
        import torch
    results = []
    for name, meta in manifest.get("tensor_core", {}).items():
        if only and name not in only:
            continue
        src, chain_name, _, _, kind, _ = TENSOR_CORE[name]
        dtype = "f16" if name.endswith("_f16") else "bf16"
        binding = meta["binding"]
        inputs = _tensor_core_inputs(name, binding)
        impls, skipped = [], {}
        try:
            built, load_s = _load(directory / name, chain_name, target)
            impls.append(_fusec_gpu(built, "fused", inputs, load_s, meta["compile_s"]))
        except Exception as e:
            skipped["fusec fused"] = _failure(e)
        oracle, oracle_from = None, None
        if torch is not None:
            tdt = torch.float16 if dtype == "f16" else torch.bfloat16
            args = [torch.from_numpy(x.astype(np.float32)).cuda() for x in inputs]
            fn = _torch_tensor_core(torch, kind, binding.get("D"))
            with torch.no_grad():
                oracle = fn(*args).cpu().numpy()
            oracle_from = "torch float32"
            args = [a.to(tdt) for a in args]
            for anchor, f in (("torch.cuda", fn), ("torch.compile.cuda", None)):
                try:
                    call_fn = f if f is not None else torch.compile(fn)
                    holder = {}

                    def call(call_fn=call_fn, holder=holder):
                        with torch.no_grad():
                            holder["out"] = call_fn(*args)
                        torch.cuda.synchronize()
                        return holder["out"]
                    t0 = time.perf_counter()
                    call()
                    impls.append(Impl(anchor, call, lambda holder=holder: holder["out"].float().cpu().numpy(),
                                      cold_s=time.perf_counter() - t0))
                except Exception as e:
                    skipped[anchor] = _failure(e)
        else:
            skipped["torch.cuda"] = skipped["torch.compile.cuda"] = "PyTorch with CUDA not available"
            oracle = np.asarray(fusec.reference(fusec.check(src).chain(chain_name),
                                                inputs, binding, compute_f64=True)[0])
            oracle_from = "fusec reference (float64)"
        samples = measure({i.name: i.call for i in impls}, budget)
        entries = {}
        for impl in impls:
            e = samples[impl.name].as_dict()
            e["cold_s"] = impl.cold_s
            try:
                c = compare(np.asarray(impl.result()).astype(np.float32), oracle, dtype)
                e["agreement"] = {"ok": c.ok, "max_abs": float(f"{c.max_abs:.3g}"), "max_rel": float(f"{c.max_rel:.3g}"),
                                  "against": oracle_from}
            except Exception as ex:
                e["agreement"] = {"ok": False, "reason": _failure(ex)}
            if impl.detail:
                e["detail"] = impl.detail
            entries[impl.name] = e
            print(f"  {name:22s} {impl.name:18s} {e['median_ms']:9.4f} ms (min {e['min_ms']:.4f})", flush=True)
        fused = entries.get("fusec fused")
        measured_us = None if fused is None else round(1e3 * fused["median_ms"], 2)
        print(f"  {name:22s} predicted {meta['predicted_us']} us on {meta['hardware']}, measured {measured_us} us",
              flush=True)
        results.append({"name": name, "dtype": dtype, "kind": kind, "binding": binding, "source": src,
                        "predicted_us": meta["predicted_us"], "predicted_on": meta["hardware"],
                        "measured_us": measured_us, "kernels": meta["kernels"], "impls": entries, "skipped": skipped,
                        "vs": {k: round(fused["median_ms"] / v["median_ms"], 3) for k, v in entries.items()
                               if fused is not None and k != "fusec fused"}})
    return results


def _ensure_lark(directory: Path) -> None:
    """Install the carried wheels of what fusec's runtime imports and the GPU image lacks."""
    missing = [m for m in ("lark", "ml_dtypes") if importlib.util.find_spec(m) is None]
    if not missing:
        return
    wheels = directory / "wheels"
    if not list(wheels.glob("*.whl")):
        raise SystemExit(f"{', '.join(missing)} not installed and no wheels carried: run `prepare` here first")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--find-links", str(wheels), *missing], check=True)


def _ensure_fusec() -> None:
    """Import fusec from this checkout without installing it: its packages fusec.dsl,
    fusec.compiler and fusec.runtime live in dsl/, compiler/ and runtime/ (pyproject's
    package-dir), so map them by hand when fusec is not installed."""
    try:
        import fusec.dsl  # noqa: F401
        return
    except ImportError:
        pass
    sys.path.insert(0, str(ROOT))
    for name, folder in (("fusec", "fusec"), ("fusec.dsl", "dsl"), ("fusec.compiler", "compiler"),
                         ("fusec.runtime", "runtime")):
        if name in sys.modules:
            continue
        spec = importlib.util.spec_from_file_location(name, ROOT / folder / "__init__.py",
                                                      submodule_search_locations=[str(ROOT / folder)])
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        if name != "fusec":      # fusec/__init__ imports the others: run it last
            setattr(sys.modules["fusec"], name.split(".")[1], module)
            spec.loader.exec_module(module)
    spec = importlib.util.find_spec("fusec")
    spec.loader.exec_module(sys.modules["fusec"])


def device_bandwidth(mbytes: int = 1024, reps: int = 20) -> dict:
    """Best-of-`reps` device-to-device copy (Numba CUDA), read + write bytes, CUDA events."""
    import numpy as np
    from numba import cuda
    n = mbytes * (1 << 20) // 4
    src = cuda.to_device(np.ones(n, np.float32))
    dst = cuda.device_array(n, np.float32)
    dst.copy_to_device(src)
    best = float("inf")
    elapsed = getattr(cuda, "event_elapsed_time", None)    # the simulator has no events to time
    for _ in range(reps):
        start, stop = cuda.event(), cuda.event()
        t0 = time.perf_counter()
        start.record()
        dst.copy_to_device(src)
        stop.record()
        stop.synchronize()
        s = elapsed(start, stop) / 1e3 if elapsed else time.perf_counter() - t0
        best = min(best, max(s, 1e-9))
    return {"gbps": round(2 * n * 4 / best / 1e9, 1), "bytes": 2 * n * 4,
            "method": f"device-to-device copy of {mbytes} MiB float32 (Numba CUDA), best of {reps}, CUDA events"}


def run(directory: Path, out: Path, only: list[str] | None = None, target_name: str = "cuda",
        budget=None) -> Path:
    """target_name "cuda-sim" runs the same plumbing on Numba's simulator (tiny sizes; tests);
    `budget` (bench.timing.Budget) replaces the default timing budget (tests: one run)."""
    _ensure_lark(directory)
    _ensure_fusec()
    from . import scratch_env
    for var in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):     # cold compiles really cold
        scratch_env(var, "fusec-bench-")
    import numpy as np

    import fusec
    from fusec.runtime.targets import select

    from . import machine
    from .anchors import Impl, Skip, prepare as prepare_anchor
    from .suite import SCHEMA, _agree, _failure, _oracle, _ratios, git_commit
    from .timing import Budget, measure
    from .workloads import BY_NAME

    manifest = json.loads((directory / "gpu-manifest.json").read_text())
    target = select(target_name)
    gpu = _gpu_name()
    bandwidth = device_bandwidth(1024 if manifest["size"] == "full" else 4)
    print(f"{gpu}: copy bandwidth {bandwidth['gbps']} GB/s", flush=True)
    # no quiesce: device time is scarce, and a driver thread that never idles would cost its cap
    # on every sample
    budget = budget or Budget(seconds=GPU_SECONDS, min_runs=5, max_runs=100, warmup=3, quiesce=0.0)
    results = []
    for name, meta in manifest["workloads"].items():
        if only and name not in only:
            continue
        w = BY_NAME[name]
        binding = meta["binding"]
        inputs = w.make_inputs(binding, seed=0)
        impls: list[Impl] = []
        skipped: dict[str, str] = {}
        try:
            built, load_s = _load(directory / name, w.chain, target)
            impls += [_fusec_gpu(built, build, inputs, load_s, meta["compile_s"]) for build in ("fused", "unfused")]
        except Exception as e:
            skipped["fusec fused"] = skipped["fusec unfused"] = _failure(e)
        dynamic = meta.get("dynamic", {"skipped": "not prepared (an older `prepare`)"})
        if "skipped" in dynamic:
            skipped["fusec dynamic"] = dynamic["skipped"]
        else:
            try:
                built, load_s = _load(directory / f"{name}.dynamic", w.chain, target)
                impl = _fusec_gpu(built, "fused", inputs, load_s, 0.0)
                impl.name = "fusec dynamic"
                impl.detail.update(symbol=dynamic["symbol"], planned_at=dynamic["planned_at"])
                impls.append(impl)
            except Exception as e:
                skipped["fusec dynamic"] = _failure(e)
        for anchor in ("cupy", "torch.cuda", "torch.compile.cuda"):
            try:
                impls.append(prepare_anchor(anchor, w, inputs))
            except Skip as e:
                skipped[anchor] = str(e)
            except Exception as e:
                skipped[anchor] = _failure(e)
        samples = measure({i.name: i.call for i in impls}, budget)
        floor = machine.floor_ms(w.bytes(binding), 0, bandwidth["gbps"], None)
        oracle = _oracle(w, inputs, binding)
        entries = {}
        for impl in impls:
            e = samples[impl.name].as_dict()
            e.update(cold_s=impl.cold_s, cached_s=impl.cached_s, agreement=_agree(impl, oracle))
            if impl.detail:
                e["detail"] = impl.detail
            entries[impl.name] = e
            print(f"  {name:14s} {impl.name:15s} {e['median_ms']:9.4f} ms (min {e['min_ms']:.4f})", flush=True)
        started = _start_twice(directory / name, w.chain, target_name)
        if "first" in started:
            first, second = started["first"], started["second"]
            if "fusec fused" in entries:        # a later process's start, as the cpu suite's cached_s
                entries["fusec fused"]["cached_s"] = round(second["load_s"] + second["call_s"], 4)
            print(f"  {name:14s} start: first process {first['load_s']:.3f} s, second {second['load_s']:.3f} s; "
                  f"Numba's cache gave {second['numba_cache']['hits']} of {second['kernels']} kernels", flush=True)
        else:
            print(f"  {name:14s} start: {started['failed']}", flush=True)
        results.append({"name": name, "chain": w.chain, "fdsl": f"bench/fdsl/{w.fdsl.name}", "binding": binding,
                        "bound": w.bound, "bytes": w.bytes(binding), "flops": w.flops(binding),
                        "floor": floor, "impls": entries, "skipped": skipped,
                        "ratios": _ratios(samples, floor), "start": started})
    tensor_core = _run_tensor_core(directory, manifest, only, target, budget)
    from . import utc_stamp
    doc = {"schema": SCHEMA, "suite": "fusec-bench", "size": manifest["size"], "target": "cuda",
           "date": utc_stamp(),
           "machine": machine.machine_id(gpu), "host": {"gpu": gpu, **_versions()},
           "fusec": {"version": fusec.__version__, "commit": git_commit()},
           "bandwidth": bandwidth, "gemm": {},
           "budget": {"seconds": budget.seconds, "min_runs": budget.min_runs, "max_runs": budget.max_runs,
                      "warmup": budget.warmup},
           "ratio_convention": "fusec fused time / other time: below 1 means fusec is faster",
           "workloads": results, "tensor_core": tensor_core}
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{doc['machine']}-{doc['date'][:10]}.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {path}")
    return path


def _load(directory: Path, chain_name: str, target):
    """A chain's builds from its artifact with fusec's runtime only, and the seconds that took."""
    import fusec
    from fusec.artifacts import load_chain
    from fusec.runtime import artifact as art
    a = art.load(directory)
    chain = next(c for c in fusec.check(a.source()).chains if c.name == chain_name)
    t0 = time.perf_counter()
    built = load_chain(a, chain, target)
    return built, time.perf_counter() - t0


def start(directory: Path, chain_name: str, target_name: str) -> dict:
    """One process's start from an artifact, as a compile-cache hit has it: the chain loaded with
    Numba's cache in the artifact (numba_cache=True: the first process compiles the kernels and
    fills it, a later one loads them) and its fused build run once. {"load_s", "call_s",
    "kernels", "numba_cache": {"hits", "misses"}}, counted over the module's kernels (the
    simulator caches nothing: both 0)."""
    _ensure_fusec()
    import fusec
    from fusec.artifacts import load_chain
    from fusec.runtime import artifact as art
    from fusec.runtime.reference import random_inputs
    from fusec.runtime.targets import select
    a = art.load(directory)
    chain = next(c for c in fusec.check(a.source()).chains if c.name == chain_name)
    t0 = time.perf_counter()
    built = load_chain(a, chain, select(target_name), numba_cache=True)
    load_s = time.perf_counter() - t0
    inputs = random_inputs(chain, a.chains[chain_name].binding, 0)
    t0 = time.perf_counter()
    built.fused(*inputs)
    call_s = time.perf_counter() - t0
    module = sys.modules[built.fused.host.__module__]
    kernels = [getattr(module, name) for name in a.chains[chain_name].builds["fused"]["kernels"]]
    counts = {what: sum(sum(getattr(k, f"_cache_{what}", {}).values()) for k in kernels) for what in ("hits", "misses")}
    return {"load_s": round(load_s, 4), "call_s": round(call_s, 4), "kernels": len(kernels),
            "numba_cache": counts}


def _start_twice(directory: Path, chain_name: str, target_name: str) -> dict:
    """`start` in two processes, one after the other, on a fresh copy of the artifact (no Numba
    cache in it yet): {"first": ..., "second": ...}, or {"failed": why}."""
    root = Path(tempfile.mkdtemp(prefix="fusec-gpu-start-"))
    try:
        copy = root / directory.name
        shutil.copytree(directory, copy, ignore=shutil.ignore_patterns("__pycache__"))
        out = {}
        for which in ("first", "second"):
            done = subprocess.run([sys.executable, "-m", "bench.gpu", "start", str(copy), "--chain", chain_name,
                                   "--target", target_name], cwd=ROOT, capture_output=True, text=True)
            if done.returncode != 0:
                return {"failed": f"{which} process: exit {done.returncode}: {done.stderr.strip()[-400:]}"}
            out[which] = json.loads(done.stdout.strip().splitlines()[-1])
            if done.stderr.strip():
                out[which]["stderr"] = done.stderr.strip()[-400:]
        return out
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _fusec_gpu(built, build: str, inputs, load_s: float, compile_s: float):
    from .anchors import _executable_impl
    # inputs on the device once, as the anchors have them
    impl, jit_s = _executable_impl(f"fusec {build}", getattr(built, build), inputs)
    impl.cold_s = (compile_s if build == "fused" else 0.0) + load_s + jit_s
    impl.cached_s = load_s + jit_s
    impl.detail = {"kernels": built.kernel_counts.get(build), "jit_s": round(jit_s, 3),
                   "compiled_here_s": compile_s}
    return impl


def _gpu_name() -> str:
    from numba import cuda
    name = getattr(cuda.get_current_device(), "name", "cuda simulator")
    return name.decode() if isinstance(name, bytes) else str(name)


def _versions() -> dict:
    import numba
    import numpy as np
    out = {"numpy": np.__version__, "numba": numba.__version__}
    for mod in ("cupy", "torch", "triton"):
        if importlib.util.find_spec(mod) is not None:
            try:
                out[mod] = __import__(mod).__version__
            except Exception:
                pass
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gpu", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=("prepare", "run", "start"),
                   help="start: one process's start from an artifact DIRECTORY (--chain; JSON on stdout), "
                        "which `run` times twice per workload")
    p.add_argument("--chain", default=None, help="start: the chain")
    p.add_argument("directory")
    p.add_argument("--out", default=None, help="run: where the JSON goes (default: $OUT or .)")
    p.add_argument("--only", default="")
    p.add_argument("--size", default="full", choices=("full", "tiny"))
    p.add_argument("--target", default="cuda", choices=("cuda", "cuda-sim"),
                   help="run: cuda-sim checks the plumbing on Numba's simulator")
    args = p.parse_args(argv)
    only = [s for s in args.only.split(",") if s] or None
    if args.command == "prepare":
        prepare(Path(args.directory), only, args.size)
    elif args.command == "start":
        print(json.dumps(start(Path(args.directory), args.chain, args.target)))
    else:
        run(Path(args.directory), Path(args.out or os.environ.get("OUT", ".")), only, args.target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
