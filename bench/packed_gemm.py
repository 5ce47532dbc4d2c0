"""A prototype: sgemm with the weights packed once, beside fusec's OpenBLAS call and onnxruntime's
prepacked MatMul (issue 39: the transformers' gap is prepacked weights, docs/PERFORMANCE.md).

    python -m bench.packed_gemm [--shapes 126x768x2304,...] [--kb 256] [--seconds 4] [--out bench/results]

Not part of fusec's build yet: it measures whether a GEMM written here can read a packed layout
kept between calls as fast as MLAS does. B is packed into 16-column panels, Bp[N/16, K, 16]; a
micro-kernel computes a 6x16 block of C += A @ B over a block of K in twelve <8 x float>
accumulators with llvm.fma.v8f32, written as LLVM IR through a Numba intrinsic (Numba has no
vector types: the same kernel written as 96 scalar accumulators is vectorised across K, with
gathers, at 7 GFLOP/s); a prange over the panels runs it for each block of 6 rows and of `kb`
K steps (a 16 KiB panel block in L1 at kb 256), and rows past the last block of 6 in scalar
loops. Timed interleaved (bench/timing.py) with fusec's `x @ w` (weights an argument: OpenBLAS
packs them every call) and onnxruntime's MatMul with w an initializer (bench/runtimes.py:
ort_runner), outputs checked against float64; writes packed-gemm-<date>.json.
"""
from __future__ import annotations

import argparse
import os

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .prepacked_weights import Product, parse_shapes, run_all
from .timing import Budget

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MR, NR = 6, 16                 # the micro-kernel's block of C: rows, columns (two vectors of 8)
SHAPES = "126x768x2304,126x768x768,126x768x3072,126x3072x768"   # GPT-2's projections, M a multiple of 6
_F32, _I64 = ir.FloatType(), ir.IntType(64)
_V8 = ir.VectorType(_F32, 8)


@intrinsic
def _micro_6x16(typingctx, a, a_off, lda, bp, b_off, c, c_off, ldc, k):
    """C[6, 16] += A[6, k] @ Bp-panel[k, 16]: a at a_off (rows lda apart), the panel's 16-float
    rows at b_off, C at c_off (rows ldc apart); offsets in elements. One loop over k, the twelve
    accumulators in registers; C loaded, added and stored once at the end."""
    sig = types.void(a, a_off, lda, bp, b_off, c, c_off, ldc, k)

    def codegen(context, builder, sig, args):
        a_, a_off_, lda_, bp_, b_off_, c_, c_off_, ldc_, k_ = args
        data = [context.make_array(sig.args[i])(context, builder, v).data for i, v in ((0, a_), (3, bp_), (5, c_))]
        aptr, bptr, cptr = (builder.gep(d, [off]) for d, off in zip(data, (a_off_, b_off_, c_off_)))
        fma = builder.module.declare_intrinsic("llvm.fma.v8f32", (), ir.FunctionType(_V8, [_V8] * 3))
        vec = _V8.as_pointer()
        i64 = lambda n: ir.Constant(_I64, n)  # noqa: E731
        entry = builder.block
        loop, done = builder.function.append_basic_block("mk_loop"), builder.function.append_basic_block("mk_done")
        zero = ir.Constant(_V8, [0.0] * 8)
        builder.cbranch(builder.icmp_signed(">", k_, i64(0)), loop, done)
        builder.position_at_end(loop)
        kk = builder.phi(_I64)
        kk.add_incoming(i64(0), entry)
        accs = [builder.phi(_V8) for _ in range(2 * MR)]
        for acc in accs:
            acc.add_incoming(zero, entry)
        row = builder.mul(kk, i64(NR))
        b = [builder.load(builder.bitcast(builder.gep(bptr, [builder.add(row, i64(8 * h))]), vec), align=4)
             for h in range(2)]
        lanes = ir.Constant(ir.VectorType(ir.IntType(32), 8), [0] * 8)
        new = []
        for i in range(MR):
            x = builder.load(builder.gep(aptr, [builder.add(builder.mul(i64(i), lda_), kk)]))
            x = builder.insert_element(ir.Constant(_V8, ir.Undefined), x, ir.Constant(ir.IntType(32), 0))
            x = builder.shuffle_vector(x, ir.Constant(_V8, ir.Undefined), lanes)
            new += [builder.call(fma, [x, b[h], accs[2 * i + h]]) for h in range(2)]
        k1 = builder.add(kk, i64(1))
        tail = builder.block
        kk.add_incoming(k1, tail)
        for acc, v in zip(accs, new):
            acc.add_incoming(v, tail)
        builder.cbranch(builder.icmp_signed("<", k1, k_), loop, done)
        builder.position_at_end(done)
        outs = []
        for v in new:                        # the phis first in their block
            outs.append(builder.phi(_V8))
            outs[-1].add_incoming(zero, entry)
            outs[-1].add_incoming(v, tail)
        for i in range(MR):
            for h in range(2):
                p = builder.bitcast(builder.gep(cptr, [builder.add(builder.mul(i64(i), ldc_), i64(8 * h))]), vec)
                builder.store(builder.fadd(builder.load(p, align=4), outs[2 * i + h]), p, align=4)
        return context.get_dummy_value()
    return sig, codegen


