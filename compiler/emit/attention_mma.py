"""The attention template on tensor cores (FlashAttention-2's structure on mma.sync.m16n8k16),
for f16 and bf16 operands with head dims multiples of 16 (plan/attention_mma.py says when).

The block's 4 warps (the template's 128 threads) own 16 query rows each of its 64. Q's tile is
copied once into a 16-bit swizzled shared tile (emit/mma.py `SwizzledTile`) and read into
registers as A fragments by ldmatrix; K and V stream through a 2-stage ring of such tiles (one
16-byte cp.async per 8 halves where an f16 operand's rows allow, else element loads). Per key
step a warp computes its 16 x BKV scores as mma accumulators (K's B fragments by ldmatrix), the
score function on them in registers, the row max and sum on a lane's two rows (g and g + 8)
combined across its quad by shuffles (xor 1, 2), and P · V with P converted in registers: the
C fragments of two n8 score tiles are the A fragment of one k16 (cvt.rn.{f16,bf16}x2.f32), no
shared round trip; V's B fragments by ldmatrix.trans. The output leaves from the accumulators.

A causal mask written as an index comparison (`where(i >= j, s, -inf)`, the indices folded from
`arange`) bounds the key loop at the block's last query (`causal`): the tiles above the diagonal
are never loaded. Under the simulator (no warps) the warp operations are emulated from the PTX
ISA's tables (`sim_helpers`).
"""
from __future__ import annotations

from . import bf16 as emit_bf16
from .cp_async import CP_ASYNC16H_HELPERS, CP_ASYNC_HELPERS
from .mma import LDSM_HELPERS, SwizzledTile, mma_helpers
from .template_values import n_inputs
from .values import expr_add
from ..mlir import ir
from ..plan.attention_mma import MMA_BQ, MMA_STAGES
from . import ids

WARPS = 4
SIM_LANES = "_ATTENTION_SIM_LANES"   # the simulator's stand-in for shuffles (emit/attention.py: _xor_lanes)


def sim_helpers(t: str) -> list[str]:
    """`_att_mma_<t>`, `_att_pack_<t>x2`, `_att_ldsm_x4[_t]`, `_att_smem_base`: emit/mma.py's
    intrinsics on a GPU; under the simulator warp-level emulations written from the PTX ISA's
    tables (mma.m16n8k16 .row.col, ldmatrix m8n8 .b16): the warp's lanes post their operands,
    meet at a barrier, and each takes its part."""
    decode = ("np.uint32(np.uint32(h) << np.uint32(16)).view(np.float32)" if t == "bf16" else "np.float32(h)")
    pack = ("(np.uint16((int(np.float32(x).view(np.uint32)) + 0x7FFF + ((int(np.float32(x).view(np.uint32)) >> 16) & 1)) >> 16) "
            "for x in (lo, hi))" if t == "bf16" else "(np.float16(lo), np.float16(hi))")
    return [
        "if _CUDASIM:   # no warps: the tensor-core attention's warp operations emulated (PTX ISA tables)",
        "    _ATT_BOX, _ATT_ARRAYS = {}, {}",
        "",
        "    def _att_warp(v):",
        '        """Every lane of the warp posts v: (this lane, the 32 posts)."""',
        "        me = cuda.threadIdx.x + cuda.blockDim.x * (cuda.threadIdx.y + cuda.blockDim.y * cuda.threadIdx.z)",
        "        _ATT_BOX[me] = v",
        "        cuda.syncthreads()",
        "        w = me - me % 32",
        "        out = [_ATT_BOX[w + l] for l in range(32)]",
        "        cuda.syncthreads()",
        "        return me % 32, out",
        "",
        f"    def _att_pack_{t}x2(lo, hi):",
        f"        return tuple({pack})" if t == "bf16" else f"        return {pack}",
        "",
        f"    def _att_mma_{t}(c0, c1, c2, c3, a0, a1, a2, a3, b0, b1):",
        "        lane, posts = _att_warp(((c0, c1, c2, c3), (a0, a1, a2, a3), (b0, b1)))",
        "        A, B, C = np.zeros((16, 16), np.float32), np.zeros((16, 8), np.float32), np.zeros((16, 8), np.float32)",
        "        for l, (cs, ar, br) in enumerate(posts):",
        "            g, t = divmod(l, 4)",
        "            for reg, (r, c) in zip(ar, ((g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8), (g + 8, 2 * t + 8))):",
        f"                A[r, c], A[r, c + 1] = ({decode} for h in reg)",
        "            for reg, k in zip(br, (2 * t, 2 * t + 8)):",
        f"                B[k, g], B[k + 1, g] = ({decode} for h in reg)",
        "            for v, (r, c) in zip(cs, ((g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1))):",
        "                C[r, c] = v",
        "        D = A @ B + C",
        "        g, t = divmod(lane, 4)",
        "        return tuple(np.float32(D[r, c]) for r, c in ((g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1)))",
        "",
        "    def _att_smem_base(arr):",
        "        base = arr.__array_interface__['data'][0]",
        "        _ATT_ARRAYS[base] = arr",
        "        return base",
        "",
        "    def _att_ldsm(trans):",
        "        def ldsm(addr):",
        "            lane, rows = _att_warp(int(addr))",
        "            base = max(b for b in _ATT_ARRAYS if b <= rows[0])",
        "            arr = _ATT_ARRAYS[base]",
        "            g, t = divmod(lane, 4)",
        "            if trans:",
        "                return tuple((arr[(rows[8 * j + 2 * t] - base) // 2 + g], arr[(rows[8 * j + 2 * t + 1] - base) // 2 + g])",
        "                             for j in range(4))",
        "            return tuple((arr[(rows[8 * j + g] - base) // 2 + 2 * t], arr[(rows[8 * j + g] - base) // 2 + 2 * t + 1])",
        "                         for j in range(4))",
        "        return ldsm",
        "",
        "    _att_ldsm_x4, _att_ldsm_x4_t = _att_ldsm(False), _att_ldsm(True)",
        "else:",
        f"    _att_mma_{t}, _att_pack_{t}x2 = _mma_{t}, _pack_{t}x2",
        "    _att_ldsm_x4, _att_ldsm_x4_t, _att_smem_base = _ldsm_x4, _ldsm_x4_t, _smem_base",
    ]


