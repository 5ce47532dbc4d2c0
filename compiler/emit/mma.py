"""The tensor-core form of the contraction template (docs/ARCHITECTURE.md, "Tensor cores").

emit/gemm.py holds a `TensorCores` when the root is marked `fusec.gemm_mma` (f16 | bf16): it
lays out the warp tiles, keeps both staging tiles as 16-bit halves in swizzled layouts
(`SwizzledTile`) in the half-word view of one f32 shared array, reads every fragment with
ldmatrix (`LDSM_HELPERS`), runs 16 of K at a time on mma.sync.m16n8k16 through the module-level
intrinsics of `mma_helpers`, and after the K loop moves the accumulators through the same
shared array into a thread grid for the epilogue.
"""
from __future__ import annotations

from ..plan.gemm import SMEM_LIMIT, restage_stride
from ..plan.hardware import WARP
from . import bf16 as emit_bf16
from .cp_async import INTRINSIC_IMPORTS
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


LDSM_HELPERS = [
    "if _CUDASIM:   # no inline PTX (the kernels take their FMA path there)",
    "    _ldsm_x4 = _ldsm_x4_t = _ldsm_x2 = _ldsm_x2_t = _smem_base = None",
    "else:",
    *INTRINSIC_IMPORTS,
    "",
    "    @_intrinsic",
    "    def _smem_base(typingctx, arr):",
    '        """The 32-bit shared-window address of arr[0] (a shared array): ldmatrix addresses are it plus',
    '        byte offsets, 32-bit integer adds."""',
    "        sig = _nbt.uint32(arr)",
    "",
    "        def codegen(context, builder, sig, args):",
    "            i32, i64 = _llir.IntType(32), _llir.IntType(64)",
    "            ary = context.make_array(sig.args[0])(context, builder, args[0])",
    "            fn = _llir.InlineAsm(_llir.FunctionType(i32, [i64]),",
    '                                 "{ .reg .u64 sa; cvta.to.shared.u64 sa, $1; cvt.u32.u64 $0, sa; }", "=r,l")',
    "            return builder.call(fn, [builder.ptrtoint(ary.data, i64)])",
    "        return sig, codegen",
    "",
    "    def _ldsm(n, trans):",
    "        @_intrinsic",
    "        def _op(typingctx, addr):",
    '            """ldmatrix.sync.aligned.m8n8.x{n}[.trans].shared.b16: lane 8 j + r gives the shared',
    "            address (32-bit, 16-byte aligned) of row r of 8x8 matrix j, 16 bytes; each lane receives",
    '            one 32-bit word of each matrix."""',
    "            sig = _nbt.UniTuple(_nbt.uint32, n)(addr)",
    "",
    "            def codegen(context, builder, sig, args):",
    "                i32 = _llir.IntType(32)",
    "                a = context.cast(builder, args[0], sig.args[0], _nbt.uint32)",
    "                regs = ','.join(f'${k}' for k in range(n))",
    "                fn = _llir.InlineAsm(_llir.FunctionType(_llir.LiteralStructType([i32] * n), [i32]),",
    '                                     "ldmatrix.sync.aligned.m8n8.x" + str(n) + (".trans" if trans else "")',
    '                                     + ".shared.b16 {" + regs + "}, [$" + str(n) + "];",',
    '                                     ",".join(["=r"] * n + ["r", "~{memory}"]), side_effect=True)',
    "                r = builder.call(fn, [a])",
    "                return context.make_tuple(builder, sig.return_type, [builder.extract_value(r, k) for k in range(n)])",
    "            return sig, codegen",
    "        return _op",
    "",
    "    _ldsm_x4, _ldsm_x4_t, _ldsm_x2, _ldsm_x2_t = _ldsm(4, False), _ldsm(4, True), _ldsm(2, False), _ldsm(2, True)",
]


