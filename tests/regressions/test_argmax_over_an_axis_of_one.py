"""Regression: argmax / argmin of a float tensor along an axis of extent 1 was an internal error
in stage emit on cpu and cuda-sim ("the emitter has no rule for the constant true"): with one
element the position test folds to `xori %eq, true`, and an i1 constant reaches the emitter as
a BoolAttr, not an IntegerAttr. Found by the per-op matrix (tests/numerics/test_indexing_ops.py)."""
import numpy as np
import pytest

import fusec

SRC = """\
chain one(x: f32[1, 4], y: f16[3, 1]) -> (i64[4], i64[3, 1]) {
    return argmax(x, axis=0), argmin(y, axis=-1, keepdims=true)
}
"""


@pytest.mark.parametrize("target", ["cpu", "cuda-sim"])
def test_argmax_over_an_axis_of_one_is_position_0(target):
    x = np.array([[1.0, np.nan, -0.0, -np.inf]], np.float32)
    y = np.array([[np.nan], [2.0], [-1.0]], np.float16)
    a, b = fusec.compile(SRC, target=target, options={"baseline": False}).one(x, y)
    assert a.tolist() == [0, 0, 0, 0] and b.tolist() == [[0], [0], [0]]
