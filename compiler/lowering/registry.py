"""The lowering-rule registry and the per-chain lowering context the rules read.

A rule is `rule(ctx, node) -> ir.Value | ScalarConst`, registered under the op-table name it
lowers. It runs with the insertion point inside the chain's function and the node's location
already set, so it only builds the ops of its own op.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from fusec.dsl.typed import Node, TypedChain

from ..mlir import ir
from .builder import Dyn, ScalarConst, Shape, element_type, parallel, rank0_tensor

Rule = Callable[["LoweringContext", Node], "ir.Value | ScalarConst"]
RULES: dict[str, Rule] = {}


def rule(*names: str) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        for n in names:
            RULES[n] = fn
        return fn
    return register


@dataclass
class LoweringContext:
    chain: TypedChain
    binding: dict[str, int]
    values: dict[int, "ir.Value | ScalarConst"] = field(default_factory=dict)
    dynamic: frozenset[str] = frozenset()        # symbols whose extent is taken at run time
    # a 16-bit conv whose channels make 16-byte runs: "channels-last" or "nchw" (contraction.py)
    conv_layout: str = "channels-last"

    def shape(self, node: Node) -> Shape:
        """The node's shape under the binding; a dynamic symbol's extent as its Dyn."""
        return tuple(Dyn(d) if isinstance(d, str) and d in self.dynamic else self.binding[d] if isinstance(d, str)
                     else d for d in node.type.shape)

    def elem(self, node: Node) -> ir.Type:
        return element_type(node.type.dtype)

    def operand(self, node_id: int) -> "ir.Value | ScalarConst":
        """The lowered value of a node: a tensor, or a ScalarConst for a compile-time scalar."""
        return self.values[node_id]

    def tensor(self, node_id: int) -> ir.Value:
        """The lowered value of a node as a tensor (a ScalarConst becomes a rank-0 constant, a
        `full` a generic that writes its value, with no input)."""
        v = self.values[node_id]
        if isinstance(v, ScalarConst) and v.shape:
            v = parallel([ScalarConst(v.value, v.dtype)], v.shape, element_type(v.dtype), lambda xs: xs[0])
        elif isinstance(v, ScalarConst):
            v = rank0_tensor(v)
            self.values[node_id] = v
        return v

    def input_node(self, node: Node, i: int) -> Node:
        return self.chain.node(node.inputs[i])
