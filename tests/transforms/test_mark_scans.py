"""mark-scans (compiler/transforms/mark_scans.py): a running sum or product generic, known by its
body (combine(acc, select(j <= i, value, neutral)) over a last reduction loop j), carries the
`fusec.scan` mark and its axis after elementwise fusion rebuilt it; the planner and the emitter
then run it as a scan."""
import pytest

from fusec.compiler.marks import SCAN, SCAN_AXIS
from fusec.compiler.mlir import ir, parse_module, print_ir
from fusec.compiler.transforms.mark_scans import mark_scans

from .stages import compile_, run_matches, texts

OFF = frozenset({"mark-scans"})
# exp fuses into the cumprod: elementwise fusion rebuilds the generic without the lowering's mark
SCAN_OF_EXP = """chain f(x: f32[M, N]) -> f32[M, N] {
    return cumprod(exp(x), axis=0)
}"""
B = dict(M=4, N=6)


def _unmarked() -> str:
    return texts(SCAN_OF_EXP, B, until="graph", disabled_passes=OFF)["graph"]


@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_the_fused_scan_is_marked_and_planned_as_a_scan(target):
    on = compile_(SCAN_OF_EXP, B, target, until="plan")
    assert f'{SCAN} = "cumprod", {SCAN_AXIS} = 0 : i64' in on.texts["graph"]
    assert "math.exp" in on.texts["graph"]
    assert "; scan: " in on.texts["plan"], on.texts["plan"]
    off = compile_(SCAN_OF_EXP, B, target, until="plan", disabled_passes=OFF)
    assert SCAN not in off.texts["graph"]
    assert "scan" not in off.texts["plan"], off.texts["plan"]     # the N x N reduction it also is


def test_the_pass_marks_the_kind_and_axis_from_the_body():
    m = parse_module(_unmarked())
    with m.context:
        assert mark_scans(m) == 1
    (op,) = [o for o in m.body.operations[0].regions[0].blocks[0].operations
             if o.operation.name == "linalg.generic"]
    assert ir.StringAttr(op.attributes[SCAN]).value == "cumprod"
    assert ir.IntegerAttr(op.attributes[SCAN_AXIS]).value == 0
    cumsum = parse_module(texts("chain g(x: f32[M, N]) -> f32[M, N] { return cumsum(x * 2.0, axis=1) }", B,
                                until="graph", disabled_passes=OFF)["graph"])
    with cumsum.context:
        assert mark_scans(cumsum) == 1
    assert f'{SCAN} = "cumsum", {SCAN_AXIS} = 1 : i64' in print_ir(cumsum)


@pytest.mark.parametrize("edit", [
    ("arith.cmpi ule", "arith.cmpi ult"),                  # j < i: not a running product
    ("arith.select %6, %3, %cst :", "arith.select %6, %3, %two :"),   # not the product's neutral 1
    ("arith.mulf %out, %7", "arith.addf %out, %3"),        # no select: a plain reduction
])
def test_a_body_that_is_not_a_scan_is_left_unmarked(edit):
    text = _unmarked()
    assert edit[0] in text
    text = text.replace(edit[0], edit[1]).replace(
        "%cst = arith.constant 1.000000e+00 : f32", "%cst = arith.constant 1.000000e+00 : f32\n"
        "    %two = arith.constant 2.000000e+00 : f32")
    m = parse_module(text)
    with m.context:
        assert mark_scans(m) == 0
    assert SCAN not in print_ir(m)


def test_a_plain_reduction_is_not_a_scan():
    m = parse_module(texts("chain g(x: f32[M, N]) -> f32[M] { return sum(exp(x), axis=1) }", B,
                           until="graph", disabled_passes=OFF)["graph"])
    with m.context:
        assert mark_scans(m) == 0


@pytest.mark.parametrize("disabled", [(), OFF])
def test_scan_or_reduction_the_numbers_are_the_references(disabled):
    run_matches(SCAN_OF_EXP, B, "cuda-sim", disabled_passes=disabled)
