"""Elementwise ops: unary math, gelu, the binary arithmetic and comparison operators, where,
clamp, cast and the logical ops on bools; each broadcasts its tensors as NumPy does.

The NumPy semantics are those of the compiled targets (compiler/lowering/scalar.py follows them
term by term): IEEE maximum and minimum, C's pow, a sigmoid that never overflows.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ..shapes import OpError, broadcast_shapes
from ..types import BOOL, DTYPES, DType, TensorType
from .registry import Arg, OpDef, register_op, require_float, require_numeric


def const_like(x: np.ndarray, v: float) -> np.ndarray:
    """A scalar constant in x's dtype (keeps f32 arithmetic in f32)."""
    return np.asarray(v, dtype=x.dtype)


def _sigmoid(x):
    """1/(1+exp(-x)) in the form that never overflows: e = exp(-|x|), then 1/(1+e) for x >= 0 and
    e/(1+e) below (the same value; NaN stays NaN). An `exp(-abs(x))` of the chain is then shared."""
    e = np.exp(-np.abs(x))
    return np.where(x >= const_like(x, 0), const_like(x, 1), e) / (const_like(x, 1) + e)


def _gelu(x, approximate):
    if approximate == "tanh":
        inner = const_like(x, math.sqrt(2 / math.pi)) * (x + const_like(x, 0.044715) * x * x * x)
        return const_like(x, 0.5) * x * (const_like(x, 1) + np.tanh(inner))
    return const_like(x, 0.5) * x * (const_like(x, 1) + _erf(x / const_like(x, math.sqrt(2))))


def _scalar_math(fn):
    """A Python `math` function over an array, elementwise (NumPy has no erf/erfc)."""
    ufunc = np.frompyfunc(fn, 1, 1)
    return lambda x: np.asarray(ufunc(x), dtype=object).astype(x.dtype)


_erf = _scalar_math(math.erf)


# IEEE 754-2019 maximum and minimum, as MLIR's arith.maximumf / minimumf compute them on every
# target: NaN if either operand is NaN, and -0 below +0. np.maximum and np.minimum propagate NaN
# but return one of two equal operands (maximum(0, -0) is -0, maximum(-0, 0) is 0), so the sign
# of a zero result is set here; integers are exact as they are.
def _maximum(a, b):
    r = np.maximum(a, b)
    if r.dtype.kind != "f":
        return r
    neg = np.signbit(a) & np.signbit(b)          # max of two zeros is -0 only if both are
    return np.where((a == 0) & (b == 0), np.where(neg, r.dtype.type(-0.0), r.dtype.type(0.0)), r)


def _minimum(a, b):
    r = np.minimum(a, b)
    if r.dtype.kind != "f":
        return r
    neg = np.signbit(a) | np.signbit(b)          # min of two zeros is -0 if either is
    return np.where((a == 0) & (b == 0), np.where(neg, r.dtype.type(-0.0), r.dtype.type(0.0)), r)


def _relu6(x):
    return _minimum(_maximum(x, const_like(x, 0)), const_like(x, 6))


def _power(a, b):
    """np.power on materialised operands: with a broadcast (stride 0) or 0-d exponent of 0.5,
    NumPy takes a square root, so pow(-inf, 0.5) would be NaN and pow(-0, 0.5) -0 where C's pow
    (every compiled target, and NumPy itself on whole arrays) gives +inf and +0. Integers to a
    negative power (which NumPy refuses) are what the compiled targets' math.ipowi gives: 1 and
    -1 keep their power (-1 to an odd one is -1), every other base gives 0."""
    shape = np.broadcast_shapes(np.shape(a), np.shape(b))
    a, b = (np.array(np.broadcast_to(v, shape), ndmin=1) for v in (a, b))
    if a.dtype.kind in "iu" and b.dtype.kind in "iu" and (b < 0).any():
        negative = b < 0
        out = np.power(a, np.where(negative, 0, b))
        odd = (b % 2) != 0
        small = np.where(a == 1, 1, np.where(a == -1, np.where(odd, -1, 1), 0)).astype(out.dtype)
        return np.where(negative, small, out).reshape(shape)
    return np.power(a, b).reshape(shape)


