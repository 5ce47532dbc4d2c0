"""python -m bench [run] | table | scaling — see `python -m bench --help`.

    python -m bench                      the whole suite at full size on the CPU: writes
                                         bench/results/<machine>-<date>.json and the table in
                                         docs/PERFORMANCE.md
    python -m bench --only softmax,mlp   some workloads
    python -m bench --size tiny          every workload at test size (plumbing check, seconds)
    python -m bench --memory default     only the timing as users call each tool (no equalised child run)
    python -m bench --quiesce 0          time without waiting for other threads to go idle
                                         and without the untimed call before each timed one
    python -m bench table                regenerate docs/PERFORMANCE.md's table from bench/results/
    python -m bench scaling              the compile-time scaling benchmark (10/100/1000 ops)
    python -m bench --models             whole models (GPT-2, Llama, BERT, ViT, ResNet-18) through
                                         fusec's torch.compile backend and ONNX path against eager
                                         PyTorch, Inductor, onnxruntime and TVM: writes
                                         bench/results/models-<date>.json (bench/models.py)
    python -m bench --models --only gpt2 --size tiny    one model at test size
    python -m bench --models --memory default           without the memory-equalised child run

On a terminal a progress line on stderr says what runs now (--quiet: none).

For NumPy's real BLAS speed on machines that set OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE, run it as
`env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m bench` (the JSON records which kernel ran).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from . import scratch_env
from .table import DOC

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", nargs="?", default="run", choices=("run", "table", "scaling"))
    p.add_argument("--size", default="full", choices=("full", "tiny", "issue"),
                   help="issue: with --models, issue 39's model sizes (the full size cuts them: bench/model_defs.py)")
    p.add_argument("--only", default="", help="comma-separated workload names (with --models: model names)")
    p.add_argument("--models", action="store_true",
                   help="the model group (bench/models.py) instead of the micro workloads")
    p.add_argument("--contenders", default=None,
                   help="with --models: comma-separated contenders (default: all of bench/models.py's CONTENDERS)")
    p.add_argument("--fusec-onnx", default=None,
                   help="with --models: the models that also run through fusec's ONNX path "
                        "(default gpt2,resnet18; 'all' for every model)")
    p.add_argument("--anchors", default=None,
                   help="comma-separated anchors (default: numpy,torch,torch.compile,jax.jit,onnxruntime,tvm)")
    p.add_argument("--seconds", type=float, default=None, help="timing budget per implementation")
    p.add_argument("--quiesce", type=float, default=None, metavar="SECONDS",
                   help="before each timed call, wait up to SECONDS (default 1) for the process's other "
                        "threads to go idle (another library's pool spinning after its call: OpenBLAS's "
                        "spins about 0.1 s), then make one untimed call; 0: neither (its own table in docs/PERFORMANCE.md)")
    p.add_argument("--out", default=str(RESULTS), help="results directory")
    p.add_argument("--doc", "--readme", dest="doc", default=str(DOC),
                   help="the page whose bench markers the table goes between (default docs/PERFORMANCE.md)")
    p.add_argument("--no-doc", "--no-readme", dest="no_doc", action="store_true",
                   help="do not rewrite the benchmark table")
    p.add_argument("--no-scaling", action="store_true", help="run: skip the compile-time scaling part")
    p.add_argument("--omp-wait", default="", choices=("PASSIVE", "ACTIVE", ""),
                   help="set OMP_WAIT_POLICY for every OpenMP pool in the process (Numba's, "
                        "PyTorch's); default: leave the environment as users have it")
    p.add_argument("--malloc-reuse", action="store_true",
                   help="keep freed memory for reuse in this process (glibc mallopt), for every "
                        "implementation alike: times without the page faults of fresh outputs")
    p.add_argument("--memory", default="both", choices=("both", "default", "equalised"),
                   help="default: every implementation as its users call it (fresh outputs for NumPy, torch, "
                        "jax, onnxruntime; fusec's planned output buffers); equalised: in a child process "
                        "started with huge pages for malloc and torch (GLIBC_TUNABLES=glibc.malloc.hugetlb=1, "
                        "THP_MEM_ALLOC_ENABLE=1), fusec handing back a fresh output each call, torch and "
                        "onnxruntime writing into preallocated outputs where they can (with --models: "
                        "onnxruntime through IOBinding; a torch model's forward allocates its outputs); both "
                        "(default): the two, recorded side by side (with --models the child finds this run's "
                        "compile caches filled)")
    p.add_argument("--tvm-tune", type=float, default=None, metavar="SECONDS",
                   help="time bound of TVM's MetaSchedule tuning per workload (with --models: per model), in a "
                        "child process (default 180 at full size, 120 with --models, 0 (not tried) at tiny)")
    p.add_argument("--scaling-sizes", default="10,100,1000")
    p.add_argument("--scaling-jit-max", type=int, default=100,
                   help="largest n whose emitted code is also Numba-compiled (jit time)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress line on stderr (it is only drawn on a terminal anyway)")
    return p


def _logger(args):
    """(log, status): log prints a result line (wiping the progress line first), status
    redraws the progress line (fusec/progress.py: stderr, on a terminal, not with --quiet)."""
    from fusec.progress import Progress
    progress = Progress(quiet=args.quiet)

    def log(text: str) -> None:
        progress.clear()
        print(text, flush=True)
    return log, progress.show, progress.clear


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    args._argv = list(sys.argv[1:] if argv is None else argv)
    args.argv = args._argv
    # torch.compile's "cold" time is only cold with empty on-disk caches: give this run its own
    # (the "cached" time then finds them filled by this run's first compile).
    for var in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        scratch_env(var, f"fusec-bench-{var.split('_')[0].lower()}-")
    if args.omp_wait:
        # Before any OpenMP runtime starts (Numba's, PyTorch's): interleaved implementations
        # with spinning thread pools steal each other's cores on a small machine.
        os.environ["OMP_WAIT_POLICY"] = args.omp_wait
    if args.command == "table":
        from .table import update_doc
        changed = update_doc(Path(args.doc), Path(args.out))
        print(f"{args.doc}: {'updated' if changed else 'unchanged'}")
        return 0
    if args.command == "scaling":
        result = _scaling(args)
        print(json.dumps({k: v["exponent"] for k, v in result["kinds"].items()}))
        return 0
    # a flag of the other group would do nothing: refused, not ignored
    other = ((("--anchors", args.anchors), ("--malloc-reuse", args.malloc_reuse), ("--no-scaling", args.no_scaling))
             if args.models else (("--contenders", args.contenders), ("--fusec-onnx", args.fusec_onnx)))
    given = [flag for flag, value in other if value]
    if given:
        group = "the micro workloads (without --models)" if args.models else "the model group (--models)"
        print(f"{', '.join(given)}: only for {group}", file=sys.stderr)
        return 1
    if args.models:
        return _models(args)
    return _run(args)


def _models(args) -> int:
    from .model_defs import MODELS
    from .models import CONTENDERS, FUSEC_ONNX, run_models, write
    from .table import update_doc
    from .timing import Budget
    if args.quiesce is not None and args.quiesce < 0:
        print(f"--quiesce takes seconds, 0 or more, not {args.quiesce:g}", file=sys.stderr)
        return 1
    names = [s for s in args.only.split(",") if s] or list(MODELS)
    contenders = [s for s in args.contenders.split(",") if s] if args.contenders else list(CONTENDERS)
    onnx = FUSEC_ONNX if args.fusec_onnx is None else (
        tuple(MODELS) if args.fusec_onnx == "all" else tuple(s for s in args.fusec_onnx.split(",") if s))
    for what, given, known in (("model", names, MODELS), ("contender", contenders, CONTENDERS),
                               ("model", onnx, MODELS)):
        unknown = sorted(set(given) - set(known))
        if unknown:
            print(f"unknown {what}(s): {', '.join(unknown)} (known: {', '.join(known)})", file=sys.stderr)
            return 1
    if args.memory == "equalised" and not _has_equalised_env():
        # the allocators read their settings when the process starts: start again with them
        os.execve(sys.executable, [sys.executable, "-m", "bench", *(args._argv or [])], _equalised_env())
    tiny = args.size == "tiny"
    budget = Budget(seconds=args.seconds if args.seconds is not None else (0.05 if tiny else 3.0),
                    min_runs=3 if tiny else 5, max_runs=5 if tiny else 30, warmup=1,
                    quiesce=args.quiesce if args.quiesce is not None else Budget.quiesce)
    t0 = time.perf_counter()
    log, status, clear = _logger(args)
    # fusec's compile caches: with --memory both, one folder the equalised child finds filled
    # (it does not compile again); a child is told its parent's through MODELS_CACHE_ENV
    cache_root = os.environ.get(MODELS_CACHE_ENV) if args.memory == "equalised" else None
    if args.memory == "both":
        from . import scratch_dir
        cache_root = scratch_dir("fusec-bench-models-cache-")

    def checkpoint(result):            # after each model: a run cut short keeps what it measured
        result["wall_s"] = round(time.perf_counter() - t0, 1)
        result["command"] = "python -m bench " + " ".join(args.argv)
        return write(result, args.out)
    try:
        tune = args.tvm_tune if args.tvm_tune is not None else (0.0 if tiny else 120.0)
        result = run_models(tuple(names), args.size, budget, tuple(contenders), onnx, log=log, status=status,
                            checkpoint=checkpoint, tvm_tune_s=tune,
                            memory="equalised" if args.memory == "equalised" else "default",
                            cache_root=cache_root)
        if args.memory == "both":
            checkpoint(result)          # the default run's figures are kept if the child is cut short
            result["equalised"] = _models_equalised_child(args, log, status, cache_root)
    finally:
        clear()
    path = checkpoint(result)
    print(f"wrote {path}")
    if not args.no_doc and not tiny:
        changed = update_doc(Path(args.doc), Path(args.out))
        print(f"{args.doc}: {'updated' if changed else 'unchanged'}")
    return 0


def _scaling(args) -> dict:
    from .scaling import run_scaling
    sizes = tuple(int(s) for s in args.scaling_sizes.split(",") if s)
    log, status, clear = _logger(args)
    log("compile-time scaling (cpu target):")
    try:
        return run_scaling(sizes, jit_max=args.scaling_jit_max, log=log, status=status)
    finally:
        clear()



EQUALISED_ENV = {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1", "THP_MEM_ALLOC_ENABLE": "1"}
# `--models --memory both` tells its equalised child where fusec's compile caches are
MODELS_CACHE_ENV = "FUSEC_BENCH_MODELS_CACHE"


def _equalised_env() -> dict:
    """This environment with huge pages asked of glibc's malloc (madvise on its mappings) and
    of PyTorch's CPU allocator: read when each starts, so only a new process gets them."""
    env = dict(os.environ)
    tunables = [t for t in env.get("GLIBC_TUNABLES", "").split(":") if t and not t.startswith("glibc.malloc.hugetlb=")]
    env["GLIBC_TUNABLES"] = ":".join(tunables + [EQUALISED_ENV["GLIBC_TUNABLES"]])
    env["THP_MEM_ALLOC_ENABLE"] = EQUALISED_ENV["THP_MEM_ALLOC_ENABLE"]
    return env