def _owner(v):
    return None if isinstance(v.owner, ir.Block) else getattr(v.owner, "operation", v.owner)


def _through(v, names):
    """v, past ops named in `names` (roundings, casts)."""
    while _owner(v) is not None and _owner(v).name in names:
        v = _owner(v).operands[0]
    return v


def _maps(op):
    return [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]


def _pure(e) -> int | None:
    try:
        return ir.AffineDimExpr(e).position
    except (ValueError, TypeError):
        return None


def _loop_of(k, op, v, depth: int = 0) -> int | None:
    """The loop of generic `op` whose index body value `v` is: a `linalg.index`, or a block
    argument read from a buffer an index-valued op of the kernel writes (an `arange` folded into
    its consumer: docs/FDSL.md), its loop read at one of `op`'s loops by itself; else None."""
    v = _through(v, ("arith.index_cast", "arith.extsi", "arith.extui", "arith.trunci"))
    o = _owner(v)
    if o is not None:
        return ir.IntegerAttr(o.attributes["dim"]).value if o.name == "linalg.index" else None
    args = list(op.regions[0].blocks[0].arguments)
    n = args.index(v) if v in args else -1
    if n < 0 or n >= n_inputs(op) or depth > 2:
        return None
    wr = k.values.writer(op.operands[n], op)
    if wr is not None and wr.name == "linalg.generic":
        inner = [x.operation for x in wr.regions[0].blocks[0].operations]
        wl = _loop_of(k, wr, inner[-1].operands[0], depth + 1)
        out = [_pure(e) for e in _maps(wr)[-1].results]
        if wl is None or wl not in out:
            return None
        return _pure(_maps(op)[n].results[out.index(wl)])
    return None


