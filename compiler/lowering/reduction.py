"""Reductions sum/mean/max/min/prod over any axis list.

One reduction linalg.generic writes the kept dims only, accumulating in the compute type (f32 for
16-bit floats); an elementwise generic follows when something is left to do (mean's division by
the count, rounding a 16-bit result); keepdims re-inserts the unit dims with tensor.expand_shape
(output indexing maps stay projected permutations, which tiling and fusion want).
"""
from __future__ import annotations

from fusec.dsl.typed import Node

from ..mlir import ir
from . import scalar as S
from .builder import (compute_type, expand, identity_map, is_float, narrow, parallel, reassociation,
                      reduction, shape_of, widen)
from .registry import LoweringContext, rule


def extreme(elem: ir.Type, lowest: bool) -> float | int:
    """The identity of max (lowest=True) or min: -inf/+inf, or the integer type's bounds."""
    if is_float(elem):
        return float("-inf") if lowest else float("inf")
    width = ir.IntegerType(elem).width
    return -(1 << (width - 1)) if lowest else (1 << (width - 1)) - 1


_COMBINE = {"sum": S.add, "mean": S.add, "prod": S.mul, "max": S.maximum, "min": S.minimum}


def _init(op: str, elem: ir.Type) -> float | int:
    if op in ("max", "min"):
        return extreme(elem, lowest=op == "max")
    return 1 if op == "prod" else 0


@rule("sum", "mean", "max", "min", "prod")
def lower_reduction(ctx: LoweringContext, node: Node):
    x = ctx.tensor(node.inputs[0])
    space = shape_of(x)
    axes = tuple(node.attr("axis"))
    elem = ctx.elem(node)
    acc = compute_type(elem)
    combine = _COMBINE[node.op]
    out = reduction([(x, identity_map(len(space)))], space, axes, _init(node.op, acc), acc,
                    lambda xs, a: combine(widen(xs[0]), a))
    if node.op == "mean":
        count = 1
        for a in axes:
            count *= space[a]
        out = parallel([out], shape_of(out), elem, lambda xs: narrow(S.div(xs[0], S.c(count, xs[0])), elem))
    elif acc != elem:
        out = parallel([out], shape_of(out), elem, lambda xs: narrow(xs[0], elem))
    return keepdims(out, ctx.shape(node))


def keepdims(value: ir.Value, shape: tuple[int, ...]) -> ir.Value:
    """Re-insert reduced unit dims (a no-op without keepdims)."""
    have = shape_of(value)
    if have == tuple(shape):
        return value
    return expand(value, tuple(shape), reassociation(tuple(shape), have))
