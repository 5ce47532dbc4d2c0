"""The tensor-core form of the contraction template (docs/ARCHITECTURE.md, "Tensor cores").

emit/gemm.py holds a `TensorCores` when the root is marked `fusec.gemm_mma` (f16 | bf16): it
lays out the warp tiles, puts both staging tiles in one flat f32 array, runs 16 of K at a time
on mma.sync.m16n8k16 through the module-level intrinsics of `mma_helpers`, and after the K loop
moves the accumulators through shared memory into a thread grid for the epilogue.
"""
from __future__ import annotations

from ..plan.hardware import WARP
from .values import expr_add, expr_mul


def mma_helpers(kind: str) -> list[str]:
    """The module-level intrinsics of the tensor-core form for operand type `kind` (f16 | bf16):
    inline PTX through llvmlite, compiled into the kernel (defined only off the simulator)."""
    t = kind
    return [
        "if _CUDASIM:   # the simulator has no warp ops: the kernels take their FMA path there",
        "    _FMA_ONLY = True",
        f"    _pack_{t}x2 = _mma_{t} = None",
        "else:",
        "    _FMA_ONLY = False",
        "    from llvmlite import ir as _llir",
        "    from numba import types as _nbt",
        "    from numba.cuda.extending import intrinsic as _intrinsic",
        "",
        "    @_intrinsic",
        f"    def _pack_{t}x2(typingctx, lo, hi):",
        f'        """Two f32 rounded to nearest into one {t}x2 register, `lo` in the low half."""',
        "        def codegen(context, builder, sig, args):",
        "            f32 = _llir.FloatType()",
        "            fn = _llir.InlineAsm(_llir.FunctionType(_llir.IntType(32), [f32, f32]),",
        f'                                 "cvt.rn.{t}x2.f32 $0, $2, $1;", "=r,f,f")',
        "            return builder.call(fn, list(args))",
        "        return _nbt.uint32(_nbt.float32, _nbt.float32), codegen",
        "",
        "    @_intrinsic",
        f"    def _mma_{t}(typingctx, c0, c1, c2, c3, a0, a1, a2, a3, b0, b1):",
        f'        """One warp\'s D = A B + C, A 16x16 and B 16x8 in {t}, C and D f32 (mma.sync.m16n8k16)."""',
        "        sig = _nbt.UniTuple(_nbt.float32, 4)(*([_nbt.float32] * 4 + [_nbt.uint32] * 6))",
        "",
        "        def codegen(context, builder, sig, args):",
        "            f32, i32 = _llir.FloatType(), _llir.IntType(32)",
        "            fn = _llir.InlineAsm(_llir.FunctionType(_llir.LiteralStructType([f32] * 4), [f32] * 4 + [i32] * 6),",
        f'                                 "mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32 "',
        '                                 "{$0,$1,$2,$3}, {$8,$9,$10,$11}, {$12,$13}, {$4,$5,$6,$7};",',
        '                                 "=f,=f,=f,=f,f,f,f,f,r,r,r,r,r,r")',
        "            r = builder.call(fn, list(args))",
        "            return context.make_tuple(builder, sig.return_type, [builder.extract_value(r, i) for i in range(4)])",
        "        return sig, codegen",
    ]


class FlatTile:
    """A [BK, B] staging tile at `offset` in a flat shared array, rows `stride` words apart."""

    def __init__(self, array: str, offset: int, stride: int):
        self.array, self.offset, self.stride = array, offset, stride

    def at(self, k: str, x: str) -> str:
        return f"{self.array}[{expr_add(expr_add(expr_mul(k, str(self.stride)), x), str(self.offset))}]"


