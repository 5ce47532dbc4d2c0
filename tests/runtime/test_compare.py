"""The numerics verdict: per-dtype tolerances, NaN/inf handling, magnitude-scaled atol, worst place."""
import numpy as np
import pytest

from fusec.runtime.compare import compare


def test_within_and_beyond_tolerance_and_the_worst_place():
    e = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    assert compare(e + 1e-6, e, "f32").ok
    bad = e.copy()
    bad[1, 0] += 0.01
    c = compare(bad, e, "f32")
    assert not c.ok and c.worst_index == (1, 0) and abs(c.max_abs - 0.01) < 1e-6
    assert "worst at [1, 0]" in c.describe()


def test_nan_and_inf_must_match():
    e = np.array([np.nan, np.inf, 1.0])
    assert compare(e.copy(), e, "f64").ok
    assert not compare(np.array([0.0, np.inf, 1.0]), e, "f64").ok
    assert not compare(np.array([np.nan, -np.inf, 1.0]), e, "f64").ok


def test_atol_scales_with_the_outputs_magnitude():
    # an element near zero out of a large dot product: its absolute error follows the terms' size
    e = np.array([500.0, 0.004], np.float32)
    a = np.array([500.0, 0.005], np.float32)
    c = compare(a, e, "f32")
    assert c.ok and c.atol == 1e-5 * 500.0
    small = np.array([0.5, 0.004], np.float32)
    assert not compare(np.array([0.5, 0.005], np.float32), small, "f32").ok


def test_integers_and_bools_are_exact():
    assert compare(np.array([1, 2]), np.array([1, 2]), "i32").ok
    assert not compare(np.array([1, 3]), np.array([1, 2]), "i32").ok
    assert not compare(np.array([True]), np.array([False]), "bool").ok


def test_shape_mismatch_is_reported():
    c = compare(np.zeros(3), np.zeros(4), "f32")
    assert not c.ok and "shape (3,) differs" in c.describe()


def test_the_float64_truth_decides_when_the_reference_itself_is_off():
    from fusec.runtime.compare import compare_to_truth
    truth = np.array([1.0, 2.0])
    ref32 = np.array([1.0, 2.003])            # the f32 reference's own rounding, amplified
    good = np.array([1.0, 2.002])             # outside tolerance of ref32, closer to the truth
    bad = np.array([1.0, 2.02])
    assert not compare(good, ref32, "f32").ok
    c = compare_to_truth(good, ref32, truth, "f32")
    assert c.ok and "as close to the f64 truth as the f32 reference" in c.note
    assert not compare_to_truth(bad, ref32, truth, "f32").ok
    assert not compare_to_truth(np.array([1, 3]), np.array([1, 2]), np.array([1, 2]), "i32").ok


def test_tolerance_used_is_the_worst_error_over_its_tolerance():
    want = np.array([1.0, 2.0, 4.0], np.float32)
    inside = compare(want + np.array([0, 0, 2e-4], np.float32), want, "f32")
    outside = compare(want + np.array([0, 0, 8e-4], np.float32), want, "f32")
    assert inside.ok and 0.3 < inside.tolerance_used() < 1 and not outside.ok and outside.tolerance_used() > 1
    # the last position's error over atol + rtol * |expected|, as the check itself decides
    assert inside.tolerance_used() == pytest.approx(2e-4 / (inside.atol + inside.rtol * 4.0), rel=1e-2)   # f32 rounding
    assert compare(np.zeros(2, np.float32), np.zeros(3, np.float32), "f32").tolerance_used() == float("inf")
    # integers: exact, so no error uses none of it and any error all of it
    ints = np.array([1, 2, 3], np.int32)
    assert compare(ints, ints, "i32").tolerance_used() == 0.0
    assert compare(ints + np.array([0, 0, 1], np.int32), ints, "i32").tolerance_used() == float("inf")
