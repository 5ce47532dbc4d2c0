"""The numerics verdict (runtime/compare.py, printed by fusec/report.py): NaN and infinities
compared position by position and counted on both sides, a disagreement named, and the relative
error shown only where it means something."""
import numpy as np

from fusec.report import ChainReport
from fusec.runtime.compare import compare

NAN, INF = np.nan, np.inf


def test_a_nan_where_the_reference_is_finite_fails_by_name_with_its_count_and_place():
    want = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], np.float32)
    got = want.copy()
    got[0, 1] = got[1, 2] = got[1, 0] = NAN
    c = compare(got, want, "f32")
    assert not c.ok
    assert c.describe().startswith("3 NaN where the reference has finite values, first at [0, 1] "
                                   "(got nan, expected 2); NaN 3, inf 0 (reference: NaN 0, inf 0); "
                                   "where both are finite: max abs err 0")


def test_every_kind_of_disagreement_is_named():
    want = np.array([1.0, NAN, INF, -INF, 2.0, NAN, INF, 3.0], np.float32)
    got = np.array([INF, 1.0, 5.0, INF, 2.0, NAN, NAN, -INF], np.float32)
    text = compare(got, want, "f32").describe()
    for phrase in ("2 infinities where the reference has finite values, first at [0] (got inf, expected 1)",
                   "1 finite values where the reference has NaN, first at [1]",
                   "1 finite values where the reference has infinities, first at [2] (got 5, expected inf)",
                   "1 infinities of the other sign than the reference's, first at [3] (got inf, expected -inf)",
                   "1 NaN where the reference has infinities, first at [6]",
                   "NaN 2, inf 3 (reference: NaN 2, inf 3)"):
        assert phrase in text, (phrase, text)


def test_matching_nan_and_inf_pass_and_are_counted():
    want = np.array([NAN, INF, -INF, 1.0, 0.0])
    c = compare(want.copy(), want, "f64")
    assert c.ok and c.max_abs == 0 and "NaN 1, inf 2 as the reference" in c.summary()
    assert "NaN" not in compare(np.ones(3), np.ones(3), "f64").summary()       # nothing to count


def test_the_relative_error_is_shown_away_from_zero_only():
    want = np.array([1.0, 0.5, 1e-9, 0.0], np.float32)
    got = np.array([1.00001, 0.5, 2e-9, 1e-7], np.float32)   # near 0: inside the absolute tolerance
    c = compare(got, want, "f32")
    assert c.ok and c.rel_floor == 1e-5 / 1e-4
    assert c.max_rel < 2e-5                                   # not 1 (the 1e-9 element) nor inf (the 0)
    assert c.summary() == "max abs err 1e-05, max rel err 1e-05 where |ref| >= 0.1"


def test_the_report_line_says_all_of_it():
    want = np.array([1.0, NAN, INF], np.float32)
    plan = {"ops": 1, "kernels": 1, "groups": []}
    rep = ChainReport("c", "cpu", {}, plan, [want], [compare(want.copy(), want, "f32")], ["f32[3]"])
    line = rep.format().splitlines()[-1]
    assert line == "  out 0 f32[3]: max abs err 0, max rel err 0 where |ref| >= 0.1; NaN 1, inf 1 as the reference -> ok"
    bad = want.copy()
    bad[0] = INF
    rep = ChainReport("c", "cpu", {}, plan, [bad], [compare(bad, want, "f32")], ["f32[3]"])
    assert rep.format().endswith("NaN 1, inf 2 (reference: NaN 1, inf 1) -> MISMATCH")
    (failure,) = rep.failures()
    assert failure.startswith("chain c output 0 (f32[3]): 1 infinities where the reference has finite values, "
                              "first at [0] (got inf, expected 1)")
    d = rep.as_dict()["numerics"][0]
    assert d["nan"] == {"reference": 1, "build": 1} and d["inf"] == {"reference": 1, "build": 2}
    assert d["special_mismatches"] and not d["ok"]