UNARY: dict[str, tuple[str, Callable, str]] = {
    # name: (domain, numpy semantics, doc)
    "neg": ("numeric", lambda x: -x, "-x"),
    "abs": ("numeric", np.abs, "|x|"),
    "exp": ("float", np.exp, "e**x"),
    "log": ("float", np.log, "natural logarithm"),
    "sqrt": ("float", np.sqrt, "square root"),
    "rsqrt": ("float", lambda x: const_like(x, 1) / np.sqrt(x), "1/sqrt(x)"),
    "tanh": ("float", np.tanh, "hyperbolic tangent"),
    "sigmoid": ("float", _sigmoid, "1/(1+exp(-x))"),
    "relu": ("numeric", lambda x: _maximum(x, const_like(x, 0)), "max(x, 0)"),
    "silu": ("float", lambda x: x * _sigmoid(x), "x*sigmoid(x)"),
    "erf": ("float", _erf, "the error function"),
    "erfc": ("float", _scalar_math(math.erfc), "1 - erf(x), accurate where erf(x) is near 1"),
    "log1p": ("float", np.log1p, "log(1 + x), accurate for small x"),
    "sin": ("float", np.sin, "sine"),
    "cos": ("float", np.cos, "cosine"),
    "floor": ("float", np.floor, "round down"),
    "ceil": ("float", np.ceil, "round up"),
    "reciprocal": ("float", lambda x: const_like(x, 1) / x, "1/x"),
    "square": ("numeric", lambda x: x * x, "x*x"),
    # PyTorch's definitions, term by term (IEEE max/min: NaN stays NaN)
    "relu6": ("float", lambda x: _relu6(x), "min(max(x, 0), 6)"),
    "hardsigmoid": ("float", lambda x: _relu6(x + const_like(x, 3)) / const_like(x, 6), "min(max(x + 3, 0), 6) / 6"),
    "hardswish": ("float", lambda x: x * _relu6(x + const_like(x, 3)) / const_like(x, 6),
                  "x * min(max(x + 3, 0), 6) / 6"),
}
POSITIVE_UNARY = {"log", "log1p", "sqrt", "rsqrt", "reciprocal"}


def _unary_infer(name: str, domain: str):
    def infer(syms, types, attrs):
        (t,) = types
        (require_float if domain == "float" else require_numeric)(t, name)
        return t.with_shape(syms.resolve(t.shape)), attrs
    return infer


for _name, (_domain, _fn, _doc) in UNARY.items():
    register_op(OpDef(_name, "elementwise", (Arg("x", "tensor", positive=_name in POSITIVE_UNARY),),
                      _unary_infer(_name, _domain), (lambda f: lambda xs, a, out: f(xs[0]))(_fn), _doc))


def _gelu_infer(syms, types, attrs):
    (t,) = types
    require_float(t, "gelu")
    return t.with_shape(syms.resolve(t.shape)), attrs


register_op(OpDef("gelu", "elementwise",
                  (Arg("x", "tensor"), Arg("approximate", "str", "tanh", choices=("tanh", "none"))),
                  _gelu_infer, lambda xs, a, out: _gelu(xs[0], a["approximate"]),
                  "GELU; tanh approximation by default, approximate=\"none\" for the erf form"))


def _broadcast_infer(name: str, verb: str, domain: str, result: DType | None = None):
    def infer(syms, types, attrs):
        for i, t in enumerate(types):
            if domain == "float":
                require_float(t, name, i)
            elif domain == "numeric":
                require_numeric(t, name, i)
        try:
            shape = broadcast_shapes(syms, [t.shape for t in types])
        except OpError as e:
            shown = " and ".join(str(t) for t in types)
            raise OpError(f"cannot {verb} {shown}: {e.message}", arg=e.arg) from None
        return TensorType(result or types[0].dtype, shape), attrs
    return infer


BINARY: dict[str, tuple[str, str, Callable, str]] = {
    # name: (verb for messages, domain, numpy semantics, doc)
    "add": ("add", "numeric", np.add, "a + b"),
    "sub": ("subtract", "numeric", np.subtract, "a - b"),
    "mul": ("multiply", "numeric", np.multiply, "a * b"),
    "div": ("divide", "float", np.divide, "a / b (floating point)"),
    "pow": ("raise", "numeric", _power, "a ** b"),
    "maximum": ("take the maximum of", "numeric", _maximum, "elementwise maximum"),
    "minimum": ("take the minimum of", "numeric", _minimum, "elementwise minimum"),
}
COMPARE: dict[str, tuple[str, Callable]] = {
    "eq": ("==", np.equal), "ne": ("!=", np.not_equal), "lt": ("<", np.less),
    "le": ("<=", np.less_equal), "gt": (">", np.greater), "ge": (">=", np.greater_equal),
}
BINARY_OPERATORS = {"+": "add", "-": "sub", "*": "mul", "/": "div", "**": "pow", "@": "matmul",
                    **{sym: name for name, (sym, _) in COMPARE.items()}}

