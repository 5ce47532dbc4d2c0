"""Regression: the reference disagreed with IEEE (and with every compiled target) on
- signed zeros of maximum, minimum, relu, clamp and the max/min reductions: np.maximum returns
  the second of two equal operands, so maximum(0, -0) was -0, relu(-0) -0, and max([0, -0])
  depended on the order; MLIR's arith.maximumf / minimumf (IEEE 754-2019) put -0 below +0;
- pow with a constant (broadcast, 0-d) exponent of 0.5: NumPy takes a square root there, so
  pow(-inf, 0.5) was NaN and pow(-0, 0.5) -0 where C's pow (every target, and NumPy on whole
  arrays) gives +inf and +0.
dsl/ops.py now computes both as IEEE does; mlir-jit (an independent lowering) agrees."""
import numpy as np

import fusec

SRC = """
chain z(x: f32[N], y: f32[N], r: f32[R, C]) -> (f32[N], f32[N], f32[N], f32[N], f32[N], f32[R], f32[R], f32[N]) {
    return maximum(x, y), minimum(x, y), relu(x), clamp(x, y, 1.0), pow(x, 0.5), max(r, axis=-1), min(r, axis=-1), pow(y, 0.5)
}
"""


def test_signed_zeros_and_pow_of_a_half_are_ieee():
    x = np.array([0.0, -0.0, -0.0, 0.0, -np.inf, np.nan, 4.0], np.float32)
    y = np.array([-0.0, 0.0, -0.0, 0.0, 1.0, 1.0, -0.0], np.float32)
    r = np.array([[0.0, -0.0], [-0.0, 0.0], [-0.0, -0.0], [np.nan, 0.0]], np.float32)
    ref = fusec.compile(SRC, target="reference").z(x, y, r)
    mx, mn, relu, clamp, pw, rmax, rmin, pwy = ref
    assert list(np.signbit(mx[:4])) == [False, False, True, False]        # max(0, -0) = max(-0, 0) = +0
    assert list(np.signbit(mn[:4])) == [True, True, True, False]          # min(0, -0) = min(-0, 0) = -0
    assert not np.signbit(relu[:4]).any() and np.isnan(relu[5])           # relu(-0) = +0, NaN stays
    assert not np.signbit(clamp[1]) and np.isnan(clamp[5])
    assert pw[4] == np.inf and not np.signbit(pw[1]) and pw[6] == 2.0      # C's pow: +inf, +0
    assert list(rmax[:3]) == [0, 0, 0] and list(np.signbit(rmax[:3])) == [False, False, True] and np.isnan(rmax[3])
    assert list(np.signbit(rmin[:3])) == [True, True, True] and np.isnan(rmin[3])
    assert not np.signbit(pwy).any()
    jit = fusec.compile(SRC, target="mlir-jit").z(x, y, r)
    for g, w in zip(jit, ref):
        assert np.array_equal(g, w, equal_nan=True) and np.array_equal(np.signbit(g), np.signbit(w)), (g, w)
