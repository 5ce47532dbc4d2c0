"""The values of an ONNX graph being imported, and the arithmetic on them that needs no chain.

- `T`, a value of the chain (a parameter or a `name = expr` statement), with its dtype and its
  shape (ints and symbols: a `dim_param` is a symbol);
- `C`, a constant known now (an initializer, a Constant, anything computed from constants);
- `S`, a shape value: a 0-d or 1-d integer tensor whose entries are ints, symbols or `Opaque`
  (a size FDSL cannot name, such as S * 4), on which shape arithmetic is folded (`SYM_OPS`).
`fold_size` bounds a constant fold before onnx's reference evaluator allocates it.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

import numpy as np

from fusec.dsl.parser import KEYWORDS

from .onnx_file import ONNX_DTYPES

FLOAT = ("f16", "bf16", "f32", "f64")
NUMERIC = FLOAT + ("i32", "i64")
NP_TO_FDSL = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64", "int32": "i32",
              "int64": "i64", "bool": "bool"}
FDSL_TO_NP = {v: k for k, v in NP_TO_FDSL.items()}
ELEM_TO_FDSL = {k: v[0] for k, v in ONNX_DTYPES.items()}
FOLD_LIMIT = 1 << 24            # elements: constants folded now up to this size


class Opaque:
    """A size FDSL cannot name (a product or sum of symbols, a comparison of one)."""

    def __init__(self, what: str):
        self.what = what

    def __repr__(self):
        return self.what


@dataclass
class T:
    name: str
    dtype: str
    shape: tuple


@dataclass
class C:
    value: np.ndarray
    param: T | None = None          # the chain parameter it became, once it did
    origin: str | None = None       # the ONNX tensor it is (an initializer, a Constant's output)


@dataclass
class S:
    items: tuple                    # int | str (a symbol) | Opaque
    scalar: bool = False


@dataclass
class Imported:
    """The FDSL of one ONNX graph: its text, its chain's name, the weights (parameter name ->
    array), the model's inputs (parameter names, in the graph's order) and outputs."""
    text: str
    chain: str
    weights: dict
    inputs: list               # [(onnx name, parameter name)]
    outputs: list              # onnx output names, in order
    nodes: int = 0
    statements: int = 0


class NodeError(Exception):
    """A problem with the node being converted (the converter adds the node's label)."""


def sanitize(name: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_]", "_", name)
    if not s or s[0].isdigit():
        s = "t_" + s
    if s in KEYWORDS:
        s = s + "_"
    return s


def _prod(items):
    """(coefficient, Counter of symbols) of a product of dims, or None when one is Opaque."""
    coef, syms = 1, Counter()
    for d in items:
        if isinstance(d, Opaque):
            return None
        if isinstance(d, str):
            syms[d] += 1
        else:
            coef *= int(d)
    return coef, syms


def _as_dim(coef: int, syms: Counter):
    """A product as one dim (an int or a single symbol), or an Opaque."""
    syms = +syms
    if not syms:
        return coef
    if coef == 1 and sum(syms.values()) == 1:
        return next(iter(syms))
    text = " * ".join(([str(coef)] if coef != 1 else []) + [s for s, n in syms.items() for _ in range(n)])
    return Opaque(text)



# ops whose result holds no more elements than their inputs together (folded on constants)
NOT_GROWING = {"Identity", "Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Tanh", "Sigmoid", "Relu", "Erf", "Sin",
               "Cos", "Floor", "Ceil", "Cast", "CastLike", "IsNaN", "IsInf", "Not", "Sign", "Round", "Mod", "Softmax",
               "LogSoftmax", "Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Concat", "Split", "Slice",
               "Trilu", "NonZero", "CumSum", "ArgMax", "ArgMin", "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
               "ReduceProd", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum", "Gelu", "HardSigmoid",
               "HardSwish", "LeakyRelu", "Elu", "Softplus", "Softsign", "Clip", "LayerNormalization",
               "BatchNormalization", "Dropout", "GlobalAveragePool", "GlobalMaxPool", "ScatterND",
               "ScatterElements", "GatherElements"}
BROADCASTING = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Where", "Equal", "Less",
                "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor", "PRelu", "BitShift"}


