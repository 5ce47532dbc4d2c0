"""Shape-polymorphic builds against static ones on the cpu, at the bench sizes.

    python -m bench.dynamic [--size full|tiny] [--seconds 2] [--out bench/results]

For each bench workload (bench/workloads.py) and a symbol of it, builds the chain twice: static
(every extent compiled in, the default) and with the symbol taken at run time (`--dynamic SYM`,
planned for its size class), checks that both give the same outputs, and times them
interleaved in one process (bench/timing.py). Writes dynamic-<date>.json with both times and
their ratio; a workload whose chain cannot take the symbol at run time is recorded with the
user error that says why.
"""
from __future__ import annotations

import argparse
import os
import statistics

import numpy as np

from . import utc_stamp, write_result
from .timing import Budget, measure
from .workloads import WORKLOADS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the symbol each workload takes at run time: its rows, tokens, images or batch
SYMBOLS = (("ew_chain", "M"), ("bias_gelu_res", "M"), ("softmax", "M"), ("layernorm", "M"), ("mlp", "M"),
           ("conv_bn_relu", "B"), ("attention", "B"), ("attention", "S"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=("full", "tiny"), default="full")
    ap.add_argument("--seconds", type=float, default=2.0, help="timing budget per build")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = ap.parse_args(argv)
    import fusec
    from fusec.dsl.diagnostics import FdslError
    by_name = {w.name: w for w in WORKLOADS}
    rows = []
    for name, sym in SYMBOLS:
        w = by_name[name]
        binding = w.binding(args.size)
        inputs = w.make_inputs(binding)
        row = {"workload": name, "symbol": sym, "binding": binding}
        static = getattr(fusec.compile(str(w.fdsl), target="cpu", options={"baseline": False}), w.chain)
        dynamic = getattr(fusec.compile(str(w.fdsl), target="cpu", options={"baseline": False, "dynamic": [sym]}),
                          w.chain)
        want = static(*inputs)
        try:
            got = dynamic(*inputs)
        except FdslError as e:
            row["refused"] = e.render().splitlines()[0]
            print(f"{name:14} {sym}: refused: {row['refused']}")
            rows.append(row)
            continue
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        (build,) = dynamic._builds.values()
        row["planned_at"] = build.plan["dynamic"][sym]
        row["kernels"] = {"static": static.plan(binding)["kernels"], "dynamic": build.plan["kernels"]}
        samples = measure({"static": lambda: static(*inputs), "dynamic": lambda: dynamic(*inputs)},
                          Budget(seconds=args.seconds, min_runs=5, max_runs=100, warmup=2))
        row["impls"] = {k: s.as_dict() for k, s in samples.items()}
        by_round = dict(zip(samples["static"].rounds, samples["static"].seconds))
        ratios = [d / by_round[r] for r, d in zip(samples["dynamic"].rounds, samples["dynamic"].seconds)
                  if r in by_round]
        row["dynamic_over_static"] = {"median": samples["dynamic"].median_ms / samples["static"].median_ms,
                                      "min": samples["dynamic"].min_ms / samples["static"].min_ms,
                                      "paired": statistics.median(ratios)}
        print(f"{name:14} {sym}: static {samples['static'].median_ms:8.3f} ms, dynamic {samples['dynamic'].median_ms:8.3f}"
              f" ms (planned at {sym} = {row['planned_at']}; kernels {row['kernels']['static']} -> "
              f"{row['kernels']['dynamic']}): x{row['dynamic_over_static']['median']:.2f} median, "
              f"x{row['dynamic_over_static']['paired']:.2f} paired")
        rows.append(row)
    result = {"date": utc_stamp(), "size": args.size, "rows": rows}
    print(f"wrote {write_result(args.out, 'dynamic', result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
