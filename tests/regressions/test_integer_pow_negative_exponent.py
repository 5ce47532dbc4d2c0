"""Regression (found by tests/fuzz.py): an integer chain raising to a negative power (`x ** x`
on i32 inputs, some negative) was an internal error: the reference's np.power refuses negative
integer powers. The reference now gives what the compiled targets' math.ipowi gives: 1 and -1
keep their power, every other base 0. A constant fold (`2 ** -1`) is still a user error."""
import numpy as np
import pytest

import fusec
from fusec.dsl.diagnostics import FdslError


def test_integer_pow_with_negative_exponents_on_the_reference():
    prog = fusec.compile("chain f(a: i32[6], b: i32[6]) -> i32[6] { return a ** b }", target="reference")
    a = np.array([2, 1, -1, -1, 0, 3], np.int32)
    b = np.array([-1, -3, -3, -2, -1, 2], np.int32)
    np.testing.assert_array_equal(prog.f(a, b), np.array([0, 1, -1, 1, 0, 9], np.int32))


def test_integer_pow_matches_the_cpu_target():
    src = "chain f(a: i32[6], b: i32[6]) -> i32[6] { return a ** b }"
    a = np.array([2, 1, -1, -1, 0, 3], np.int32)
    b = np.array([-1, -3, -3, -2, -1, 2], np.int32)
    ref = fusec.compile(src, target="reference").f(a, b)
    np.testing.assert_array_equal(fusec.compile(src, target="cpu").f(a, b), ref)


def test_a_constant_fold_to_a_negative_power_is_still_a_user_error():
    with pytest.raises(FdslError, match=r"an integer to a negative power is not an integer; write a float "
                                        r"\(2\.0 \*\* -1\)"):
        fusec.check("chain f(x: f32[4]) -> f32[4] { return x * 2 ** -1 }")
