"""The values of a template kernel's buffers: `TemplateValues` gives the value at an index as a
register the template supplies (`supply`), an absorbed producer's body evaluated there, else a
load (`load_element`), with linalg indexing maps read as Python index text. Used by emit/gemm.py,
emit/attention.py and emit/scan.py; see docs/ARCHITECTURE.md, "GPU kernels", Contraction kernels.
"""
from __future__ import annotations

import math
from contextlib import contextmanager

from .values import EmitError, atom, elem_of_type, expr_add, expr_mul, floordiv, is_int, is_memref, mod, no_rule
from .views import computed
from ..mlir import ir


# ---------------------------------------------------------------------- linalg ops' structure

def ints(attr) -> list[int]:
    """A DenseI64ArrayAttr (a template's marks) as ints."""
    return [int(x) for x in ir.DenseI64ArrayAttr(attr)]


def indexing_maps(op) -> list["ir.AffineMap"]:
    return [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]


def n_inputs(op) -> int:
    """How many of a linalg op's operands are ins (the rest are outs)."""
    try:
        return len(op.opview.inputs)
    except AttributeError:
        raise EmitError("the emitter cannot split the operands of this op into ins and outs", op) from None


def affine(e: "ir.AffineExpr", dims: list[str]) -> str:
    """An affine expression over loop coordinates `dims` as a Python index expression."""
    e = e.maybe_downcast() if hasattr(e, "maybe_downcast") else e
    if isinstance(e, ir.AffineDimExpr):
        return dims[e.position]
    if isinstance(e, ir.AffineConstantExpr):
        return str(e.value)
    if isinstance(e, ir.AffineAddExpr):
        return expr_add(affine(e.lhs, dims), affine(e.rhs, dims))
    if isinstance(e, ir.AffineMulExpr):
        return expr_mul(affine(e.lhs, dims), affine(e.rhs, dims))
    if isinstance(e, ir.AffineFloorDivExpr):
        return floordiv(affine(e.lhs, dims), affine(e.rhs, dims))
    if isinstance(e, ir.AffineModExpr):
        return mod(affine(e.lhs, dims), affine(e.rhs, dims))
    raise EmitError(f"the emitter has no rule for the affine expression {e}")


def dims_of(e: "ir.AffineExpr") -> set[int]:
    """The loops an affine expression reads."""
    e = e.maybe_downcast() if hasattr(e, "maybe_downcast") else e
    if isinstance(e, ir.AffineDimExpr):
        return {e.position}
    if isinstance(e, ir.AffineConstantExpr):
        return set()
    if isinstance(e, ir.AffineBinaryExpr):
        return dims_of(e.lhs) | dims_of(e.rhs)
    return set()


def dims_of_map(m: "ir.AffineMap") -> set[int]:
    """The loops any result of an affine map reads."""
    out = set()
    for e in m.results:
        out |= dims_of(e)
    return out


def pure_dim(e: "ir.AffineExpr") -> int | None:
    """The loop an affine expression is by itself, else None."""
    e = e.maybe_downcast() if hasattr(e, "maybe_downcast") else e
    return e.position if isinstance(e, ir.AffineDimExpr) else None


def is_identity(m: "ir.AffineMap") -> bool:
    return m.n_dims == len(m.results) and all(pure_dim(e) == i for i, e in enumerate(m.results))


def load_element(view, idx: list[str], flat: "FlatViews | None" = None) -> str:
    """Element `idx` of a view as a value (an f16 array's element widened to its compute type);
    through `flat`'s 1-D view of its array where that has one."""
    e = flat.at(view, idx) if flat is not None else None
    if e is None:
        e = view.at(idx)
    return computed(view.array, e)


