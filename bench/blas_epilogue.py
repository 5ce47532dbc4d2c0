"""Where a cpu contraction's epilogue runs: after one whole BLAS call, or inside each BLAS tile.

    python -m bench.blas_epilogue [--sizes 512,1024,4096] [--rows 64,128,256] [--out bench/results]

fusec's cpu build of `gelu(x @ w + b)` (the bench's mlp) is one host function: one CBLAS sgemm
for the whole product, threaded by BLAS itself, then a prange over row tiles that applies the
epilogue (transforms/cpu_library_calls.py: hoist_whole_contractions). This script rewrites that
emitted function, its epilogue lines untouched, into the three forms that keep each output tile in
cache between its product and its epilogue:

    tile   a prange over row tiles; each tile one single-threaded sgemm into its rows, then its
           epilogue (BLAS limited to one thread per worker, as fusec does for calls in a prange)
    block  a loop over row blocks; each block one sgemm on BLAS's own threads, then its epilogue
           in a prange over its rows
    serial the same loop, each block's epilogue on the calling thread alone (no prange: only
           BLAS's threads run, and one core idles through each epilogue)

for several row counts, checks every form against fusec's output, and times them interleaved
in one process (bench/timing.py), each once as it is and once right after a NumPy matmul on
BLAS's threads (which then spin, as after any threaded NumPy call). Writes
blas-epilogue-<date>.json.
"""
from __future__ import annotations

import argparse
import os
import re

import numpy as np

from . import utc_stamp, write_result
from .timing import Budget, measure

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = "chain mlp(x: f32[M, K], w: f32[K, N], b: f32[N]) -> f32[M, N] {\n    return gelu(x @ w + b)\n}\n"
_GEMM = re.compile(r"^    (_sgemm\(101, 111, 111, )(\d+)(, \d+, \d+, _f32_1, )(\w+)(, \d+, \w+, \d+, _f32_0, )(\w+)"
                   r"(, \d+\)).*$", re.M)
_TILES = re.compile(r"^    for (\w+) in numba\.prange\(0, (\d+)\):\n        (\w+) = \1 \* (\d+)\n"
                    r"        for (\w+) in range\(\4\):\n", re.M)


