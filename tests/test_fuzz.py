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


# ---- fuzzing that compiles (--targets) ------------------------------------------------------------

COMPILED_PROGRAMS = 5           # programs that pass the checker, each compiled on cpu, cuda-sim and mlir-jit


@pytest.fixture(scope="module")
def compiled_figures():
    programs = fuzz.corpus()
    cases = [fuzz.make_case(2026, i, programs) for i in range(400)]
    # those small enough for the simulator (the examples' fixed sizes, 768 x 3072, are not)
    small = [c for c in cases if (cc := fuzz.compiled_case(c, 2026)) and not fuzz.too_large(cc, "cuda-sim")]
    return fuzz.fuzz_compiled(small, ["reference", *fuzz.COMPILED_TARGETS], timeout_s=120, seed=2026,
                              limit=COMPILED_PROGRAMS)


@pytest.mark.slow
def test_compiled_programs_match_the_reference_or_end_in_a_user_error(compiled_figures):
    shown = [f"case {r.case.index} on {r.target}: {r.problem} [{r.kind}]\n{r.case.program.decode()}\n"
             f"{r.stderr.strip()[-600:]}" for r in compiled_figures["failures"][:3]]
    assert compiled_figures["failing"] == 0, "\n".join(shown)
    per = compiled_figures["targets"]
    assert compiled_figures["cases"]["programs compiled"] == COMPILED_PROGRAMS
    for target in fuzz.COMPILED_TARGETS:
        assert per[target]["runs"] == COMPILED_PROGRAMS, (target, per[target])
        assert per[target]["ok"] + per[target]["user_errors"] == COMPILED_PROGRAMS
        assert per[target]["ok"] >= COMPILED_PROGRAMS // 2, (target, compiled_figures["refusals"])


def test_a_compiled_case_is_one_chain_at_tiny_sizes_without_fallback():
    programs = fuzz.corpus()
    cc = next(c for c in (fuzz.compiled_case(fuzz.make_case(3, i, programs), 3) for i in range(200)) if c and c.bind)
    argv = cc.argv("cpu")
    assert argv[argv.index("--target") + 1] == "cpu" and "--no-fallback" in argv
    assert argv.count("--chain") == 1 and set(cc.bind.values()) <= set(fuzz.TINY)
    same = fuzz.compiled_case(fuzz.Case(99, "other", cc.program, []), 3)
    assert same.key() == cc.key()           # one compiled case per distinct program: duplicates are skipped
    assert fuzz.compiled_case(fuzz.Case(0, "x", b"chain f(x: f32[N]) -> i32[N] { return x }\n", []), 3) is None


def test_the_compiled_contract_and_failure_kinds():
    assert fuzz.compiled_contract(3, "", "fusec: numerics failure: out 0") == "a mismatch (exit 3)"
    assert fuzz.compiled_contract(4, "", "") == "a fallback (exit 4)"
    assert fuzz.compiled_contract(1, "", "prog.fdsl:2:5: error: cannot add f32[N] and f16[N]: dtypes differ\n") is None
    assert fuzz.compiled_contract(0, "", "") is None
    err = "fusec: internal error in stage kernels: KeyError: 'x'\n  reproduce with: ..."
    assert fuzz.failure_kind(fuzz.compiled_contract(2, "", err), err) == "internal error KeyError in kernels"
    assert fuzz.failure_kind("a mismatch (exit 3)", "") == "a mismatch (exit 3)"
    assert fuzz.failure_kind("a timeout (120 s)", "") == "a timeout"
    assert fuzz.failure_kind(None, "") is None


def test_a_hang_or_a_crash_in_the_worker_is_a_failure_and_the_next_run_goes_on():
    worker = fuzz.Worker()
    try:
        spin = worker.run(["--fuzz-selftest", "spin"], timeout_s=1)       # 1 s of CPU time
        assert spin["problem"] == "a timeout (1 s)" and spin["rc"] is None
        hang = worker.run(["--fuzz-selftest", "hang"], timeout_s=0.5)     # asleep: 2.5 s on the clock
        assert hang["problem"] == "a timeout (0.5 s)" and hang["seconds"] >= 0.5 * fuzz.WALL_FACTOR
        crash = worker.run(["--fuzz-selftest", "crash"], timeout_s=60)
        assert crash["problem"].startswith("a crash (worker ended with -6)"), crash
        ok = worker.run([str(fuzz.EXAMPLES / "softmax.fdsl"), "--target", "reference", "--bind", "M=2,N=3"], 60)
        assert ok["problem"] is None and ok["rc"] == 0 and "softmax_rows" in ok["out"], ok
        assert worker.started == 4
    finally:
        worker.close()


def test_the_minimiser_keeps_what_fails_and_drops_the_rest():
    src = (fuzz.EXAMPLES / "attention.fdsl").read_text()
    cc = fuzz.CompiledCase(0, "x", src.encode(), "by_hand", {"B": 3, "S": 4}, 1, False)
    calls = []

    def fails(c):               # stands for "still fails the same way": passes the gate and keeps an exp(
        calls.append(c)
        return fuzz.gate(c, 20).rc == 0 and b"exp(" in c.program
    small, tried = fuzz.minimise(cc, fails)
    text = small.program.decode()
    assert fails(small) and len(text) < len(src) // 10, text
    assert text.count("chain ") == 1 and "exp(" in text and "softmax" not in text and "max(" not in text
    assert small.bind == {"B": 1, "S": 1} and small.fuse, small      # sizes and --no-fuse shrunk too
    assert tried == len({c.key() for c in calls[:-1]})               # each candidate tried once


def test_fix_declared_follows_a_smaller_body():
    text = "chain g(x: f32[M, N]) -> (f32[M], i32) {\n    return x, sum(x, axis=-1)\n}\n"
    fixed = fuzz.fix_declared(text)
    assert fixed.startswith("chain g(x: f32[M, N]) -> (f32[M, N], f32[M]) {")
    import fusec
    fusec.check(fixed)
