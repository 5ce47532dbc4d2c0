"""Regression: on the cpu target an f16 value inside a chain was never rounded to f16 (Numba's
CPU target has no float16, so f16 is computed in f32 and arith.truncf emitted nothing): so
cast(cast(x, f16), f32) was x itself, and an f16 intermediate beyond 65504 stayed finite where
the reference (which rounds after every op, as the CUDA target does) has inf. Now truncf to f16
rounds on the bits (compiler/emit/cpu.py round_f16), ties to even, denormals and -0 kept."""
import numpy as np

import fusec

SRC = """
chain h(x: f32[N], y: f16[N]) -> (f32[N], f16[N]) {
    return cast(cast(x, f16), f32), exp(y) * 0.001
}
"""


def test_f16_values_are_rounded_to_f16_between_ops_on_the_cpu():
    x = np.array([1e5, 65504.0, 65519.0, 65520.0, 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 1e-6, -1e-8,
                  6e-8, -0.0, np.nan, -np.inf, 0.1], np.float32)
    y = np.array([12.0, 11.0, -20.0, 1.0, 0.0, np.nan, np.inf, -np.inf, 11.5, -0.0, 2.0, 10.0, 11.1], np.float16)
    got = fusec.compile(SRC, target="cpu", options={"baseline": False}).h(x, y)
    want = fusec.compile(SRC, target="reference").h(x, y)
    with np.errstate(over="ignore"):
        as_f16 = x.astype(np.float16).astype(np.float32)
    assert np.array_equal(got[0], as_f16, equal_nan=True), got[0]
    assert np.array_equal(np.signbit(got[0]), np.signbit(want[0]))
    assert got[0][0] == np.inf and got[0][2] == 65504 and got[0][3] == np.inf and got[0][4] == 1.0
    assert np.array_equal(got[1], want[1], equal_nan=True), (got[1], want[1])
    assert got[1][0] == np.inf                        # exp(12) = 162755 is inf in f16, times 0.001
