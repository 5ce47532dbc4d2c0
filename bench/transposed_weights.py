"""A linear layer with PyTorch-style [N, K] weights on the cpu: `gelu(x @ transpose(w) + b)`.

    python -m bench.transposed_weights [--sizes 512,1024,4096] [--out bench/results]

Times fusec's fused build against NumPy's `x @ w.T` alone (the layer's BLAS call, its floor)
and NumPy's whole layer, interleaved in one process (bench/timing.py), and writes
transposed-weights-<date>.json. The cpu emitter reads w as it lies, through BLAS's transpose
flag (transforms/cpu_library_calls.py: fold_transposed_operands), so the layer should take
about its matmul's time.
"""
from __future__ import annotations

import argparse
import os

import numpy as np

from . import utc_stamp, write_result
from .timing import Budget, measure

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = "chain lin(x: f32[M, K], w: f32[N, K], b: f32[N]) -> f32[M, N] {\n    return gelu(x @ transpose(w) + b)\n}\n"


def _gelu(h):
    return np.float32(0.5) * h * (np.float32(1) + np.tanh(np.float32(0.7978846) * (h + np.float32(0.044715) * h ** 3)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="512,1024,4096", help="M,K,N")
    ap.add_argument("--seconds", type=float, default=3.0, help="timing budget per implementation")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = ap.parse_args(argv)
    import fusec
    m, k, n = (int(s) for s in args.sizes.split(","))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, k), dtype=np.float32)
    w = rng.standard_normal((n, k), dtype=np.float32) / np.float32(np.sqrt(k))
    b = rng.standard_normal(n, dtype=np.float32)
    lin = fusec.compile(SOURCE, target="cpu", options={"baseline": False}).lin
    got = lin(x, w, b)                          # compiles and runs once
    np.testing.assert_allclose(got, _gelu(x @ w.T + b), rtol=1e-3, atol=1e-3)
    calls = {"fusec fused": lambda: lin(x, w, b), "numpy x @ w.T": lambda: x @ w.T,
             "numpy layer": lambda: _gelu(x @ w.T + b)}
    samples = measure(calls, Budget(seconds=args.seconds, min_runs=10, max_runs=200, warmup=2))
    text = lin.stages({"M": m, "K": k, "N": n})["kernels"]
    result = {"date": utc_stamp(),
              "chain": SOURCE, "binding": {"M": m, "K": k, "N": n},
              "transposed_in_place": "_sgemm(101, 111, 112," in text,
              "impls": {name: s.as_dict() for name, s in samples.items()}}
    for name, s in samples.items():
        print(f"{name:15} median {s.median_ms:8.2f} ms  min {s.min_ms:8.2f} ms  ({len(s.seconds)} runs)")
    print(f"wrote {write_result(args.out, 'transposed-weights', result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
