"""The typed chain: the checker's output and every later stage's input.

A chain is a flat SSA list of Nodes in topological order. A node is a parameter, a
scalar constant (rank 0, dtype already adopted from its context) or one op-table op
with its static attributes normalised (axes non-negative and sorted, pairs as tuples).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .source import SourceFile, Span
from .types import TensorType


@dataclass(frozen=True)
class Node:
    id: int
    op: str                                # op-table name, or 'param' / 'constant'
    inputs: tuple[int, ...]
    attrs: tuple[tuple[str, Any], ...]
    type: TensorType
    span: Span | None = None
    name: str | None = None                # the user's name, when bound to one

    def attr(self, key: str, default: Any = None) -> Any:
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    @property
    def ref(self) -> str:
        return f"%{self.name}" if self.name else f"%{self.id}"


@dataclass(frozen=True)
class TypedChain:
    name: str
    nodes: tuple[Node, ...]
    params: tuple[int, ...]                # node ids of the parameters, in declaration order
    outputs: tuple[int, ...]               # node ids returned, in order
    symbols: tuple[str, ...]               # symbols of the chain, in order of first appearance
    span: Span | None = None

    def node(self, i: int) -> Node:
        return self.nodes[i]

    @property
    def param_nodes(self) -> tuple[Node, ...]:
        return tuple(self.nodes[i] for i in self.params)

    @property
    def output_types(self) -> tuple[TensorType, ...]:
        return tuple(self.nodes[i].type for i in self.outputs)

    def users(self) -> dict[int, list[int]]:
        """For every node id, the ids of the nodes that read it."""
        out: dict[int, list[int]] = {n.id: [] for n in self.nodes}
        for n in self.nodes:
            for i in n.inputs:
                out[i].append(n.id)
        return out

    def format(self) -> str:
        params = ", ".join(f"{n.name}: {n.type}" for n in self.param_nodes)
        rets = ", ".join(str(t) for t in self.output_types)
        rets = f"({rets})" if len(self.outputs) != 1 else rets
        lines = [f"chain {self.name}({params}) -> {rets} {{"]
        for n in self.nodes:
            if n.op == "param":
                continue
            loc = f"  # {n.span.line}:{n.span.col}" if n.span else ""
            args = ", ".join(self.nodes[i].ref for i in n.inputs)
            attrs = ", ".join(f"{k}={_fmt_attr(v)}" for k, v in n.attrs)
            body = " ".join(p for p in (n.op, args, f"{{{attrs}}}" if attrs else "") if p)
            lines.append(f"  {n.ref} = {body} : {n.type}{loc}")
        lines.append(f"  return {', '.join(self.nodes[i].ref for i in self.outputs)}")
        lines.append("}")
        return "\n".join(lines)


def _fmt_attr(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, tuple):
        return "[" + ", ".join(_fmt_attr(x) for x in v) + "]"
    if isinstance(v, str):
        return f'"{v}"'
    return repr(v)


@dataclass(frozen=True)
class TypedModule:
    file: SourceFile
    chains: tuple[TypedChain, ...]

    def chain(self, name: str) -> TypedChain:
        for c in self.chains:
            if c.name == name:
                return c
        raise KeyError(name)

    def format(self) -> str:
        return "\n\n".join(c.format() for c in self.chains) + "\n"
