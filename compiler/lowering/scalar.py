"""Scalar semantics of every elementwise FDSL op: the arith/math ops a linalg.generic body holds.

Each emitter follows its NumPy reference in dsl/ops/elementwise.py term by term (same operation order),
so f32 results agree to rounding. Composite elementwise ops (gelu, silu, sigmoid, rsqrt) are
several arith/math ops inside one body: the generic is still one producer/consumer.
"""
from __future__ import annotations

import math as pymath
from typing import Callable

from ..mlir import arith, ir, math
from .builder import is_float, scalar

Emitter = Callable[[list[ir.Value], ir.Type, object], ir.Value]   # (elements, result type, node)


def _f(v: ir.Value) -> bool:
    return is_float(v.type)


def _is_bool(t: ir.Type) -> bool:
    return isinstance(t, ir.IntegerType) and ir.IntegerType(t).width == 1


def c(value: float, like: ir.Value) -> ir.Value:
    return scalar(value, like.type)


def add(a, b):
    return arith.addf(a, b) if _f(a) else arith.addi(a, b)


def sub(a, b):
    return arith.subf(a, b) if _f(a) else arith.subi(a, b)


def mul(a, b):
    return arith.mulf(a, b) if _f(a) else arith.muli(a, b)


def div(a, b):
    return arith.divf(a, b)


def maximum(a, b):
    return arith.maximumf(a, b) if _f(a) else arith.maxsi(a, b)


def minimum(a, b):
    return arith.minimumf(a, b) if _f(a) else arith.minsi(a, b)


def neg(a):
    return arith.negf(a) if _f(a) else arith.subi(c(0, a), a)


def recip(a):
    return div(c(1, a), a)


def sigmoid(x):
    """As dsl/ops/elementwise.py: e = exp(-|x|), (x >= 0 ? 1 : e) / (1 + e): never overflows, and CSE
    shares the exp with an `exp(-abs(x))` of the same kernel."""
    e = math.exp(neg(math.absf(x)))
    return div(arith.select(cmp("ge", x, c(0, x)), c(1, x), e), add(c(1, x), e))


def gelu(x, approximate: str):
    half_x = mul(c(0.5, x), x)
    if approximate == "tanh":
        cube = mul(mul(mul(c(0.044715, x), x), x), x)
        inner = mul(c(pymath.sqrt(2 / pymath.pi), x), add(x, cube))
        return mul(half_x, add(c(1, x), math.tanh(inner)))
    return mul(half_x, add(c(1, x), math.erf(div(x, c(pymath.sqrt(2), x)))))


def relu6(x):
    return minimum(maximum(x, c(0, x)), c(6, x))


def logical_not(x):
    return arith.xori(x, scalar(1, x.type))


def power(a, b):
    """C's pow; a float raised to a constant 2 or 3 is x * x or x * x * x (as PyTorch computes
    `x ** 2` and `x ** 3`, the tanh GELU's cube among them): the same special values, exact for 2,
    within an ulp of pow for 3, and no libm call per element."""
    if _f(a):
        n = _constant_float(b)
        if n == 2.0:
            return mul(a, a)
        if n == 3.0:
            return mul(mul(a, a), a)
        return math.powf(a, b)
    return math.ipowi(a, b)


def _constant_float(v) -> float | None:
    """The value of an arith.constant float scalar, else None."""
    owner = v.owner if not isinstance(v, ir.BlockArgument) else None
    op = owner.operation if owner is not None and hasattr(owner, "operation") else owner
    if op is None or op.name != "arith.constant" or not is_float(v.type):
        return None
    return ir.FloatAttr(op.attributes["value"]).value


_FCMP = {"eq": "OEQ", "ne": "UNE", "lt": "OLT", "le": "OLE", "gt": "OGT", "ge": "OGE"}
_ICMP = {"eq": "eq", "ne": "ne", "lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge"}
_UCMP = {"eq": "eq", "ne": "ne", "lt": "ult", "le": "ule", "gt": "ugt", "ge": "uge"}  # i1: true > false


