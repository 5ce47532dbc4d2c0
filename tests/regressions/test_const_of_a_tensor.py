"""Regression: `const c = -x` with a tensor `x` crashed the checker (AttributeError: 'int'
object has no attribute 'kind'), and `const c = x` made a const of a tensor."""
import pytest

import fusec
from fusec.cli import main
from fusec.dsl.diagnostics import FdslError


@pytest.mark.parametrize("value, col", [("-x", 16), ("x", 15), ("x * 2", 15), ("2 - -x", 20)])
def test_a_const_of_a_tensor_is_a_user_error(value, col):
    with pytest.raises(FdslError) as e:
        fusec.check(f"chain f(x: f32[4]) -> f32[4] {{\n    const c = {value}\n    return x\n}}\n")
    (d,) = e.value.diagnostics
    assert (d.span.line, d.span.col) == (2, col)
    assert d.message == ("a const must be a compile-time number, and 'x' is a tensor parameter; bind it with "
                         "`name = ...` instead")


def test_an_unknown_name_in_a_const(tmp_path, capsys):
    f = tmp_path / "c.fdsl"
    f.write_text("const k = -y\nchain f(x: f32[4]) -> f32[4] {\n    return x * k\n}\n")
    assert main([str(f), "--target", "reference"]) == 1
    assert f"{f}:1:12: error: unknown name 'y'; a const is made of numbers and other consts" in capsys.readouterr().err