class Fragments:
    """Where a lane's accumulators lie in the mma fragment layout (PTX ISA, "Matrix Fragments for
    mma.m16n8k16"): accumulator (i, j) is (mi, h) = divmod(i, 2), (ni, e) = divmod(j, 2), at row
    g + 8 h + 16 mi and column 2 t + e + 8 ni of the warp's tile (lane = 4 g + t)."""

    def __init__(self, mb: str, nb: str):
        self.mb, self.nb = mb, nb

    def row(self, i: int) -> str:
        return expr_add(self.mb, str((i // 2) * 16 + (i % 2) * 8))

    def col(self, j: int) -> str:
        return expr_add(self.nb, str((j // 2) * 8 + j % 2))


class TensorCores:
    """The tensor-core pieces of one contraction block (module doc): BM x BN outputs, K in
    steps of BK, TM x TN accumulators per thread, `threads` threads numbered `tid`."""

    def __init__(self, body, kind: str, tid: str, bm: int, bn: int, bk: int, tm: int, tn: int, threads: int):
        self.w, self.names, self.helpers = body.w, body.names, body.ctx.helpers
        self.kind, self.tid = kind, tid
        self.bm, self.bn, self.bk, self.tm, self.tn, self.T = bm, bn, bk, tm, tn, threads
        self.array: str | None = None

    def layout(self) -> Fragments:
        """The warp tiles and the lane's coordinates: warp w owns the (8 TM) x (4 TN) tile at rows
        (w // WN) 8 TM, columns (w % WN) 4 TN (WN = BN / (4 TN)); per 16 of K lane 4 g + t reads
        its A fragments at K rows 2 t + {0, 1} (+8), rows g (+8) + 16 mi, and its B fragments at
        K rows 2 t + {0, 1} (+8), columns g + 8 ni."""
        w, names = self.w, self.names
        lane, warp, g, t = (names.fresh(n) for n in ("lane", "warp", "g", "t4"))
        across = self.bn // (4 * self.tn)                 # warp tiles along N
        w(f"{lane} = {self.tid} % {WARP}")
        w(f"{warp} = {self.tid} // {WARP}")
        w(f"{g} = {lane} // 4")
        w(f"{t} = {lane} % 4")
        self.mb, self.nb, self.nf, self.kf = (names.fresh(n) for n in ("mb", "nb", "nf", "kf"))
        w(f"{self.mb} = ({warp} // {across}) * {8 * self.tm} + {g}")     # accumulator and A rows
        w(f"{self.nb} = ({warp} % {across}) * {4 * self.tn} + 2 * {t}")  # accumulator columns
        w(f"{self.nf} = ({warp} % {across}) * {4 * self.tn} + {g}")      # B fragment columns
        w(f"{self.kf} = 2 * {t}")                                           # fragment K rows
        return Fragments(self.mb, self.nb)

    def tiles(self, pad: int) -> tuple[FlatTile, FlatTile]:
        """The A and B staging tiles in one f32 array, which then holds the block's output tile
        (the epilogue reads it back in a thread grid's coalesced order: `restage`)."""
        sh = self.names.fresh("S")
        mwords, nwords = self.bk * (self.bm + pad), self.bk * (self.bn + pad)
        self.w(f"{sh} = cuda.shared.array({max(mwords + nwords, self.bm * (self.bn + 1))}, numba.float32)")
        self.array = sh
        return FlatTile(sh, 0, self.bm + pad), FlatTile(sh, mwords, self.bn + pad)

    def step(self, mt: FlatTile, nt: FlatTile, accs, kk0: str) -> None:
        """16 of K on tensor cores: the fragments from the shared tiles, one mma per 16x8."""
        w, names, t = self.w, self.names, self.kind
        pack, mma = f"_pack_{t}x2", f"_mma_{t}"
        self.helpers.use_text(mma, mma_helpers(t))
        k = names.fresh("kf0")
        w(f"{k} = {kk0} + {self.kf}")

        def pair(tile: FlatTile, k_off: int, col: str) -> str:
            return f"{pack}({tile.at(expr_add(k, str(k_off)), col)}, {tile.at(expr_add(k, str(k_off + 1)), col)})"

        a, b = [], []
        for mi in range(self.tm // 2):
            r0, r8 = expr_add(self.mb, str(16 * mi)), expr_add(self.mb, str(16 * mi + 8))
            regs = [names.fresh(f"fa{mi}_") for _ in range(4)]
            for n, (ko, r) in zip(regs, ((0, r0), (0, r8), (8, r0), (8, r8))):
                w(f"{n} = {pair(mt, ko, r)}")
            a.append(regs)
        for ni in range(self.tn // 2):
            c = expr_add(self.nf, str(8 * ni))
            regs = [names.fresh(f"fb{ni}_") for _ in range(2)]
            for n, ko in zip(regs, (0, 8)):
                w(f"{n} = {pair(nt, ko, c)}")
            b.append(regs)
        for mi in range(self.tm // 2):
            for ni in range(self.tn // 2):
                d = [accs[2 * mi][2 * ni], accs[2 * mi][2 * ni + 1], accs[2 * mi + 1][2 * ni], accs[2 * mi + 1][2 * ni + 1]]
                w(f"{', '.join(d)} = {mma}({', '.join(d + a[mi] + b[ni])})")

    def restage(self, accs, frags: Fragments, grid):
        """The accumulators through shared memory into a layout whose warps store along the
        output's contiguous dim: TXR threads along N (the widest that divides BN and the block,
        so a warp's 32 lanes cover 32 consecutive outputs when BN allows), TYR = T / TXR along M,
        each thread (BM / TYR) x (BN / TXR) outputs. Returns those and their layout,
        grid(ry, TYR, rx, TXR)."""
        w, names = self.w, self.names
        arr, stride = self.array, self.bn + 1
        for i in range(self.tm):
            for j in range(self.tn):
                w(f"{arr}[{expr_add(expr_mul(frags.row(i), str(stride)), frags.col(j))}] = {accs[i][j]}")
        w("cuda.syncthreads()")
        txr = max(d for d in range(1, self.bn + 1)
                  if self.bn % d == 0 and self.T % d == 0 and self.bm % (self.T // d) == 0)
        tyr = self.T // txr
        rx, ry = names.fresh("rx"), names.fresh("ry")
        w(f"{rx} = {self.tid} % {txr}")
        w(f"{ry} = {self.tid} // {txr}")
        at = grid(ry, tyr, rx, txr)
        nm, nn = self.bm // tyr, self.bn // txr
        out = [[names.fresh(f"o{i}_{j}") for j in range(nn)] for i in range(nm)]
        for i in range(nm):
            for j in range(nn):
                w(f"{out[i][j]} = {arr}[{expr_add(expr_mul(at.row(i), str(stride)), at.col(j))}]")
        return out, at