def forms(module: str, host: str, m: int, rows: list[int]) -> dict[str, str]:
    """{form name: the name of its host function}, defined by appending them to `module`
    (returned as the "source" entry); raises ValueError when the emitted function is not the
    one whole call followed by a row-tile loop this rewrites."""
    start = module.index(f"def {host}(")
    deco = max(0, module.rfind("@numba.njit", 0, start))
    end = module.find("\n", module.find("\n    return (", start) + 1)
    fn = module[deco:end + 1] if end > start else module[deco:]
    gemm, tiles = _GEMM.search(fn), _TILES.search(fn)
    if not gemm or not tiles or gemm.start() > tiles.start() or int(gemm.group(2)) != m:
        raise ValueError(f"{host} is not one whole sgemm followed by a row-tile loop:\n{fn}")
    out = {"source": module}
    for r in rows:
        if m % r:
            continue
        count, var, base = m // r, tiles.group(1), tiles.group(3)
        call = (f"{gemm.group(1)}{r}{gemm.group(3)}{gemm.group(4)}[{base}:]{gemm.group(5)}{gemm.group(6)}[{base}:]"
                f"{gemm.group(7)}")
        body = fn[:gemm.start()] + fn[gemm.end() + 1:]
        tile_head = (f"    for {var} in numba.prange(0, {count}):\n        {base} = {var} * {r}\n        {call}\n"
                     f"        for {tiles.group(5)} in range({r}):\n")
        block_head = (f"    for {var} in range(0, {count}):\n        {base} = {var} * {r}\n        {call}\n"
                      f"        for {tiles.group(5)} in numba.prange({r}):\n")
        serial_head = block_head.replace(f"in numba.prange({r}):", f"in range({r}):")
        for form, head in (("tile", tile_head), ("block", block_head), ("serial", serial_head)):
            name = f"_{form}{r}"
            text = _TILES.sub(lambda _: head, body, count=1).replace(f"def {host}(", f"def {name}(", 1)
            if form == "serial":                 # no prange left
                text = text.replace("parallel=True", "parallel=False", 1)
            out["source"] += "\n\n" + text
            if form == "tile":
                out["source"] += (f"\n\ndef {name}_one_thread(*args):\n"
                                  "    if _BLAS_THREADS is None:\n"
                                  f"        return {name}(*args)\n"
                                  '    with _BLAS_THREADS.limit(limits=1, user_api="blas"):\n'
                                  f"        return {name}(*args)\n")
                out[f"tile {r} rows"] = f"{name}_one_thread"
            else:
                out[f"{form} {r} rows"] = name
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="512,1024,4096", help="M,K,N")
    ap.add_argument("--rows", default="64,128,256", help="rows per tile or block of the rewritten forms")
    ap.add_argument("--seconds", type=float, default=3.0, help="timing budget per implementation")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = ap.parse_args(argv)
    import fusec
    from fusec.runtime.artifact import function_from_source
    m, k, n = (int(s) for s in args.sizes.split(","))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, k), dtype=np.float32)
    w = rng.standard_normal((k, n), dtype=np.float32) / np.float32(np.sqrt(k))
    b = rng.standard_normal(n, dtype=np.float32)
    mlp = fusec.compile(SOURCE, target="cpu", options={"baseline": False}).mlp
    want = mlp(x, w, b).copy()
    module = mlp.stages({"M": m, "K": k, "N": n})["kernels"]
    host = re.search(r"^def (_run_mlp_planned)\(", module, re.M).group(1)
    made = forms(module, host, m, [int(r) for r in args.rows.split(",")])
    out = np.empty((m, n), np.float32)
    calls = {"fusec: whole call, then epilogue": function_from_source(made["source"], host, "blas-epilogue")}
    calls.update({name: function_from_source(made["source"], fn, "blas-epilogue")
                  for name, fn in made.items() if name != "source"})
    for name, fn in calls.items():
        got = fn(x, w, b, out)[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=name)
    a = rng.standard_normal((1024, 1024), dtype=np.float32)
    spin = np.empty_like(a)

    def after_numpy(fn):
        def call():
            np.matmul(a, a, out=spin)           # timed with the call: its own time is taken off
            return fn(x, w, b, out)
        return call
    timed = {name: (lambda fn: lambda: fn(x, w, b, out))(fn) for name, fn in calls.items()}
    budget = Budget(seconds=args.seconds, min_runs=10, max_runs=200, warmup=2)
    alone = measure(timed, budget)
    # right after NumPy's threaded matmul: the matmul is timed with each call, so its own time
    # (measured alone, in the same rounds) is subtracted from the medians reported
    after = measure({"numpy matmul": lambda: np.matmul(a, a, out=spin),
                     **{name: after_numpy(fn) for name, fn in calls.items()}}, budget)
    base = after.pop("numpy matmul")
    result = {"date": utc_stamp(), "chain": SOURCE, "binding": {"M": m, "K": k, "N": n},
              "alone": {name: s.as_dict() for name, s in alone.items()},
              "after_numpy_matmul": {name: s.as_dict() for name, s in after.items()},
              "numpy_matmul_1024": base.as_dict(),
              "note": "after_numpy_matmul times include the 1024x1024 matmul (numpy_matmul_1024 alone)"}
    print(f"alone{'':34s} median      min   | after a NumPy matmul (minus its {base.median_ms:.2f} ms)")
    for name in calls:
        s, t = alone[name], after[name]
        print(f"  {name:36s} {s.median_ms:7.2f} {s.min_ms:8.2f} ms | {t.median_ms - base.median_ms:7.2f} ms")
    print(f"wrote {write_result(args.out, 'blas-epilogue', result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
