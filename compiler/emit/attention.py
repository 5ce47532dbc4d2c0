"""The attention template: online softmax over streamed key/value tiles (transforms/attention_kernels.py).

At the root marked `fusec.block_attention` = [BQ, BKV] the whole kernel is written here, from
the marked ops' bodies:

gpu (inside a gpu.launch of (query blocks, batch) blocks of 8 x 16 threads): the block's BQ
queries are loaded once into shared memory (Q's producers evaluated in the loader, along Q's
contiguous head dim); then per step of BKV keys the K and V tiles are loaded the same way, each
thread computes a (BQ/16) x (BKV/8) tile of scores from shared memory, applies the score function
(the ops between the two contractions, inlined: scale, mask, bias), and the row's running max is
combined across the row's 8 threads through shared memory; the thread rescales its accumulators
and its share of the running sum by exp(m_old - m_new) (the exponentials op's own body),
writes exp(z - m_new) into a shared P tile, and after a barrier adds P · V for its (BQ/16) x
(DV/8) outputs. At the end the row sums are combined the same way and the epilogue (the root's
body, when the root is an elementwise op after the second contraction) runs on acc / l.

cpu (in the host function): a prange over the same blocks; per block the Q tile, per step the
K and V tiles gathered into contiguous arrays (producers evaluated), the two tile products by
CBLAS sgemm called from the compiled loop (emit/cpu.py: BLAS_PRELUDE, as the cpu target's other
contractions), the score function, the running statistics and the rescale in compiled loops.

Scores of keys past the end, and of queries past the end, are -inf (masked before the max); a
row whose scores are all -inf gives NaN, as the unfused softmax does (0 / 0).
"""
from __future__ import annotations

from .gemm import _Gemm, _dims_of_map, _elem as _elem_of, _maps, _n_inputs, _pure_dim, affine
from .cpu import BLAS_MARK, NO_TRANS, TRANS, blas_layout, blas_fn
from .values import EmitError, floordiv, mod, mul
from ..mlir import ir
from ..plan.attention import THREADS_X, THREADS_Y
from ..transforms.cpu_library_calls import copy_permutation
from ..marks import ABSORBED, ATTENTION_BATCH, ATTENTION_LOOPS, ATTENTION_ROLE, ATTENTION_V, ATTENTION_Z, BLOCK_ATTENTION



def block_attention(body, root) -> None:
    body.need(root, "kernel", "cpu")
    _Attention(body, root).emit()


def _ints(attr) -> list[int]:
    return [int(x) for x in ir.DenseI64ArrayAttr(attr)]


