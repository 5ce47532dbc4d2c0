"""Regression: runtime/compare.py `compare_to_truth` (the float64 reference deciding a finite
tolerance failure) took nanmax of |build - truth|, so a build with a NaN where the reference has
a finite value passed whenever the f32 reference was off elsewhere; and an infinity that the
build shares with the f32 reference where the f64 truth is finite (an f32 overflow) made the
build's error infinite, so no other difference could be decided by the truth. Now a NaN or an
infinity the reference does not have always fails, by name, and the truth compares the
positions where all three are finite."""
import numpy as np

from fusec.runtime.compare import compare_to_truth


def test_a_nan_where_the_reference_is_finite_is_never_excused():
    truth = np.array([0.5, 1.0, 2.0])
    ref32 = np.array([0.5, 1.0, 2.003])              # the reference's own rounding, amplified
    build = np.array([np.nan, 1.0, 2.0])
    c = compare_to_truth(build, ref32, truth, "f32")
    assert not c.ok and "1 NaN where the reference has finite values, first at [0]" in c.describe()


def test_an_overflow_shared_with_the_reference_leaves_the_truth_to_decide_the_rest():
    truth = np.array([3.5e38, 1.0, 2.0])              # finite in f64, inf in f32
    ref32 = np.array([np.inf, 1.0, 2.003])
    assert compare_to_truth(np.array([np.inf, 1.0, 2.0]), ref32, truth, "f32").ok
    assert not compare_to_truth(np.array([np.inf, 1.5, 2.0]), ref32, truth, "f32").ok
    assert not compare_to_truth(np.array([3.4e38, 1.0, 2.0]), ref32, truth, "f32").ok   # finite where inf
