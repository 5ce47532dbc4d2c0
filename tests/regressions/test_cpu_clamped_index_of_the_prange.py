"""Regression: on the cpu, a concat (or any clamped index) along the axis that became the
kernel's `numba.prange` failed in Numba's type inference (`getitem(array(float32, 1d, C),
float64)`): the index of `numba.prange(N)` is a uint64, and Numba types `max(uint64, int64)`
as float64. The emitter now always gives the prange a start (`numba.prange(0, N)`), whose index
is signed. Found by the per-op matrix (tests/numerics/test_indexing_ops.py)."""
import numpy as np

import fusec

SRC = """\
chain joined(a: f32[3], b: f32[1], c: f32[2, 3], d: f32[4, 3]) -> (f32[4], f32[6, 3]) {
    return concat([a, b], axis=-1), concat([c, d], axis=0)
}
"""


def test_a_concat_along_the_prange_axis_runs_on_the_cpu():
    a, b = np.arange(3, dtype=np.float32), np.array([7], np.float32)
    c, d = np.ones((2, 3), np.float32), np.full((4, 3), 2, np.float32)
    prog = fusec.compile(SRC, target="cpu", options={"baseline": False})
    x, y = prog.joined(a, b, c, d)
    assert x.tolist() == [0, 1, 2, 7]
    np.testing.assert_array_equal(y, np.concatenate([c, d]))
    assert "numba.prange(0, " in prog.joined.stages({})["kernels"]
