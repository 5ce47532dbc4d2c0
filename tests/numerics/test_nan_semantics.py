"""The NaN and special-value semantics docs/FDSL.md states per operator ("NaN and special values"),
checked on the reference and on mlir-jit (an independent lowering); the matrix
(test_special_values.py) checks that the compiled targets agree with the reference."""
from __future__ import annotations

import re

import numpy as np
import pytest

import fusec

INF, NAN, Z = np.inf, np.nan, -0.0
BIG = float(np.finfo(np.float32).max)

# (what the language reference says, FDSL over x (and y, rows r), x, y or r, the expected result)
CASES = [
    ("max: NaN if the slice holds one; -0 below +0; only -inf gives -inf", "max(r, axis=-1)",
     [[1, NAN, 3], [0, Z, Z], [Z, Z, Z], [-INF, -INF, -INF]], None, [NAN, 0, Z, -INF]),
    ("min: NaN if the slice holds one; -0 below +0", "min(r, axis=-1)",
     [[1, NAN, 3], [0, Z, 0], [INF, INF, INF], [2, 1, 3]], None, [NAN, Z, INF, 1]),
    ("sum, mean: NaN with both infinities, inf with one sign, overflow", "sum(r, axis=-1)",
     [[INF, -INF, 1], [INF, 1, 2], [BIG, BIG, 1], [1, NAN, 2]], None, [NAN, INF, INF, NAN]),
    ("mean", "mean(r, axis=-1)", [[INF, -INF, 1], [-INF, 1, 2], [1, 2, 3], [1, NAN, 2]], None, [NAN, -INF, 2, NAN]),
    ("prod: NaN for 0 * inf", "prod(r, axis=-1)", [[0, INF, 1], [Z, 1, 2], [INF, -1, 2], [1, 2, 3]], None,
     [NAN, Z, -INF, 6]),
    ("maximum: NaN if either; -0 below +0 in either order", "maximum(x, y)",
     [NAN, 1, 0, Z, Z, -INF], [1, NAN, Z, 0, Z, -1], [NAN, NAN, 0, 0, Z, -1]),
    ("minimum", "minimum(x, y)", [NAN, 1, 0, Z, 0, INF], [1, NAN, Z, 0, 0, 1], [NAN, NAN, Z, Z, 0, 1]),
    ("relu: NaN stays, -0 gives +0, -inf gives 0", "relu(x)", [NAN, Z, -INF, INF, -1, 2], None,
     [NAN, 0, 0, INF, 0, 2]),
    ("clamp: NaN in any operand; hi wins when lo > hi", "clamp(x, y, 1.0)", [NAN, 0.5, 5, 0, -INF, 3],
     [0, NAN, 2, -1, 0, 0], [NAN, NAN, 1, 0, 0, 1]),
    ("softmax: NaN along a slice with a NaN, a +inf or only -inf; a -inf element gives 0",
     "softmax(r, axis=-1)", [[1, NAN, 0], [1, INF, 0], [-INF, -INF, -INF], [0, -INF, 0]], None,
     [[NAN] * 3, [NAN] * 3, [NAN] * 3, [0.5, 0, 0.5]]),
    ("log_softmax: the same, -inf for a -inf element", "log_softmax(r, axis=-1)",
     [[1, NAN, 0], [1, INF, 0], [-INF, -INF, -INF], [0, -INF, 0]], None,
     [[NAN] * 3, [NAN] * 3, [NAN] * 3, [-0.6931472, -INF, -0.6931472]]),
    ("exp overflows to inf from 88.73 and underflows to 0 below -103.97", "exp(x)",
     [88.72, 88.73, -103.9, -103.98, -INF, NAN], None, [3.3931e38, INF, 1.4e-45, 0, 0, NAN]),
    ("sigmoid(-inf) is 0, sigmoid(inf) 1", "sigmoid(x)", [-INF, INF, NAN, 0, -1e4, 1e4], None,
     [0, 1, NAN, 0.5, 0, 1]),
    ("sigmoid never overflows: far below 0 it is exp(x), a denormal, not 1/(1+inf) = 0", "sigmoid(x)",
     [-90, -92, -88.5, -30, 30, -0.5], None, [8.194013e-40, 1.108939e-40, 3.672302e-39, 9.357623e-14, 1, 0.37754068]),
    ("tanh(+-inf) is +-1, -0 stays", "tanh(x)", [-INF, INF, NAN, Z, 0, 20], None, [-1, 1, NAN, Z, 0, 1]),
    ("silu(-inf) is NaN (-inf * 0)", "silu(x)", [-INF, INF, NAN, Z, -1e4, 0], None, [NAN, INF, NAN, Z, Z, 0]),
    ("gelu(-inf) is NaN in both forms, gelu(inf) inf", "gelu(x)", [-INF, INF, NAN, Z, -1e4, 0], None,
     [NAN, INF, NAN, Z, Z, 0]),
    ("gelu none", 'gelu(x, approximate="none")', [-INF, INF, NAN, Z, -1e4, 0], None, [NAN, INF, NAN, Z, Z, 0]),
    ("log(0) is -inf, below 0 NaN", "log(x)", [0, Z, -1, INF, NAN, 1], None, [-INF, -INF, NAN, INF, NAN, 0]),
    ("log1p(-1) is -inf, below -1 NaN", "log1p(x)", [-1, -2, INF, NAN, 0, Z], None, [-INF, NAN, INF, NAN, 0, Z]),
    ("sqrt(-0) is -0, below 0 NaN", "sqrt(x)", [Z, -1, INF, NAN, 0, 4], None, [Z, NAN, INF, NAN, 0, 2]),
    ("rsqrt(0) is inf", "rsqrt(x)", [0, -1, INF, NAN, 4, 1], None, [INF, NAN, 0, NAN, 0.5, 1]),
    ("reciprocal(+-0) is +-inf", "reciprocal(x)", [0, Z, INF, -INF, NAN, 2], None, [INF, -INF, 0, Z, NAN, 0.5]),
    ("div as IEEE: 0 / 0 is NaN", "div(x, y)", [0, 1, -1, INF, 1, 0], [0, 0, 0, INF, INF, -1],
     [NAN, INF, -INF, NAN, 0, Z]),
    ("pow as C's pow", "pow(x, y)", [NAN, 1, -2, -INF, Z, Z], [0, NAN, 0.5, 0.5, 0.5, -1],
     [1, 1, NAN, INF, 0, -INF]),
    ("pow with a constant exponent 0.5", "pow(x, 0.5)", [-INF, Z, 4, -1, INF, NAN], None, [INF, 0, 2, NAN, INF, NAN]),
    ("floor, ceil keep NaN, inf and -0", "ceil(x)", [-0.5, Z, -INF, NAN, INF, 1.5], None, [Z, Z, -INF, NAN, INF, 2]),
    ("floor", "floor(x)", [-0.5, Z, -INF, NAN, INF, 1.5], None, [-1, Z, -INF, NAN, INF, 1]),
    ("sin, cos are NaN at +-inf", "sin(x)", [INF, -INF, NAN, Z, 0, 0], None, [NAN, NAN, NAN, Z, 0, 0]),
    ("comparisons with NaN are false except ne", "cast(ne(x, y), f32) * 2.0 + cast(eq(x, y), f32)",
     [NAN, NAN, 1, 1, INF, 0], [NAN, 1, NAN, 1, INF, Z], [2, 2, 2, 1, 1, 1]),
    ("lt with NaN", "cast(lt(x, y), f32) + cast(ge(x, y), f32)", [NAN, 1, 0, 1, 0, 0], [1, NAN, 1, 0, 0, 0],
     [0, 0, 1, 1, 1, 1]),
    ("where(x == x, x, 0.0) replaces NaN by 0", "where(x == x, x, 0.0)", [NAN, 1, -INF, Z, 0, 0], None,
     [0, 1, -INF, Z, 0, 0]),
    ("cumsum: NaN from the first NaN on; +inf meeting -inf is NaN from there; -0 first stays", "cumsum(r, axis=-1)",
     [[1, NAN, 2], [INF, -INF, 1], [Z, Z, 1], [1, 2, 3]], None, [[1, NAN, NAN], [INF, NAN, NAN], [Z, Z, 1], [1, 3, 6]]),
    ("cumprod: 0 * inf is NaN from there; overflow to inf", "cumprod(r, axis=-1)",
     [[0, INF, 1], [2, NAN, 1], [BIG, 2, -1], [Z, 2, 3]], None, [[0, NAN, NAN], [2, NAN, NAN], [BIG, INF, -INF], [Z, Z, Z]]),
    ("f16 cumsum adds in f32 and rounds each result once", "cast(cumsum(cast(x, f16)), f32)",
     [60000, 10000, -10000, -60000, 1, 0.5], None, [60000, INF, 60000, 0, 1, 1.5]),
    ("argmax: the first NaN; else the first largest, -0 equal to +0", "cast(argmax(r, axis=-1), f32)",
     [[1, NAN, 3, NAN], [Z, 0, 0, Z], [-INF, -INF, -INF, -INF], [1, 3, 3, INF]], None, [1, 0, 0, 3]),
    ("argmin: the same", "cast(argmin(r, axis=-1), f32)",
     [[1, 3, -INF, NAN], [0, Z, Z, 0], [2, 1, 1, 2], [INF, INF, INF, INF]], None, [3, 0, 1, 0]),
    ("cast to f16 rounds, inf from 65520, NaN and -0 stay", "cast(cast(x, f16), f32)",
     [65519, 65520, 1e5, NAN, Z, 6e-8], None, [65504, INF, INF, NAN, Z, 5.96e-8]),
    ("cast to bool: NaN is true", "cast(cast(x, bool), f32)", [NAN, 0, Z, INF, 1e-45, 0], None, [1, 0, 0, 1, 1, 0]),
    ("an f16 intermediate beyond 65504 is inf", "cast(cast(x, f16) * 1000.0 * 0.001, f32)",
     [70.0, 66.0, 65.0, NAN, -66.0, 1], None, [INF, INF, 65, NAN, -INF, 1]),
    ("... even when the next op would bring it back", "cast(exp(cast(x, f16)) * 0.001, f32)",
     [12.0, 11.0, -INF, NAN, 0, 1], None, [INF, 59.875, 0, NAN, 0.001, 0.002718]),
    ("relu6: NaN stays, +-inf give 6 and 0, -0 gives +0", "relu6(x)", [NAN, INF, -INF, Z, 7, 2.5], None,
     [NAN, 6, 0, 0, 6, 2.5]),
    ("hardsigmoid: NaN stays, +-inf give 1 and 0", "hardsigmoid(x)", [NAN, INF, -INF, -3, 3, 0], None,
     [NAN, 1, 0, 0, 1, 0.5]),
    ("hardswish: -inf is NaN (-inf * 0), -0 and x <= -3 give -0", "hardswish(x)", [NAN, INF, -INF, Z, -4, 1], None,
     [NAN, INF, NAN, Z, Z, 2 / 3]),
    ("the literals inf, -inf and nan", "where(x > 0.0, inf, where(x < 0.0, -inf, nan))", [1, -1, 0, INF, -INF, NAN],
     None, [INF, -INF, NAN, INF, -INF, NAN]),
    ("logical ops and any / all on comparisons with NaN", "cast(logical_or(x > 0.0, logical_not(x == x)), f32) + "
     "cast(logical_and(x < 1.0, logical_xor(x > -1.0, true)), f32) * 2.0",
     [NAN, 1, 0, -2, INF, -INF], None, [1, 1, 0, 2, 1, 2]),
    ("any / all: NaN compares false", "cast(any(r > 0.0, axis=-1), f32) + cast(all(r == r, axis=-1), f32) * 2.0",
     [[NAN, 1, -1], [NAN, -1, Z], [1, 2, 3], [-INF, Z, -1]], None, [1, 0, 3, 2]),
]


