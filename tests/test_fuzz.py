"""The mutation fuzzer (tests/fuzz.py) in the default test run: a few hundred cases of every
family, none of which may end in an internal error, a traceback or a timeout. The long run is
`python -m tests.fuzz -n 10000` (docs/GUIDE.md: Fuzzing)."""
import importlib.util
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("fusec_tests_fuzz", Path(__file__).with_name("fuzz.py"))
fuzz = sys.modules["fusec_tests_fuzz"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fuzz)

CASES = 400


@pytest.fixture(scope="module")
def figures():
    return fuzz.fuzz(CASES, seed=2026, timeout_s=20)


def test_no_case_breaks_the_contract(figures):
    shown = [f"case {r.case.index} ({r.case.family}): {r.problem}: {r.stderr.strip()[-300:]}"
             for r in figures["failures"][:5]]
    assert figures["failing"] == 0, "\n".join(shown)
    assert set(figures["exit_codes"]) <= {"0", "1", "3"}


def test_every_family_ran_and_both_outcomes_happen(figures):
    assert set(figures["families"]) == set(fuzz.FAMILY_WEIGHTS)
    assert figures["exit_codes"].get("0", 0) > CASES // 20 and figures["exit_codes"].get("1", 0) > CASES // 2


def test_a_case_is_reproducible_from_its_seed_and_index():
    programs = fuzz.corpus()
    a, b = fuzz.make_case(7, 123, programs), fuzz.make_case(7, 123, programs)
    assert (a.family, a.program, a.argv, a.files) == (b.family, b.program, b.argv, b.files)


def test_the_contract_check_itself():
    assert fuzz._contract(2, "", "fusec: internal error: x") == "exit 2"
    assert fuzz._contract(1, "", "Traceback (most recent call last):\n") == "a traceback"
    assert fuzz._contract(1, "", "something went wrong\n") == "exit 1 without an error: line"
    assert fuzz._contract(1, "", "f.fdsl:1:2: error: no\n") is None
    assert fuzz._contract(0, "ok", "") is None