class SwizzledTile:
    """One operand's staging tile in the f16 view `array` of the block's shared array, at
    half-word `offset`: `rows` rows of `width` halves, rows along K (`rows_k`: the operand's
    contiguous dim is the side's) or along the side (its contiguous dim is K), so the loader
    writes along rows as it reads. A row is C = width / 8 chunks of 16 bytes (one ldmatrix row);
    chunk c of row r lies at chunk c ^ swz(r), swz(r) = (r // max(1, 8 / C)) % min(C, 8), so the
    8 rows an ldmatrix matrix reads (same c, 8 consecutive r) fall in 8 distinct 16-byte
    positions of a 128-byte line: all 32 banks (CUTLASS's and FlashAttention's XOR swizzle).
    Where C is not a power of two, no XOR: rows an odd number of chunks apart (one chunk of
    padding when C is even) do the same. A ring of such tiles (cp.async stages) has them `size`
    halves apart; `staged(stage)` is stage `stage` of it."""

    def __init__(self, array: str, offset: int, rows_k: bool, rows: int, width: int, size: int = 0, stage: str = "0",
                 bf16: bool = False):
        self.array, self.offset, self.rows_k, self.rows, self.width = array, offset, rows_k, rows, width
        self.size, self.stage, self.bf16 = size, stage, bf16
        c = width // 8
        self.xor = c & (c - 1) == 0
        self.stride = width if self.xor or c % 2 else width + 8
        self.shift = max(1, 8 // c).bit_length() - 1 if self.xor else 0
        self.mask = min(c, 8) - 1 if self.xor else 0

    @property
    def halves(self) -> int:
        return self.rows * self.stride

    def staged(self, stage: str) -> "SwizzledTile":
        return SwizzledTile(self.array, self.offset, self.rows_k, self.rows, self.width, self.size, stage, self.bf16)

    def base(self, unit: int = 1) -> str:
        """The stage's first half-word beyond `offset` (`unit` 2: its byte)."""
        return expr_mul(self.stage, str(unit * self.size)) if self.size else "0"

    def swz(self, row: str) -> str:
        """The chunk XOR of row `row` (period 8 rows, so a row offset by a multiple of 8 keeps it)."""
        if not self.mask:
            return "0"
        return f"((({row}) >> {self.shift}) & {self.mask})" if self.shift else f"(({row}) & {self.mask})"

    def flat(self, k: str, x: str) -> str:
        """The half-word index of element (k, x)."""
        row, col = (k, x) if self.rows_k else (x, k)
        chunk = f"(({col}) >> 3)"
        if self.mask:
            chunk = f"({chunk} ^ {self.swz(row)})"
        return expr_add(expr_add(expr_add(expr_add(expr_mul(row, str(self.stride)), f"({chunk} << 3)"), f"(({col}) & 7)"),
                                 self.base()), str(self.offset))

    def at(self, k: str, x: str) -> str:
        return f"{self.array}[{self.flat(k, x)}]"

    def index(self, k: str, x: str) -> str:
        return f"({self.flat(k, x)},)"

    def value(self, k: str, x: str) -> str:
        """Element (k, x) as f32 (the FMA path's operand)."""
        if self.bf16:
            return f"_bits_f32(np.uint32({self.at(k, x)}) << np.uint32(16))"
        return f"np.float32({self.at(k, x)})"

    def store(self, k: str, x: str, v: str) -> str:
        """The statement that puts f32 `v` at element (k, x): an f16 half converted by the f16
        view's store; a bf16 tile (a uint16 view) takes the top half of v's bits, which is v
        exactly (a bf16 operand's f32 values are bf16s: emit/values.py)."""
        if self.bf16:
            return f"{self.at(k, x)} = np.uint16(_f32_bits({v}) >> np.uint32(16))"
        return f"{self.at(k, x)} = {v}"


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
        self.w, self.names, self.helpers, self.ctx = body.w, body.names, body.ctx.helpers, body.ctx
        self.kind, self.tid = kind, tid
        self.bm, self.bn, self.bk, self.tm, self.tn, self.T = bm, bn, bk, tm, tn, threads
        self.array: str | None = None

    def layout(self) -> Fragments:
        """The warp tiles and the lane's coordinates: warp w owns the (8 TM) x (4 TN) tile at rows
        (w // WN) 8 TM, columns (w % WN) 4 TN (WN = BN / (4 TN)); lane 4 g + t holds the
        accumulators `Fragments` gives."""
        w, names = self.w, self.names
        lane, warp, g, t = (names.fresh(n) for n in ("lane", "warp", "g", "t4"))
        across = self.bn // (4 * self.tn)                 # warp tiles along N
        w(f"{lane} = {self.tid} % {WARP}")
        w(f"{warp} = {self.tid} // {WARP}")
        w(f"{g} = {lane} // 4")
        w(f"{t} = {lane} % 4")
        self.lane = lane
        self.wm, self.wn, self.mb, self.nb = (names.fresh(n) for n in ("wm", "wn", "mb", "nb"))
        w(f"{self.wm} = ({warp} // {across}) * {8 * self.tm}")     # the warp tile's first row
        w(f"{self.wn} = ({warp} % {across}) * {4 * self.tn}")      # and first column
        w(f"{self.mb} = {self.wm} + {g}")                           # accumulator rows
        w(f"{self.nb} = {self.wn} + 2 * {t}")                       # accumulator columns
        return Fragments(self.mb, self.nb)

    def tiles(self, rows_k_m: bool, rows_k_n: bool, align: str, ring_m: int = 1,
              ring_n: int = 1) -> tuple[SwizzledTile, SwizzledTile]:
        """The A and B staging tiles, 16-bit, in the f16 view (bf16: the uint16 view, bf16 bits)
        of one f32 shared array that then holds
        the block's output tile (the epilogue reads it back in a thread grid's coalesced order:
        `restage`). A side's tile has rows along K where the operand's contiguous dim is the
        side's (`rows_k_*`), else rows along the side (K contiguous); a side copied by cp.async
        has a ring of `ring_*` such tiles. Then each lane's ldmatrix row addresses (`_lanes`)."""
        names, w = self.names, self.w
        sh, h = names.fresh("S"), names.fresh("H")
        bf = self.kind == "bf16"
        mt = SwizzledTile(h, 0, rows_k_m, *((self.bk, self.bm) if rows_k_m else (self.bm, self.bk)), bf16=bf)
        if ring_m > 1:
            mt = SwizzledTile(h, 0, mt.rows_k, mt.rows, mt.width, mt.halves, bf16=bf)
        nt = SwizzledTile(h, mt.halves * ring_m, rows_k_n, *((self.bk, self.bn) if rows_k_n else (self.bn, self.bk)),
                          bf16=bf)
        if ring_n > 1:
            nt = SwizzledTile(h, nt.offset, nt.rows_k, nt.rows, nt.width, nt.halves, bf16=bf)
        words = max(-(-(mt.halves * ring_m + nt.halves * ring_n) // 2), self.bm * restage_stride(self.bn))
        if 4 * words > SMEM_LIMIT:       # past the static 48 KB: dynamic, its bytes given at launch (emit/module.py)
            w(f"{sh} = cuda.shared.array(0, numba.float32, {align})   # dynamic: {4 * words} B")
            self.ctx.dynamic_shared = 4 * words
        else:
            w(f"{sh} = cuda.shared.array({words}, numba.float32, {align})")
        w(f"{h} = {sh}.view({'np.uint16' if bf else 'np.float16'})")
        if bf:      # the tiles' stores and the FMA path's reads move bits (_f32_bits, _bits_f32)
            self.helpers.use_text("bf16_round", emit_bf16.ROUND.strip("\n").splitlines())
        self.array = sh
        self.hb = names.fresh("hb")
        self.helpers.use_text("_ldsm_x4", LDSM_HELPERS)
        w(f"{self.hb} = _smem_base({h}) if not _FMA_ONLY else 0")   # the tiles' shared address (bytes)
        lj, lr = names.fresh("lj"), names.fresh("lr")
        w(f"{lj} = {self.lane} >> 3")     # the ldmatrix matrix this lane gives a row address of
        w(f"{lr} = {self.lane} & 7")      # and the row
        self.addr = {"m": self._lanes(mt, "m", lj, lr), "n": self._lanes(nt, "n", lj, lr)}
        return mt, nt

    def _lanes(self, tile: SwizzledTile, side: str, lj: str, lr: str):
        """The lane's row address for ldmatrix in `tile` (bytes, from `_smem_base`), as a function
        (group, kk) -> its expression:
        group g is the A fragment mi = g (rows 16 g of the warp tile) or the B fragment pair
        (2 g, 2 g + 1) (columns 16 g), kk the K offset within the step (a multiple of 16). Lane
        8 j + r addresses row r of matrix j: for A, matrix j is rows 8 (j % 2), K 8 (j // 2) of
        the 16x16 fragment (a0..a3 of the PTX ISA's A layout); for B, columns 8 (j // 2), K
        8 (j % 2) (b0, b1 of fragment 2 g, then of 2 g + 1). The parts fixed per lane are
        computed here, before the K loop: per K offset where rows run along the side (the chunk
        is K's), per group where rows run along K (the chunk is the side's); the swizzle of a
        row depends on r alone (period 8)."""
        w, names = self.w, self.names
        xw = self.wm if side == "m" else self.wn
        x8, k8 = (f"({lj} & 1)", f"({lj} >> 1)") if side == "m" else (f"({lj} >> 1)", f"({lj} & 1)")
        s = tile.swz(lr)
        if not tile.rows_k:          # rows along the side: row xw + 8 x8 + r, chunk kk / 8 + k8
            row, u = names.fresh(f"{side}lrow"), names.fresh(f"{side}lu")
            w(f"{row} = {xw} + 8 * {x8} + {lr}")
            w(f"{u} = {k8} ^ {s}" if s != "0" else f"{u} = {k8}")
            offs = {}
            for kk in range(0, self.bk, 16):
                o = names.fresh(f"{side}l{kk}_")
                chunk = f"({kk // 8} ^ {u})" if kk else u
                half = expr_add(expr_add(expr_mul(row, str(tile.stride)), f'({chunk} << 3)'), str(tile.offset))
                w(f"{o} = {self.hb} + 2 * ({half})")
                offs[kk] = o
            return lambda g, kk: expr_add(offs[kk], str(2 * 16 * g * tile.stride))
        row, v = names.fresh(f"{side}lrow"), names.fresh(f"{side}lv")   # rows along K: row 8 k8 + r
        w(f"{row} = 8 * {k8} + {lr}")
        w(f"{v} = ({xw} >> 3) + {x8}")
        groups = self.tm // 2 if side == "m" else (self.tn // 2 + 1) // 2
        offs = []
        for g in range(groups):
            o = names.fresh(f"{side}l{g}_")
            chunk = expr_add(v, str(2 * g))
            if s != "0":
                chunk = f"(({chunk}) ^ {s})"
            half = expr_add(expr_add(expr_mul(row, str(tile.stride)), f'({chunk} << 3)'), str(tile.offset))
            w(f"{o} = {self.hb} + 2 * ({half})")
            offs.append(o)
        return lambda g, kk: expr_add(offs[g], str(2 * kk * tile.stride))

    def step(self, mt: SwizzledTile, nt: SwizzledTile, accs, kk: int) -> None:
        """16 of K (at offset kk of the step) on tensor cores: each A fragment one
        `ldmatrix.x4` (.trans where the tile's rows run along K), each pair of B fragments one
        `ldmatrix.x4` (an odd last one `.x2`; .trans where its rows run along the side: B's
        fragment is column-major), one mma per 16x8."""
        w, names, t = self.w, self.names, self.kind
        mma = f"_mma_{t}"
        self.helpers.use_text(mma, mma_helpers(t))
        a, b = [], []
        for mi in range(self.tm // 2):
            regs = [names.fresh(f"fa{mi}_") for _ in range(4)]
            op = "_ldsm_x4_t" if mt.rows_k else "_ldsm_x4"
            w(f"{', '.join(regs)} = {op}({expr_add(self.addr['m'](mi, kk), mt.base(2))})")
            a.append(regs)
        nf = self.tn // 2
        for p in range((nf + 1) // 2):
            n = 4 if 2 * p + 1 < nf else 2
            regs = [names.fresh(f"fb{p}_") for _ in range(n)]
            op = f"_ldsm_x{n}" + ("_t" if nt.rows_k else "")
            w(f"{', '.join(regs)} = {op}({expr_add(self.addr['n'](p, kk), nt.base(2))})")
            b.extend(regs[i:i + 2] for i in range(0, n, 2))
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
        arr, stride = self.array, restage_stride(self.bn)   # the pair a lane stores: 8 bytes, conflict-free
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
