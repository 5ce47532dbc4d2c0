"""script (compiler/transforms/script.py): transform scripts as data: ops found by their
`fusec.tag` (group * 10000 + op), steps printed into one named sequence, applied by MLIR's
transform interpreter; a failing script or pass is a CompilerInternalError naming the stage."""
import pytest

from fusec.compiler.errors import CompilerInternalError
from fusec.compiler.marks import TAG
from fusec.compiler.mlir import ir, parse_module, print_ir
from fusec.compiler.transforms.script import ANY, Step, apply_script, match_tag, run_passes, script_text, tag_of

MODULE = f"""
func.func @f(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>, %c: tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>) {{
  %0 = linalg.matmul {{{TAG} = 10002 : i64}} ins(%a, %b : tensor<2x3xf32>, tensor<3x4xf32>) outs(%c : tensor<2x4xf32>) -> tensor<2x4xf32>
  %1 = linalg.matmul {{{TAG} = 2 : i64}} ins(%a, %b : tensor<2x3xf32>, tensor<3x4xf32>) outs(%c : tensor<2x4xf32>) -> tensor<2x4xf32>
  return %0, %1 : tensor<2x4xf32>, tensor<2x4xf32>
}}
"""
GENERALIZE = Step(f"%g = transform.structured.generalize %m : ({ANY}) -> {ANY}")


def test_a_tag_names_one_op_of_one_kernel():
    assert tag_of(0, 7) == 7 and tag_of(1, 2) == 10002 and tag_of(12, 345) == 120345
    assert match_tag("m", 10002).text == (f'%m = transform.structured.match attributes {{"{TAG}" = 10002 : i64}} '
                                          f'in %root : ({ANY}) -> {ANY}')


def test_the_steps_are_one_named_sequence_that_parses():
    text = script_text([match_tag("m", 10002), GENERALIZE])
    assert text.startswith("module attributes {transform.with_named_sequence} {\n")
    assert "transform.named_sequence @__transform_main(%root: !transform.any_op {transform.consumed})" in text
    lines = text.splitlines()
    assert lines[2] == "    " + match_tag("m", 10002).text and lines[3] == "    " + GENERALIZE.text
    assert lines[4] == "    transform.yield"
    with ir.Context():
        ir.Module.parse(text)


def test_a_script_changes_the_tagged_op_only():
    m = parse_module(MODULE)
    apply_script(m, script_text([match_tag("m", tag_of(1, 2)), GENERALIZE]), "tiled")
    text = print_ir(m)
    (generic,) = [l for l in text.splitlines() if "linalg.generic" in l]
    assert f"{TAG} = 10002" in generic
    (kept,) = [l for l in text.splitlines() if "linalg.matmul" in l]
    assert f"{TAG} = 2 " in kept


def test_a_failing_script_is_an_internal_error_naming_the_stage():
    m = parse_module(MODULE)
    bad = Step(f'%p = transform.get_parent_op %m {{op_name = "scf.forall"}} : ({ANY}) -> {ANY}')   # none
    with pytest.raises(CompilerInternalError) as info:
        apply_script(m, script_text([match_tag("m", tag_of(1, 2)), bad]), "tiled")
    assert info.value.stage == "tiled" and "transform script failed" in info.value.message
    assert "could not find a parent op" in info.value.message


def test_a_failing_pass_is_an_internal_error_naming_it():
    m = parse_module(MODULE)
    with m.context:
        run_passes(m, ("canonicalize",), "gpu")
        with pytest.raises(CompilerInternalError) as info:
            run_passes(m, ("canonicalize", "no-such-pass"), "gpu")
    assert info.value.stage == "gpu" and "no-such-pass" in info.value.message
