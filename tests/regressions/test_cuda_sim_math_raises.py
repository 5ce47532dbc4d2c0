"""Regression (issue 18): on cuda-sim, a kernel's `math.exp(v)` raised OverflowError for v = 88.8
(`fusec: internal error: OverflowError: ... math range error`), where a GPU returns inf; so did
math.log(0), math.sqrt(-1), math.sin(inf), math.pow(0, -1), math.floor(nan) with ValueError or
OverflowError: the simulator runs kernels as Python, whose `math` raises. Now a cuda module
computes those calls with NumPy under the simulator (compiler/emit/scalar.py), silently, and
gives the reference's inf, NaN and signed zeros."""
import warnings

import numpy as np

import fusec

SRC = """
chain m(x: f32[N], y: f32[N]) -> (f32[N], f32[N], f32[N], f32[N], f32[N], f32[N], f32[N], f32[N], f32[N], f64[N]) {
    return exp(x), log(x), sqrt(x), sin(x), pow(x, y), floor(x), log1p(x), rsqrt(x), sigmoid(-x), exp(cast(x, f64) * 10.0)
}
"""


def test_math_on_the_simulator_returns_inf_and_nan_without_raising_or_warning():
    x = np.array([88.8, 1e4, np.inf, -np.inf, np.nan, 0.0, -0.0, -1.0, -2.0, 1.0], np.float32)
    y = np.array([2.0, 3.0, 0.5, 0.5, 1.0, -1.0, -1.0, 0.5, 2.0, 0.0], np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prog = fusec.compile(SRC, target="cuda-sim", options={"baseline": False})
        got = prog.m(x, y)
    want = fusec.compile(SRC, target="reference").m(x, y)
    for i, (g, w) in enumerate(zip(got, want)):
        assert np.array_equal(g, w, equal_nan=True), (i, g, w)
        assert np.array_equal(np.signbit(g), np.signbit(w)), (i, g, w)
    assert got[0][0] == np.inf and got[1][5] == -np.inf and np.isnan(got[2][7]) and np.isnan(got[3][2])
    assert got[4][5] == np.inf and got[4][6] == -np.inf and got[4][2] == np.inf     # C's pow
    assert np.isnan(got[5][4]) and np.signbit(got[5][6]) and got[9][0] == np.inf
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)], [str(w.message) for w in caught]
    src = prog.m.stages({"N": x.size})["kernels"]
    assert "math.exp(" in src and "if not _CUDASIM else np.exp(" in src   # math on a GPU, NumPy simulated
