"""Regression: deep nesting (`return x + x + ...` with 400 terms, 500 nested parentheses, 300
nested `neg(`) was a RecursionError in the parser (exit 2). Up to dsl.limits.MAX_NESTING levels
parse, check and run; deeper is a user error at the place."""
import numpy as np
import pytest

import fusec
from fusec.cli import main
from fusec.dsl.limits import MAX_NESTING
from fusec.dsl.ast_format import format_ast
from fusec.dsl.parser import parse_text


def chain(expr: str) -> str:
    return f"chain f(x: f32[4]) -> f32[4] {{\n    return {expr}\n}}\n"


@pytest.mark.parametrize("expr, value", [
    (" + ".join(["x"] * 400), 400.0),
    ("(" * 500 + "x" + ")" * 500, 1.0),
    ("neg(" * 300 + "x" + ")" * 300, 1.0),
    ("-" * 301 + "x", -1.0),
    (" + ".join(["x"] * (MAX_NESTING - 10)), float(MAX_NESTING - 10)),
])
def test_deep_programs_run_on_the_reference(tmp_path, capsys, expr, value):
    path = tmp_path / "deep.fdsl"
    path.write_text(chain(expr))
    prog = fusec.compile(str(path), target="reference")
    np.testing.assert_allclose(prog.f(np.ones(4, np.float32)), np.full(4, value, np.float32))
    assert main([str(path), "--target", "reference", "--emit", "ast"]) == 0
    assert capsys.readouterr().out.startswith("(chain f")
    assert format_ast(parse_text(chain(expr)))


def test_deeper_than_the_limit_is_a_user_error_at_the_place(tmp_path, capsys):
    path = tmp_path / "deeper.fdsl"
    path.write_text(chain(" + ".join(["x"] * 5000)))
    assert main([str(path), "--target", "reference"]) == 1
    err = capsys.readouterr().err
    assert f"{path}:2:" in err
    assert f"this expression is nested more than {MAX_NESTING} levels deep" in err
    assert "Traceback" not in err and "internal error" not in err
    assert max(len(line) for line in err.splitlines()) < 400       # the long line is shown cut