FLAT_HELPER = [
    "if _CUDASIM:",
    "    def _flat(a, n):",
    "        return a.reshape(n)",
    "else:",
    "    from numba import types as _nbt",
    "    from numba.cuda.extending import intrinsic as _intrinsic",
    "",
    "    @_intrinsic",
    "    def _flat(typingctx, a, n):",
    '        """A C-contiguous array\'s n elements as a 1-D array (Numba\'s reshape calls a host function)."""',
    "        out = _nbt.Array(a.dtype, 1, 'C')",
    "",
    "        def codegen(context, builder, sig, args):",
    "            arr = context.make_array(sig.args[0])(context, builder, args[0])",
    "            res = context.make_array(out)(context, builder)",
    "            n = context.cast(builder, args[1], sig.args[1], _nbt.intp)",
    "            context.populate_array(res, data=arr.data, shape=[n], strides=[arr.itemsize], itemsize=arr.itemsize,",
    "                                   meminfo=arr.meminfo, parent=arr.parent)",
    "            return res._getvalue()",
    "        return out(a, n), codegen",
]


class FlatViews:
    """1-D views of whole global arrays of static shape (rank 3 or more; read as they are, or
    through an expand_shape of the whole array), for a template's loop:
    `<array>_f = _flat(<array>, n)` written once where the loop starts (line `at` of the
    writer, at `depth`), and an element read as `<array>_f[(i0 * s0 + i1 * s1 + ...) & mask]`
    with the strides s as constants (the array under 2**31 elements; the mask, all ones above
    its size, keeps the offset non-negative to LLVM, so Numba's wraparound fix-up folds away). Numba indexes a 4-D array with each index times its stride as a
    64-bit multiply (the strides are run-time values to it); with constant strides the index
    arithmetic folds and the terms fixed across the loop are hoisted out of it."""

    def __init__(self, w, names, helpers, at: int, depth: int):
        self.w, self.names, self.helpers, self.at_line, self.depth = w, names, helpers, at, depth
        self.views: dict[str, str] = {}

    def name(self, array, size: int) -> str:
        """The 1-D view of `array` (`size` elements), declared at the loop's start on first use."""
        if array.name not in self.views:
            self.helpers.use_text("_flat", FLAT_HELPER)
            n = self.views[array.name] = self.names.fresh(f"{array.name}_f")
            self.w.lines.insert(self.at_line, "    " * self.depth + f"{n} = _flat({array.name}, {size})")
            self.at_line += 1
        return self.views[array.name]

    def at(self, view, idx: list[str]) -> str | None:
        """`view[idx]` through its array's 1-D view, None where the array has none."""
        shape = view.shape if view.whole else view.base_shape     # the array's own shape
        if (view.array.space != "global" or shape is None or len(shape) < 3
                or not all(is_int(n) for n in shape)):
            return None
        shape = [int(n) for n in shape]
        if math.prod(shape) >= 1 << 31:      # offsets (and a pad's coordinates) within 32 bits
            return None
        flat, stride = "0", 1
        for i, n in reversed(list(zip(view.to_base(tuple(idx)), shape))):
            flat = expr_add(expr_mul(i, str(stride)), flat)
            stride *= n
        # masked non-negative: LLVM cannot prove such an offset non-negative (it drops the
        # pad's clamps under the read's guard), and would add a wraparound fix-up; any offset
        # inside the array (below 2**31) is left as it is, and ptxas keeps the sum in 32 bits
        return f"{self.name(view.array, stride)}[({flat}) & {(1 << max(stride - 1, 1).bit_length()) - 1}]"


def elem(v):
    """The element type of a value (a memref's elements)."""
    return elem_of_type(v.type)


# ---------------------------------------------------------------------- values inside a kernel

def body_slice(block, value) -> tuple[set[int], list]:
    """The ops of `block` (their positions) that `value` depends on, and the block arguments it
    reads (nested regions: their ops' operands count as the op's)."""
    ops = [o.operation for o in block.operations]
    where = {}
    for n, o in enumerate(ops):
        for r in o.results:
            where[r] = n
    args = list(block.arguments)
    needed, read, todo = set(), [], [value]
    while todo:
        v = todo.pop()
        if v in where:
            n = where[v]
            if n not in needed:
                needed.add(n)
                todo.extend(_operands_within(ops[n]))
        elif v in args and v not in read:
            read.append(v)
    return needed, read


def _operands_within(op) -> list:
    """Op's operands and those of the ops nested in its regions."""
    out = list(op.operands)
    for region in op.regions:
        for b in region.blocks:
            for o in b.operations:
                out += _operands_within(o.operation)
    return out