def causal_key(k) -> bool:
    """Whether the score function is a causal mask: the op writing the exponentials' Z selects
    -inf unless i >= j (or i > j), i and j the query and key loops' own indices (`_loop_of`),
    its result Z up to a rounding; then a key tile whose first key is past the block's last
    query is all -inf, and skipping it changes nothing."""
    q_dim, k_dim = k.s_loops.index(k.q_loop), k.s_loops.index(k.k_loop)
    op = k.values.writer(k.e.operands[k.z_op], k.e)
    if op is not None and op.name == "linalg.generic":
        if [_pure(e) for e in _maps(op)[-1].results] != list(range(_maps(op)[-1].n_dims)):
            return False
        inner = [x.operation for x in op.regions[0].blocks[0].operations]
        sel = _owner(_through(inner[-1].operands[0], ("arith.truncf", "arith.extf")))
        if sel is None or sel.name != "arith.select":
            return False
        cmp = _owner(sel.operands[0])
        if cmp is None or cmp.name != "arith.cmpi":
            return False
        pred = ir.IntegerAttr(cmp.attributes["predicate"]).value   # 2 slt 3 sle 4 sgt 5 sge, 6-9 unsigned
        a, b = (_loop_of(k, op, x) for x in cmp.operands[:2])
        ok = {(q_dim, k_dim): (4, 5, 8, 9), (k_dim, q_dim): (2, 3, 6, 7)}.get((a, b), ())
        fv = _owner(_through(sel.operands[2], ("arith.truncf", "arith.extf")))
        if pred not in ok or fv is None or fv.name != "arith.constant":
            return False
        return float(ir.FloatAttr(fv.attributes["value"]).value) == float("-inf")
    return False


