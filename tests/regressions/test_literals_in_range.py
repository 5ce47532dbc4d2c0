"""Regression: integer literals out of range (`x + -99999999999999999999`, `axis=-9999...`, an
i32 chain plus `3000000000`) were OverflowErrors in constant folding (exit 2), and `fusec
compile` even wrote an artifact that crashed later at `fusec run`; `1e400` silently became inf.
Integer literals are now checked against the dtype they meet, axes against the rank, and a
float literal or constant must stay finite in its dtype."""
import numpy as np
import pytest

import fusec
from fusec.cli import main
from fusec.dsl.diagnostics import FdslError


def chain(params: str, ret: str, body: str) -> str:
    return f"chain f({params}) -> {ret} {{\n    return {body}\n}}\n"


@pytest.mark.parametrize("params, ret, body, message", [
    ("x: i32[4]", "i32[4]", "x + -99999999999999999999",
     "2:16: error: the integer -99999999999999999999 does not fit in i32 (-2147483648 to 2147483647)"),
    ("x: i32[4]", "i32[4]", "x + 3000000000",
     "2:16: error: the integer 3000000000 does not fit in i32 (-2147483648 to 2147483647)"),
    ("x: f32[4, 3]", "f32[4]", "sum(x, axis=-99999999999999999999)",
     "2:19: error: axis -99999999999999999999 is out of range for a tensor of rank 2"),
    ("x: f32[4]", "f32[4]", "x * 1e400",
     "2:16: error: the float literal 1e400 is out of range: the largest finite f64 is 1.79769e+308"),
    ("x: f32[4]", "f32[4]", "x * 1e39",
     "2:16: error: the number 1e+39 is out of the range of f32 (its largest finite value is 3.40282e+38)"),
    ("x: f16[4]", "f16[4]", "x + 70000",
     "2:16: error: the number 70000 is out of the range of f16 (its largest finite value is 65504)"),
    ("x: f32[4]", "f32[4]", "x * (99999999999999999999 * 2)",
     "2:17: error: the integer 99999999999999999999 does not fit in i64, in which integer constants are computed"),
    ("x: f32[1, 3, 8, 8], w: f32[2, 3, 3, 3]", "f32[1, 2, 1, 1]", "conv2d(x, w, stride=99999999999999999999)",
     "2:32: error: conv2d's 'stride' is 99999999999999999999, which does not fit in i64"),
    ("x: f32[99999999999999999999]", "f32[4]", "x",
     "1:16: error: the dimension 99999999999999999999 does not fit in i64 (at most 9223372036854775807)"),
])
def test_out_of_range_literals_are_user_errors(params, ret, body, message):
    with pytest.raises(FdslError) as e:
        fusec.check(chain(params, ret, body))
    assert f"<string>:{message}" in str(e.value)


def test_in_range_literals_still_work():
    # a negated literal is exact (it may be beyond i64 and still fit a float dtype)
    prog = fusec.compile(chain("x: f32[4]", "f32[4]", "x + -99999999999999999999"), target="reference")
    np.testing.assert_array_equal(prog.f(np.zeros(4, np.float32)), np.full(4, -1e20, np.float32))
    prog = fusec.compile(chain("x: i64[4]", "i64[4]", "x + 3000000000"), target="reference")
    np.testing.assert_array_equal(prog.f(np.zeros(4, np.int64)), np.full(4, 3000000000))
    prog = fusec.compile(chain("x: f32[4]", "f32[4]", "x * (1.0 / 0.0)"), target="reference")   # arithmetic: IEEE
    assert np.isinf(prog.f(np.ones(4, np.float32))).all()


def test_compile_writes_no_artifact_for_an_out_of_range_literal(tmp_path, capsys):
    src = tmp_path / "big.fdsl"
    src.write_text(chain("x: i32[4]", "i32[4]", "x + 3000000000"))
    assert main(["compile", str(src), "-o", str(tmp_path / "art"), "--target", "cpu"]) == 1
    assert "does not fit in i32" in capsys.readouterr().err
    assert not (tmp_path / "art").exists()
