"""The attention template: online softmax over streamed key/value tiles, written whole at the root
marked `fusec.block_attention` = [BQ, BKV]. `AttentionKernel` gives the roles, loops and values
(through `TemplateValues`); its `emit_gpu` is the gpu schedule, emit/attention_cpu.py the cpu
one. See docs/ARCHITECTURE.md, "GPU kernels", Attention kernels.
"""
from __future__ import annotations

from contextlib import contextmanager

from . import ids
from .attention_cpu import emit_cpu
from .attention_mma import SIM_LANES, guarded, causal_key, emit_gpu_mma, rounds
from .template_values import (TemplateValues, affine, body_slice, dims_of_map, indexing_maps, ints,
                              n_inputs, pure_dim)
from .values import EmitError, atom, elem_of_type, expr_add, expr_mul, floordiv, mod
from ..mlir import ir
from ..plan.attention import THREADS_X, THREADS_Y, gpu_layout
from ..marks import (ABSORBED, ATTENTION_BATCH, ATTENTION_MMA, ATTENTION_GUARD, ATTENTION_LOOPS, ATTENTION_ROLE, ATTENTION_V,
                     ATTENTION_Z, BLOCK_ATTENTION, TAG)


def block_attention(body, root) -> None:
    body.need(root, "kernel", "cpu")
    kernel = AttentionKernel(body, root)
    if body.mode == "cpu":
        emit_cpu(kernel)
    elif ATTENTION_MMA in root.attributes:      # on tensor cores (emit/attention_mma.py)
        emit_gpu_mma(kernel, ir.StringAttr(root.attributes[ATTENTION_MMA]).value)
    else:
        kernel.emit_gpu()


def _operand_itself(block, v) -> bool:
    """Whether body value `v` is one block argument, possibly widened (extf: f16 computed in f32)."""
    needed, read = body_slice(block, v)
    ops = [o.operation for o in block.operations]
    return len(read) == 1 and all(ops[n].name == "arith.extf" for n in needed)


def _own_ops(root) -> list:
    """The ops of the root's block that are its kernel's: those tagged for its plan group (tag
    // 10000, transforms/script.py: tag_of), and the untagged copies bufferization put into
    their buffers. On the cpu two attention kernels share the function's block (two layers of
    one chain), and one kernel's roles or buffers are not the other's."""
    def group(op):
        return ir.IntegerAttr(op.attributes[TAG]).value // 10000 if TAG in op.attributes else None
    mine = group(root)
    block = [o.operation for o in root.block.operations]
    tagged = [op for op in block if group(op) == mine]
    buffers = {v for op in tagged for v in op.operands}
    return [op for op in block if group(op) == mine
            or (TAG not in op.attributes and op.name == "memref.copy" and op.operands[1] in buffers)]


