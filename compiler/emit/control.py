"""Structured control flow: scf.for, scf.if and scf.parallel as Python loops and branches.

The outermost scf.parallel of the CPU target is one `numba.prange` over all its dims; every other
parallel loop runs serially (inside a CUDA thread, or inside a prange iteration)."""
from __future__ import annotations

from . import views
from .values import EmitError, expr_add, expr_mul, floordiv, is_int, is_memref, mod
from .views import Array

# A long f32 sum is carried in f64; on the cpu its loop adds blocks of this many elements into an
# f32 partial first (ControlFlow._summing_loop). A sum of at most this many terms stays f32.
SUM_BLOCK = 1024
from ..mlir import ir
from .siblings import MEMREF_VIEW_OPS, access, defined_in, nested_ops, operation, view_root, within
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
        out = {}

        def body():
            out["term"] = self.ops(block)
            self._yield(names, out["term"])
        self._summing_loop((op,), self.names(iv), lb, ub, step, "", body)
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

        def body():
            for loop in group.loops:
                self.ops(loop.regions[0].blocks[0])
        self._summing_loop(group.loops, iv, lb, ub, step, f"    # {len(group.loops)} loops over one range, fused", body)
        self._write_back(kept)

    def _summing_loop(self, loops, iv, lb, ub, step, comment, body) -> None:
        """`for iv in range(lb, ub, step)` running `body`. On the cpu, where the loop adds into f64
        sums itself (not through a nested loop), it adds into an f32 partial per sum instead, one
        per block of SUM_BLOCK iterations (`blk`), each added to its f64 sum after the block: the
        block's adds stay f32 and vectorised (LLVM splits them over its lanes), and the sum's
        error is a block's, not the row's. A loop of at most SUM_BLOCK iterations is one block."""
        sums = [m for m in self.ctx.wide if self.mode == "cpu" and _adds_here(m, loops)]
        if not sums:
            self.w(f"for {iv} in {_range('range', lb, ub, step)}:{comment}")
            with self.w.indent():
                body()
            return
        trip = _trip(lb, ub, step)
        blocked = not (is_int(trip) and int(trip) <= SUM_BLOCK)
        if blocked:
            blk = self.names.temp("blk")
            span = str(SUM_BLOCK) if step == "1" else expr_mul(str(SUM_BLOCK), step)
            self.w(f"for {blk} in range({lb}, {ub}, {span}):    # f32 partial sums of {SUM_BLOCK}, added in f64")
            self.w.depth += 1
        parts = []
        for m in sums:
            part = self.names.temp("part")
            self.w(f"{part} = np.float32(0)")
            parts.append((m, self.ctx.held[m], part))
            self.ctx.held[m] = part
        head = _range("range", blk, f"min({expr_add(blk, span)}, {ub})", step) if blocked else _range("range", lb, ub, step)
        self.w(f"for {iv} in {head}:{comment}")
        with self.w.indent():
            body()
        for m, total, part in parts:
            self.w(f"{total} += {part}")
            self.ctx.held[m] = total
        if blocked:
            self.w.depth -= 1

    def _keep_in_locals(self, *loops) -> list:
        """cpu: the elements of a function-local buffer that a loop reads and writes at one place
        (indices fixed outside it: a row tile's accumulator, `acc[r] += x[r, j]` over j) are held
        in a Python local for the loop: loaded before, stored after. LLVM cannot do this itself,
        since it cannot tell the buffer from the arrays the loop reads, so it would load and
        store the element every iteration and not vectorise the reduction.

        cpu and GPU kernels: an f32 sum the loop accumulates (`acc = acc + y`, and nothing else
        reads the running value) is carried in an f64 local across the loop and rounded to f32
        once after it (`_wide_sum`): a row of 10^6 or a thread's serial partial of thousands of
        elements then loses nothing to the loop's order (docs/FDSL.md, "Long reductions")."""
        kept, seen = [], set()
        for inner in (o for loop in loops for o in nested_ops(loop)):
            at = access(inner)
            if at is None or at[0] in seen:
                continue
            m = at[0]
            seen.add(m)
            if m in self.ctx.held:
                # a one-element alloc already a local (body.py: _held_as_local): widen it for the loop
                if m not in self.ctx.wide and _wide_sum(m, loops) and _long(m, loops):
                    local = self.names.temp("sum")
                    self.w(f"{local} = np.float64({self.ctx.held[m]})")
                    kept.append((m, None, local, self.ctx.held[m]))
                    self.ctx.held[m] = local
                    self.ctx.wide.add(m)
                continue
            place = self._one_place(m, loops)
            if place is None:
                continue
            index, stored = place
            wide = stored and _wide_sum(m, loops) and _long(m, loops)
            if self.mode != "cpu" and not wide:
                continue
            local = self.names.temp("acc")
            at_place = self.view(m).load([self.val(i) for i in index])
            self.w(f"{local} = np.float64({at_place})" if wide else f"{local} = {at_place}")
            self.ctx.held[m] = local
            if wide:
                self.ctx.wide.add(m)
            kept.append((m, index, local, stored))
        return kept

    def _write_back(self, kept: list) -> None:
        for m, index, local, stored in kept:
            wide = m in self.ctx.wide
            self.ctx.wide.discard(m)
            if index is None:                  # a widened local: rounded back into its f32 local
                self.w(f"{stored} = np.float32({local})")
                self.ctx.held[m] = stored
                continue
            if stored:
                value = f"np.float32({local})" if wide else local
                self.w(self.view(m).store([self.val(i) for i in index], value))
            del self.ctx.held[m]

    def _one_place(self, m, loops):
        """(the indices, whether it stores) of every access of buffer `m` inside `loop`, when `m`
        is a buffer this function allocated (no caller's array, no view: nothing else aliases
        it), the loop only loads and stores it, and always at the same indices, all defined
        outside the loop; else None. On the cpu `m` may be planned (emit/memplan.py): an output
        buffer from the pool or an arena slice aliases nothing the loop touches, since every
        buffer a top-level op uses has its own arena range; a GPU kernel keeps only its own
        allocs (a thread's partial in shared memory)."""
        if isinstance(m.owner, ir.Block):
            return None
        if operation(m.owner).name in MEMREF_VIEW_OPS:
            # a row's element of the output (`subview %out[r]` in a prange), a thread's element
            # of a block-shared partial (`subview %partials[0, tid]`): the loop may keep it when
            # it touches the buffer through this view alone and holds no barrier (no other
            # thread reads it meanwhile)
            root = view_root(m)
            if isinstance(root.owner, ir.Block) or _others_within(root, m, loops) or any(
                    o.name == "gpu.barrier" for loop in loops for o in nested_ops(loop)):
                return None
            if operation(root.owner).name not in ("memref.alloc", "memref.alloca"):
                return None
        elif operation(m.owner).name not in ("memref.alloc", "memref.alloca"):
            return None
        if self.mode != "cpu" and self.ctx.memory is not None and m in self.ctx.memory.slots:
            return None
        index, stored = None, False
        for use in m.uses:
            user = operation(use.owner)
            if user.name in MEMREF_VIEW_OPS and _used_within(user.results[0], loops):
                return None                    # read or written through a view inside the loop
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


