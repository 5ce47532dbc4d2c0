"""Elementwise ops: one all-parallel linalg.generic each, broadcasting through indexing maps.

The body computes in the op's compute type (f16/bf16 widen to f32) and rounds once at the end,
so a composite body such as gelu rounds like the reference's single op.
"""
from __future__ import annotations

from fusec.dsl.typed import Node

from .builder import compute_type, narrow, parallel, widen
from .registry import LoweringContext, rule
from .scalar import EMITTERS, convert


def _lower_elementwise(ctx: LoweringContext, node: Node):
    out_elem = ctx.elem(node)
    operands = [ctx.operand(i) for i in node.inputs]
    if node.op == "cast":
        if ctx.input_node(node, 0).type.dtype == node.type.dtype:
            return operands[0]
        return parallel(operands, ctx.shape(node), out_elem, lambda xs: convert(xs[0], out_elem))
    emit, work = EMITTERS[node.op], compute_type(out_elem)
    return parallel(operands, ctx.shape(node), out_elem,
                    lambda xs: narrow(emit([widen(x) for x in xs], work, node), out_elem))


rule(*EMITTERS, "cast")(_lower_elementwise)