def pack(b: np.ndarray) -> np.ndarray:
    """B [K, N] (N a multiple of 16) as 16-column panels, Bp[N/16, K, 16]: what a caller keeps
    between calls when B is a constant."""
    k, n = b.shape
    if n % NR:
        raise ValueError(f"pack: N = {n} is not a multiple of {NR}")
    return np.ascontiguousarray(b.reshape(k, n // NR, NR).transpose(1, 0, 2))


@numba.njit(parallel=True, fastmath=True, nogil=True)
def gemm_packed(a, bp, c, kb):
    """c += a @ B for B packed by pack(): a prange over B's panels, blocks of kb K steps, blocks
    of 6 rows by the micro-kernel, the rows past the last block of 6 in scalar loops."""
    m, k = a.shape
    panels = bp.shape[0]
    n = panels * NR
    full = m - m % MR
    for p in numba.prange(panels):
        for k0 in range(0, k, kb):
            kn = min(kb, k - k0)
            for i0 in range(0, full, MR):
                _micro_6x16(a, i0 * k + k0, k, bp, (p * k + k0) * NR, c, i0 * n + p * NR, n, kn)
        for i in range(full, m):
            for j in range(NR):
                s = np.float32(0.0)
                for q in range(k):
                    s += a[i, q] * bp[p, q, j]
                c[i, p * NR + j] += s


def run_shape(m: int, k: int, n: int, kb: int, budget: Budget) -> dict:
    p = Product(m, k, n)
    wp = pack(p.w)
    out = np.zeros((m, n), np.float32)

    def packed():
        out[:] = 0
        gemm_packed(p.x, wp, out, kb)
        return out
    row = p.timed({"fusec (OpenBLAS, w an argument)": lambda: p.fusec(p.x, p.w),
                   "onnxruntime (w a constant)": p.ort_constant.call, "prototype (w packed once)": packed}, budget)
    return {**row, "kb": kb}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=SHAPES, help="MxKxN,... (N a multiple of 16)")
    ap.add_argument("--kb", type=int, default=256, help="K steps per block of the micro-kernel (default 256)")
    ap.add_argument("--seconds", type=float, default=4.0, help="timing budget per implementation and shape")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = ap.parse_args(argv)
    if args.kb < 1:
        ap.error(f"--kb: {args.kb} is not a positive number of K steps")
    shapes = parse_shapes(ap, args.shapes, NR)
    budget = Budget(seconds=args.seconds, min_runs=10, max_runs=400, warmup=3)
    return run_all(shapes, lambda m, k, n: run_shape(m, k, n, args.kb, budget), "packed-gemm", args.out)


if __name__ == "__main__":
    raise SystemExit(main())
