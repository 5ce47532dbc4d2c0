"""Shape ops: transpose/permute as linalg.transpose, reshape as tensor.collapse_shape/expand_shape,
broadcast_to as a generic whose input map broadcasts."""
from __future__ import annotations

from fusec.dsl.typed import Node

from ..mlir import ir, linalg
from .builder import ScalarConst, empty, is_dynamic, parallel, reshape, shape_of
from .registry import LoweringContext, rule


def _permute(ctx: LoweringContext, node: Node, perm: tuple[int, ...]):
    x = ctx.tensor(node.inputs[0])
    if tuple(perm) == tuple(range(len(perm))):
        return x
    return linalg.transpose(x, outs=[empty(ctx.shape(node), ctx.elem(node))], permutation=list(perm)).results[0]


@rule("transpose")
def lower_transpose(ctx: LoweringContext, node: Node):
    rank = node.type.rank
    perm = list(range(rank))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return _permute(ctx, node, tuple(perm))


@rule("permute")
def lower_permute(ctx: LoweringContext, node: Node):
    return _permute(ctx, node, tuple(node.attr("perm")))


@rule("reshape")
def lower_reshape(ctx: LoweringContext, node: Node):
    heads = _repeated_heads(ctx, node)
    if heads is not None:
        return heads
    return reshape(ctx.tensor(node.inputs[0]), ctx.shape(node))


def _repeated_heads(ctx: LoweringContext, node: Node):
    """reshape(broadcast_to(y, [.., n, G, ..]), [.., n G, ..]) where y is 1 at G's place: each of
    y's n entries repeated G times along one dim (grouped-query attention's K and V heads, as
    the torch frontend writes `repeat_kv`), as one generic reading y at h floordiv G. So no
    reshape of a broadcast stands between K or V and the attention's contractions: elementwise
    fusion would move it through them (the scores as a 5-D contraction, a reshape before the
    score function), and the attention kernel reads K and V at the K/V head h // G. None: not
    that form."""
    b = ctx.chain.node(node.inputs[0])
    if b.op != "broadcast_to":
        return None
    y = ctx.operand(b.inputs[0])
    if isinstance(y, ScalarConst):
        return None
    src, wide, out = shape_of(y), ctx.shape(b), ctx.shape(node)
    if len(src) != len(wide) or len(out) != len(wide) - 1:
        return None
    for p in range(len(out)):
        g = wide[p + 1] if p + 1 < len(wide) else None
        if (isinstance(g, int) and not is_dynamic(g) and g > 1 and src[p + 1] == 1
                and isinstance(wide[p], int) and not is_dynamic(wide[p]) and out[p] == wide[p] * g
                and tuple(src[:p + 1]) == tuple(wide[:p + 1]) and tuple(src[p + 2:]) == tuple(wide[p + 2:])
                and tuple(out[:p]) == tuple(wide[:p]) and tuple(out[p + 1:]) == tuple(wide[p + 2:])):
            break
    else:
        return None
    n = len(out)
    d = [ir.AffineDimExpr.get(i) for i in range(n)]
    exprs = d[:p] + [ir.AffineFloorDivExpr.get(d[p], ir.AffineConstantExpr.get(g)),
                     ir.AffineConstantExpr.get(0)] + d[p + 1:]
    m = ir.AffineMap.get(n, 0, exprs)
    return parallel([(y, m)], out, ctx.elem(node), lambda xs: xs[0])


@rule("broadcast_to")
def lower_broadcast_to(ctx: LoweringContext, node: Node):
    x = ctx.operand(node.inputs[0])
    out = ctx.shape(node)
    if not isinstance(x, ScalarConst) and shape_of(x) == out:
        return x
    return parallel([x], out, ctx.elem(node), lambda xs: xs[0])