def _program():
    params, outs, body, inputs = [], [], [], []
    for i, (_, expr, x, y, want) in enumerate(CASES):
        x = np.asarray(x, np.float32)
        e = re.sub(r"\bx\b", f"x{i}", re.sub(r"\by\b", f"y{i}", re.sub(r"\br\b", f"x{i}", expr)))
        params.append(f"x{i}: f32[{', '.join(map(str, x.shape))}]")
        inputs.append(x)
        if y is not None:
            params.append(f"y{i}: f32[{len(y)}]")
            inputs.append(np.asarray(y, np.float32))
        shape = np.asarray(want).shape
        outs.append(f"f32[{', '.join(map(str, shape))}]")
        body.append(e)
    src = f"chain s({', '.join(params)}) -> ({', '.join(outs)}) {{\n    return {', '.join(body)}\n}}\n"
    return src, inputs


@pytest.mark.parametrize("target", ["reference", "mlir-jit"])
def test_the_documented_special_values(target):
    src, inputs = _program()
    got = fusec.compile(src, target=target).s(*inputs)
    bad = []
    for (what, expr, *_ , want), g in zip(CASES, got):
        w = np.asarray(want, np.float32)
        same = np.isclose(g, w, rtol=1e-3, atol=0, equal_nan=True) & ((np.signbit(g) == np.signbit(w)) | np.isnan(w))
        if target == "mlir-jit" and expr == "log1p(x)":      # log(1 + x) there: log1p(-0) is +0
            same |= (g == 0) & (w == 0)
        if not same.all():
            bad.append(f"{what}: {expr} gave {g.tolist()}, documented {w.tolist()}")
    assert not bad, "\n".join(bad)
