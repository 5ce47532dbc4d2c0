"""Shape ops: transpose/permute as linalg.transpose, reshape as tensor.collapse_shape/expand_shape,
broadcast_to as a generic whose input map broadcasts."""
from __future__ import annotations

from fusec.dsl.typed import Node

from ..mlir import linalg
from .builder import ScalarConst, empty, parallel, reshape, shape_of
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
    return reshape(ctx.tensor(node.inputs[0]), ctx.shape(node))


@rule("broadcast_to")
def lower_broadcast_to(ctx: LoweringContext, node: Node):
    x = ctx.operand(node.inputs[0])
    out = ctx.shape(node)
    if not isinstance(x, ScalarConst) and shape_of(x) == out:
        return x
    return parallel([x], out, ctx.elem(node), lambda xs: xs[0])
