"""Where a cpu contraction's epilogue runs: after one whole BLAS call, or inside each BLAS chunk.

    python -m bench.blas_epilogue [--sizes 512,1024,4096] [--rows 64,128,256] [--out bench/results]

Two forms of fusec's own cpu build of `gelu(x @ w + b)` (the bench's mlp), for several row
chunks of its prange:

    chunk  each chunk one sgemm on its worker's one thread into its rows of the output, then
           the epilogue on those rows while they are in cache (what fusec emits where the loop
           has a chunk for every core: plan/cost.py hoisted_matmuls)
    whole  one sgemm for the whole product before the loop (split into a slice of C per
           worker since 2026-12-07, every call on one BLAS thread: emit/cpu.py _gemm_chunks;
           before, one call on BLAS's own threads), then the loop applies the epilogue (built
           here by planning with the old rule, every hoistable matmul hoisted)

Each form runs in a process of its own, as a program runs it, because the forms disturb each
other: after a call on BLAS's threads, OpenBLAS's threads spin for a while on the cores, and a
prange that follows (of the same form, or of the next form in an interleaved timing) waits for
them (docs/ARCHITECTURE.md, "What the code taught us"). Each process times its form alone, then
right after a NumPy matmul on BLAS's threads (as in a program that calls NumPy between fusec
calls; the matmul's own time, measured in the same process, is taken off). Every form is checked
against NumPy first. Writes blas-epilogue-<date>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np

from . import utc_stamp, write_result

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = "chain mlp(x: f32[M, K], w: f32[K, N], b: f32[N]) -> f32[M, N] {\n    return gelu(x @ w + b)\n}\n"


def build(form: str, rows: int, m: int, k: int, n: int):
    """The chain compiled in this process in `form` ('chunk' | 'whole') with `rows` rows per
    chunk (0: the plan's own choice), and the emitted text of its kernels."""
    import fusec
    from fusec.compiler.plan import cost, cost_cpu, planner
    if form == "whole":           # the old rule: every hoistable matmul is one call before the loop
        def old_rule(info, members, root, mapped, chunks, cores):
            return cost.hoistable_matmuls(info, members, root, mapped)
        cost.hoisted_matmuls = cost_cpu.hoisted_matmuls = planner.hoisted_matmuls = old_rule
    options = {"baseline": False}
    if rows:
        options["plans"] = {"mlp": {"groups": [{"ops": [1, 2], "block_tiles": [rows, 0]}]}}
    chain = fusec.compile(SOURCE, target="cpu", options=options, cache=False).mlp
    return chain, chain.stages({"M": m, "K": k, "N": n})["kernels"]


def run_one(form: str, rows: int, m: int, k: int, n: int, runs: int) -> dict:
    """Time one form in this process: alone, then each call right after a NumPy matmul."""
    import time
    chain, text = build(form, rows, m, k, n)
    # whole: the call in a prange of its own (its split among the workers) before the chunk loop
    call = text.index("_sgemm(101, ")
    whole = "numba.prange(" in text[call:] and "_hi" in text[call:text.index("\n", call)]
    if whole != (form == "whole"):
        raise RuntimeError(f"the {form} form was not built: its sgemm is {'before' if whole else 'in'} the loop")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, k), dtype=np.float32)
    w = rng.standard_normal((k, n), dtype=np.float32) / np.float32(np.sqrt(k))
    b = rng.standard_normal(n, dtype=np.float32)
    got = chain(x, w, b)
    h = x.astype(np.float64) @ w.astype(np.float64) + b
    want = 0.5 * h * (1 + np.tanh(0.7978845608 * (h + 0.044715 * h ** 3)))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=form)
    a = rng.standard_normal((1024, 1024), dtype=np.float32)
    spin = np.empty_like(a)

    def timed(fn) -> list[float]:
        for _ in range(3):
            fn()
        out = []
        for _ in range(runs):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
        return out

    alone = timed(lambda: chain(x, w, b))
    numpy_alone = timed(lambda: np.matmul(a, a, out=spin))
    after = timed(lambda: (np.matmul(a, a, out=spin), chain(x, w, b)))
    ms = lambda v: float(f"{v * 1e3:.4g}")          # noqa: E731
    base = float(np.median(numpy_alone))
    return {"alone": {"median_ms": ms(np.median(alone)), "min_ms": ms(min(alone)), "runs": runs},
            "after_numpy_matmul": {"median_ms": ms(np.median(after) - base), "runs": runs},
            "numpy_matmul_1024_median_ms": ms(base)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="512,1024,4096", help="M,K,N")
    ap.add_argument("--rows", default="64,128,256", help="rows per chunk of each form")
    ap.add_argument("--runs", type=int, default=40, help="timed calls per form and case")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--one", default="", help=argparse.SUPPRESS)          # FORM,ROWS: this process times one
    args = ap.parse_args(argv)
    m, k, n = (int(s) for s in args.sizes.split(","))
    if args.one:
        form, rows = args.one.split(",")
        print(json.dumps(run_one(form, int(rows), m, k, n, args.runs)))
        return 0
    cases = [("chunk", 0)] + [(f, int(r)) for r in args.rows.split(",") if m % int(r) == 0 for f in ("chunk", "whole")]
    results = {}
    for form, rows in cases:
        name = f"{form}, {rows} rows" if rows else f"{form}, the plan's rows"
        proc = subprocess.run([sys.executable, "-m", "bench.blas_epilogue", "--one", f"{form},{rows}",
                               "--sizes", args.sizes, "--runs", str(args.runs)], cwd=ROOT, capture_output=True,
                              text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{name}: {proc.stderr.strip()[-2000:]}")
        results[name] = json.loads(proc.stdout.strip().splitlines()[-1])
    result = {"date": utc_stamp(), "chain": SOURCE, "binding": {"M": m, "K": k, "N": n},
              "forms": results,
              "note": "each form timed in a process of its own (alone, then right after a 1024x1024 NumPy "
                      "matmul, whose own median is taken off)"}
    print(f"{'form':28s} alone median    min | after a NumPy matmul")
    for name, r in results.items():
        print(f"  {name:26s} {r['alone']['median_ms']:8.2f} {r['alone']['min_ms']:8.2f} ms | "
              f"{r['after_numpy_matmul']['median_ms']:8.2f} ms")
    print(f"wrote {write_result(args.out, 'blas-epilogue', result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
