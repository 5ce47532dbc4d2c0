"""Regression: the mlir-jit target lowered math.log1p with convert-math-to-llvm, which writes
log(1 + x): 0 for |x| below the epsilon (log1p(1e-10) was 0 in f32, and 8e-8 off in f64). It
now calls libm's log1p (log1pf for f32)."""
import numpy as np
import pytest

import fusec


@pytest.mark.parametrize("dtype, np_dtype, rtol", [("f32", np.float32, 1e-6), ("f64", np.float64, 1e-14)])
def test_log1p_of_tiny_values(dtype, np_dtype, rtol):
    prog = fusec.compile(f"chain f(x: {dtype}[5]) -> {dtype}[5] {{ return log1p(x) }}", target="mlir-jit")
    x = np.array([1e-10, -1e-9, 1e-7, 3e-5, 0.5], np_dtype)
    np.testing.assert_allclose(prog.f(x), np.log1p(x), rtol=rtol)


def test_log1p_in_f16_is_computed_in_f32():
    prog = fusec.compile("chain f(x: f16[3]) -> f16[3] { return log1p(x) }", target="mlir-jit")
    x = np.array([1e-4, 0.5, -1.0], np.float16)
    with np.errstate(divide="ignore"):
        want = np.log1p(x.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(prog.f(x), want)
