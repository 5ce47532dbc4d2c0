"""Creation ops, folded into their consumers: `full` and `full_like` are a ScalarConst with the
result's shape (an elementwise consumer holds the value as an arith.constant in its body; a rule
that needs a tensor gets a generic with no input that writes it, LoweringContext.tensor), and
`arange` a generic with no input whose body is its loop index (linalg.index) times the step plus
the start, which fuses into its consumers as any elementwise producer does, so no kernel reads a
buffer of either."""
from __future__ import annotations

from fusec.dsl.typed import Node

from ..mlir import arith, ir, linalg
from .builder import ScalarConst, parallel, scalar
from .registry import LoweringContext, rule
from .scalar import add, convert, mul


@rule("full", "full_like")
def lower_full(ctx: LoweringContext, node: Node):
    return ScalarConst(node.attr("value"), node.type.dtype, tuple(ctx.shape(node)))


@rule("arange")
def lower_arange(ctx: LoweringContext, node: Node):
    i64 = ir.IntegerType.get_signless(64)
    begin, step = node.attr("begin"), node.attr("step")

    def body(_):
        v = arith.index_cast(i64, linalg.IndexOp(0).result)
        if step != 1:
            v = mul(v, scalar(step, i64))
        if begin != 0:
            v = add(v, scalar(begin, i64))
        return convert(v, ctx.elem(node))
    return parallel([], ctx.shape(node), ctx.elem(node), body)
