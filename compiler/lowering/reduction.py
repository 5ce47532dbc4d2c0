"""Reductions sum/mean/max/min/prod, and any/all on bools, over any axis list; argmax/argmin; the
scans cumsum/cumprod.

One reduction linalg.generic writes the kept dims only, accumulating in the compute type (f32 for
16-bit floats); an elementwise generic follows when something is left to do (mean's division by
the count, rounding a 16-bit result); keepdims re-inserts the unit dims with tensor.expand_shape
(output indexing maps stay projected permutations, which tiling and fusion want).
"""
from __future__ import annotations

from fusec.dsl.typed import Node

from ..mlir import arith, ir, linalg
from . import scalar as S
from .builder import (compute_type, count, count_value, dims_map, expand, fill, generic, identity_map, is_float, kept_map, narrow,
                      parallel, reassociation, reduction, shape_of, widen)
from .registry import LoweringContext, rule
from ..marks import SCAN, SCAN_AXIS
from .. import combiners


@rule("sum", "mean", "max", "min", "prod")
def lower_reduction(ctx: LoweringContext, node: Node):
    x = ctx.tensor(node.inputs[0])
    space = shape_of(x)
    axes = tuple(node.attr("axis"))
    elem = ctx.elem(node)
    acc = compute_type(elem)
    c = combiners.of_reduction(node.op, "linalg")
    out = reduction([(x, identity_map(len(space)))], space, axes, c.init(acc), acc,
                    lambda xs, a: c.combine(widen(xs[0]), a))
    if node.op == "mean":
        n = count(space, axes)
        out = parallel([out], shape_of(out), elem, lambda xs: narrow(S.div(xs[0], count_value(n, xs[0])), elem))
    elif acc != elem:
        out = parallel([out], shape_of(out), elem, lambda xs: narrow(xs[0], elem))
    return keepdims(out, ctx.shape(node))


@rule("any", "all")
def lower_bool_reduction(ctx: LoweringContext, node: Node):
    """any / all: the max / min (compiler/combiners.py) of the bools read as i32 0 / 1, then
    `!= 0`. An i1 is signed in arith (true is -1), so its own maxsi would be `and`; the i32
    reduction is the integer max and min every stage already knows, and the compare after it
    is an elementwise epilogue the reduction's kernel holds."""
    x = ctx.tensor(node.inputs[0])
    space = shape_of(x)
    axes = tuple(node.attr("axis"))
    i32 = ir.IntegerType.get_signless(32)
    c = combiners.of_reduction(node.op, "linalg")
    out = reduction([(x, identity_map(len(space)))], space, axes, c.init(i32), i32,
                    lambda xs, a: c.combine(arith.extui(i32, xs[0]), a))
    # the compare after keepdims: its output is then a fresh tensor of the result's shape, which
    # a run-time extent (--dynamic) gives the same ops as a static one
    out = keepdims(out, ctx.shape(node))
    return parallel([out], ctx.shape(node), ctx.elem(node), lambda xs: S.cmp("ne", xs[0], S.c(0, xs[0])))


def keepdims(value: ir.Value, shape: tuple[int, ...]) -> ir.Value:
    """Re-insert reduced unit dims (a no-op without keepdims)."""
    have = shape_of(value)
    if have == tuple(shape):
        return value
    return expand(value, tuple(shape), reassociation(tuple(shape), have))


@rule("argmax", "argmin")
def lower_arg_reduction(ctx: LoweringContext, node: Node):
    """The first position of the extreme along the axis, as two reductions a row kernel can hold:
    m = max (min) of x, then the smallest index j where x[j] equals m, or is NaN when m is (the
    IEEE maximum and minimum are NaN exactly when the slice holds one). -0 and +0 are equal, so
    the first zero of either sign is found, as NumPy does."""
    x = ctx.tensor(node.inputs[0])
    space = shape_of(x)
    rank, axis = len(space), node.attr("axis")
    elem = ir.RankedTensorType(x.type).element_type
    work = compute_type(elem)
    c = combiners.of_reduction(node.op, "linalg")
    m = reduction([(x, identity_map(rank))], space, (axis,), c.init(work), work,
                  lambda xs, a: c.combine(widen(xs[0]), a))
    i64 = ir.IntegerType.get_signless(64)
    n = space[axis]

    def first(xs, acc):
        v, top = widen(xs[0]), xs[1]
        if is_float(work):
            hit = arith.ori(arith.cmpf(arith.CmpFPredicate.OEQ, v, top),
                            arith.andi(arith.cmpf(arith.CmpFPredicate.UNO, top, top),
                                       arith.cmpf(arith.CmpFPredicate.UNO, v, v)))
        else:
            hit = arith.cmpi(arith.CmpIPredicate.eq, v, top)
        j = arith.index_cast(i64, linalg.IndexOp(axis).result)
        return combiners.MIN.combine(acc, arith.select(hit, j, S.c(n, acc)))
    out = reduction([(x, identity_map(rank)), (m, kept_map(rank, (axis,)))], space, (axis,), n, i64, first)
    return keepdims(out, ctx.shape(node))




@rule("cumsum", "cumprod")
def lower_scan(ctx: LoweringContext, node: Node):
    """out[.., i, ..] = combine over j <= i of x[.., j, ..]: a generic over the output's loops and
    one more, j, reduced, whose body takes x[j] where j <= i and the neutral element elsewhere.
    That is what it means, for every consumer of the IR (MLIR's own JIT runs it as written, in
    N^2 steps); the op is marked `fusec.scan` (kept through fusion by
    compiler/transforms/mark_scans.py) and compiled as a scan, one pass along the axis
    (compiler/emit/scan.py)."""
    x = ctx.tensor(node.inputs[0])
    space = shape_of(x)
    rank, axis = len(space), node.attr("axis")
    elem = ir.RankedTensorType(x.type).element_type
    work = compute_type(elem)
    # the neutral, -0 for a float sum: a row that starts with -0 keeps it (np.cumsum([-0.0]) is -0)
    c = combiners.of_scan(node.op, "linalg")
    neutral = c.neutral(work)
    read = [ir.AffineDimExpr.get(rank if d == axis else d) for d in range(rank)]

    def body(xs, accs):
        i, j = linalg.IndexOp(axis).result, linalg.IndexOp(rank).result
        inside = arith.cmpi(arith.CmpIPredicate.ule, j, i)
        v = widen(xs[0])
        return [c.combine(accs[0], arith.select(inside, v, S.c(neutral, v)))]
    acc = fill(neutral, space, work)
    (out,) = generic([(x, ir.AffineMap.get(rank + 1, 0, read))], [(acc, dims_map(rank + 1, range(rank)))],
                     ["parallel"] * rank + ["reduction"], body)
    out.owner.attributes[SCAN] = ir.StringAttr.get(node.op)
    out.owner.attributes[SCAN_AXIS] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), axis)
    if work != elem:
        out = parallel([out], space, elem, lambda xs: narrow(xs[0], elem))
    return out