def fold_size(op: str, arrays: list, attrs: dict) -> int | None:
    """How many elements folding `op` on these constant inputs makes (bounded before onnx's
    reference evaluator allocates them), or None when fusec does not fold this op."""
    given = [a for a in arrays if a is not None]
    total = sum(int(a.size) for a in given)

    def count(shape) -> int:
        n = 1
        for d in shape:
            n *= max(int(d), 0)
        return n
    if op in NOT_GROWING:
        return total
    if op in BROADCASTING:
        return count(np.broadcast_shapes(*(a.shape for a in given)))
    if op in ("MatMul", "Gemm"):
        a, b = given[0], given[1]
        return total + count(a.shape[:-1]) * int(b.shape[-1] if b.ndim else 1) * max(
            1, count(np.broadcast_shapes(a.shape[:-2], b.shape[:-2])))
    if op == "Gather":
        data, idx = arrays[0], arrays[1]
        return count(data.shape) // max(1, int(data.shape[int(attrs.get("axis", 0))]) if data.ndim else 1) * \
            int(idx.size) + total
    if op == "ConstantOfShape":
        return count(arrays[0].reshape(-1))
    if op == "Expand":
        return count(np.broadcast_shapes(arrays[0].shape, tuple(int(d) for d in arrays[1].reshape(-1))))
    if op == "Tile":
        return count(arrays[0].shape) * count(arrays[1].reshape(-1))
    if op == "Range":
        start, limit, delta = (float(np.asarray(a).reshape(-1)[0]) for a in arrays[:3])
        if delta == 0 or not all(math.isfinite(v) for v in (start, limit, delta)):
            return None
        return max(int(math.ceil((limit - start) / delta)), 0)
    return None


def _f(v: float) -> str:
    text = repr(float(v))
    return f"({text})" if text.startswith("-") else text


def _clamp(b: int, e: int, st: int, d: int) -> tuple[int, int, int]:
    """ONNX Slice's clamping of one axis of extent d: (start, stop, step), stop -1 meaning
    'before index 0' for a negative step."""
    if st == 0:
        raise NodeError("a step of 0")
    b = b + d if b < 0 else b
    e = e + d if e < 0 else e
    if st > 0:
        b, e = min(max(b, 0), d), min(max(e, 0), d)
    else:
        b, e = min(max(b, 0), d - 1), min(max(e, -1), d - 1)
    return b, e, st


def _sym_add(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    if b == 0:
        return a
    if a == 0:
        return b
    return Opaque(f"{a} + {b}")


def _sym_sub(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a - b
    if b == 0:
        return a
    return Opaque(f"{a} - {b}")


def _sym_mul(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    p = _prod([a, b])
    return _as_dim(*p) if p is not None else Opaque(f"{a} * {b}")


def _sym_div(a, b):
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise NodeError("a division by zero in shape arithmetic")
        return int(a / b) if (a < 0) != (b < 0) else a // b
    if b == 1:
        return a
    return Opaque(f"{a} / {b}")


def _sym_max(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b)
    if isinstance(b, int) and b <= 1:
        return a
    if isinstance(a, int) and a <= 1:
        return b
    return a if a == b else Opaque(f"max({a}, {b})")


def _sym_min(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    return a if a == b else Opaque(f"min({a}, {b})")


def _sym_eq(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if a is b or (isinstance(a, str) and a == b):
        return True
    if (isinstance(a, int) and a < 1) or (isinstance(b, int) and b < 1):
        return False            # a symbol is a positive size
    return Opaque(f"{a} == {b}")


def _sym_where(c, a, b):
    if isinstance(c, Opaque):
        raise NodeError(f"a condition on sizes FDSL cannot decide ({c})")
    return a if bool(c) else b


SYM_OPS = {"Add": _sym_add, "Sub": _sym_sub, "Mul": _sym_mul, "Div": _sym_div, "Max": _sym_max, "Min": _sym_min,
           "Equal": _sym_eq, "Where": _sym_where}

# ops that are not folded on constant inputs (handled by their own method even then)
