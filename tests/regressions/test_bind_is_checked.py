"""Regression: `--bind M=²` was an internal error (str.isdigit accepts superscripts), `--bind
M=4,M=5` kept the last value silently and `--bind m=4` (no such symbol) was ignored; a negative
--seed was an internal error."""
import os

import pytest

from fusec.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOFTMAX = os.path.join(ROOT, "examples", "softmax.fdsl")


@pytest.mark.parametrize("flags, message", [
    (["--bind", "M=\u00b2"], "--bind expects NAME=SIZE pairs with positive sizes, such as M=64,N=128; got 'M=\u00b2'"),
    (["--bind", "M=\u0663"], "--bind expects NAME=SIZE pairs with positive sizes"),
    (["--bind", "M=0"], "--bind expects NAME=SIZE pairs with positive sizes"),
    (["--bind", "M=4,M=5"], "--bind gives M twice (M=4 and M=5)"),
    (["--bind", "M=4", "--bind", "M=4"], "--bind gives M twice (M=4 and M=4)"),
    (["--bind", "m=4"], "--bind m=4: no selected chain of"),
    (["--bind", "M=" + "9" * 40], "the size is out of range"),
    (["--seed", "-1"], "argument --seed: '-1' is not a seed (a non-negative integer)"),
])
def test_odd_bindings_are_usage_errors(capsys, flags, message):
    assert main([SOFTMAX, "--target", "reference", *flags]) == 1
    err = capsys.readouterr().err
    assert err.startswith("fusec: error: ") and message in err and "internal error" not in err


def test_an_unknown_symbol_names_the_known_ones_and_a_close_one(capsys):
    assert main([SOFTMAX, "--target", "reference", "--bind", "m=4"]) == 1
    assert "their free symbols are M, N; did you mean M?" in capsys.readouterr().err


def test_a_symbol_the_checker_unified_away_says_so(tmp_path, capsys):
    f = tmp_path / "u.fdsl"
    f.write_text("chain unified(x: f32[M, N], b: f32[64]) -> f32[M, 64] {\n    return x + b\n}\n")
    assert main([str(f), "--target", "reference", "--bind", "N=64"]) == 1
    assert ("--bind N=64: the shapes of chain 'unified' fix N (the checker unified it with another size); their "
            "free symbols are M") in capsys.readouterr().err
    assert main([str(f), "--target", "reference", "--bind", "M=3"]) == 0
