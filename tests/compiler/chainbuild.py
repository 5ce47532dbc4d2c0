"""Typed chains built by hand for compiler tests, typed by the op table's own shape rules
(OPS[op].infer, defaults filled from the op's signature), so compiler tests do not depend on
the parser or the checker; plus FileCheck and input helpers shared by the tests."""
from __future__ import annotations

from typing import Any


from fusec.dsl.ops import OPS, REQUIRED
from fusec.dsl.shapes import Symbols
from fusec.dsl.source import SourceFile, Span
from fusec.dsl.typed import Node, TypedChain, TypedModule
from fusec.dsl.types import DTYPES, TensorType


class ChainBuilder:
    """b = ChainBuilder("f"); x = b.param("x", "f32", [2, 3]); y = b.op("exp", x); b.build(y)"""

    def __init__(self, name: str = "chain", path: str = "test.fdsl"):
        self.name = name
        self.file = SourceFile(path, "")
        self.nodes: list[Node] = []
        self.params: list[int] = []
        self.symbols: list[str] = []
        self.syms = Symbols()

    def _span(self) -> Span:
        line = len(self.nodes) + 2
        return Span(self.file, line, 5, line, 9)

    def _add(self, op: str, inputs, attrs: dict, type_: TensorType, name: str | None = None) -> int:
        node = Node(len(self.nodes), op, tuple(inputs), tuple(attrs.items()), type_, self._span(), name)
        self.nodes.append(node)
        return node.id

    def param(self, name: str, dtype: str, shape=()) -> int:
        for d in shape:
            if isinstance(d, str) and d not in self.symbols:
                self.symbols.append(d)
                self.syms.declare(d)
        nid = self._add("param", (), {}, TensorType(DTYPES[dtype], tuple(shape)), name)
        self.params.append(nid)
        return nid

    def const(self, value, dtype: str) -> int:
        return self._add("constant", (), {"value": value}, TensorType(DTYPES[dtype], ()))

    def op(self, name: str, *inputs: int | None, **attrs: Any) -> int:
        opdef = OPS[name]
        tensor_args = opdef.tensor_args
        ins = list(inputs) + [None] * (len(tensor_args) - len(inputs))
        types = [None if i is None else self.nodes[i].type for i in ins]
        full = {}
        for a in opdef.args:
            if a.is_tensor:
                continue
            v = attrs.get(a.name, a.default)
            assert v is not REQUIRED, f"{name}: missing {a.name}"
            if a.kind == "pair" and isinstance(v, int):
                v = (v, v)
            if a.kind in ("pair", "perm", "dims") and isinstance(v, list):
                v = tuple(v)
            full[a.name] = v
        type_, norm = opdef.infer(self.syms, types, full)
        norm = dict(norm)
        if name == "conv2d":
            norm["has_bias"] = ins[2] is not None
        return self._add(name, [i for i in ins if i is not None], norm, type_)

    def build(self, *outputs: int) -> TypedChain:
        def resolve(t: TensorType) -> TensorType:
            return t.with_shape(self.syms.resolve(t.shape))
        nodes = tuple(Node(n.id, n.op, n.inputs, n.attrs, resolve(n.type), n.span, n.name) for n in self.nodes)
        return TypedChain(self.name, nodes, tuple(self.params), tuple(outputs), tuple(self.symbols),
                          Span(self.file, 1, 1, 1, 6))

    def module(self, *outputs: int) -> TypedModule:
        return TypedModule(self.file, (self.build(*outputs),))


def filecheck(text: str, checks: str) -> None:
    """Run the `filecheck` package (LLVM FileCheck semantics) on `text` against `checks`."""
    import subprocess
    import sys
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".check", delete=False) as f:
        f.write(checks)
        path = f.name
    r = subprocess.run([sys.executable, "-m", "filecheck", path], input=text, capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"FileCheck failed:\n{r.stdout}\n{r.stderr}\n--- input ---\n{text}")


def random_input(rng, dtype: str, shape, positive: bool = False, discrete: bool = False):
    """Floats ~N(0,1) (|x|+0.5 when positive; multiples of 0.5 when discrete, so comparisons
    meet equal values), small integers, random bools."""
    import numpy as np

    dt = DTYPES[dtype]
    if dt.is_bool:
        return np.asarray(rng.random(shape) < 0.5)
    if dt.is_int:
        return rng.integers(1 if positive else -4, 5, size=shape).astype(dt.np)
    if discrete:
        x = rng.integers(-3, 4, size=shape) / 2
    else:
        x = rng.standard_normal(shape)
        x = np.abs(x) + 0.5 if positive else x
    return np.asarray(x).astype(dt.np)
