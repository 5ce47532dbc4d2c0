"""Structured control flow: scf.for, scf.if and scf.parallel as Python loops and branches.

The outermost scf.parallel of the CPU target is one `numba.prange` over all its dims; every other
parallel loop runs serially (inside a CUDA thread, or inside a prange iteration)."""
from __future__ import annotations

from . import views
from .values import EmitError, expr_add, expr_mul, floordiv, is_int, is_memref, mod
from .views import Array
from ..mlir import ir
from .siblings import access, defined_in, nested_ops, operation, within
from .vector import vector_loop


class ControlFlow:
    """The scf rules of `Body` (body.py), which provides w, ctx, names, mode, ops, val."""

    def scf_for(self, op):
        self.need(op, "kernel", "cpu")
        if vector_loop(self, op):                # a thread's 4 consecutive f32: 16-byte accesses
            return
        lb, ub, step = (self.val(v) for v in op.operands[:3])
        block = op.regions[0].blocks[0]
        iv, carried = block.arguments[0], list(block.arguments)[1:]
        self._no_memref(op, carried)
        names = self._bind_carried(carried, op.operands[3:])
        self.ctx.expr[iv] = self.names(iv)
        kept = self._keep_in_locals(op)
        self.w(f"for {self.names(iv)} in {_range('range', lb, ub, step)}:")
        with self.w.indent():
            term = self.ops(block)
            self._yield(names, term)
        self._write_back(kept)
        for r, n in zip(op.results, names):
            self.ctx.expr[r] = n

    def fused_loops(self, group) -> None:
        """Sibling loops over one range as one Python loop (emit/siblings.py): the ops that stood
        between them first, then each loop's body in turn under the first loop's index."""
        for op in group.hoisted:
            self.op(op)
        first = group.loops[0]
        lb, ub, step = (self.val(v) for v in first.operands[:3])
        iv = self.names(first.regions[0].blocks[0].arguments[0])
        for loop in group.loops:
            self.ctx.expr[loop.regions[0].blocks[0].arguments[0]] = iv
        kept = self._keep_in_locals(*group.loops)
        self.w(f"for {iv} in {_range('range', lb, ub, step)}:    # {len(group.loops)} loops over one range, fused")
        with self.w.indent():
            for loop in group.loops:
                self.ops(loop.regions[0].blocks[0])
        self._write_back(kept)

    def _keep_in_locals(self, *loops) -> list:
        """cpu: the elements of a function-local buffer that a loop reads and writes at one place
        (indices fixed outside it: a row tile's accumulator, `acc[r] += x[r, j]` over j) are held
        in a Python local for the loop: loaded before, stored after. LLVM cannot do this itself,
        since it cannot tell the buffer from the arrays the loop reads, so it would load and
        store the element every iteration and not vectorise the reduction."""
        if self.mode != "cpu":
            return []
        kept, seen = [], set()
        for inner in (o for loop in loops for o in nested_ops(loop)):
            at = access(inner)
            if at is None or at[0] in seen or at[0] in self.ctx.held:
                continue
            m = at[0]
            seen.add(m)
            place = self._one_place(m, loops)
            if place is not None:
                index, stored = place
                local = self.names.temp("acc")
                self.w(f"{local} = {self.view(m).at([self.val(i) for i in index])}")
                self.ctx.held[m] = local
                kept.append((m, index, local, stored))
        return kept

    def _write_back(self, kept: list) -> None:
        for m, index, local, stored in kept:
            if stored:
                self.w(f"{self.view(m).at([self.val(i) for i in index])} = {local}")
            del self.ctx.held[m]

    def _one_place(self, m, loops):
        """(the indices, whether it stores) of every access of buffer `m` inside `loop`, when `m`
        is a buffer this function allocated (no caller's array, no arena slice, no view: nothing
        else aliases it), the loop only loads and stores it, and always at the same indices,
        all defined outside the loop; else None."""
        if isinstance(m.owner, ir.Block):
            return None
        if operation(m.owner).name not in ("memref.alloc", "memref.alloca") or (
                self.ctx.memory is not None and m in self.ctx.memory.slots):
            return None
        index, stored = None, False
        for use in m.uses:
            user = operation(use.owner)
            if not any(within(user, loop) for loop in loops):
                continue
            at = access(user)
            if at is None or at[0] != m:       # m stored as a value, or used by anything else
                return None
            if index is None:
                if any(defined_in(i, loops) for i in at[1]):
                    return None
                index = at[1]
            elif at[1] != index:
                return None
            stored = stored or at[2]
        return None if index is None else (index, stored)

    def scf_if(self, op):
        self.need(op, "kernel", "cpu")
        names = [self.names(r) for r in op.results]
        self.w(f"if {self.val(op.operands[0])}:")
        with self.w.indent():
            yielded = self._yield_if(op, names, self.ops(op.regions[0].blocks[0]))
        if len(op.regions) > 1 and len(op.regions[1].blocks) > 0:
            self.w("else:")
            with self.w.indent():
                self._yield_if(op, names, self.ops(op.regions[1].blocks[0]), yielded)
        for r, n in zip(op.results, names):
            if is_memref(r):
                v = yielded[n]
                array = Array(n, v.array.elem, v.array.rank, v.array.storage, v.array.space)
                self.ctx.views[r] = views.whole(array, v.shape)
            else:
                self.ctx.expr[r] = n

    def _yield_if(self, op, names, term, first: dict | None = None) -> dict:
        """Assign an scf.if's yielded values to its result names. A yielded memref must be a
        whole array (of the same rank and element storage in both branches): the result
        names the array chosen."""
        values, yielded = [], {}
        for n, v in zip(names, term.operands if term is not None else []):
            if not is_memref(v):
                values.append(self.val(v))
                continue
            view = self.view(v)
            other = (first or {}).get(n, view)
            if not view.whole or (view.array.rank, view.array.storage) != (
                    other.array.rank, other.array.storage):
                raise EmitError("the emitter has no rule for 'scf.if' yielding memref views "
                                "other than whole arrays of one rank and type", op)
            values.append(view.array.name)
            yielded[n] = view
        if names:
            self.w(f"{', '.join(names)} = {', '.join(values)}")
        return yielded

    def scf_parallel(self, op):
        self.need(op, "kernel", "cpu")
        n = len(op.regions[0].blocks[0].arguments)
        lbs = [self.val(v) for v in op.operands[:n]]
        ubs = [self.val(v) for v in op.operands[n:2 * n]]
        steps = [self.val(v) for v in op.operands[2 * n:3 * n]]
        inits = list(op.operands[3 * n:])
        block = op.regions[0].blocks[0]
        ivs = list(block.arguments)
        outermost = self.mode == "cpu" and self.parallel_depth == 0
        if outermost and inits:
            raise EmitError("the emitter has no rule for 'scf.parallel' with reductions at the "
                            "outermost (prange) level", op)
        accs = [self.names(r) for r in op.results]
        for acc, init in zip(accs, inits):
            self.w(f"{acc} = {self.val(init)}")
        for iv in ivs:
            self.ctx.expr[iv] = self.names(iv)
        depth = self.w.depth
        if outermost:
            self._prange(ivs, lbs, ubs, steps)
        else:
            for iv, lb, ub, step in zip(ivs, lbs, ubs, steps):
                self.w(f"for {self.names(iv)} in {_range('range', lb, ub, step)}:")
                self.w.depth += 1
        self.parallel_depth += 1
        start = len(self.w.lines)
        term = self.ops(block)
        if term is not None and term.name == "scf.reduce":
            self._reduce(term, accs)
        if len(self.w.lines) == start:
            self.w("pass")
        self.parallel_depth -= 1
        self.w.depth = depth
        for r, acc in zip(op.results, accs):
            self.ctx.expr[r] = acc

    def _prange(self, ivs, lbs, ubs, steps):
        """The outermost scf.parallel: one `numba.prange` over all its dims, delinearised. Always
        with a start: the index of `numba.prange(N)` is a uint64, and Numba types max(uint64,
        int64) (a clamped index, as a concat's or a gather's) as float64, no array index."""
        if len(ivs) == 1:
            lb, ub, step = lbs[0], ubs[0], steps[0]
            loop = f"numba.prange({lb}, {ub})" if step == "1" else _range("numba.prange", lb, ub, step)
            self.w(f"for {self.names(ivs[0])} in {loop}:")
            self.w.depth += 1
            return
        trips = [_trip(lb, ub, s) for lb, ub, s in zip(lbs, ubs, steps)]
        total = "1"
        for t in trips:
            total = expr_mul(total, t)
        p = self.names.temp("p")
        self.w(f"for {p} in numba.prange(0, {total}):")
        self.w.depth += 1
        for k, (iv, lb, step) in enumerate(zip(ivs, lbs, steps)):
            inner = "1"
            for t in trips[k + 1:]:
                inner = expr_mul(inner, t)
            i = floordiv(p, inner)
            i = i if k == 0 else mod(i, trips[k])
            self.w(f"{self.names(iv)} = {expr_add(lb, expr_mul(i, step))}")

    def _reduce(self, term, accs):
        for k, region in enumerate(term.regions):
            block = region.blocks[0]
            lhs, rhs = block.arguments[0], block.arguments[1]
            self.ctx.expr[lhs] = accs[k]
            self.ctx.expr[rhs] = self.val(term.operands[k])
            ret = self.ops(block)
            self.w(f"{accs[k]} = {self.val(ret.operands[0])}")

    def _bind_carried(self, carried, inits) -> list[str]:
        names = [self.names(a) for a in carried]
        for a, n, init in zip(carried, names, inits):
            self.w(f"{n} = {self.val(init)}")
            self.ctx.expr[a] = n
        return names

    def _yield(self, names: list[str], term) -> None:
        if not names:
            return
        values = [self.val(v) for v in term.operands]
        self.w(f"{', '.join(names)} = {', '.join(values)}")

    def execute_region(self, op):
        """A one-block region run once, in place (as the planner's launch wrappers leave)."""
        if len(op.regions[0].blocks) != 1:
            raise EmitError("the emitter has no rule for a multi-block 'scf.execute_region'", op)
        term = self.ops(op.regions[0].blocks[0])
        for r, v in zip(op.results, term.operands if term is not None else []):
            if is_memref(v):
                self.ctx.views[r] = self.ctx.views[v]
            else:
                self.ctx.expr[r] = self.val(v)

    def _no_memref(self, op, values):
        if any(is_memref(v) for v in values):
            raise EmitError(f"the emitter has no rule for '{op.name}' carrying memrefs", op)


def _range(fn: str, lb: str, ub: str, step: str) -> str:
    if step != "1":
        return f"{fn}({lb}, {ub}, {step})"
    return f"{fn}({ub})" if lb == "0" else f"{fn}({lb}, {ub})"


def _trip(lb: str, ub: str, step: str) -> str:
    if lb == "0" and step == "1":
        return ub
    if is_int(lb) and is_int(ub) and is_int(step):
        return str(max(0, -(-(int(ub) - int(lb)) // int(step))))
    span = f"{ub} - {lb}" if lb != "0" else ub
    return floordiv(expr_add(span, str(int(step) - 1)) if is_int(step) else f"{span} + {step} - 1", step)
