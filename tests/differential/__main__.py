"""Long differential runs: `python -m tests.differential -n 10000 [--targets reference,cpu,cuda-sim,mlir-jit]
[--seed S] [--explore]`.

Chains `S, S+1, ..., S+n-1` of tests/differential/gen.py go through fusec's targets and the torch
oracle (tests/differential/harness.py). Prints the counts (chains, agreements, disagreements,
undefined results, chains that did not check, target runs, skipped targets), every
disagreement with its smallest failing prefix as a reproducer, and the wall time. Exit status 1
when a chain disagrees. `--explore` draws the first seed from the clock (FUSEC_EXPLORE=1 too).
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.differential", description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=1000, help="number of chains (default 1000)")
    ap.add_argument("--targets", default="reference",
                    help="comma-separated: reference, cpu, cuda-sim, cuda, mlir-jit (default reference)")
    ap.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    ap.add_argument("--explore", action="store_true", help="draw the first seed from the clock")
    ap.add_argument("--no-shrink", action="store_true", help="print disagreements as drawn")
    ap.add_argument("--every", type=int, default=0, help="print a progress line every N chains")
    args = ap.parse_args(argv)
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    if "reference" not in targets:
        targets.insert(0, "reference")
    if "cuda-sim" in targets:
        os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
    os.environ.setdefault("FUSEC_NO_CACHE", "1")      # every chain compiled fresh
    seed = args.seed
    if args.explore or os.environ.get("FUSEC_EXPLORE") == "1":
        seed = int(time.time() * 1000) % 2**31
    from .harness import chain_case, check, shrink

    start = time.perf_counter()
    counts: collections.Counter = collections.Counter()
    runs: collections.Counter = collections.Counter()
    skipped: collections.Counter = collections.Counter()
    noted = 0
    failures = []
    for k in range(args.n):
        case = chain_case(seed + k)
        res = check(case, targets)
        counts[res.status] += 1
        for r in res.ran:
            runs[r] += 1
        for s in res.skipped:
            skipped[s] += 1
        noted += bool(res.notes)
        if res.status in ("disagree", "invalid"):
            small = case if args.no_shrink or res.status == "invalid" else shrink(case, targets)
            failures.append((res, small))
            print(f"--- {res.status}: {small.describe()}", flush=True)
            for p in res.problems:
                print(f"    {p}", flush=True)
        if args.every and (k + 1) % args.every == 0:
            print(f"[{k + 1}/{args.n}] {dict(counts)} {time.perf_counter() - start:.0f} s", flush=True)
    wall = time.perf_counter() - start
    print(f"chains {args.n} (seeds {seed}..{seed + args.n - 1}), targets {','.join(targets)}")
    print(f"agree {counts['agree']}, disagree {counts['disagree']}, undefined {counts['undefined']}, "
          f"invalid {counts['invalid']}; ill-conditioned float64 outputs noted in {noted}")
    print("runs: " + ", ".join(f"{k} {v}" for k, v in sorted(runs.items())))
    if skipped:
        print("skipped: " + ", ".join(f"{k} {v}" for k, v in sorted(skipped.items())))
    print(f"wall time {wall:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
