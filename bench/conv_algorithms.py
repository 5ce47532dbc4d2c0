"""The cpu conv algorithms (compiler/plan/conv.py) on a set of shapes: each algorithm that applies,
forced by a hand plan, timed in one interleaved run, beside the model's prediction for it and
the algorithm the model picks.

    python -m bench.conv_algorithms [--seconds 2] [--only NAME] [--out bench/results]

For each shape: `relu(conv2d(x, w, ...) + bias)` (the conv and its epilogue in one kernel, the
model's tiles), measured medians and minima, predicted times, and whether the model's pick was
the fastest measured (`pick_over_best`: its time over the fastest one's), and how much of the
numerics check's tolerance each algorithm's output takes (`tolerance_used`, the worst of three
seeded inputs; above 1 it fails). An algorithm whose output fails the numerics check is
recorded under `failed_numerics`, not timed. Writes
conv-algorithms-<date>.json.
"""
from __future__ import annotations

import argparse
import os

import numpy as np

from . import utc_stamp, write_result
from .timing import Budget, measure

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEEDS = 3          # each algorithm's output checked on this many seeded inputs: the worst is kept

# name: (batch, channels, filters, window, height, width, stride, padding, dilation)
SHAPES = {
    "resnet 1x1 64->256 56x56": (8, 64, 256, 1, 56, 56, 1, 0, 1),
    "resnet 3x3 64->64 56x56": (8, 64, 64, 3, 56, 56, 1, 1, 1),
    "resnet 3x3 128->128 28x28": (8, 128, 128, 3, 28, 28, 1, 1, 1),
    "resnet 3x3 256->256 14x14": (8, 256, 256, 3, 14, 14, 1, 1, 1),
    "resnet 3x3 s2 64->128 56x56": (8, 64, 128, 3, 56, 56, 2, 1, 1),
    "resnet 7x7 s2 stem 3->64 224x224": (2, 3, 64, 7, 224, 224, 2, 3, 1),
    "3x3 16->16 56x56": (8, 16, 16, 3, 56, 56, 1, 1, 1),
    "3x3 4->4 56x56": (8, 4, 4, 3, 56, 56, 1, 1, 1),
    "7x7 filter bank 1->4 128x128": (4, 1, 4, 7, 128, 128, 1, 3, 1),
    "7x7 filter 1->1 256x256": (4, 1, 1, 7, 256, 256, 1, 3, 1),
    "5x5 dilation 2 32->32 56x56": (4, 32, 32, 5, 56, 56, 1, 4, 2),
    # ResNet-18's deeper stages at batch 1 (the models bench): few output columns per filter
    "resnet b1 3x3 128->128 28x28": (1, 128, 128, 3, 28, 28, 1, 1, 1),
    "resnet b1 3x3 256->256 14x14": (1, 256, 256, 3, 14, 14, 1, 1, 1),
    "resnet b1 3x3 512->512 7x7": (1, 512, 512, 3, 7, 7, 1, 1, 1),
    "resnet b1 3x3 s2 256->512 14x14": (1, 256, 512, 3, 14, 14, 2, 1, 1),
}


def source(c, f, k, h, w, stride, padding, dilation) -> tuple[str, int, int]:
    oh = (h + 2 * padding - dilation * (k - 1) - 1) // stride + 1
    ow = (w + 2 * padding - dilation * (k - 1) - 1) // stride + 1
    return (f"chain c(x: f32[B, {c}, {h}, {w}], w: f32[{f}, {c}, {k}, {k}], g: f32[{f}]) -> f32[B, {f}, {oh}, {ow}] {{\n"
            f"    return relu(conv2d(x, w, stride={stride}, padding={padding}, dilation={dilation}) + "
            f"reshape(g, [{f}, 1, 1]))\n}}\n"), oh, ow