for _name, (_verb, _domain, _fn, _doc) in BINARY.items():
    register_op(OpDef(_name, "elementwise",
                      (Arg("a", "tensor", positive=_name == "pow"), Arg("b", "tensor", positive=_name == "div")),
                      _broadcast_infer(_name, _verb, _domain), (lambda f: lambda xs, a, out: f(xs[0], xs[1]))(_fn),
                      _doc, verb=_verb))

for _name, (_sym, _fn) in COMPARE.items():
    register_op(OpDef(_name, "elementwise", (Arg("a", "tensor"), Arg("b", "tensor")),
                      _broadcast_infer(_name, f"compare ('{_sym}')", "any", BOOL),
                      (lambda f: lambda xs, a, out: f(xs[0], xs[1]))(_fn), f"a {_sym} b (yields bool)",
                      verb=f"compare ('{_sym}')"))


def _where_infer(syms, types, attrs):
    cond, a, b = types
    if not cond.dtype.is_bool:
        raise OpError(f"where expects a bool condition, got {cond}; compare first (x > 0)", arg=0)
    if a.dtype != b.dtype:
        raise OpError(f"where: branches have different dtypes ({a.dtype} vs {b.dtype})", arg=2)
    shape = _broadcast_infer("where", "select between", "any")(syms, types, attrs)[0].shape
    return TensorType(a.dtype, shape), attrs


register_op(OpDef("where", "elementwise", (Arg("cond", "tensor"), Arg("a", "tensor"), Arg("b", "tensor")),
                  _where_infer, lambda xs, a, out: np.where(xs[0], xs[1], xs[2]),
                  "cond ? a : b, broadcasting", dtype_args=(1, 2)))

register_op(OpDef("clamp", "elementwise", (Arg("x", "tensor"), Arg("lo", "tensor"), Arg("hi", "tensor")),
                  _broadcast_infer("clamp", "clamp", "numeric"),
                  lambda xs, a, out: _minimum(_maximum(xs[0], xs[1]), xs[2]), "min(max(x, lo), hi)"))


def _cast_infer(syms, types, attrs):
    (t,) = types
    return TensorType(DTYPES[attrs["dtype"]], syms.resolve(t.shape)), attrs


register_op(OpDef("cast", "elementwise", (Arg("x", "tensor"), Arg("dtype", "dtype")),
                  _cast_infer, lambda xs, a, out: xs[0].astype(DTYPES[a["dtype"]].np), "convert to another dtype",
                  dtype_args=()))


def _require_bool(t: TensorType, op: str, i: int) -> None:
    if not t.dtype.is_bool:
        raise OpError(f"{op} expects bool tensors, got {t}; compare first (x > 0) or cast(x, bool)", arg=i)


def _logical_infer(name: str):
    def infer(syms, types, attrs):
        for i, t in enumerate(types):
            _require_bool(t, name, i)
        return _broadcast_infer(name, f"combine ({name})", "any", BOOL)(syms, types, attrs)
    return infer


LOGICAL: dict[str, tuple[Callable, str]] = {
    # name: (numpy semantics, doc); bool tensors only
    "logical_not": (np.logical_not, "not x (bool)"),
    "logical_and": (np.logical_and, "a and b (bool)"),
    "logical_or": (np.logical_or, "a or b (bool)"),
    "logical_xor": (np.logical_xor, "a xor b (bool)"),
}
for _name, (_fn, _doc) in LOGICAL.items():
    _args = (Arg("x", "tensor"),) if _name == "logical_not" else (Arg("a", "tensor"), Arg("b", "tensor"))
    register_op(OpDef(_name, "elementwise", _args, _logical_infer(_name),
                      (lambda f: lambda xs, a, out: f(*xs))(_fn), _doc, verb=f"combine ({_name})"))