def _has_equalised_env() -> bool:
    return ("glibc.malloc.hugetlb=1" in os.environ.get("GLIBC_TUNABLES", "").split(":")
            and os.environ.get("THP_MEM_ALLOC_ENABLE") == "1")


def _equalised_child(args, log) -> dict | None:
    """The memory-equalised timing of the same workloads in a child process started with
    _equalised_env(); its results (None, logged, if it failed)."""
    import subprocess
    import tempfile
    from . import runtimes
    out = tempfile.mkdtemp(prefix="fusec-bench-equalised-")
    keep = ["--size", args.size, "--only", args.only]
    for flag, value in (("--anchors", args.anchors), ("--seconds", args.seconds), ("--quiesce", args.quiesce),
                        ("--omp-wait", args.omp_wait or None), ("--tvm-tune", args.tvm_tune)):
        if value is not None:
            keep += [flag, str(value)]
    keep += ["--malloc-reuse"] if args.malloc_reuse else []
    cmd = [sys.executable, "-m", "bench", "run", *keep, "--memory", "equalised", "--out", out, "--no-doc",
           "--no-scaling", "--quiet"]
    env = _equalised_env()
    if runtimes._MS_BROKEN:      # MetaSchedule's failure is the wheel's: the child does not try again
        env["FUSEC_BENCH_TVM_MS_BROKEN"] = runtimes._MS_BROKEN[0]
    log("[memory-equalised run: a child process with " + ", ".join(f"{k}={v}" for k, v in EQUALISED_ENV.items()) + "]")
    p = subprocess.run(cmd, env=env, cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in p.stdout.splitlines():
        if not line.startswith("wrote "):
            log("  " + line)
    files = sorted(Path(out).glob("*.json"))
    if p.returncode != 0 or not files:
        log(f"  the memory-equalised run failed (exit {p.returncode})")
        return None
    return json.loads(files[-1].read_text())


def _models_equalised_child(args, log, status, cache_root: str) -> dict:
    """`--models --memory both`: the same models, contenders, sizes, budget and flags timed
    memory-equalised in a child process started with _equalised_env(), finding this process's
    compile caches in `cache_root`; what models.equalised_summary keeps of its result, with
    "failed" (why) where it did not finish (the models it finished are kept)."""
    from . import runtimes, scratch_dir
    from .models import equalised_summary
    out = scratch_dir("fusec-bench-models-equalised-")
    keep = ["--size", args.size, "--only", args.only]
    for flag, value in (("--contenders", args.contenders), ("--fusec-onnx", args.fusec_onnx),
                        ("--seconds", args.seconds), ("--quiesce", args.quiesce),
                        ("--omp-wait", args.omp_wait or None), ("--tvm-tune", args.tvm_tune)):
        if value is not None:
            keep += [flag, str(value)]
    cmd = [sys.executable, "-m", "bench", "run", "--models", *keep, "--memory", "equalised", "--out", out,
           "--no-doc", "--quiet"]
    env = _equalised_env()
    env[MODELS_CACHE_ENV] = cache_root
    if runtimes._MS_BROKEN:      # MetaSchedule's failure is the wheel's: the child does not try again
        env["FUSEC_BENCH_TVM_MS_BROKEN"] = runtimes._MS_BROKEN[0]
    log("[memory-equalised run: a child process with " + ", ".join(f"{k}={v}" for k, v in EQUALISED_ENV.items())
        + ", fusec's compile caches of this run]")
    status("memory-equalised run (a child process)")
    returncode, output = _child(cmd, env)
    lines = output.splitlines()
    for line in lines:
        if not line.startswith("wrote "):
            log("  " + line)
    files = sorted(Path(out).glob("models-*.json"))
    summary = equalised_summary(json.loads(files[-1].read_text())) if files else {"models": []}
    if returncode != 0 or not files:
        tail = next((ln.strip() for ln in reversed(lines) if ln.strip()), "no output")
        summary["failed"] = f"exit {returncode}: {tail[:300]}"
        log(f"  the memory-equalised run failed (exit {returncode}); {len(summary['models'])} model(s) of it kept")
    return summary


def _child(cmd: list[str], env: dict) -> tuple[int, str]:
    """Run a child bench process from the repository root: its exit status and its output
    (stdout and stderr together)."""
    import subprocess
    p = subprocess.run(cmd, env=env, cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.returncode, p.stdout


def _run(args) -> int:
    from .anchors import CPU_ANCHORS
    from .suite import run_suite, write_results
    from .table import update_doc
    from .timing import Budget
    from .workloads import WORKLOADS
    if args.quiesce is not None and args.quiesce < 0:
        print(f"--quiesce takes seconds, 0 or more, not {args.quiesce:g}", file=sys.stderr)
        return 1
    if args.size == "issue":
        print("--size issue is a size of the model group: python -m bench --models --size issue", file=sys.stderr)
        return 1
    only = [s for s in args.only.split(",") if s]
    unknown = sorted(set(only) - {w.name for w in WORKLOADS})
    if unknown:
        print(f"unknown workload(s): {', '.join(unknown)}", file=sys.stderr)
        return 1
    workloads = tuple(w for w in WORKLOADS if not only or w.name in only)
    anchors = tuple(a for a in (args.anchors.split(",") if args.anchors else CPU_ANCHORS) if a)
    tiny = args.size == "tiny"
    malloc = "default"
    if args.malloc_reuse:
        from .machine import reuse_freed_memory
        malloc = "reuse" if reuse_freed_memory() else "default (mallopt refused)"
    budget = Budget(seconds=args.seconds if args.seconds is not None else (0.05 if tiny else 3.0),
                    min_runs=3 if tiny else 5, max_runs=10 if tiny else 60, warmup=1 if tiny else 2,
                    quiesce=args.quiesce if args.quiesce is not None else Budget.quiesce)
    if args.memory == "equalised" and not _has_equalised_env():
        # the allocators read their settings when the process starts: start again with them
        os.execve(sys.executable, [sys.executable, "-m", "bench", *(args._argv or [])], _equalised_env())
    from . import anchors as anchors_mod
    anchors_mod.TVM_TUNE["seconds"] = args.tvm_tune if args.tvm_tune is not None else (0.0 if tiny else 180.0)
    t0 = time.perf_counter()
    from .machine import describe
    info = describe()
    info["malloc"] = malloc
    log, status, clear = _logger(args)
    try:
        mode = "equalised" if args.memory == "equalised" else "default"
        results = run_suite(workloads, args.size, anchors, budget, log=log, machine_info=info, status=status,
                            memory=mode)
    finally:
        clear()
    if args.memory == "both":
        child = _equalised_child(args, log)
        if child is not None:
            results["equalised"] = {"memory": child["memory"], "date": child["date"], "bandwidth": child["bandwidth"],
                                    "workloads": [{k: w[k] for k in ("name", "floor", "impls", "skipped", "ratios")}
                                                  for w in child["workloads"]]}
    if not args.no_scaling and not tiny and not only:
        results["compile_scaling"] = _scaling(args)
    results["wall_s"] = round(time.perf_counter() - t0, 1)
    path = write_results(results, Path(args.out))
    print(f"wrote {path}")
    if not args.no_doc and not tiny:
        changed = update_doc(Path(args.doc), Path(args.out))
        print(f"{args.doc}: {'updated' if changed else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
