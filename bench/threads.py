"""Whose threads run while a call is timed: the evidence behind bench/timing.py's quiesce.

    python -m bench.threads [--only mlp] [--rounds 60] [--anchors numpy,torch,torch.compile,jax.jit]
                            [--quiesce] [--size full|tiny] [--out bench/results]

Times a workload's implementations as `python -m bench` does (fusec fused, unfused and dynamic,
then the anchors; rounds in a shuffled order, one process), without the wait for other threads
unless --quiesce, and reads every thread's CPU time (Linux: /proc/self/task/*/schedstat) right
before and after each timed call. Each thread is given to the implementation whose own calls
run it for a fifth of the call or more in four calls of five (its pool; a pool several share is
theirs together: Numba's and PyTorch's libgomp). For each implementation
it prints the median and minimum time, then, over its slow samples (above its median) and its
fast ones, the mean CPU milliseconds other implementations' threads ran during the call. Writes
threads-<workload>[-quiesced]-<date>.json.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import os
import statistics
import sys
import threading
import time

from . import scratch_env, utc_stamp, write_result
from .timing import Budget, measure, thread_cpu_ns

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sample(calls: dict, rounds: int, quiesce: float = 0.0) -> list[dict]:
    """Time `calls` as bench/timing.py's measure does (two warm-up calls each, then `rounds`
    shuffled rounds); each sample: the call, its seconds and the CPU seconds every other thread
    ran during it (the caller's thread left out: it is the one timed)."""
    me = str(threading.get_native_id())
    out = []

    @contextlib.contextmanager
    def observe(name):
        before = thread_cpu_ns() or {}
        t0 = time.perf_counter()
        yield
        dt = time.perf_counter() - t0
        after = thread_cpu_ns() or {}
        ran = {t: (ns - before.get(t, 0)) / 1e9 for t, ns in after.items() if t != me and ns > before.get(t, 0)}
        out.append({"impl": name, "seconds": dt, "threads": ran})
    measure(calls, Budget(seconds=0.0, min_runs=rounds, max_runs=rounds, warmup=2, quiesce=quiesce), around=observe)
    return out


def owners(samples: list[dict], share: float = 0.2) -> dict[str, frozenset]:
    """Each thread's implementations: those that run it for at least `share` of the call in
    four calls of five (its pool: another's spinning thread runs in some of its calls, not in
    nearly all; a pool several use, as Numba and PyTorch share libgomp's, is theirs together);
    a thread none runs that steadily goes to the one whose calls ran it most."""
    names = list(dict.fromkeys(s["impl"] for s in samples))
    tids = {t for s in samples for t in s["threads"]}
    out = {}
    for t in tids:
        frac = {n: _low([s["threads"].get(t, 0.0) / s["seconds"] for s in samples if s["impl"] == n])
                for n in names}
        mine = frozenset(n for n, f in frac.items() if f >= share)
        if not mine:
            total = collections.Counter()
            for s in samples:
                total[s["impl"]] += s["threads"].get(t, 0.0)
            mine = frozenset([total.most_common(1)[0][0]])
        out[t] = mine
    return out


def _low(xs: list[float]) -> float:
    """The value four of five of xs reach (their 20th percentile)."""
    xs = sorted(xs)
    return xs[int(0.2 * (len(xs) - 1))]


def summarise(samples: list[dict]) -> dict:
    """Per implementation: median and minimum ms, and the mean CPU ms that other implementations'
    threads ran during its slow samples (above its median) and during its fast ones."""
    own = owners(samples)
    out = {}
    for name in dict.fromkeys(s["impl"] for s in samples):
        mine = [s for s in samples if s["impl"] == name]
        med = statistics.median(s["seconds"] for s in mine)
        row = {"median_ms": round(med * 1e3, 3), "min_ms": round(min(s["seconds"] for s in mine) * 1e3, 3),
               "runs": len(mine)}
        for part, group in (("slow", [s for s in mine if s["seconds"] > med]),
                            ("fast", [s for s in mine if s["seconds"] <= med])):
            other: collections.Counter = collections.Counter()
            for s in group:
                for t, sec in s["threads"].items():
                    if name not in own[t]:
                        other[" + ".join(sorted(own[t]))] += sec * 1e3 / max(1, len(group))
            row[f"other_threads_ms_{part}"] = {k: round(v, 2) for k, v in other.most_common() if v >= 0.01}
        out[name] = row
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="mlp", help="the workload")
    ap.add_argument("--size", choices=("full", "tiny"), default="full")
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--anchors", default="numpy,torch,torch.compile,jax.jit")
    ap.add_argument("--quiesce", action="store_true", help="wait for other threads first, as python -m bench does")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = ap.parse_args(argv)
    for var in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        scratch_env(var, f"fusec-bench-{var.split('_')[0].lower()}-")
    from .anchors import Skip, fusec_dynamic_impl, fusec_impls, prepare
    from .workloads import BY_NAME
    if args.only not in BY_NAME:
        print(f"unknown workload: {args.only}", file=sys.stderr)
        return 1
    if not thread_cpu_ns():
        print("no /proc/self/task here: threads' CPU time cannot be read", file=sys.stderr)
        return 1
    w = BY_NAME[args.only]
    binding = w.binding(args.size)
    inputs = w.make_inputs(binding, seed=0)
    impls = fusec_impls(w, binding, inputs, "cpu")
    skipped = {}
    try:
        impls.append(fusec_dynamic_impl(w, binding, inputs, "cpu"))
    except Skip as e:
        skipped["fusec dynamic"] = str(e)
    for a in (x for x in args.anchors.split(",") if x):
        try:
            impls.append(prepare(a, w, inputs))
        except Skip as e:
            skipped[a] = str(e)
    calls = {i.name: i.call for i in impls}
    rows = summarise(sample(calls, args.rounds, 1.0 if args.quiesce else 0.0))
    for name, row in rows.items():
        print(f"{name:15} median {row['median_ms']:8.2f} ms  min {row['min_ms']:8.2f}")
        for part in ("slow", "fast"):
            others = ", ".join(f"{k} {v:.1f}" for k, v in list(row[f"other_threads_ms_{part}"].items())[:4])
            print(f"  {part} samples: other implementations' threads ran (ms) {others or '-'}")
    result = {"date": utc_stamp(), "workload": w.name, "binding": binding, "rounds": args.rounds,
              "quiesce": args.quiesce, "impls": rows, "skipped": skipped,
              "note": "other_threads_ms_*: mean CPU ms per sample that threads owned by other implementations "
                      "ran during the timed call; slow: samples above the implementation's median"}
    stem = f"threads-{w.name}" + ("-quiesced" if args.quiesce else "")
    print(f"wrote {write_result(args.out, stem, result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