def emit_gpu_mma(k, kind: str) -> None:
    """The tensor-core schedule (module doc) of AttentionKernel `k` for operands of `kind`."""
    w, names, c = k.w, k.names, k.ctx.consts
    BQ, BKV, D, DV = k.bq, k.bkv, k.D, k.DV
    if BQ != MMA_BQ:
        raise ValueError(f"the tensor-core attention takes {MMA_BQ} queries per block, not {BQ}")
    bf = kind == "bf16"
    helpers = k.ctx.helpers
    helpers.cudasim = True
    helpers.use_text(f"_mma_{kind}", mma_helpers(kind))
    helpers.use_text("_ldsm_x4", LDSM_HELPERS)
    helpers.use_text(f"_tc_att_{kind}", sim_helpers(kind))
    if bf:
        helpers.use_text("bf16_round", emit_bf16.ROUND.strip("\n").splitlines())
    T = 32 * WARPS
    helpers.use_text(SIM_LANES, [f"{SIM_LANES} = {T} if _CUDASIM else 1   "
                                  "# the simulator's stand-in for warp shuffles: a word per thread"])
    ninf, zero = c.float(float("-inf"), k.elem), c.zero(k.elem)
    steps = -(-k.SK // BKV)
    causal = causal_key(k)
    w(f"# fusec.block_attention on {kind} tensor cores (mma.sync m16n8k16): {BQ} queries per block, 4 warps "
      f"of 16 rows, keys in steps of {BKV} through {MMA_STAGES} stages; P stays in registers")
    tid = names.fresh("tid")
    w(f"{tid} = {ids.thread_id('y')} * 8 + {ids.thread_id('x')}")
    lane, warp, g, t4, lj, lr = (names.fresh(n) for n in ("lane", "warp", "g", "t4", "lj", "lr"))
    w(f"{lane} = {tid} & 31")
    w(f"{warp} = {tid} >> 5")
    w(f"{g} = {lane} >> 2")
    w(f"{t4} = {lane} & 3")
    w(f"{lj} = {lane} >> 3")      # the ldmatrix matrix this lane gives a row address of
    w(f"{lr} = {lane} & 7")       # and its row
    i0 = names.fresh("i0")
    w(f"{i0} = {ids.block_id('x')} * {BQ}")
    batch = k.batch_coords(ids.block_id("y"))
    # shared memory: Q's tile, then MMA_STAGES tiles of K, then of V (16-bit halves)
    H, S, Xs = names.fresh("H"), names.fresh("S"), names.fresh("Xs")
    qt = SwizzledTile(H, 0, False, BQ, D, bf16=bf)
    k1 = SwizzledTile(H, qt.halves, False, BKV, D, bf16=bf)
    kt = SwizzledTile(H, qt.halves, False, BKV, D, k1.halves, bf16=bf)
    v1 = SwizzledTile(H, qt.halves + MMA_STAGES * k1.halves, True, BKV, DV, bf16=bf)
    vt = SwizzledTile(H, v1.offset, True, BKV, DV, v1.halves, bf16=bf)
    words = (v1.offset + MMA_STAGES * v1.halves) // 2
    align = helpers.use_text("_SMEM_ALIGN", [
        "_SMEM_ALIGN = None if _CUDASIM else 16   # shared staging tiles: 16-byte runs (LDS.128)"])
    if 4 * words > 48 * 1024:
        w(f"{S} = cuda.shared.array(0, numba.float32, {align})   # dynamic: {4 * words} B")
        k.ctx.dynamic_shared = 4 * words
    else:
        w(f"{S} = cuda.shared.array({words}, numba.float32, {align})")
    w(f"{H} = {S}.view({'np.uint16' if bf else 'np.float16'})")
    w(f"{Xs} = cuda.shared.array({SIM_LANES}, numba.float32)")
    k._tid, k._xs = tid, Xs
    hb = names.fresh("hb")
    w(f"{hb} = _att_smem_base({H})")
    # copies: 16-byte cp.async runs where an f16 (bf16: its uint16 bits) operand lies with rows
    # of whole chunks
    q_read = lambda r, d: k.q_value(batch, r, d)
    k_read = lambda r, d: k.k_value(batch, r, d)
    v_read = lambda r, d: k.operand(k.o, k.omaps, k.v_op, k.o_dims(batch, "0", r, d))
    q_src, k_src, v_src = (_copy_source(k, rd) for rd in (q_read, k_read, v_read))
    copies = any(x is not None for x in (q_src, k_src, v_src))
    if copies:
        helpers.use_text("_cp_async16", CP_ASYNC_HELPERS)
        helpers.use_text("_cp_async16h", CP_ASYNC16H_HELPERS)
    _load(k, tid, T, qt, BQ, D, i0, k.SQ, q_read, q_src, False)
    if copies:
        w("_cp_commit()")
    j0 = names.fresh("j0")

    def load_step(step: str, stage: str):
        w(f"{j0} = {step} * {BKV}")
        _load(k, tid, T, kt.staged(stage), BKV, D, j0, k.SK, k_read, k_src, False)
        _load(k, tid, T, vt.staged(stage), BKV, DV, j0, k.SK, v_read, v_src, True)
        if copies:
            w("_cp_commit()")

    load_step("0", "0")
    if copies:
        w("_cp_wait1()")
    w("cuda.syncthreads()")
    # Q's A fragments, once: matrix j of x4 is rows 8 (j & 1), K 8 (j >> 1) of the warp's 16x16
    qrow = names.fresh("qrow")
    w(f"{qrow} = {warp} * 16 + 8 * ({lj} & 1) + {lr}")
    qa = []
    for kk in range(0, D, 16):
        regs = [names.fresh(f"qa{kk // 16}_") for _ in range(4)]
        w(f"{', '.join(regs)} = _att_ldsm_x4({hb} + 2 * ({qt.flat(expr_add(str(kk), f'8 * ({lj} >> 1)'), qrow)}))")
        qa.append(regs)
    # the lane's ldmatrix row addresses in K's and V's stage 0 (bytes): K by keys 8 (lj >> 1) +
    # lr, d chunk kk / 8 + (lj & 1); V (.trans) by keys 8 (lj & 1) + lr, dv chunk 2 p + (lj >> 1)
    krow, vrow = names.fresh("krow"), names.fresh("vrow")
    w(f"{krow} = 8 * ({lj} >> 1) + {lr}")
    w(f"{vrow} = 8 * ({lj} & 1) + {lr}")
    ka = []
    for kk in range(0, D, 16):
        a = names.fresh(f"ka{kk // 16}_")
        w(f"{a} = {hb} + 2 * ({k1.flat(expr_add(str(kk), f'8 * ({lj} & 1)'), krow)})")
        ka.append(a)
    va = []
    for p in range(DV // 16):
        a = names.fresh(f"va{p}_")
        w(f"{a} = {hb} + 2 * ({v1.flat(vrow, expr_add(str(16 * p), f'8 * ({lj} >> 1)'))})")
        va.append(a)
    # the lane's statistics for its rows g (h = 0) and g + 8 (h = 1); accumulators o[n][e]: row
    # g + 8 (e >> 1), value column 8 n + 2 t + (e & 1)
    m = [names.fresh(f"m{h}_") for h in range(2)]
    l = [names.fresh(f"l{h}_") for h in range(2)]
    o = [[names.fresh(f"o{n}_{e}_") for e in range(4)] for n in range(DV // 8)]
    for h in range(2):
        w(f"{m[h]} = {ninf}")
        w(f"{l[h]} = {zero}")
    for n in range(DV // 8):
        for e in range(4):
            w(f"{o[n][e]} = {zero}")
    rows = [names.fresh(f"row{h}_") for h in range(2)]
    for h in range(2):
        w(f"{rows[h]} = {i0} + {warp} * 16 + {g} + {8 * h}")
    nst = names.fresh("nsteps")
    if causal:      # key tiles past the block's last query are all -inf: never loaded
        w(f"{nst} = min({steps}, ({i0} + {BQ + BKV - 1}) // {BKV})   # causal: the tiles above the diagonal skipped")
    else:
        w(f"{nst} = {steps}")
    st = names.fresh("st")
    w(f"for {st} in range({nst}):")
    with w.indent():
        stage = names.fresh("stage")
        w(f"{stage} = {st} & 1")
        w(f"if {st} + 1 < {nst}:")
        with w.indent():
            load_step(f"({st} + 1)", f"(1 - {stage})")
            if copies:
                w("_cp_wait1()")
        if copies:
            w("else:")
            with w.indent():
                w("_cp_wait0()")
        w("cuda.syncthreads()")
        w(f"{j0} = {st} * {BKV}")
        koff, voff = names.fresh("koff"), names.fresh("voff")
        w(f"{koff} = {stage} * {2 * k1.halves}")
        w(f"{voff} = {stage} * {2 * v1.halves}")
        mma, pack = f"_att_mma_{kind}", f"_att_pack_{kind}x2"
        # S = Q Kᵀ: per k16 of d, the B fragments of two n8 key tiles per ldmatrix.x4
        s = [[names.fresh(f"s{n}_{e}_") for e in range(4)] for n in range(BKV // 8)]
        for n in range(BKV // 8):
            for e in range(4):
                w(f"{s[n][e]} = {zero}")
        for kk in range(D // 16):
            frags = []
            for p in range(BKV // 16):
                regs = [names.fresh(f"kb{p}_") for _ in range(4)]
                w(f"{', '.join(regs)} = _att_ldsm_x4({ka[kk]} + {koff} + {2 * 16 * p * k1.stride})")
                frags += [regs[:2], regs[2:]]
            for n in range(BKV // 8):
                w(f"{', '.join(s[n])} = {mma}({', '.join(s[n] + qa[kk] + frags[n])})")
        # the score function (-inf past the ends), the rows' max over the quad
        z = [[names.fresh(f"z{n}_{e}_") for e in range(4)] for n in range(BKV // 8)]
        keys = {}
        for n in range(BKV // 8):
            for e in (0, 1):
                key = names.fresh(f"key{n}_{e}_")
                w(f"{key} = {j0} + {8 * n + e} + 2 * {t4}")
                keys[n, e] = key
        for n in range(BKV // 8):
            for e in range(4):
                row, key = rows[e >> 1], keys[n, e & 1]
                conds = ([f"{row} < {k.SQ}"] if k.SQ % BQ else []) + ([f"{key} < {k.SK}"] if k.SK % BKV else [])
                guarded(w, z[n][e], ninf, conds, lambda: k.score(batch, row, key, s[n][e]))
        mn = [names.fresh(f"mn{h}_") for h in range(2)]
        for h in range(2):
            w(f"{mn[h]} = {z[0][2 * h]}")
            for n in range(BKV // 8):
                for e in (2 * h, 2 * h + 1):
                    if (n, e) != (0, 2 * h):
                        w(f"{mn[h]} = {k.maximum(z[n][e], mn[h])}")
        for off in (1, 2):
            other = [names.fresh(f"x{h}_") for h in range(2)]
            k._xor_lanes(mn, other, off)
            for h in range(2):
                w(f"{mn[h]} = {k.maximum(other[h], mn[h])}")
        # the exponentials against the new max (0 for a row that has seen only -inf), the
        # rescale of the running sum and accumulators
        ms, al, ls = ([names.fresh(f"{x}{h}_") for h in range(2)] for x in ("ms", "al", "ls"))
        pv = [[names.fresh(f"p{n}_{e}_") for e in range(4)] for n in range(BKV // 8)]
        for h in range(2):
            w(f"{mn[h]} = {k.maximum(m[h], mn[h])}")
            w(f"{ms[h]} = {zero} if {mn[h]} == {ninf} else {mn[h]}")
            w(f"{al[h]} = {k.exp_sub(m[h], ms[h])}")
        for n in range(BKV // 8):
            for e in range(4):
                h = e >> 1
                w(f"{pv[n][e]} = {k.exp_sub(z[n][e], ms[h])}")
                w(f"{ls[h]} = {pv[n][e]}" if n == 0 and e in (0, 2) else f"{ls[h]} = {ls[h]} + {pv[n][e]}")
        for h in range(2):
            w(f"{l[h]} = {l[h]} * {al[h]} + {ls[h]}")
            w(f"{m[h]} = {mn[h]}")
        for n in range(DV // 8):
            for e in range(4):
                w(f"{o[n][e]} = {o[n][e]} * {al[e >> 1]}")
        # O += P V: P's C fragments of key tiles 2 kc, 2 kc + 1 packed into the A fragment of k16 kc
        for kc in range(BKV // 16):
            a = [names.fresh(f"pa{kc}_") for _ in range(4)]
            for r, (n, e) in enumerate(((2 * kc, 0), (2 * kc, 2), (2 * kc + 1, 0), (2 * kc + 1, 2))):
                w(f"{a[r]} = {pack}({pv[n][e]}, {pv[n][e + 1]})")
            for p in range(DV // 16):
                regs = [names.fresh(f"vb{p}_") for _ in range(4)]
                w(f"{', '.join(regs)} = _att_ldsm_x4_t({va[p]} + {voff} + {2 * 16 * kc * v1.stride})")
                for half, n in ((regs[:2], 2 * p), (regs[2:], 2 * p + 1)):
                    w(f"{', '.join(o[n])} = {mma}({', '.join(o[n] + a + half)})")
        # every warp is done with this stage before the next step's copies overwrite it
        w("cuda.syncthreads()")
    # the rows' sums over the quad, then O = acc / l through the epilogue
    for off in (1, 2):
        other = [names.fresh(f"y{h}_") for h in range(2)]
        k._xor_lanes(l, other, off)
        for h in range(2):
            w(f"{l[h]} = {l[h]} + {other[h]}")
    for h in range(2):
        guard = k.SQ % BQ != 0
        if guard:
            w(f"if {rows[h]} < {k.SQ}:")
            w.depth += 1
        for n in range(DV // 8):
            for e in (2 * h, 2 * h + 1):
                col = names.fresh("col")
                w(f"{col} = {8 * n + (e & 1)} + 2 * {t4}")
                ov = names.fresh("ov")
                w(f"{ov} = {k.result(o[n][e], l[h], m[h], None)}")
                k.store(batch, rows[h], col, ov)
        if guard:
            w.depth -= 1


def _copy_source(k, read):
    """Where element (row r, column d) of an operand tile comes from when it is an f16 array's
    (a bf16 array's bits) element as it lies (`read(r, d)` reads nothing else and computes nothing: found by writing
    the read and discarding the text, emit/gemm.py's probe) with a run of 8 consecutive d at 8
    consecutive elements of rows a static multiple of 8 elements long (16-byte cp.async; the
    array's base aligned at launch): a function (r, d) -> (array, base index), else None."""
    import re
    w = k.w
    r, d = "__fusec_r__", "__fusec_d__"
    lines, depth, memo = len(w.lines), w.depth, dict(k.values.memo)
    k.values.probe = []
    try:
        text = read(r, d)
        found, written = k.values.probe, w.lines[lines:] + [text]
    finally:
        k.values.probe = None
        del w.lines[lines:]
        w.depth, k.values.memo = depth, memo
    if len(found) != 1:
        return None
    view, idx = found[0]
    arr = view.array
    if arr.space != "global" or arr.storage not in ("float16", "uint16"):     # f16, bf16's bits
        return None
    base = list(view.to_base(tuple(idx)))
    if base[-1] != d or any(d in x for x in base[:-1]):
        return None
    shape = view.base_shape or (view.shape if view.whole else None)
    if not shape or not str(shape[-1]).isdigit() or int(shape[-1]) % 8:
        return None
    load = f"{arr.name}[{', '.join(base)}]"
    rest = " ".join(x.replace(load, "") for x in written)
    rest = re.sub(r"np\.float(16|32)\(|\b[A-Za-z_][A-Za-z_0-9]*\b|[()=\s]", "", rest)
    if rest:                                    # arithmetic on the element: not a copy
        return None
    return lambda row, col: (arr.name, [x.replace(r, f"({row})").replace(d, f"({col})") for x in base])


def _load(k, tid: str, T: int, tile: SwizzledTile, rows: int, cols: int, row0: str, limit: int, read, src,
          rows_k: bool) -> None:
    """The tile's `rows` x `cols` elements from operand rows row0.. (0 past `limit`): 16-byte
    cp.async runs of 8 where `src` gives them (a plain store of 0 past the end), else thread
    tid takes elements tid + T i (a load and a 16-bit store each). `rows_k`: the tile's rows
    are its K (V's keys), so element (r, d) is tile.store(r, d), else tile.store(d, r)."""
    w, names = k.w, k.names
    at = (lambda r, d: (r, d)) if rows_k else (lambda r, d: (d, r))
    if src is not None:
        per = cols // 8
        n = rows * per
        if src(0, 0)[0] not in k.ctx.aligned16:
            k.ctx.aligned16.append(src(0, 0)[0])
        for i, guard in rounds(tid, n, T):
            e = expr_add(tid, str(T * i))
            r, d = names.fresh("cr"), names.fresh("cd")
            with w.when(guard):
                w(f"{r} = ({e}) // {per}")
                w(f"{d} = (({e}) % {per}) * 8")
                array, index = src(expr_add(row0, r), d)
                cond = [f"{expr_add(row0, r)} < {limit}"] if limit % rows else []
                with w.when(cond):
                    w(f"_cp_async16h({tile.array}, {tile.index(*at(r, d))}, {array}, ({', '.join(index)},))")
                if cond:
                    w("else:")
                    with w.indent():
                        for x in range(8):
                            w(tile.store(*at(r, expr_add(d, str(x))), k.ctx.consts.zero(k.elem)))
        return
    n = rows * cols
    zero = k.ctx.consts.zero(k.elem)
    for i, guard in rounds(tid, n, T):
        e = expr_add(tid, str(T * i))
        r, d = names.fresh("tr"), names.fresh("tc")
        with w.when(guard):
            w(f"{r} = ({e}) // {cols}")
            w(f"{d} = ({e}) % {cols}")
            v = names.fresh("v")
            guarded(w, v, zero, [f"{expr_add(row0, r)} < {limit}"] if limit % rows else [],
                     lambda: read(expr_add(row0, r), d))
            w(tile.store(*at(r, d), v))


def rounds(tid: str, n: int, T: int):
    """(i, its guard) for each round of T threads over n elements, thread tid taking element
    tid + T i: the last round, when partial, only for the threads below what is left."""
    for i in range(-(-n // T)):
        yield i, ([f"{tid} < {n - T * i}"] if n - T * i < T else [])


def guarded(w, name: str, default: str, conds: list[str], value) -> None:
    """name = value() where every condition holds, else `default`; without conditions, name =
    value(). `value` is called where its line goes (reading a value may write lines before it)."""
    if conds:
        w(f"{name} = {default}")
        w(f"if {' and '.join(conds)}:")
        with w.indent():
            w(f"{name} = {value()}")
    else:
        w(f"{name} = {value()}")