class TemplateValues:
    """The value of a buffer at an index inside one template kernel (module doc).

    `writers`: the kernel's ops (block order) whose writes are evaluated where read; `supplied`:
    those whose results the template holds in registers, readable only at the element last
    given to `supply`. Values computed as statements are reused at the same element until
    `forget` (or the end of a `guarded` region). Its errors say fusec.block_gemm whichever
    template meets them."""

    def __init__(self, body, root, writers, supplied):
        self.body, self.w, self.names, self.ctx = body, body.w, body.names, body.ctx
        block = [o.operation for o in root.block.operations]
        self.order = {op: i for i, op in enumerate(block)}
        self.writers, self.supplied = writers, tuple(supplied)
        self.memo: dict = {}            # (writer, index) -> the temporaries holding its results
        self.acc: dict = {}             # (a supplied op's buffer, index) -> the register holding it
        self.probe: list | None = None  # while probing: the (view, index) of each global read
        self.loaded: dict = {}          # (array, base index) -> the register a wide load put it in
        self.flat: FlatViews | None = None  # global arrays read through 1-D views (FlatViews)

    def supply(self, v, idx: list[str], value: str) -> None:
        """From now on buffer `v` (a supplied op's) holds `value` at `idx`, and nothing else."""
        self.acc = {(v, tuple(idx)): value}

    def forget(self) -> None:
        """Values computed so far are out of scope: compute them again where read."""
        self.memo = {}

    @contextmanager
    def guarded(self, conds: list[str]):
        """Statements under `if <conds>:` (none: unguarded); values first computed there are
        forgotten after it, those from before stay."""
        if not conds:
            yield
            return
        saved = dict(self.memo)
        self.w(f"if {' and '.join(conds)}:")
        self.w.depth += 1
        yield
        self.w.depth -= 1
        self.memo = saved

    def writer(self, v, before) -> "ir.Operation | None":
        """The last kernel op before `before` that writes the buffer `v`."""
        limit = self.order[before]
        found = None
        for op in self.writers:
            if self.order[op] >= limit:
                break
            outs = [op.operands[1]] if op.name == "memref.copy" else list(op.operands)[n_inputs(op):]
            if v in outs:
                found = op
        return found

    def written_through_another_view(self, v) -> bool:
        """Whether a kernel op writes the array under buffer `v` through another view than `v`."""
        name = self.body.view(v).array.name
        return any(v2 != v and self.body.view(v2).array.name == name
                   for op in self.writers if op.name != "memref.copy" for v2 in list(op.operands)[n_inputs(op):])

    def read(self, v, idx: list[str], before) -> str:
        """The value of buffer `v` at `idx` as the kernel's ops before `before` left it."""
        writer = self.writer(v, before)
        if writer is None:
            if self.written_through_another_view(v):
                raise EmitError("a fusec.block_gemm kernel reads a buffer through another view than the one "
                                "its op wrote", before)
            view = self.body.view(v)
            if self.probe is not None:
                self.probe.append((view, list(idx)))
            if self.loaded:
                got = self.loaded.get((view.array.name, tuple(view.to_base(tuple(idx)))))
                if got is not None:
                    return got
            return load_element(view, idx, self.flat)
        if writer.name == "linalg.fill":
            return self.body.val(writer.operands[0])
        if writer.name == "memref.copy":          # an absorbed copy between the kernel's buffers
            return self.read(writer.operands[0], idx, writer)
        if writer in self.supplied:
            key = (v, tuple(idx))
            if key not in self.acc:
                raise EmitError("a fusec.block_gemm epilogue reads the contraction's result at another "
                                "element than its own", before)
            return self.acc[key]
        if writer.name != "linalg.generic":
            raise no_rule(writer, "inside a fusec.block_gemm kernel")
        n_in = n_inputs(writer)
        k = list(writer.operands)[n_in:].index(v)
        out_map = indexing_maps(writer)[n_in + k]
        if not is_identity(out_map):
            raise EmitError("a producer inside a fusec.block_gemm kernel must write its result in loop order", writer)
        key = (id(writer), tuple(idx))
        if key not in self.memo:
            temps = []
            for e in self._inline(writer, list(idx)):
                t = self.names.fresh("t")
                self.w(f"{t} = {e}")
                temps.append(t)
            self.memo[key] = temps
        return self.memo[key][k]

    def results(self, op, dims: list[str]) -> list[str]:
        """Op's body at loop coordinates `dims`: its results (expressions), stored nowhere."""
        return self._inline(op, dims)

    def store_results(self, op, dims: list[str]) -> None:
        """Op's body at loop coordinates `dims`, each result stored into its output there."""
        maps = indexing_maps(op)
        n_in = n_inputs(op)
        outs = list(op.operands)[n_in:]
        values = self._inline(op, dims)
        for k, (v, m) in enumerate(zip(outs, maps[n_in:])):
            idx = [affine(e, dims) for e in m.results]
            self.w(self.body.view(v).store(idx, values[k]))

    def contraction_step(self, op, x: str, y: str, acc: str) -> str:
        """A contraction's body on one pair of operands and its accumulator (an expression)."""
        args = list(op.regions[0].blocks[0].arguments)
        return self._step(op, {args[0]: x, args[1]: y, args[2]: acc}, set(),
                          "a fusec.gemm_contraction body must be scalar arithmetic")

    def factor(self, op, value, dims: list[str]) -> str:
        """One value of a contraction's body (a factor of its product) at loop coordinates `dims`:
        the body's ops it depends on evaluated there, its block arguments read from op's operands
        at their maps, `linalg.index` the coordinates, `memref.load` (a gather folded into the
        body) read where it points."""
        block = op.regions[0].blocks[0]
        inner = [o.operation for o in block.operations]
        needed, args = body_slice(block, value)
        maps = indexing_maps(op)
        expr = self.ctx.expr
        n_in = n_inputs(op)
        for k, a in enumerate(block.arguments):
            if a in args:
                if k >= n_in:
                    raise EmitError("a factor of a contraction's product reads its accumulator", op)
                expr[a] = self.read(op.operands[k], [affine(e, dims) for e in maps[k].results], op)
        for n, o in enumerate(inner[:-1]):
            if n not in needed:
                continue
            if o.name == "linalg.index":
                expr[o.results[0]] = dims[ir.IntegerAttr(o.attributes["dim"]).value]
                continue
            if o.name == "arith.constant":
                self.body.op(o)
                continue
            self._bind(o, self._body_expr(o, op, "inside a contraction's factor"))
        return self.body.val(value)

    def factor_step(self, op, factors, x: str, y: str, acc: str) -> str:
        """A contraction's body on its two factors' values `x`, `y` (`factors`: the body values of
        its product's two sides, evaluated already by `factor`) and its accumulator."""
        block = op.regions[0].blocks[0]
        skip = body_slice(block, factors[0])[0] | body_slice(block, factors[1])[0]
        return self._step(op, {factors[0]: x, factors[1]: y, list(block.arguments)[n_inputs(op)]: acc}, skip,
                          "a contraction's product of two factors must be scalar arithmetic")

    def _step(self, op, env: dict, skip: set, what: str) -> str:
        """op's body evaluated from `env` (block values already bound), the ops at the indices in
        `skip` left out (computed already), as one expression of its yielded value; `what` is
        the error where the body is not scalar arithmetic."""
        ops = [o.operation for o in op.regions[0].blocks[0].operations]
        for n, o in enumerate(ops[:-1]):
            if n in skip:
                continue
            if len(o.results) != 1 or o.regions or any(v not in env and v not in self.ctx.expr for v in o.operands):
                raise EmitError(what, op)
            e = self.ctx.rules.expr(o, [env[v] if v in env else self.body.val(v) for v in o.operands])
            if e is None:
                raise no_rule(o)
            env[o.results[0]] = atom(e)
        (y_,) = ops[-1].operands
        return env[y_] if y_ in env else self.body.val(y_)

    def _range_test(self, o) -> str | None:
        """`0 <= x < n` (arith.andi of cmpi sge x, 0 and cmpi slt x, n: a pad's bounds test) as
        `(x & 0xffffffff) < n`, which LLVM compares as 32-bit numbers (the 64-bit pair it makes
        of the two tests costs a carry and a second ISETP per operation in SASS). Only where the
        loader reads through 1-D views (`flat`): there every index is an array coordinate plus
        a window offset, far inside 32 bits, where the two tests agree. None: another andi."""
        tests = {}
        for v in o.operands:
            c = v.owner.opview if hasattr(v.owner, "opview") else v.owner
            c = getattr(c, "operation", c)
            if getattr(c, "name", None) != "arith.cmpi" or len(list(v.uses)) != 1:
                return None
            pred = ir.IntegerAttr(c.attributes["predicate"]).value
            tests[pred] = (c.operands[0], self.body.val(c.operands[1]))
        low, high = tests.get(5), tests.get(2)           # sge, slt
        if low is None or high is None or low[0] != high[0] or low[1] != "0" or not high[1].isdigit():
            return None
        return f"({atom(self.body.val(low[0]))} & 0xffffffff) < {high[1]}"

    def _inline(self, op, dims: list[str]) -> list[str]:
        """Op's body at loop coordinates `dims`: its results as expressions (statements for
        values used more than once)."""
        if any("parallel" not in str(t) for t in ir.ArrayAttr(op.attributes["iterator_types"])):
            raise EmitError("a producer inside a fusec.block_gemm kernel must be elementwise", op)
        maps = indexing_maps(op)
        block = op.regions[0].blocks[0]
        args = list(block.arguments)
        expr = self.ctx.expr
        for a, v, m in zip(args, op.operands, maps):
            if not list(a.uses):
                continue
            expr[a] = self.read(v, [affine(e, dims) for e in m.results], op)
        inner = [o.operation for o in block.operations]
        for o in inner[:-1]:
            if o.name == "linalg.index":
                expr[o.results[0]] = dims[ir.IntegerAttr(o.attributes["dim"]).value]
                continue
            if o.name == "arith.constant":
                self.body.op(o)
                continue
            where = "inside a fusec.block_gemm producer"
            if o.regions or len(o.results) != 1:
                raise no_rule(o, where)
            e = None
            if o.name == "arith.andi" and self.flat is not None:
                e = self._range_test(o)
            self._bind(o, e if e is not None else self._body_expr(o, op, where))
        return [self.body.val(x) for x in inner[-1].operands]

    def _body_expr(self, o, op, where: str) -> str:
        """The expression of a body op `o` of `op` with one result and no region: a memref.load
        (a gather folded into the body) read where it points, else the scalar rules'."""
        if o.regions or len(o.results) != 1:
            raise no_rule(o, where)
        if o.name == "memref.load":
            return self.read(o.operands[0], [self.body.val(i) for i in o.operands[1:]], op)
        if any(is_memref(x) for x in o.operands):
            raise no_rule(o, where)
        e = self.ctx.rules.expr(o, [self.body.val(x) for x in o.operands])
        if e is None:
            raise no_rule(o)
        return e

    def _bind(self, o, e: str) -> None:
        """Body op `o`'s result is `e`: inlined where it is read once, else a statement."""
        r = o.results[0]
        if len(list(r.uses)) == 1:
            self.ctx.expr[r] = atom(e)
        else:
            self.body.assign(r, e)


def linear(e) -> tuple[dict[int, int], int] | None:
    """An affine expression as ({loop: coefficient}, constant), None where it is not linear."""
    e = e.maybe_downcast() if hasattr(e, "maybe_downcast") else e
    if isinstance(e, ir.AffineDimExpr):
        return {e.position: 1}, 0
    if isinstance(e, ir.AffineConstantExpr):
        return {}, e.value
    if isinstance(e, (ir.AffineAddExpr, ir.AffineMulExpr)):
        a, b = linear(e.lhs), linear(e.rhs)
        if a is None or b is None:
            return None
        if isinstance(e, ir.AffineAddExpr):
            return {l: a[0].get(l, 0) + b[0].get(l, 0) for l in a[0].keys() | b[0].keys()}, a[1] + b[1]
        if a[0] and b[0]:
            return None
        (c, x) = (a[1], b) if not a[0] else (b[1], a)
        return {l: c * k for l, k in x[0].items()}, c * x[1]
    return None
