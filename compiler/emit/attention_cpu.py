"""The cpu schedule of the attention template: a prange over (query block, batch) blocks, the two
tile products CBLAS sgemm calls on tiles taken as they lie (`_as_it_lies`) or gathered, the rest
in compiled loops; roles, loops and values from the kernel's AttentionKernel (emit/attention.py).
See docs/ARCHITECTURE.md, "GPU kernels", Attention kernels, and "What the code taught us".
"""
from __future__ import annotations

from .attention_mma import causal_key

from .cpu import BLAS_MARK, NO_TRANS, TRANS, blas_fn, blas_layout
from .template_values import indexing_maps, pure_dim
from .values import expr_mul
from ..mlir import ir
from ..transforms.cpu_library_calls import copy_permutation
from ..marks import BLOCK_ATTENTION


def emit_cpu(att) -> None:
    """The cpu schedule (module doc) of an AttentionKernel (emit/attention.py), in the host function."""
    w, names, c = att.w, att.names, att.ctx.consts
    BQ, BKV, D, DV = att.bq, att.bkv, att.D, att.DV
    f = f"np.{att.elem.compute}"
    ninf, zero = c.float(float("-inf"), att.elem), c.zero(att.elem)
    nb = "1"                  # the batch's extent: a number, or read at run time (--dynamic)
    for lp in att.batch_loops:
        nb = expr_mul(nb, str(att.ext[lp]))
    att.ctx.helpers.blas = True
    blas = blas_fn(att.elem)
    one = c.float(1.0, att.elem)
    w(f"# {BLOCK_ATTENTION}: {BQ} queries per block, keys in steps of {BKV} (online softmax; the tile "
      f"products by BLAS)")
    blk = names.fresh("blk")
    w(f"for {blk} in numba.prange(0, {expr_mul(nb, str(att.nq))}):")      # a start: a signed index (emit/control.py)
    with w.indent():
        i0, bflat = names.fresh("i0"), names.fresh("bb")
        w(f"{bflat} = {blk} // {att.nq}")
        w(f"{i0} = ({blk} % {att.nq}) * {BQ}")
        batch = att.batch_coords(bflat)
        qs, kt, vs, sc, pt, acc, mm, ll, tmp = (names.fresh(n) for n in
                                                 ("qs", "kt", "vs", "sc", "pt", "acc", "mrow", "lrow", "pv"))
        j0, nc = names.fresh("j0"), names.fresh("nc")
        # Q, K and V as they lie in their arrays where they can be (no producer, row-major, a
        # whole tile in every block or step), else gathered into a tile each block or step
        o_loops = {att.o_batch[sl]: x for sl, x in batch.items()}
        q_in = _as_it_lies(att, att.s, att.q_op, batch, att.q_loop, att.d_loop, (att.q_loop, i0, BQ)) \
            if att.SQ % BQ == 0 and att.factors is None else None
        k_in = _as_it_lies(att, att.s, att.k_op, batch, att.d_loop, att.k_loop, (att.k_loop, j0, BKV)) \
            if att.SK % BKV == 0 and att.factors is None else None
        v_in = _as_it_lies(att, att.o, att.v_op, o_loops, att.o_j, att.dv_loop, (att.o_j, j0, BKV)) \
            if att.SK % BKV == 0 else None
        if q_in is None:
            w(f"{qs} = np.zeros(({BQ}, {D}), {f})")
        if k_in is None:
            w(f"{kt} = np.zeros(({D}, {BKV}), {f})")
        if v_in is None:
            w(f"{vs} = np.zeros(({BKV}, {DV}), {f})")
        w(f"{sc} = np.empty(({BQ}, {BKV}), {f})")
        w(f"{pt} = np.empty(({BQ}, {BKV}), {f})")
        w(f"{tmp} = np.empty(({BQ}, {DV}), {f})")
        w(f"{acc} = np.zeros(({BQ}, {DV}), {f})")
        w(f"{mm} = np.full({BQ}, {ninf}, {f})")
        w(f"{ll} = np.zeros({BQ}, {f})")
        vsum = names.fresh("vsum") if att.sums_v else None
        if vsum:                              # the fully-masked-row guard's Σ_j V_j (AttentionKernel.guard)
            w(f"{vsum} = np.zeros({DV}, {f})")
        nr = names.fresh("nr")
        w(f"{nr} = min({BQ}, {att.SQ} - {i0})")
        if q_in is None:
            r, d = names.fresh("r"), names.fresh("d")
            w(f"for {r} in range({nr}):")
            with w.indent():
                w(f"for {d} in range({D}):")
                with w.indent():
                    w(f"{qs}[{r}, {d}] = {att.q_value(batch, f'{i0} + {r}', d)}")
            q_in = (qs, NO_TRANS, D)
        if not att.sums_v and causal_key(att):    # a causal mask: the key tiles past the block's last query are all -inf
            w(f"for {j0} in range(0, min({att.SK}, {i0} + {BQ}), {BKV}):")
        else:
            w(f"for {j0} in range(0, {att.SK}, {BKV}):")
        with w.indent():
            w(f"{nc} = min({BKV}, {att.SK} - {j0})")
            cc, dd = names.fresh("c"), names.fresh("d")
            if k_in is None or v_in is None:
                w(f"for {cc} in range({nc}):")
                with w.indent():
                    if k_in is None:
                        w(f"for {dd} in range({D}):")
                        with w.indent():
                            w(f"{kt}[{dd}, {cc}] = {att.k_value(batch, f'{j0} + {cc}', dd)}")
                    if v_in is None:
                        w(f"for {dd} in range({DV}):")
                        with w.indent():
                            w(f"{vs}[{cc}, {dd}] = {att.operand(att.o, att.omaps, att.v_op, att.o_dims(batch, '0', f'{j0} + {cc}', dd))}")
                w(f"if {nc} < {BKV}:")         # the last, partial step: no stale keys or values
                with w.indent():
                    if k_in is None:
                        w(f"{kt}[:, {nc}:] = {zero}")
                    if v_in is None:
                        w(f"{vs}[{nc}:, :] = {zero}")
            if vsum:
                w(f"for {cc} in range({nc}):")
                with w.indent():
                    w(f"for {dd} in range({DV}):")
                    with w.indent():
                        w(f"{vsum}[{dd}] += {att.operand(att.o, att.omaps, att.v_op, att.o_dims(batch, '0', f'{j0} + {cc}', dd))}")
            k_in = k_in or (kt, NO_TRANS, BKV)
            v_in = v_in or (vs, NO_TRANS, DV)
            (qa, qf, qld), (ka, kf, kld), (va, vf, vld) = q_in, k_in, v_in
            w(f"{blas}(101, {qf}, {kf}, {BQ}, {BKV}, {D}, {one}, {qa}, {qld}, {ka}, {kld}, "
              f"{zero}, {sc}, {BKV})  {BLAS_MARK} the scores tile")
            r = names.fresh("r")
            w(f"for {r} in range({nr}):")
            with w.indent():
                # branch-free loops over the step's keys (they vectorise): the score
                # function, the row max, the exponentials and their sum
                mn, ls, alpha = names.fresh("mn"), names.fresh("ls"), names.fresh("al")
                cc = names.fresh("c")
                w(f"for {cc} in range({nc}):")
                with w.indent():
                    w(f"{sc}[{r}, {cc}] = {att.score(batch, f'{i0} + {r}', f'{j0} + {cc}', f'{sc}[{r}, {cc}]')}")
                w(f"{mn} = {mm}[{r}]")
                w(f"for {cc} in range({nc}):")
                with w.indent():
                    w(f"{mn} = {att.maximum(f'{sc}[{r}, {cc}]', mn)}")
                w(f"{ls} = {zero}")
                w(f"if {mn} == {ninf}:")       # nothing but -inf on this row so far: p = 0
                with w.indent():
                    w(f"{alpha} = {c.float(1.0, att.elem)}")
                    w(f"for {cc} in range({nc}):")
                    with w.indent():
                        w(f"{pt}[{r}, {cc}] = {zero}")
                w("else:")
                with w.indent():
                    w(f"{alpha} = {att.exp_sub(f'{mm}[{r}]', mn)}")
                    w(f"for {cc} in range({nc}):")
                    with w.indent():
                        p = names.fresh("p")
                        w(f"{p} = {att.exp_sub(f'{sc}[{r}, {cc}]', mn)}")
                        w(f"{pt}[{r}, {cc}] = {p}")
                        w(f"{ls} = {ls} + {p}")
                w(f"for {cc} in range({nc}, {BKV}):")   # keys past the end
                with w.indent():
                    w(f"{pt}[{r}, {cc}] = {zero}")
                w(f"{ll}[{r}] = {ll}[{r}] * {alpha} + {ls}")
                w(f"{mm}[{r}] = {mn}")
                w(f"for {cc} in range({DV}):")
                with w.indent():
                    w(f"{acc}[{r}, {cc}] = {acc}[{r}, {cc}] * {alpha}")
            w(f"{pt}[{nr}:, :] = {zero}")           # queries past the end
            w(f"{blas}(101, {NO_TRANS}, {vf}, {BQ}, {DV}, {BKV}, {one}, {pt}, {BKV}, {va}, {vld}, "
              f"{zero}, {tmp}, {DV})  {BLAS_MARK} P · V")
            w(f"{acc} += {tmp}")
        r, dv = names.fresh("r"), names.fresh("dv")
        w(f"for {r} in range({nr}):")
        with w.indent():
            w(f"for {dv} in range({DV}):")
            with w.indent():
                ov = names.fresh("ov")
                w(f"{ov} = {att.result(f'{acc}[{r}, {dv}]', f'{ll}[{r}]', f'{mm}[{r}]', vsum and f'{vsum}[{dv}]')}")
                att.store(batch, f"{i0} + {r}", dv, ov)