def _used_within(v, loops) -> bool:
    """Whether memref `v`, or a view of it, is used inside one of `loops`."""
    for use in v.uses:
        user = operation(use.owner)
        if any(within(user, loop) for loop in loops):
            return True
        if user.name in MEMREF_VIEW_OPS and _used_within(user.results[0], loops):
            return True
    return False


def _others_within(v, m, loops) -> bool:
    """Whether memref `v`, or a view of it other than `m` (and its own views), is used inside
    one of `loops`."""
    for use in v.uses:
        user = operation(use.owner)
        if user.name in MEMREF_VIEW_OPS:
            if user.results[0] != m and _others_within(user.results[0], m, loops):
                return True
        elif any(within(user, loop) for loop in loops):
            return True
    return False


def _wide_sum(m, loops) -> bool:
    """Whether `loops` accumulate an f32 sum in `m` and nothing else: every store of `m` in them
    stores `arith.addf` of a load of `m` (the addf used by that store alone), and every load of
    `m` in them feeds only such addfs. Then the running value may be held in f64: no other
    operation sees it, so only the sum's rounding changes (a scan, which stores each running
    value as an output, is not one)."""
    if str(ir.MemRefType(m.type).element_type) != "f32":
        return False
    inside = [operation(u.owner) for u in m.uses if any(within(operation(u.owner), loop) for loop in loops)]
    loads = [o for o in inside if o.name == "memref.load"]
    stores = [o for o in inside if o.name == "memref.store"]
    if not stores or len(loads) + len(stores) != len(inside):
        return False
    load_results = {o.results[0] for o in loads}
    adds = set()
    for st in stores:
        add = st.operands[0].owner
        if isinstance(add, ir.Block):
            return False
        add = operation(add)
        if add.name != "arith.addf" or not any(v in load_results for v in add.operands):
            return False
        if len(list(add.results[0].uses)) != 1:
            return False
        adds.add(add)
    for ld in loads:
        for use in ld.results[0].uses:
            if operation(use.owner) not in adds:
                return False
    return True


def _accesses(m, loops) -> list:
    return [operation(u.owner) for u in m.uses if any(within(operation(u.owner), loop) for loop in loops)]


def _loops_between(op, loops) -> list:
    """The scf.for ops enclosing `op` inside (not counting) the one of `loops` that holds it."""
    out, p = [], op.parent
    while p is not None and p not in loops:
        if p.name == "scf.for":
            out.append(p)
        p = p.parent
    return out


def _static_trip(loop) -> int | None:
    bounds = []
    for v in loop.operands[:3]:
        owner = v.owner
        if isinstance(owner, ir.Block) or operation(owner).name != "arith.constant":
            return None
        bounds.append(ir.IntegerAttr(operation(owner).attributes["value"]).value)
    lb, ub, step = bounds
    return max(0, -(-(ub - lb) // step))


def _long(m, loops) -> bool:
    """Whether `loops` (one loop, or siblings over one range) add more than SUM_BLOCK terms into
    `m`, counting the nested loops around its accesses; a run-time trip count is long."""
    trip = _static_trip(loops[0])
    if trip is None:
        return True
    inner = 1
    for op in _accesses(m, loops):
        n = 1
        for loop in _loops_between(op, loops):
            t = _static_trip(loop)
            if t is None:
                return True
            n *= t
        inner = max(inner, n)
    return trip * inner > SUM_BLOCK


def _adds_here(m, loops) -> bool:
    """Whether `loops` touch `m` in their own bodies, not through a nested loop."""
    inside = _accesses(m, loops)
    return bool(inside) and not any(_loops_between(op, loops) for op in inside)