def cmp(kind: str, a, b):
    """arith.cmpf or arith.cmpi (unsigned on bools) of `kind` (eq, ne, lt, le, gt, ge); on floats
    ordered, and `ne` unordered, as NumPy's."""
    if _f(a):
        return arith.cmpf(getattr(arith.CmpFPredicate, _FCMP[kind]), a, b)
    table = _UCMP if _is_bool(a.type) else _ICMP
    return arith.cmpi(getattr(arith.CmpIPredicate, table[kind]), a, b)


def _width(t: ir.Type) -> int:
    return ir.FloatType(t).width if is_float(t) else ir.IntegerType(t).width


def convert(x: ir.Value, to: ir.Type) -> ir.Value:
    """NumPy's astype: float<->float rounds, float->int truncates, nonzero->bool, bool->0/1."""
    src = x.type
    if src == to:
        return x
    if _is_bool(to):
        return cmp("ne", x, c(0, x))                # NaN -> true, as NumPy
    if is_float(src) and is_float(to):
        # f16 <-> bf16 goes through f32 (exact). f64 -> f16/bf16 also does: LLVM lowers the
        # direct truncation to compiler-rt calls (__truncdfhf2) the JIT process lacks; the
        # double rounding can differ from NumPy's direct rounding by one ulp in rare ties.
        if _width(src) == _width(to) or (_width(src) == 64 and _width(to) == 16):
            return convert(convert(x, ir.F32Type.get()), to)
        return arith.extf(to, x) if _width(to) > _width(src) else arith.truncf(to, x)
    if is_float(src):
        return arith.fptosi(to, x)
    if is_float(to):
        return arith.uitofp(to, x) if _is_bool(src) else arith.sitofp(to, x)
    if _width(to) > _width(src):
        return arith.extui(to, x) if _is_bool(src) else arith.extsi(to, x)
    return arith.trunci(to, x)


def _unary(f: Callable[[ir.Value], ir.Value]) -> Emitter:
    return lambda xs, out, node: f(xs[0])


def _binary(f: Callable[[ir.Value, ir.Value], ir.Value]) -> Emitter:
    return lambda xs, out, node: f(xs[0], xs[1])


EMITTERS: dict[str, Emitter] = {
    "neg": _unary(neg),
    "abs": _unary(lambda x: math.absf(x) if _f(x) else math.absi(x)),
    "exp": _unary(math.exp),
    "log": _unary(math.log),
    "sqrt": _unary(math.sqrt),
    "rsqrt": _unary(math.rsqrt),
    "tanh": _unary(math.tanh),
    "sigmoid": _unary(sigmoid),
    "relu": _unary(lambda x: maximum(x, c(0, x))),
    "silu": _unary(lambda x: mul(x, sigmoid(x))),
    "erf": _unary(math.erf),
    "erfc": _unary(math.erfc),
    "log1p": _unary(math.log1p),
    "sin": _unary(math.sin),
    "cos": _unary(math.cos),
    "floor": _unary(math.floor),
    "ceil": _unary(math.ceil),
    "reciprocal": _unary(recip),
    "square": _unary(lambda x: mul(x, x)),
    "relu6": _unary(relu6),
    "hardsigmoid": _unary(lambda x: div(relu6(add(x, c(3, x))), c(6, x))),
    "hardswish": _unary(lambda x: div(mul(x, relu6(add(x, c(3, x)))), c(6, x))),
    "gelu": lambda xs, out, node: gelu(xs[0], node.attr("approximate", "tanh")),
    "add": _binary(add),
    "sub": _binary(sub),
    "mul": _binary(mul),
    "div": _binary(div),
    "pow": _binary(power),
    "maximum": _binary(maximum),
    "minimum": _binary(minimum),
    **{k: (lambda k: _binary(lambda a, b: cmp(k, a, b)))(k) for k in _FCMP},
    "where": lambda xs, out, node: arith.select(xs[0], xs[1], xs[2]),
    "clamp": lambda xs, out, node: minimum(maximum(xs[0], xs[1]), xs[2]),
    "logical_not": _unary(logical_not),
    "logical_and": _binary(arith.andi),
    "logical_or": _binary(arith.ori),
    "logical_xor": _binary(arith.xori),
}
# cast has no compute type: it converts straight from the source element (see elementwise.py).