class AttentionKernel:
    """One `fusec.block_attention` kernel (module doc): its roles (s: the scores contraction,
    mx: the row max, e: the exponentials, sm: the row sum, o: the output contraction), loops,
    static extents and tiles, and the values of its buffers (`values`)."""

    def __init__(self, body, root):
        self.body, self.root = body, root
        self.w, self.names, self.ctx = body.w, body.names, body.ctx
        block = _own_ops(root)
        writers = [op for op in block if (op.name.startswith("linalg.") or op.name == "memref.copy")
                   and (ABSORBED in op.attributes or ATTENTION_ROLE in op.attributes or op == root)]
        roles = {ir.StringAttr(op.attributes[ATTENTION_ROLE]).value: op for op in block if ATTENTION_ROLE in op.attributes}
        for need in ("scores", "max", "exp", "sum", "out"):
            if need not in roles:
                raise EmitError(f"a fusec.block_attention kernel has no op marked {need}", root)
        self.s, self.e, self.o = roles["scores"], roles["exp"], roles["out"]
        self.mx, self.sm = roles["max"], roles["sum"]
        self.values = TemplateValues(body, root, writers, (self.s, self.o))
        self.bq, self.bkv = ints(root.attributes[BLOCK_ATTENTION])
        self.q_loop, self.k_loop, self.d_loop = ints(root.attributes[ATTENTION_LOOPS])
        self.batch_loops = ints(root.attributes[ATTENTION_BATCH])
        self.smaps = indexing_maps(self.s)
        s_out = self.smaps[-1]
        s_loops = [pure_dim(e) for e in s_out.results]          # score dim -> scores loop
        if any(l is None for l in s_loops):
            raise EmitError("the scores of a fusec.block_attention must be indexed by their loops", self.s)
        self.s_loops = s_loops
        shape = self.body.view(self.s.operands[-1]).shape
        self.ext = {l: shape[t] for t, l in enumerate(s_loops)}
        # the scores' operands: Q varies with the query loop, K with the key loop
        used = [dims_of_map(m) for m in self.smaps[:2]]
        self.q_op = 0 if self.q_loop in used[0] else 1
        self.k_op = 1 - self.q_op
        self.ext[self.d_loop] = self._extent(self.s, self.d_loop)
        self.factors = self._factors(body.mode == "cpu")
        # the output contraction's loops by role: j its (non-unit) reduction, q the output loop V
        # does not index, dv the output loop V indexes and the scores operand does not, the batch
        # the output loops both index (paired with the scores' batch loops in output order);
        # unit loops (a batch of 1 folded by a graph pass) stay 0
        self.v_op = ir.IntegerAttr(self.o.attributes[ATTENTION_V]).value
        omaps = indexing_maps(self.o)
        self.omaps = omaps
        n_in = n_inputs(self.o)
        ext_o = {l: self._extent_or(self.o, l, "1") for l in range(omaps[0].n_dims)}
        iters = [str(t) for t in ir.ArrayAttr(self.o.attributes["iterator_types"])]
        red = [l for l in range(len(iters)) if "reduction" in iters[l] and ext_o[l] != "1"]
        if len(red) != 1:
            raise EmitError("the output contraction of a fusec.block_attention needs one key loop", self.o)
        self.o_j = red[0]
        v_loops = dims_of_map(omaps[self.v_op])
        p_ops = [k for k in range(n_in) if k != self.v_op and self.o_j in dims_of_map(omaps[k])]
        if not p_ops:
            raise EmitError("the output contraction of a fusec.block_attention reads no scores operand", self.o)
        p_loops = dims_of_map(omaps[p_ops[0]])
        out = [pure_dim(e) for e in omaps[-1].results]
        big = [l for l in out if l is not None and ext_o[l] != "1"]
        q = [l for l in out if l is not None and l not in v_loops]
        q = [l for l in q if ext_o[l] != "1"] or q[:1]        # one query (decoding) is a unit loop
        dv = [l for l in big if l in v_loops and l not in p_loops]
        ob = [l for l in big if l in v_loops and l in p_loops]
        sb = [l for l in s_loops if l in self.batch_loops]
        if len(q) != 1 or len(dv) != 1 or len(ob) != len(sb):
            raise EmitError("the output contraction of a fusec.block_attention needs one query, one head-dim "
                            "and the scores' batch loops", self.o)
        self.o_q, self.dv_loop = q[0], dv[0]
        self.o_batch = dict(zip(sb, ob))           # scores batch loop -> output batch loop
        self.dv = ext_o[self.dv_loop]
        self.z_op = ir.IntegerAttr(self.e.attributes[ATTENTION_Z]).value
        for name, v in (("queries", self.ext[self.q_loop]), ("keys", self.ext[self.k_loop]),
                        ("head dim", self.ext[self.d_loop]), ("value dim", self.dv)):
            if not str(v).isdigit():
                raise EmitError(f"a fusec.block_attention needs a static number of {name}, not {v}", root)
        self.SQ, self.SK = int(self.ext[self.q_loop]), int(self.ext[self.k_loop])
        self.D, self.DV = int(self.ext[self.d_loop]), int(self.dv)
        self.nq = -(-self.SQ // self.bq)
        self.elem = elem_of_type(self.s.operands[-1].type)
        # the fully-masked-row guard P = where(M == C, K, E / L) (plan/attention.py: _unguard): a
        # row whose final max is C gets O = K · Σ_j V_j (the reference's K-filled row of P times
        # V); `sums_v`: the template keeps Σ_j V_j for that, except for SDPA's C = -inf, K = 0,
        # where such a row's accumulators already hold Σ_j 0 · V_j (every p of the row is 0)
        self.guard = None
        if ATTENTION_GUARD in self.o.attributes:
            cv, kv = (float(x) for x in ir.DenseF64ArrayAttr(self.o.attributes[ATTENTION_GUARD]))
            self.guard = (cv, kv)
        self.sums_v = self.guard is not None and not (self.guard[0] == float("-inf") and self.guard[1] == 0.0)

    def _factors(self, cpu: bool):
        """The scores body's two factors (Q's, K's) as body values, where the tiles hold them
        evaluated (`q_value`, `k_value`) rather than the operands as they lie: a body with more
        than two operands or reading by index (a rotary embedding folded into the contraction
        reads Q at computed d and cos, sin at (i, d)); on the cpu, whose tile product is a BLAS
        call, also any arithmetic on an operand (a scale folded in). None: the operands are the
        factors (contraction_step applies the body on the gpu)."""
        block = self.s.regions[0].blocks[0]
        ops = [o.operation for o in block.operations]
        args = list(block.arguments)
        n_in = n_inputs(self.s)
        y = ops[-1].operands[0]
        add = None if isinstance(y.owner, ir.Block) else getattr(y.owner, "operation", y.owner)
        if add is None or add.name != "arith.addf" or args[n_in] not in list(add.operands):
            raise EmitError("the scores of a fusec.block_attention must be a multiply-add", self.s)
        prod = [v for v in add.operands if v != args[n_in]][0]
        mul = None if isinstance(prod.owner, ir.Block) else getattr(prod.owner, "operation", prod.owner)
        if mul is None or mul.name != "arith.mulf":
            raise EmitError("the scores of a fusec.block_attention must be a multiply-add", self.s)
        a, b = mul.operands
        plain = n_in == 2 and not any(o.name in ("linalg.index", "memref.load", "tensor.extract") for o in ops)
        if plain and (not cpu or all(_operand_itself(block, v) for v in (a, b))):
            return None
        # which factor is Q's: the one whose operands or indices read the query loop
        loops = []
        maps = indexing_maps(self.s)
        for v in (a, b):
            needed, read = body_slice(block, v)
            ls = set()
            for x in read:
                ls |= dims_of_map(maps[args.index(x)])
            ls |= {ir.IntegerAttr(ops[n].attributes["dim"]).value for n in needed if ops[n].name == "linalg.index"}
            loops.append(ls)
        if self.q_loop in loops[1] and self.q_loop not in loops[0]:
            a, b = b, a
        return (a, b)

    def q_value(self, batch: dict[int, str], i: str, d: str) -> str:
        """Q at query i, head-dim d: the scores' Q operand, or its factor evaluated (`_factors`)."""
        dims = self.s_dims(batch, i, "0", d)
        if self.factors is None:
            return self.operand(self.s, self.smaps, self.q_op, dims)
        self.values.forget()
        return self.values.factor(self.s, self.factors[0], dims)

    def k_value(self, batch: dict[int, str], j: str, d: str) -> str:
        """K at key j, head-dim d (as `q_value`)."""
        dims = self.s_dims(batch, "0", j, d)
        if self.factors is None:
            return self.operand(self.s, self.smaps, self.k_op, dims)
        self.values.forget()
        return self.values.factor(self.s, self.factors[1], dims)

    def scores_step(self, q: str, k: str, acc: str) -> str:
        """The scores' accumulation of one query and key value (as the tiles hold them)."""
        if self.factors is None:
            return self.values.contraction_step(self.s, q, k, acc)
        return self.values.factor_step(self.s, self.factors, q, k, acc)

    def _extent_or(self, op, loop: int, default: str) -> str:
        try:
            return self._extent(op, loop)
        except EmitError:
            return default

    def _extent(self, op, loop: int) -> str:
        for v, m in zip(op.operands, indexing_maps(op)):
            shape = self.body.view(v).shape
            for t, e in enumerate(m.results):
                if pure_dim(e) == loop:
                    return shape[t]
        raise EmitError("a fusec.block_attention loop indexes no operand dim by itself", op)

    def result(self, acc: str, l: str, m: str, vsum: str | None) -> str:
        """The output from a row's accumulator `acc`, sum `l` and final max `m` (and, where
        `sums_v`, the Σ_j V_j of its column `vsum`): acc / l, or the guard's value for a row
        whose max is C (module doc of plan/attention.py; `guard` above)."""
        if self.guard is None:
            return f"{acc} / {l}"
        c = self.ctx.consts
        cv, kv = self.guard
        if not self.sums_v:
            return f"{acc} if {m} == {c.float(cv, self.elem)} else {acc} / {l}"
        return f"{c.float(kv, self.elem)} * {vsum} if {m} == {c.float(cv, self.elem)} else {acc} / {l}"

    # -- values --------------------------------------------------------------------------------
    def s_dims(self, batch: dict[int, str], i: str, j: str, d: str) -> list[str]:
        """The scores contraction's loop coordinates at query i, key j, head-dim d."""
        dims = ["0"] * self.smaps[0].n_dims
        for l, x in batch.items():
            dims[l] = x
        dims[self.q_loop], dims[self.k_loop], dims[self.d_loop] = i, j, d
        return dims

    def o_dims(self, batch: dict[int, str], i: str, j: str, dv: str) -> list[str]:
        """The output contraction's loop coordinates at query i, key j, value-dim dv."""
        dims = ["0"] * self.omaps[0].n_dims
        for sl, x in batch.items():
            dims[self.o_batch[sl]] = x
        dims[self.o_q], dims[self.o_j], dims[self.dv_loop] = i, j, dv
        return dims

    def operand(self, op, maps, k: int, dims: list[str]) -> str:
        """Operand k of `op` (its indexing `maps`) at loop coordinates `dims`."""
        self.values.forget()
        return self.values.read(op.operands[k], [affine(e, dims) for e in maps[k].results], op)

    def score(self, batch, i: str, j: str, s: str) -> str:
        """The score function at (i, j) with the score's value in `s`."""
        sdims = self.s_dims(batch, i, j, "0")
        self.values.supply(self.s.operands[-1], [affine(e, sdims) for e in self.smaps[-1].results], s)
        edims = [sdims[l] for l in self.s_loops]           # the exponentials' loops are the score dims
        self.values.forget()
        maps = indexing_maps(self.e)
        return self.values.read(self.e.operands[self.z_op], [affine(e, edims) for e in maps[self.z_op].results], self.e)

    def _body_of(self, op, args: dict[int, str]) -> str:
        """Op's (one-result) body with its block arguments bound to `args` (by number)."""
        block = op.regions[0].blocks[0]
        expr = self.ctx.expr
        for k, a in enumerate(block.arguments):
            if k in args:
                expr[a] = args[k]
        inner = [o.operation for o in block.operations]
        for o in inner[:-1]:
            if o.name == "arith.constant":
                self.body.op(o)
                continue
            e = self.ctx.rules.expr(o, [self.body.val(x) for x in o.operands])
            if e is None:
                raise EmitError(f"no rule for {o.name} in a fusec.block_attention body", op)
            self.body.assign(o.results[0], e)
        return self.body.val(inner[-1].operands[0])

    def exp_sub(self, a: str, b: str) -> str:
        """exp(a - b) by the exponentials op's own body."""
        m_arg = 1 - self.z_op
        return self._body_of(self.e, {self.z_op: a, m_arg: b})

    def maximum(self, a: str, b: str) -> str:
        """max(a, b) by the row max op's own body."""
        n_in = n_inputs(self.mx)
        return self._body_of(self.mx, {0: a, n_in: b})

    def batch_coords(self, flat: str) -> dict[int, str]:
        """The batch loops' coordinates (named) from the block's flat batch number."""
        out: dict[int, str] = {}
        inner = "1"
        for l in reversed(self.batch_loops):
            n = str(self.ext[l])
            out[l] = mod(floordiv(flat, inner), n) if l != self.batch_loops[0] else floordiv(flat, inner)
            inner = expr_mul(inner, n)
        named = {}
        for l, e in out.items():
            v = self.names.fresh(f"b{l}_")
            self.w(f"{v} = {e}")
            named[l] = v
        return named

    def store(self, batch, i: str, dv: str, value: str) -> None:
        """Output (i, dv) with value `value`, through the epilogue when the root is one."""
        odims = self.o_dims(batch, i, "0", dv)
        out_map = self.omaps[-1]
        oidx = [affine(e, odims) for e in out_map.results]
        if self.root == self.o:
            self.w(self.body.view(self.o.operands[-1]).store(oidx, value))
            return
        self.values.supply(self.o.operands[-1], oidx, value)
        self.values.forget()
        self.values.store_results(self.root, self._epilogue_dims(oidx))

    def _epilogue_dims(self, oidx: list[str]) -> list[str]:
        """The epilogue's loop coordinates where it reads output element `oidx`: its read of the
        output is a permutation of its loops (the identity, or a transpose after the attention:
        `permute(p @ v, [1, 0, 2])`), inverted."""
        rmaps = indexing_maps(self.root)
        out = self.o.operands[-1]
        reads = [m for v, m in zip(list(self.root.operands)[:n_inputs(self.root)], rmaps) if v == out]
        if not reads:
            raise EmitError("a fusec.block_attention epilogue does not read the attention's output", self.root)
        m = reads[0]
        loops = [pure_dim(e) for e in m.results]
        if any(l is None for l in loops) or sorted(loops) != list(range(m.n_dims)):
            raise EmitError("a fusec.block_attention epilogue must read the attention's output at a "
                            "permutation of its loops", self.root)
        dims = ["0"] * m.n_dims
        for t, l in enumerate(loops):
            dims[l] = oidx[t]
        return dims

    # -- the gpu schedule ----------------------------------------------------------------------
    def emit_gpu(self) -> None:
        """The gpu schedule (docs/ARCHITECTURE.md, "Attention kernels"), inside the kernel's
        gpu.launch of (query blocks, batch) blocks of THREADS_X x THREADS_Y threads; tiles as
        `plan.attention.GpuLayout` says. Everything inside a key step is unrolled here (the
        loaders, the scores over d, P · V over the step's keys), so each shared read is a
        per-thread base plus a constant; the row max and the final row sum combine across a
        row's 8 threads (adjacent lanes of one warp) by shuffles."""
        w, names, c = self.w, self.names, self.ctx.consts
        BQ, BKV, D, DV = self.bq, self.bkv, self.D, self.DV
        T = THREADS_X * THREADS_Y
        L = gpu_layout(D, DV, BQ, BKV)
        rq, ck = BQ // THREADS_Y, BKV // THREADS_X
        f = f"numba.{self.elem.compute}"
        ninf, zero = c.float(float("-inf"), self.elem), c.zero(self.elem)
        self.ctx.helpers.cudasim = True
        self.ctx.helpers.use_text(SIM_LANES, [f"{SIM_LANES} = {T} if _CUDASIM else 1   "
                                               "# the simulator's stand-in for warp shuffles: a word per thread"])
        w(f"# {BLOCK_ATTENTION}: {BQ} queries per block, keys in steps of {BKV}; a thread takes {rq} queries x "
          f"{ck} keys of scores and {rq} x {L.groups}x{L.cw} outputs (online softmax)")
        tx, ty, tid = names.fresh("tx"), names.fresh("ty"), names.fresh("tid")
        w(f"{tx} = {ids.thread_id('x')}")
        w(f"{ty} = {ids.thread_id('y')}")
        w(f"{tid} = {ty} * {THREADS_X} + {tx}")
        i0 = names.fresh("i0")
        w(f"{i0} = {ids.block_id('x')} * {BQ}")
        batch = self.batch_coords(ids.block_id("y"))
        Qs, Ks, Vs, Ps, Xs = (names.fresh(n) for n in ("Qs", "Ks", "Vs", "Ps", "Xs"))
        w(f"{Qs} = cuda.shared.array(({BQ}, {L.dp}), {f})")
        w(f"{Ks} = cuda.shared.array(({BKV}, {L.k_stride}), {f})")
        w(f"{Vs} = cuda.shared.array(({BKV}, {L.v_stride}), {f})")
        w(f"{Ps} = cuda.shared.array(({BQ}, {L.p_stride}), {f})")
        w(f"{Xs} = cuda.shared.array({SIM_LANES}, {f})")
        self._tid, self._xs, self._splits = tid, Xs, {}
        q_read = lambda r, d: self.q_value(batch, expr_add(i0, r), d)
        self._load_tiles([(BQ, L.dp, D, i0, self.SQ, q_read, Qs)])
        rows = [expr_add(ty, str(THREADS_Y * a)) for a in range(rq)]
        keys = [expr_add(tx, str(THREADS_X * k)) for k in range(ck)]
        cols = [[expr_add(expr_mul(tx, str(L.cw)), str(g * THREADS_X * L.cw + i)) for i in range(L.cw)]
                for g in range(L.groups)]
        m = [names.fresh(f"m{a}_") for a in range(rq)]
        l = [names.fresh(f"l{a}_") for a in range(rq)]
        acc = [[[names.fresh(f"o{a}_{g}_{i}") for i in range(L.cw)] for g in range(L.groups)] for a in range(rq)]
        for a in range(rq):
            w(f"{m[a]} = {ninf}")
            w(f"{l[a]} = {zero}")
            for g in range(L.groups):
                for i in range(L.cw):
                    w(f"{acc[a][g][i]} = {zero}")
        vsum = [[names.fresh(f"vs{g}_{i}") for i in range(L.cw)] for g in range(L.groups)] if self.sums_v else None
        for g in range(L.groups if vsum else 0):
            for i in range(L.cw):
                w(f"{vsum[g][i]} = {zero}")
        row_guard = self.SQ % BQ != 0
        key_guard = self.SK % BKV != 0
        j0 = names.fresh("j0")
        if not self.sums_v and causal_key(self):    # a causal mask: the key tiles past the block's last query are all -inf
            w(f"for {j0} in range(0, min({self.SK}, {expr_add(i0, str(BQ))}), {BKV}):")
        else:
            w(f"for {j0} in range(0, {self.SK}, {BKV}):")
        with w.indent():
            # K and V of this step (the barrier: every thread is done with the last step's tiles)
            w("cuda.syncthreads()")
            k_read = lambda r, d: self.k_value(batch, expr_add(j0, r), d)
            v_read = lambda r, d: self.operand(self.o, self.omaps, self.v_op, self.o_dims(batch, "0", expr_add(j0, r), d))
            self._load_tiles([(BKV, L.dp, D, j0, self.SK, k_read, Ks), (BKV, DV, DV, j0, self.SK, v_read, Vs)])
            w("cuda.syncthreads()")
            # the scores: 4 adjacent d of each query and key per read
            s = [[names.fresh(f"s{a}_{k}") for k in range(ck)] for a in range(rq)]
            for a in range(rq):
                for k in range(ck):
                    w(f"{s[a][k]} = {zero}")
            with self._chunks(L.dp, max(1, UNROLLED_FMAS // (rq * ck * 4))) as offsets:
                for d4 in offsets:
                    qv = [[names.fresh(f"q{a}_{i}_") for i in range(4)] for a in range(rq)]
                    kv = [[names.fresh(f"k{k}_{i}_") for i in range(4)] for k in range(ck)]
                    for a in range(rq):
                        for i in range(4):
                            w(f"{qv[a][i]} = {Qs}[{rows[a]}, {expr_add(d4, str(i))}]")
                    for k in range(ck):
                        for i in range(4):
                            w(f"{kv[k][i]} = {Ks}[{keys[k]}, {expr_add(d4, str(i))}]")
                    for a in range(rq):
                        for k in range(ck):
                            for i in range(4):
                                w(f"{s[a][k]} = {self.scores_step(qv[a][i], kv[k][i], s[a][k])}")
            # the score function, -inf past the ends; the row max across the row's 8 threads
            z = [[names.fresh(f"z{a}_{k}") for k in range(ck)] for a in range(rq)]
            mn = [names.fresh(f"mn{a}_") for a in range(rq)]
            for a in range(rq):
                for k in range(ck):
                    conds = ([f"{expr_add(i0, rows[a])} < {self.SQ}"] if row_guard else []) + \
                            ([f"{expr_add(j0, keys[k])} < {self.SK}"] if key_guard else [])
                    guarded(w, z[a][k], ninf, conds,
                             lambda: self.score(batch, expr_add(i0, rows[a]), expr_add(j0, keys[k]), s[a][k]))
                w(f"{mn[a]} = {z[a][0]}")
                for k in range(1, ck):
                    w(f"{mn[a]} = {self.maximum(z[a][k], mn[a])}")
            for off in (1, 2, 4):
                other = [names.fresh(f"x{a}_") for a in range(rq)]
                self._xor_lanes(mn, other, off)
                for a in range(rq):
                    w(f"{mn[a]} = {self.maximum(other[a], mn[a])}")
            # the exponentials against the new max (0 for a row that has seen only -inf, so
            # exp(-inf - 0) = 0 leaves p, l and the outputs 0); the rescale of the running sums
            fold = self._exp2_form()
            for a in range(rq):
                w(f"{mn[a]} = {self.maximum(m[a], mn[a])}")
                ms, al, ls = names.fresh(f"ms{a}_"), names.fresh(f"al{a}_"), names.fresh(f"ls{a}_")
                w(f"{ms} = {zero} if {mn[a]} == {ninf} else {mn[a]}")
                if fold:
                    msl = names.fresh(f"msl{a}_")
                    w(f"{msl} = {ms} * {fold}")
                    w(f"{al} = {self._exp2(f'{m[a]} * {fold} - {msl}')}")
                else:
                    w(f"{al} = {self.exp_sub(m[a], ms)}")
                for k in range(ck):
                    p = names.fresh("p")
                    if fold:
                        w(f"{p} = {self._exp2(f'{z[a][k]} * {fold} - {msl}')}")
                    else:
                        w(f"{p} = {self.exp_sub(z[a][k], ms)}")
                    w(f"{Ps}[{rows[a]}, {keys[k]}] = {p}")
                    w(f"{ls} = {p}" if k == 0 else f"{ls} = {ls} + {p}")
                w(f"{l[a]} = {l[a]} * {al} + {ls}")
                for g in range(L.groups):
                    for i in range(L.cw):
                        w(f"{acc[a][g][i]} = {acc[a][g][i]} * {al}")
                w(f"{m[a]} = {mn[a]}")
            # a row's P is written and read by its own warp
            w("if _CUDASIM:")
            with w.indent():
                w("cuda.syncthreads()")
            w("else:")
            with w.indent():
                w("cuda.syncwarp()")
            # P · V: 4 adjacent keys of a row, a run of cw value columns, per read
            with self._chunks(BKV, max(1, UNROLLED_FMAS // (rq * L.groups * L.cw * 4))) as offsets:
                for j4 in offsets:
                    pv = [[names.fresh(f"p{a}_{i}_") for i in range(4)] for a in range(rq)]
                    for a in range(rq):
                        for i in range(4):
                            w(f"{pv[a][i]} = {Ps}[{rows[a]}, {expr_add(j4, str(i))}]")
                    for i in range(4):
                        vv = [[names.fresh(f"v{g}_{e}_") for e in range(L.cw)] for g in range(L.groups)]
                        for g in range(L.groups):
                            for e in range(L.cw):
                                w(f"{vv[g][e]} = {Vs}[{expr_add(j4, str(i))}, {cols[g][e]}]")
                                if vsum:        # the guard's Σ_j V_j (0 past the keys' end)
                                    w(f"{vsum[g][e]} = {vsum[g][e]} + {vv[g][e]}")
                        for a in range(rq):
                            for g in range(L.groups):
                                for e in range(L.cw):
                                    w(f"{acc[a][g][e]} = {acc[a][g][e]} + {pv[a][i]} * {vv[g][e]}")
        # the row sums across the row's 8 threads, then O = acc / l through the epilogue
        for off in (1, 2, 4):
            other = [names.fresh(f"y{a}_") for a in range(rq)]
            self._xor_lanes(l, other, off)
            for a in range(rq):
                w(f"{l[a]} = {l[a]} + {other[a]}")
        # O = acc / l. Where the value columns fit in a row of Qs (free once every thread is
        # past the last step) the outputs pass through it, so each store (and the epilogue's
        # reads) is 8 adjacent columns of a row across its threads, not 4 columns 4 apart
        staged = DV <= L.dp
        if staged:
            w("cuda.syncthreads()")
        for a in range(rq):
            if row_guard and not staged:
                w(f"if {expr_add(i0, rows[a])} < {self.SQ}:")
                w.depth += 1
            for g in range(L.groups):
                for e in range(L.cw):
                    col_guard = (g * THREADS_X + THREADS_X) * L.cw > DV and cols[g][e] != "0"
                    if col_guard:
                        w(f"if {cols[g][e]} < {DV}:")
                        w.depth += 1
                    out = self.result(acc[a][g][e], l[a], m[a], vsum and vsum[g][e])
                    if staged:
                        w(f"{Qs}[{rows[a]}, {cols[g][e]}] = {out}")
                    else:
                        ov = names.fresh("ov")
                        w(f"{ov} = {out}")
                        self.store(batch, expr_add(i0, rows[a]), cols[g][e], ov)
                    if col_guard:
                        w.depth -= 1
            if row_guard and not staged:
                w.depth -= 1
        if not staged:
            return
        w("cuda.syncthreads()")
        for a in range(rq):
            if row_guard:
                w(f"if {expr_add(i0, rows[a])} < {self.SQ}:")
                w.depth += 1
            for k in range(-(-DV // THREADS_X)):
                col = expr_add(tx, str(THREADS_X * k))
                if THREADS_X * (k + 1) > DV:
                    w(f"if {col} < {DV}:")
                    w.depth += 1
                ov = names.fresh("ov")
                w(f"{ov} = {Qs}[{rows[a]}, {col}]")
                self.store(batch, expr_add(i0, rows[a]), col, ov)
                if THREADS_X * (k + 1) > DV:
                    w.depth -= 1
            if row_guard:
                w.depth -= 1

    @contextmanager
    def _chunks(self, n: int, unroll: int):
        """The offsets 0, 4, ... n - 4 of a loop over n (a multiple of 4) in steps of 4, `unroll`
        steps written out per iteration of a loop the emitter writes (all of them, no loop, when
        n <= 4 unroll)."""
        while (n // 4) % unroll:
            unroll -= 1
        if n <= 4 * unroll:
            yield self._in_blocks([str(o) for o in range(0, n, 4)])
            return
        v, o = self.names.fresh("u"), self.names.fresh("uo")
        self.w(f"for {v} in range({n // (4 * unroll)}):")
        self.w.depth += 1
        self.w(f"{o} = {v} * {4 * unroll}")
        yield self._in_blocks([expr_add(o, str(4 * c)) for c in range(unroll)])
        self.w.depth -= 1

    def _in_blocks(self, items: list, per: int | None = None):
        """`items`, the code written for each `per` of them under `if tid >= 0:` (always true:
        LLVM drops the test). Numba's lowering is quadratic in a basic block's length
        (`_find_singly_assigned_variable` scans the block once per variable); blocks of a few
        hundred statements keep a written-out key step's compile to seconds."""
        per = per or BLOCK_CHUNKS
        for b in range(0, len(items), per):
            if len(items) > per:
                self.w(f"if {self._tid} >= 0:")
                self.w.depth += 1
            yield from items[b:b + per]
            if len(items) > per:
                self.w.depth -= 1

    def _xor_lanes(self, values: list[str], into: list[str], off: int) -> None:
        """`into[a]` = `values[a]` of the lane `off` away (lane ^ off): a warp shuffle; under the
        simulator, which has no warps, through a shared word per thread between barriers (every
        warp of the block is full, so the two agree)."""
        w, tid, xs = self.w, self._tid, self._xs
        w("if _CUDASIM:")
        with w.indent():
            for v, o in zip(values, into):
                w("cuda.syncthreads()")
                w(f"{xs}[{tid}] = {v}")
                w("cuda.syncthreads()")
                w(f"{o} = {xs}[{tid} ^ {off}]")
        w("else:")
        with w.indent():
            for v, o in zip(values, into):
                w(f"{o} = cuda.shfl_xor_sync(0xFFFFFFFF, {v}, {off})")

    def _exp2_form(self) -> str | None:
        """log2(e) as a constant when the exponentials are exactly exp(z - m) in f32: then they
        are written exp2(z log2(e) - m log2(e)), one FFMA and the SFU's ex2 (rel. error ~1e-6 for
        |m| ~ 100, inside the f32 tolerance); None otherwise (the op's own body)."""
        if self.elem.mlir != "f32":
            return None
        block = self.e.regions[0].blocks[0]
        ops = [o.operation for o in block.operations]
        if [o.name for o in ops] != ["arith.subf", "math.exp", "linalg.yield"]:
            return None
        args = list(block.arguments)
        sub, ex = ops[0], ops[1]
        if list(sub.operands) != [args[self.z_op], args[1 - self.z_op]] or ex.operands[0] != sub.results[0]:
            return None
        if any(str(v.type) != "f32" for v in (*sub.operands, *ex.results)):
            return None
        return self.ctx.consts.float(1.4426950408889634, self.elem)

    def _exp2(self, x: str) -> str:
        return f"{self.ctx.helpers.use_text(_EX2, EX2_HELPER)}({x})"

    def _load_tiles(self, tiles) -> None:
        """Tiles (rows, cols, valid cols, row0, rows limit, read(r, d), shared tile) of an operand
        into shared memory: thread tid takes elements tid + T k, unrolled, every load of all the
        tiles issued before the first store. Row r, column d of a tile is the operand's row0 + r
        at d; 0 past `limit` rows or `valid` columns (padding)."""
        w, names, T, tid = self.w, self.names, THREADS_X * THREADS_Y, self._tid
        zero = self.ctx.consts.zero(self.elem)
        stores = []
        for rows, cols, valid, row0, limit, read, tile in tiles:
            n = rows * cols
            for k, exists in rounds(tid, n, T):
                r, d = self._element(cols, k)
                conds = list(exists)
                if limit % rows:
                    conds.append(f"{expr_add(row0, r)} < {limit}")
                if valid < cols:
                    conds.append(f"{d} < {valid}")
                v = names.fresh("v")
                guarded(w, v, zero, conds, lambda: read(r, d))
                stores.append((exists, f"{tile}[{r}, {d}] = {v}"))
        for conds, line in stores:
            if conds:
                w(f"if {conds[0]}:")
                with w.indent():
                    w(line)
            else:
                w(line)

    def _element(self, cols: int, k: int) -> tuple[str, str]:
        """(row, column) of element tid + T k of a tile `cols` wide: a power of two dividing T
        by the thread's hoisted shift and mask, a multiple of T by constants, else `//` and `%`."""
        T, tid = THREADS_X * THREADS_Y, self._tid
        if cols & (cols - 1) == 0 and T % cols == 0:
            if cols not in self._splits:
                r, d = self.names.fresh("tr"), self.names.fresh("tc")
                self.w(f"{r} = {tid} >> {cols.bit_length() - 1}")
                self.w(f"{d} = {tid} & {cols - 1}")
                self._splits[cols] = (r, d)
            r, d = self._splits[cols]
            return expr_add(r, str(k * (T // cols))), d
        if cols % T == 0:
            return str(k // (cols // T)), expr_add(tid, str(T * (k % (cols // T))))
        e = expr_add(tid, str(T * k))
        return floordiv(atom(e), str(cols)), mod(atom(e), str(cols))


_EX2 = "_ex2_ftz_f32"
# 2^x by the SFU alone: PTX ex2.approx.ftz.f32 (max rel. error 2^-22, subnormal results 0, as
# the exponentials' sum can ignore); libdevice's exp2f scales inputs below -126 around it (4
# instructions). The simulator runs the same definition in NumPy.
EX2_HELPER = [
    "if _CUDASIM:",
    "    def _ex2_ftz_f32(x):",
    '        """ex2.approx.ftz.f32 as the simulator runs it: 2**x, below the least normal f32 0."""',
    "        r = np.exp2(np.float32(x))",
    "        return np.float32(0) if r < np.float32(1.1754944e-38) else np.float32(r)",
    "else:",
    "    from llvmlite import ir as _llir",
    "    from numba import types as _nbt",
    "    from numba.cuda.extending import intrinsic as _intrinsic",
    "",
    "    @_intrinsic",
    "    def _ex2_ftz_f32(typingctx, x):",
    '        """2**x by the SFU (PTX ex2.approx.ftz.f32)."""',
    "        def codegen(context, builder, sig, args):",
    "            f32 = _llir.FloatType()",
    '            fn = _llir.InlineAsm(_llir.FunctionType(f32, [f32]), "ex2.approx.ftz.f32 $0, $1;", "=f,f")',
    "            return builder.call(fn, list(args))",
    "        return _nbt.float32(_nbt.float32), codegen",
]
# the scores and P . V are written out whole up to this many FMAs each per key step (the bench
# tiles: 512 each); longer ones are loops over that many (Numba compiles ~1,000 statements a
# second or slower, and ptxas forms LDS.128 from constant offsets only)
UNROLLED_FMAS = 1024
BLOCK_CHUNKS = 4
