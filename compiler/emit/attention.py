"""The attention template: online softmax over streamed key/value tiles, written whole at the root
marked `fusec.block_attention` = [BQ, BKV]. `AttentionKernel` gives the roles, loops and values
(through `TemplateValues`); its `emit_gpu` is the gpu schedule, emit/attention_cpu.py the cpu
one. See docs/ARCHITECTURE.md, "GPU kernels", Attention kernels.
"""
from __future__ import annotations

from . import ids
from .attention_cpu import emit_cpu
from .template_values import (TemplateValues, affine, dims_of_map, indexing_maps, ints, n_inputs,
                              pure_dim)
from .values import EmitError, elem_of_type, expr_mul, floordiv, mod
from ..mlir import ir
from ..plan.attention import THREADS_X, THREADS_Y
from ..marks import ABSORBED, ATTENTION_BATCH, ATTENTION_LOOPS, ATTENTION_ROLE, ATTENTION_V, ATTENTION_Z, BLOCK_ATTENTION


def block_attention(body, root) -> None:
    body.need(root, "kernel", "cpu")
    kernel = AttentionKernel(body, root)
    if body.mode == "cpu":
        emit_cpu(kernel)
    else:
        kernel.emit_gpu()


class AttentionKernel:
    """One `fusec.block_attention` kernel (module doc): its roles (s: the scores contraction,
    mx: the row max, e: the exponentials, sm: the row sum, o: the output contraction), loops,
    static extents and tiles, and the values of its buffers (`values`)."""

    def __init__(self, body, root):
        self.body, self.root = body, root
        self.w, self.names, self.ctx = body.w, body.names, body.ctx
        block = [o.operation for o in root.block.operations]
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
            self.w(f"{self.body.view(self.o.operands[-1]).at(oidx)} = {value}")
            return
        self.values.supply(self.o.operands[-1], oidx, value)
        self.values.forget()
        rmaps = indexing_maps(self.root)
        # the epilogue reads the output with an identity map: its loops are the output's dims
        self.values.store_results(self.root, [oidx[t] for t in range(len(rmaps[-1].results))])

    # -- the gpu schedule ----------------------------------------------------------------------
    def emit_gpu(self) -> None:
        """The gpu schedule (docs/ARCHITECTURE.md, "Attention kernels"), inside the kernel's
        gpu.launch of (query blocks, batch) blocks of THREADS_X x THREADS_Y threads."""
        w, names, c = self.w, self.names, self.ctx.consts
        BQ, BKV, D, DV = self.bq, self.bkv, self.D, self.DV
        T = THREADS_X * THREADS_Y
        rq, ck, cd = BQ // THREADS_Y, BKV // THREADS_X, -(-DV // THREADS_X)
        f = f"numba.{self.elem.compute}"
        ninf, zero = c.float(float("-inf"), self.elem), c.zero(self.elem)
        w(f"# {BLOCK_ATTENTION}: {BQ} queries per block, keys in steps of {BKV}, {rq}x{ck} scores and {rq}x{cd} "
          f"outputs per thread (online softmax)")
        tx, ty, tid = names.fresh("tx"), names.fresh("ty"), names.fresh("tid")
        w(f"{tx} = {ids.thread_id('x')}")
        w(f"{ty} = {ids.thread_id('y')}")
        w(f"{tid} = {ty} * {THREADS_X} + {tx}")
        i0 = names.fresh("i0")
        w(f"{i0} = {ids.block_id('x')} * {BQ}")
        batch = self.batch_coords(ids.block_id("y"))
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
                w(f"{v} = {self.operand(self.s, self.smaps, self.q_op, self.s_dims(batch, f'{i0} + {r}', '0', d))}")
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
                    ("K", D, D, Ks, lambda cc, dd: self.operand(self.s, self.smaps, self.k_op,
                                                                  self.s_dims(batch, "0", f"{j0} + {cc}", dd))),
                    ("V", DV, DV, Vs, lambda cc, dd: self.operand(self.o, self.omaps, self.v_op,
                                                                    self.o_dims(batch, "0", f"{j0} + {cc}", dd)))):
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
                        w(f"{s[a][k]} = {self.values.contraction_step(self.s, qv[a], kv[k], s[a][k])}")
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
                        w(f"{z[a][k]} = {self.score(batch, f'{i0} + {rows[a]}', j, s[a][k])}")
                    w(f"{pm} = {self.maximum(z[a][k], pm)}")
                w(f"{Rs}[{rows[a]}, {tx}] = {pm}")
            w("cuda.syncthreads()")
            for a in range(rq):
                mn, alpha, ls = names.fresh(f"mn{a}_"), names.fresh(f"al{a}_"), names.fresh(f"ls{a}_")
                w(f"{mn} = {m[a]}")
                for t in range(THREADS_X):
                    w(f"{mn} = {self.maximum(f'{Rs}[{rows[a]}, {t}]', mn)}")
                w(f"{ls} = {zero}")
                w(f"if {mn} == {ninf}:")      # nothing seen yet on this row: p = 0, nothing to rescale
                with w.indent():
                    w(f"{alpha} = {c.float(1.0, self.elem)}")
                    for k in range(ck):
                        w(f"{Ps}[{rows[a]}, {tx} + {THREADS_X * k}] = {zero}")
                w("else:")
                with w.indent():
                    w(f"{alpha} = {self.exp_sub(m[a], mn)}")
                    for k in range(ck):
                        p = names.fresh("p")
                        w(f"{p} = {self.exp_sub(z[a][k], mn)}")
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
                    self.store(batch, f"{i0} + {rows[a]}", dv, ov)
                    if guard:
                        w.depth -= 1
