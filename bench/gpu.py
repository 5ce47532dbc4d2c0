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
    from . import utc_stamp
    doc = {"schema": SCHEMA, "suite": "fusec-bench", "size": manifest["size"], "target": "cuda",
           "date": utc_stamp(),
           "machine": machine.machine_id(gpu), "host": {"gpu": gpu, **_versions()},
           "fusec": {"version": fusec.__version__, "commit": git_commit()},
           "bandwidth": bandwidth, "gemm": {},
           "budget": {"seconds": budget.seconds, "min_runs": budget.min_runs, "max_runs": budget.max_runs,
                      "warmup": budget.warmup},
           "ratio_convention": "fusec fused time / other time: below 1 means fusec is faster",
           "workloads": results}
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