def run_shape(name: str, dims, seconds: float) -> dict:
    import fusec
    from fusec.compiler.plan.conv import ALGORITHMS, ConvShape, not_applicable
    b, c, f, k, h, w, stride, padding, dilation = dims
    src, oh, ow = source(c, f, k, h, w, stride, padding, dilation)
    binding = {"B": b}
    auto = fusec.compile(src, target="cpu", options={"baseline": False}).c
    plan = auto.compiled(binding).plan
    (g,) = [g for g in plan["groups"] if g["conv"]]
    ops = [o["id"] for o in g["ops"]]
    whole = ConvShape(b, c, h + 2 * padding, w + 2 * padding, f, k, k, oh, ow, stride, stride, dilation, dilation)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((b, c, h, w), dtype=np.float32)
    wt = rng.standard_normal((f, c, k, k), dtype=np.float32) / np.float32(np.sqrt(c * k * k))
    bias = rng.standard_normal(f, dtype=np.float32)
    calls, predicted, failed, used = {}, {}, {}, {}
    for algo in (a for a in ALGORITHMS if not_applicable(whole, a) is None):
        spec = {"groups": [{"ops": ops, "block_tiles": g["block_tiles"], "conv": algo}]}
        prog = fusec.compile(src, target="cpu", options={"baseline": False, "plans": {"c": spec}}).c
        compiled = prog.compiled(binding)
        checks = [prog.check(binding=binding, seed=seed)[0] for seed in range(SEEDS)]
        check = max(checks, key=lambda c: c.tolerance_used())
        used[algo] = round(check.tolerance_used(), 3)
        predicted[algo] = compiled.plan["groups"][0]["cost"]["time_s"]
        if not check.ok:                         # recorded, not timed
            failed[algo] = check.describe()
            print(f"{name}: {algo} does not match the reference: {failed[algo]}", flush=True)
            continue
        calls[algo] = (lambda p: lambda: p(x, wt, bias))(prog)
    samples = measure(calls, Budget(seconds=seconds, min_runs=5, max_runs=100, warmup=2))
    best = min(samples, key=lambda a: samples[a].median_ms)
    pick = g["conv"]
    return {"name": name, "binding": binding, "shape": dict(zip(
                ("batch", "channels", "filters", "window", "height", "width", "stride", "padding", "dilation"), dims)),
            "pick": pick, "fastest": best,
            "pick_over_best": round(samples[pick].median_ms / samples[best].median_ms, 3),
            "algorithms": {a: {"predicted_ms": round(predicted[a] * 1e3, 3), "tolerance_used": used[a],
                               **samples[a].as_dict()} for a in samples},
            "failed_numerics": {a: {"predicted_ms": round(predicted[a] * 1e3, 3), "check": why} for a, why in failed.items()}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=2.0, help="timing budget per shape")
    ap.add_argument("--only", help="one shape, by name")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = ap.parse_args(argv)
    from .machine import describe
    shapes = {k: v for k, v in SHAPES.items() if not args.only or k == args.only}
    if not shapes:
        ap.error(f"--only {args.only!r}: no such shape; shapes: {', '.join(SHAPES)}")
    results = []
    for name, dims in shapes.items():
        r = run_shape(name, dims, args.seconds)
        results.append(r)
        cells = "  ".join(f"{a} {v['median_ms']:.2f} ms (model {v['predicted_ms']:.2f}, {v['tolerance_used']:.0%} of tol)"
                          for a, v in r["algorithms"].items())
        print(f"{name:34} pick {r['pick']:8} fastest {r['fastest']:8} x{r['pick_over_best']:.2f}   {cells}", flush=True)
    result = {"date": utc_stamp(), "machine": describe(),
              "shapes": results,
              "picked_fastest": sum(r["pick"] == r["fastest"] for r in results), "of": len(results),
              "geomean_pick_over_best": round(float(np.exp(np.mean([np.log(r["pick_over_best"]) for r in results]))), 3)}
    print(f"the model picked the fastest on {result['picked_fastest']} of {result['of']} shapes; "
          f"its picks took x{result['geomean_pick_over_best']} the fastest's time (geomean)")
    print(f"wrote {write_result(args.out, 'conv-algorithms', result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