def _as_it_lies(att, op, k: int, loops: dict[int, str], rows: int, cols: int,
                tile: tuple[int, str, int]) -> tuple[str, int, int] | None:
    """Operand k of `op` passed to BLAS as it lies in its array, when it can be: (the slice,
    CBLAS transpose flag, leading dimension) for op(X) with `rows` x `cols` loops and the
    loop tile[0] cut to tile[1]:tile[1] + tile[2]. Read through a kernel op that only
    permutes its input's axes (`transpose(k)`), it lies in that input. None when the
    operand is made inside the kernel otherwise (a producer, a cast), is not a whole array
    whose rows' elements are adjacent (emit/cpu.py: blas_layout), or its dims are not the two
    loops last and batch loops (`loops`: loop -> index variable) before them; a copy then
    gathers it (emit_cpu)."""
    v, before = op.operands[k], op
    dims = [pure_dim(e) for e in indexing_maps(op)[k].results]
    writer = att.values.writer(v, before)
    if writer is not None:
        with writer.context:
            perm = copy_permutation(writer) if len(writer.operands) == 2 else None
        if (perm is None or len(perm) != len(dims) or any(perm[perm[u]] != u for u in range(len(perm)))
                or ir.MemRefType(writer.operands[0].type).element_type != ir.MemRefType(v.type).element_type):
            return None
        v, before = writer.operands[0], writer
        dims = [dims[perm[u]] for u in range(len(perm))]
        if att.values.writer(v, before) is not None:
            return None
    view = att.body.view(v)
    if (not view.whole or view.host is None or view.array.storage != view.array.elem.compute
            or att.values.written_through_another_view(v)):
        return None
    layout = blas_layout(v)             # (NO_TRANS, the row stride): rows of adjacent elements
    if len(dims) < 2 or None in dims or set(dims[-2:]) != {rows, cols} or layout is None or layout[0] != NO_TRANS:
        return None
    index = []
    for l in dims[:-2]:
        if l not in loops:
            return None
        index.append(loops[l])
    loop, start, size = tile
    index += [f"{start}:{start} + {size}" if l == loop else ":" for l in dims[-2:]]
    flag = NO_TRANS if dims[-2:] == [rows, cols] else TRANS
    return f"{view.host}[{', '.join(index)}]", flag, layout[1]
