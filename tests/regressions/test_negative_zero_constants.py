"""Regression: a float constant -0.0 reached a compiled kernel as +0: the emitter wrote it as
`np.float32(-0)`, and -0 is the integer 0 (also in a tensor constant's literal list). So `x * -0.0`
was +0 for a positive x on cpu and cuda-sim, and a cumsum (whose neutral element is -0: -0 + x is
x for every x) of a row starting with -0 began with +0 (np.cumsum([-0.0]) is -0). Found by the
special-values matrix (tests/numerics/test_special_values.py)."""
import numpy as np
import pytest

import fusec

SRC = """\
chain z(x: f32[3], r: f32[2, 3]) -> (f32[3], f32[2, 3]) {
    return x * -0.0, cumsum(r, axis=-1)
}
"""


@pytest.mark.parametrize("target", ["reference", "mlir-jit", "cpu", "cuda-sim"])
def test_negative_zero_stays_negative(target):
    x = np.array([1.0, -1.0, 0.0], np.float32)
    r = np.array([[-0.0, -0.0, 0.0], [-0.0, 1.0, -1.0]], np.float32)
    a, c = fusec.compile(SRC, target=target, options={"baseline": False} if target in ("cpu", "cuda-sim") else None).z(x, r)
    assert np.signbit(a).tolist() == [True, False, True]
    assert np.signbit(c).tolist() == [[True, True, False], [True, False, False]]
