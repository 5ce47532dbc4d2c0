"""The ops and literals issue 38 added for imported models, at the checker: the `inf` and `nan`
literals, the logical ops and any / all on bools, relu6 / hardsigmoid / hardswish, and the
creation ops: their types, and each refusal at its exact place."""
import math
import textwrap

import pytest

import fusec
from fusec.dsl.diagnostics import FdslError


def typed(src: str):
    return fusec.check(textwrap.dedent(src))


def first_error(src: str) -> tuple[int, int, str]:
    with pytest.raises(FdslError) as info:
        typed(src)
    d = info.value.diagnostics[0]
    return d.span.line, d.span.col, d.message


def chain(params: str, ret: str, body: str) -> str:
    return f"chain c({params}) -> {ret} {{\n    return {body}\n}}\n"


def test_inf_and_nan_are_weak_floats_that_take_the_tensor_dtype():
    for dt in ("f16", "bf16", "f32", "f64"):
        c = typed(chain(f"x: {dt}[4]", f"{dt}[4]", "where(x > 0.0, x, -inf) + nan * 0.0")).chain("c")
        consts = [n for n in c.nodes if n.op == "constant"]
        assert {n.type.dtype.name for n in consts} == {dt}
        values = [n.attr("value") for n in consts]
        assert -math.inf in values and any(math.isnan(v) for v in values)


def test_inf_folds_as_a_float_and_a_const_may_hold_it():
    c = typed("const NEG = -inf\n" + chain("x: f32[4]", "f32[4]", "maximum(x, NEG * 2.0)")).chain("c")
    (k,) = [n for n in c.nodes if n.op == "constant"]
    assert k.attr("value") == -math.inf


@pytest.mark.parametrize("src, line, col, message", [
    (chain("x: i32[4]", "i32[4]", "x + inf"), 2, 16,
     "the float literal inf cannot combine with i32 values; write an integer or cast the tensor with cast(x, f32)"),
    (chain("x: bool[4]", "bool[4]", "where(x, nan, x)"), 2, 21,
     "the float literal nan cannot combine with bool values; write an integer or cast the tensor with cast(x, f32)"),
    ("chain c(x: f32[4]) -> f32[4] {\n    inf = x\n    return inf\n}\n", 2, 5, None),
    (chain("x: f32[4]", "bool[4]", "logical_and(x, x > 0.0)"), 2, 24,
     "logical_and expects bool tensors, got f32[4]; compare first (x > 0) or cast(x, bool)"),
    (chain("x: f32[4]", "bool[4]", "logical_or(x > 0.0, x)"), 2, 32,
     "logical_or expects bool tensors, got f32[4]; compare first (x > 0) or cast(x, bool)"),
    (chain("x: i32[4]", "bool[4]", "logical_not(x)"), 2, 24,
     "logical_not expects bool tensors, got i32[4]; compare first (x > 0) or cast(x, bool)"),
    (chain("x: bool[4]", "bool[4]", "logical_xor(x, 1)"), 2, 27, "the number 1 cannot combine with bool values; use true or false"),
    (chain("x: bool[4]", "bool", "logical_and(1, 2) == x"), 2, 12, "logical_and expects bool values (true, false), got 1, 2"),
    (chain("x: f32[4, 3]", "bool[4]", "any(x, axis=1)"), 2, 16,
     "any expects a bool tensor, got f32[4, 3]; compare first (x > 0) or cast(x, bool)"),
    (chain("x: i64[4, 3]", "bool", "all(x)"), 2, 16,
     "all expects a bool tensor, got i64[4, 3]; compare first (x > 0) or cast(x, bool)"),
    (chain("x: i32[4]", "i32[4]", "hardswish(x)"), 2, 22,
     "hardswish expects a floating-point tensor, got i32[4]; convert with cast(x, f32)"),
    (chain("x: bool[4]", "bool[4]", "relu6(x)"), 2, 18,
     "relu6 expects a floating-point tensor, got bool[4]; convert with cast(x, f32)"),
])
def test_refusals_name_the_place(src, line, col, message):
    got = first_error(src)
    assert got[:2] == (line, col), got
    if message is not None:
        assert got[2] == message


def test_logical_ops_and_bool_reductions_type_as_bools_and_broadcast():
    c = typed(chain("x: f32[N, 8], m: bool[8]", "(bool[N], bool[N, 1], bool)",
                    "any(logical_and(x > 0.0, m), axis=1), all(logical_not(m) |> logical_or(x < 1.0), axis=-1, "
                    "keepdims=true), logical_xor(any(m), true)")).chain("c")
    assert [str(t) for t in c.output_types] == ["bool[N]", "bool[N, 1]", "bool"]


def test_hard_activations_keep_the_dtype_and_clamp_takes_scalars():
    c = typed(chain("x: f16[4]", "f16[4]", "hardswish(x) + hardsigmoid(x) + relu6(x) + clamp(x, 0, 6)")).chain("c")
    assert str(c.output_types[0]) == "f16[4]"
    assert {n.attr("value") for n in c.nodes if n.op == "constant"} == {0.0, 6.0}