class _Attention(_Gemm):
    """Shares the contraction template's value machinery (read, _inline, _store_root): the
    scores' and the output's values come from registers (`self.acc`), every other kernel op is
    evaluated where its value is needed."""

    def __init__(self, body, root):        # noqa: the base's __init__ parses a contraction kernel
        self.body, self.root = body, root
        self.w, self.names, self.ctx = body.w, body.names, body.ctx
        block = [o.operation for o in root.block.operations]
        self.order = {op: i for i, op in enumerate(block)}
        self.writers = [op for op in block if (op.name.startswith("linalg.") or op.name == "memref.copy")
                        and (ABSORBED in op.attributes or ATTENTION_ROLE in op.attributes or op == root)]
        roles = {ir.StringAttr(op.attributes[ATTENTION_ROLE]).value: op for op in block if ATTENTION_ROLE in op.attributes}
        for need in ("scores", "max", "exp", "sum", "out"):
            if need not in roles:
                raise EmitError(f"a fusec.block_attention kernel has no op marked {need}", root)
        self.s, self.e, self.o = roles["scores"], roles["exp"], roles["out"]
        self.mx, self.sm = roles["max"], roles["sum"]
        self.c = self.s
        self.supplied = (self.s, self.o)
        self.bq, self.bkv = _ints(root.attributes[BLOCK_ATTENTION])
        self.q_loop, self.k_loop, self.d_loop = _ints(root.attributes[ATTENTION_LOOPS])
        self.batch_loops = _ints(root.attributes[ATTENTION_BATCH])
        self.memo, self.acc = {}, {}
        self.smaps = _maps(self.s)
        s_out = self.smaps[-1]
        s_loops = [_pure_dim(e) for e in s_out.results]          # score dim -> scores loop
        if any(l is None for l in s_loops):
            raise EmitError("the scores of a fusec.block_attention must be indexed by their loops", self.s)
        self.s_loops = s_loops
        shape = self.body.view(self.s.operands[-1]).shape
        self.ext = {l: shape[t] for t, l in enumerate(s_loops)}
        # the scores' operands: Q varies with the query loop, K with the key loop
        used = [_dims_of_map(m) for m in self.smaps[:2]]
        self.q_op = 0 if self.q_loop in used[0] else 1
        self.k_op = 1 - self.q_op
        self.ext[self.d_loop] = self._extent(self.s, self.d_loop)
        # the output contraction's loops by role: j its (non-unit) reduction, q the output loop V
        # does not index, dv the output loop V indexes and the scores operand does not, the batch
        # the output loops both index (paired with the scores' batch loops in output order);
        # unit loops (a batch of 1 folded by a graph pass) stay 0
        self.v_op = ir.IntegerAttr(self.o.attributes[ATTENTION_V]).value
        omaps = _maps(self.o)
        self.omaps = omaps
        n_in = _n_inputs(self.o)
        ext_o = {l: self._extent_or(self.o, l, "1") for l in range(omaps[0].n_dims)}
        iters = [str(t) for t in ir.ArrayAttr(self.o.attributes["iterator_types"])]
        red = [l for l in range(len(iters)) if "reduction" in iters[l] and ext_o[l] != "1"]
        if len(red) != 1:
            raise EmitError("the output contraction of a fusec.block_attention needs one key loop", self.o)
        self.o_j = red[0]
        v_loops = _dims_of_map(omaps[self.v_op])
        p_ops = [k for k in range(n_in) if k != self.v_op and self.o_j in _dims_of_map(omaps[k])]
        if not p_ops:
            raise EmitError("the output contraction of a fusec.block_attention reads no scores operand", self.o)
        p_loops = _dims_of_map(omaps[p_ops[0]])
        out = [_pure_dim(e) for e in omaps[-1].results]
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
        self.elem = _elem_of(self.s.operands[-1])

    def _extent_or(self, op, loop: int, default: str) -> str:
        try:
            return self._extent(op, loop)
        except EmitError:
            return default

    def _extent(self, op, loop: int) -> str:
        for v, m in zip(op.operands, _maps(op)):
            shape = self.body.view(v).shape
            for t, e in enumerate(m.results):
                if _pure_dim(e) == loop:
                    return shape[t]
        raise EmitError("a fusec.block_attention loop indexes no operand dim by itself", op)

    # -- values --------------------------------------------------------------------------------
    def _s_dims(self, batch: dict[int, str], i: str, j: str, d: str) -> list[str]:
        dims = ["0"] * self.smaps[0].n_dims
        for l, x in batch.items():
            dims[l] = x
        dims[self.q_loop], dims[self.k_loop], dims[self.d_loop] = i, j, d
        return dims

    def _o_dims(self, batch: dict[int, str], i: str, j: str, dv: str) -> list[str]:
        dims = ["0"] * self.omaps[0].n_dims
        for sl, x in batch.items():
            dims[self.o_batch[sl]] = x
        dims[self.o_q], dims[self.o_j], dims[self.dv_loop] = i, j, dv
        return dims

    def _operand(self, op, maps, k: int, dims: list[str]) -> str:
        self.memo = {}
        return self.read(op.operands[k], [affine(e, dims) for e in maps[k].results], op)

    def _z(self, batch, i: str, j: str, s: str) -> str:
        """The score function at (i, j) with the score's value in `s`."""
        sdims = self._s_dims(batch, i, j, "0")
        self.acc = {(self.s.operands[-1], tuple(affine(e, sdims) for e in self.smaps[-1].results)): s}
        edims = [sdims[l] for l in self.s_loops]           # the exponentials' loops are the score dims
        self.memo = {}
        maps = _maps(self.e)
        return self.read(self.e.operands[self.z_op], [affine(e, edims) for e in maps[self.z_op].results], self.e)

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

    def _exp_sub(self, a: str, b: str) -> str:
        """exp(a - b) by the exponentials op's own body."""
        m_arg = 1 - self.z_op
        return self._body_of(self.e, {self.z_op: a, m_arg: b})

    def _max(self, a: str, b: str) -> str:
        n_in = _n_inputs(self.mx)
        return self._body_of(self.mx, {0: a, n_in: b})

    def _batch_coords(self, flat: str) -> dict[int, str]:
        out: dict[int, str] = {}
        inner = "1"
        for l in reversed(self.batch_loops):
            n = str(self.ext[l])
            out[l] = mod(floordiv(flat, inner), n) if l != self.batch_loops[0] else floordiv(flat, inner)
            inner = mul(inner, n)
        named = {}
        for l, e in out.items():
            v = self.names.fresh(f"b{l}_")
            self.w(f"{v} = {e}")
            named[l] = v
        return named

    def _store(self, batch, i: str, dv: str, value: str) -> None:
        odims = self._o_dims(batch, i, "0", dv)
        out_map = self.omaps[-1]
        oidx = [affine(e, odims) for e in out_map.results]
        if self.root == self.o:
            self.w(f"{self.body.view(self.o.operands[-1]).at(oidx)} = {value}")
            return
        self.acc = {(self.o.operands[-1], tuple(oidx)): value}
        self.memo = {}
        rmaps = _maps(self.root)
        # the epilogue reads the output with an identity map: its loops are the output's dims
        self._store_root([oidx[t] for t in range(len(rmaps[-1].results))])

    def _as_it_lies(self, op, k: int, loops: dict[int, str], rows: int, cols: int,
                    tile: tuple[int, str, int]) -> tuple[str, int, int] | None:
        """Operand k of `op` passed to BLAS as it lies in its array, when it can be: (the slice,
        CBLAS transpose flag, leading dimension) for op(X) with `rows` x `cols` loops and the
        loop tile[0] cut to tile[1]:tile[1] + tile[2]. Read through a kernel op that only
        permutes its input's axes (`transpose(k)`), it lies in that input. None when the
        operand is made inside the kernel otherwise (a producer, a cast), is not a whole array
        whose rows' elements are adjacent (emit/cpu.py: blas_layout), or its dims are not the two
        loops last and batch loops (`loops`: loop -> index variable) before them; a copy then
        gathers it (_emit_cpu)."""
        v, before = op.operands[k], op
        dims = [_pure_dim(e) for e in _maps(op)[k].results]
        writer = self._writer(v, before)
        if writer is not None:
            with writer.context:
                perm = copy_permutation(writer) if len(writer.operands) == 2 else None
            if (perm is None or len(perm) != len(dims) or any(perm[perm[u]] != u for u in range(len(perm)))
                    or ir.MemRefType(writer.operands[0].type).element_type != ir.MemRefType(v.type).element_type):
                return None
            v, before = writer.operands[0], writer
            dims = [dims[perm[u]] for u in range(len(perm))]
            if self._writer(v, before) is not None:
                return None
        view = self.body.view(v)
        if (not view.whole or view.host is None or view.array.storage != view.array.elem.compute
                or self._written_through_another_view(v)):
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

    # -- emission ------------------------------------------------------------------------------
    def emit(self) -> None:
        if self.body.mode == "cpu":
            self._emit_cpu()
        else:
            self._emit_gpu()

    def _emit_gpu(self) -> None:
        w, names, c = self.w, self.names, self.ctx.consts
        BQ, BKV, D, DV = self.bq, self.bkv, self.D, self.DV
        T = THREADS_X * THREADS_Y
        rq, ck, cd = BQ // THREADS_Y, BKV // THREADS_X, -(-DV // THREADS_X)
        f = f"numba.{self.elem.compute}"
        ninf, zero = c.float(float("-inf"), self.elem), c.zero(self.elem)
        w(f"# {BLOCK_ATTENTION}: {BQ} queries per block, keys in steps of {BKV}, {rq}x{ck} scores and {rq}x{cd} "
          f"outputs per thread (online softmax)")
        tx, ty, tid = names.fresh("tx"), names.fresh("ty"), names.fresh("tid")
        w(f"{tx} = cuda.threadIdx.x")
        w(f"{ty} = cuda.threadIdx.y")
        w(f"{tid} = {ty} * {THREADS_X} + {tx}")
        i0 = names.fresh("i0")
        w(f"{i0} = cuda.blockIdx.x * {BQ}")
        batch = self._batch_coords("cuda.blockIdx.y")
        Qs, Ks, Vs, Ps, Rs = (names.fresh(n) for n in ("Qs", "Ks", "Vs", "Ps", "Rs"))
        w(f"{Qs} = cuda.shared.array(({D}, {BQ + 1}), {f})")
        w(f"{Ks} = cuda.shared.array(({D}, {BKV + 1}), {f})")
        w(f"{Vs} = cuda.shared.array(({BKV}, {THREADS_X * cd + 1}), {f})")
        w(f"{Ps} = cuda.shared.array(({BQ}, {BKV + 1}), {f})")
        w(f"{Rs} = cuda.shared.array(({BQ}, {THREADS_X}), {f})")
        # the Q tile, along the head dim
        e = names.fresh("e")
        w(f"for {e} in range({tid}, {BQ * D}, {T}):")
        with w.indent():
            r, d, v = names.fresh("r"), names.fresh("d"), names.fresh("v")
            w(f"{r} = {e} // {D}")
            w(f"{d} = {e} % {D}")
            w(f"{v} = {zero}")
            w(f"if {i0} + {r} < {self.SQ}:")
            with w.indent():
                w(f"{v} = {self._operand(self.s, self.smaps, self.q_op, self._s_dims(batch, f'{i0} + {r}', '0', d))}")
            w(f"{Qs}[{d}, {r}] = {v}")
        rows = [names.fresh(f"row{a}_") for a in range(rq)]
        for a, row in enumerate(rows):
            w(f"{row} = {ty} + {THREADS_Y * a}")
        m = [names.fresh(f"m{a}_") for a in range(rq)]
        l = [names.fresh(f"l{a}_") for a in range(rq)]
        acc = [[names.fresh(f"o{a}_{k}") for k in range(cd)] for a in range(rq)]
        for a in range(rq):
            w(f"{m[a]} = {ninf}")
            w(f"{l[a]} = {zero}")
            for k in range(cd):
                w(f"{acc[a][k]} = {zero}")
        j0 = names.fresh("j0")
        w(f"for {j0} in range(0, {self.SK}, {BKV}):")
        with w.indent():
            w("cuda.syncthreads()")
            for name, n, col, tile, load in (
                    ("K", D, D, Ks, lambda cc, dd: self._operand(self.s, self.smaps, self.k_op,
                                                                  self._s_dims(batch, "0", f"{j0} + {cc}", dd))),
                    ("V", DV, DV, Vs, lambda cc, dd: self._operand(self.o, self.omaps, self.v_op,
                                                                    self._o_dims(batch, "0", f"{j0} + {cc}", dd)))):
                e = names.fresh("e")
                w(f"for {e} in range({tid}, {BKV * n}, {T}):")
                with w.indent():
                    cc, dd, v = names.fresh("c"), names.fresh("d"), names.fresh("v")
                    w(f"{cc} = {e} // {n}")
                    w(f"{dd} = {e} % {n}")
                    w(f"{v} = {zero}")
                    w(f"if {j0} + {cc} < {self.SK}:")
                    with w.indent():
                        w(f"{v} = {load(cc, dd)}")
                    w(f"{tile}[{dd}, {cc}] = {v}" if name == "K" else f"{tile}[{cc}, {dd}] = {v}")
            w("cuda.syncthreads()")
            s = [[names.fresh(f"s{a}_{k}") for k in range(ck)] for a in range(rq)]
            for a in range(rq):
                for k in range(ck):
                    w(f"{s[a][k]} = {zero}")
            dd = names.fresh("d")
            w(f"for {dd} in range({D}):")
            with w.indent():
                qv = [names.fresh(f"q{a}_") for a in range(rq)]
                kv = [names.fresh(f"k{k}_") for k in range(ck)]
                for a in range(rq):
                    w(f"{qv[a]} = {Qs}[{dd}, {rows[a]}]")
                for k in range(ck):
                    w(f"{kv[k]} = {Ks}[{dd}, {tx} + {THREADS_X * k}]")
                for a in range(rq):
                    for k in range(ck):
                        w(f"{s[a][k]} = {self._contraction_step(qv[a], kv[k], s[a][k])}")
            # the score function, masked past the ends; the row max across the row's threads
            z = [[names.fresh(f"z{a}_{k}") for k in range(ck)] for a in range(rq)]
            for a in range(rq):
                pm = names.fresh(f"pm{a}_")
                w(f"{pm} = {ninf}")
                for k in range(ck):
                    j = names.fresh("j")
                    w(f"{j} = {j0} + {tx} + {THREADS_X * k}")
                    w(f"{z[a][k]} = {ninf}")
                    w(f"if {i0} + {rows[a]} < {self.SQ} and {j} < {self.SK}:")
                    with w.indent():
                        w(f"{z[a][k]} = {self._z(batch, f'{i0} + {rows[a]}', j, s[a][k])}")
                    w(f"{pm} = {self._max(z[a][k], pm)}")
                w(f"{Rs}[{rows[a]}, {tx}] = {pm}")
            w("cuda.syncthreads()")
            for a in range(rq):
                mn, alpha, ls = names.fresh(f"mn{a}_"), names.fresh(f"al{a}_"), names.fresh(f"ls{a}_")
                w(f"{mn} = {m[a]}")
                for t in range(THREADS_X):
                    w(f"{mn} = {self._max(f'{Rs}[{rows[a]}, {t}]', mn)}")
                w(f"{ls} = {zero}")
                w(f"if {mn} == {ninf}:")      # nothing seen yet on this row: p = 0, nothing to rescale
                with w.indent():
                    w(f"{alpha} = {c.float(1.0, self.elem)}")
                    for k in range(ck):
                        w(f"{Ps}[{rows[a]}, {tx} + {THREADS_X * k}] = {zero}")
                w("else:")
                with w.indent():
                    w(f"{alpha} = {self._exp_sub(m[a], mn)}")
                    for k in range(ck):
                        p = names.fresh("p")
                        w(f"{p} = {self._exp_sub(z[a][k], mn)}")
                        w(f"{Ps}[{rows[a]}, {tx} + {THREADS_X * k}] = {p}")
                        w(f"{ls} = {ls} + {p}")
                w(f"{l[a]} = {l[a]} * {alpha} + {ls}")
                for k in range(cd):
                    w(f"{acc[a][k]} = {acc[a][k]} * {alpha}")
                w(f"{m[a]} = {mn}")
            w("cuda.syncthreads()")
            jj = names.fresh("jj")
            w(f"for {jj} in range({BKV}):")
            with w.indent():
                pv = [names.fresh(f"p{a}_") for a in range(rq)]
                vv = [names.fresh(f"v{k}_") for k in range(cd)]
                for a in range(rq):
                    w(f"{pv[a]} = {Ps}[{rows[a]}, {jj}]")
                for k in range(cd):
                    w(f"{vv[k]} = {Vs}[{jj}, {tx} + {THREADS_X * k}]")
                for a in range(rq):
                    for k in range(cd):
                        w(f"{acc[a][k]} = {acc[a][k]} + {pv[a]} * {vv[k]}")
        # the row sums across the row's threads, then O = acc / l through the epilogue
        w("cuda.syncthreads()")
        for a in range(rq):
            w(f"{Rs}[{rows[a]}, {tx}] = {l[a]}")
        w("cuda.syncthreads()")
        for a in range(rq):
            lt = names.fresh(f"lt{a}_")
            w(f"{lt} = {Rs}[{rows[a]}, 0]")
            for t in range(1, THREADS_X):
                w(f"{lt} = {lt} + {Rs}[{rows[a]}, {t}]")
            w(f"if {i0} + {rows[a]} < {self.SQ}:")
            with w.indent():
                for k in range(cd):
                    dv = f"{tx} + {THREADS_X * k}"
                    guard = (THREADS_X * (k + 1) > DV)
                    if guard:
                        w(f"if {dv} < {DV}:")
                        w.depth += 1
                    ov = names.fresh("ov")
                    w(f"{ov} = {acc[a][k]} / {lt}")
                    self._store(batch, f"{i0} + {rows[a]}", dv, ov)
                    if guard:
                        w.depth -= 1

    def _emit_cpu(self) -> None:
        w, names, c = self.w, self.names, self.ctx.consts
        BQ, BKV, D, DV = self.bq, self.bkv, self.D, self.DV
        f = f"np.{self.elem.compute}"
        ninf, zero = c.float(float("-inf"), self.elem), c.zero(self.elem)
        nb = "1"                  # the batch's extent: a number, or read at run time (--dynamic)
        for lp in self.batch_loops:
            nb = mul(nb, str(self.ext[lp]))
        self.ctx.helpers.blas = True
        blas = blas_fn(self.elem)
        one = c.float(1.0, self.elem)
        w(f"# {BLOCK_ATTENTION}: {BQ} queries per block, keys in steps of {BKV} (online softmax; the tile "
          f"products by BLAS)")
        blk = names.fresh("blk")
        w(f"for {blk} in numba.prange(0, {mul(nb, str(self.nq))}):")      # a start: a signed index (emit/control.py)
        with w.indent():
            i0, bflat = names.fresh("i0"), names.fresh("bb")
            w(f"{bflat} = {blk} // {self.nq}")
            w(f"{i0} = ({blk} % {self.nq}) * {BQ}")
            batch = self._batch_coords(bflat)
            qs, kt, vs, sc, pt, acc, mm, ll, tmp = (names.fresh(n) for n in
                                                     ("qs", "kt", "vs", "sc", "pt", "acc", "mrow", "lrow", "pv"))
            j0, nc = names.fresh("j0"), names.fresh("nc")
            # Q, K and V as they lie in their arrays where they can be (no producer, row-major, a
            # whole tile in every block or step), else gathered into a tile each block or step
            o_loops = {self.o_batch[sl]: x for sl, x in batch.items()}
            q_in = self._as_it_lies(self.s, self.q_op, batch, self.q_loop, self.d_loop, (self.q_loop, i0, BQ)) \
                if self.SQ % BQ == 0 else None
            k_in = self._as_it_lies(self.s, self.k_op, batch, self.d_loop, self.k_loop, (self.k_loop, j0, BKV)) \
                if self.SK % BKV == 0 else None
            v_in = self._as_it_lies(self.o, self.v_op, o_loops, self.o_j, self.dv_loop, (self.o_j, j0, BKV)) \
                if self.SK % BKV == 0 else None
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
            nr = names.fresh("nr")
            w(f"{nr} = min({BQ}, {self.SQ} - {i0})")
            if q_in is None:
                r, d = names.fresh("r"), names.fresh("d")
                w(f"for {r} in range({nr}):")
                with w.indent():
                    w(f"for {d} in range({D}):")
                    with w.indent():
                        w(f"{qs}[{r}, {d}] = {self._operand(self.s, self.smaps, self.q_op, self._s_dims(batch, f'{i0} + {r}', '0', d))}")
                q_in = (qs, NO_TRANS, D)
            w(f"for {j0} in range(0, {self.SK}, {BKV}):")
            with w.indent():
                w(f"{nc} = min({BKV}, {self.SK} - {j0})")
                cc, dd = names.fresh("c"), names.fresh("d")
                if k_in is None or v_in is None:
                    w(f"for {cc} in range({nc}):")
                    with w.indent():
                        if k_in is None:
                            w(f"for {dd} in range({D}):")
                            with w.indent():
                                w(f"{kt}[{dd}, {cc}] = {self._operand(self.s, self.smaps, self.k_op, self._s_dims(batch, '0', f'{j0} + {cc}', dd))}")
                        if v_in is None:
                            w(f"for {dd} in range({DV}):")
                            with w.indent():
                                w(f"{vs}[{cc}, {dd}] = {self._operand(self.o, self.omaps, self.v_op, self._o_dims(batch, '0', f'{j0} + {cc}', dd))}")
                    w(f"if {nc} < {BKV}:")         # the last, partial step: no stale keys or values
                    with w.indent():
                        if k_in is None:
                            w(f"{kt}[:, {nc}:] = {zero}")
                        if v_in is None:
                            w(f"{vs}[{nc}:, :] = {zero}")
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
                        w(f"{sc}[{r}, {cc}] = {self._z(batch, f'{i0} + {r}', f'{j0} + {cc}', f'{sc}[{r}, {cc}]')}")
                    w(f"{mn} = {mm}[{r}]")
                    w(f"for {cc} in range({nc}):")
                    with w.indent():
                        w(f"{mn} = {self._max(f'{sc}[{r}, {cc}]', mn)}")
                    w(f"{ls} = {zero}")
                    w(f"if {mn} == {ninf}:")       # nothing but -inf on this row so far: p = 0
                    with w.indent():
                        w(f"{alpha} = {c.float(1.0, self.elem)}")
                        w(f"for {cc} in range({nc}):")
                        with w.indent():
                            w(f"{pt}[{r}, {cc}] = {zero}")
                    w("else:")
                    with w.indent():
                        w(f"{alpha} = {self._exp_sub(f'{mm}[{r}]', mn)}")
                        w(f"for {cc} in range({nc}):")
                        with w.indent():
                            p = names.fresh("p")
                            w(f"{p} = {self._exp_sub(f'{sc}[{r}, {cc}]', mn)}")
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
                    w(f"{ov} = {acc}[{r}, {dv}] / {ll}[{r}]")
                    self._store(batch, f"{i0} + {r}", dv, ov)

