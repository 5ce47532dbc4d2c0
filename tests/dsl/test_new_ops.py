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


# ---- creation ------------------------------------------------------------------------------

DTYPES = ("f16", "bf16", "f32", "f64", "i32", "i64", "bool")


def _node(src: str, op: str):
    return next(n for n in typed(src).chain("c").nodes if n.op == op)


@pytest.mark.parametrize("dt", DTYPES)
def test_full_and_full_like_take_the_dtype_given_or_x_s(dt):
    value = "true" if dt == "bool" else "1"
    n = _node(chain("x: f32[N, 3]", f"{dt}[N, 3]", f"full([N, 3], {value}, dtype={dt})"), "full")
    assert str(n.type) == f"{dt}[N, 3]"
    n = _node(chain(f"x: {dt}[N, 3]", f"{dt}[N, 3]", f"full_like(x, {value})"), "full_like")
    assert str(n.type) == f"{dt}[N, 3]" and n.attr("value") == (True if dt == "bool" else 1)
    n = _node(chain("x: i32[4]", f"{dt}[4]", f"full_like(x, {value}, dtype={dt})"), "full_like")
    assert str(n.type) == f"{dt}[4]"


def test_full_without_a_dtype_takes_the_value_s_weak_default():
    for value, dt in (("1.5", "f32"), ("-inf", "f32"), ("nan", "f32"), ("3", "i64"), ("false", "bool")):
        assert str(_node(chain("x: f32[2]", f"{dt}[2, 5]", f"full([2, 5], {value})"), "full").type) == f"{dt}[2, 5]"


@pytest.mark.parametrize("dt", [d for d in DTYPES if d != "bool"])
def test_arange_makes_numbers_of_its_dtype(dt):
    n = _node(chain("x: f32[S]", f"{dt}[S]", f"arange(S, dtype={dt})"), "arange")
    assert str(n.type) == f"{dt}[S]"


@pytest.mark.parametrize("call, shape, begin, step", [
    ("arange(5)", (5,), 0, 1), ("arange(2, 11, 3)", (3,), 2, 3), ("arange(10, 0, -4)", (3,), 10, -4),
    ("arange(-3, 3)", (6,), -3, 1), ("arange(0, 7, 7)", (1,), 0, 7)])
def test_arange_extent_is_numpy_s(call, shape, begin, step):
    import numpy as np
    n = _node(chain("x: f32[2]", f"i64[{shape[0]}]", call), "arange")
    assert n.type.shape == shape == np.arange(*[int(a) for a in call[7:-1].split(",")]).shape
    assert (n.attr("begin"), n.attr("step")) == (begin, step)


def test_a_symbolic_extent_unifies_with_what_it_meets():
    c = typed(chain("x: f32[M, 8]", "f32[M, 8]", "x + cast(reshape(arange(N), [N, 1]), f32) + full([N, 8], 0.5)"
                    ).replace("x: f32[M, 8]", "x: f32[M, 8], y: f32[N]")).chain("c")
    assert str(c.output_types[0]) == "f32[M, 8]"
    assert all(n.type.shape[0] == "M" for n in c.nodes if n.op in ("arange", "full"))


@pytest.mark.parametrize("src, line, col, message", [
    (chain("x: f32[4]", "i64[4]", "full([4], 1.5, dtype=i64)"), 2, 22,
     "full: the float value 1.5 cannot fill a i64 tensor; give an integer, or a float dtype"),
    (chain("x: f32[4]", "bool[4]", "full([4], 1, dtype=bool)"), 2, 22,
     "full: a bool tensor is filled with true or false, not 1"),
    (chain("x: f32[4]", "f16[4]", "full([4], 70000.0, dtype=f16)"), 2, 22,
     "full: the number 70000 is out of the range of f16 (its largest finite value is 65504)"),
    (chain("x: i32[4]", "i32[4]", "full_like(x, 3000000000)"), 2, 25,
     "full_like: the integer 3000000000 does not fit in i32 (-2147483648 to 2147483647)"),
    (chain("x: f32[4]", "f32[4]", "full([4, 0], 1.0)"), 2, 17, "full: dimensions must be positive, got [4, 0]"),
    (chain("x: f32[4]", "f32[4]", "full([4], x)"), 2, 22,
     "full's 'value' must be a number, true or false (or a symbol of this chain)"),
    (chain("x: f32[4]", "f32[4]", "full([K], 1.0)"), 2, 18, "a dimension must be an integer, -1 or a symbol of this chain"),
    (chain("x: f32[4]", "i64[4]", "arange(5, 1)"), 2, 22, "arange(5, 1, 1) is empty; FDSL has no empty tensors"),
    (chain("x: f32[4]", "i64[4]", "arange(0, 4, 0)"), 2, 25, "arange: 'step' must not be 0"),
    (chain("x: f32[4]", "f32[4]", "arange(0.5, 4.5)"), 2, 19,
     "arange: 'start' must be an integer or a symbol, got 0.5 (for floats, arange(n) and arithmetic: "
     "cast(arange(n), f32) * 0.5)"),
    (chain("x: f32[N]", "i64[N]", "arange(1, N)"), 2, 22,
     "arange: a symbolic stop (N) needs start 0 and step 1 (the extent must be the symbol itself): write "
     "arange(N) and add or multiply after"),
    (chain("x: f32[4]", "bool[4]", "arange(4, dtype=bool)"), 2, 22, "arange makes numbers, not bool"),
    (chain("x: f32[4]", "i32[4]", "arange(2147483645, 2147483649, dtype=i32)"), 2, 31,
     "arange: the integer 2147483648 does not fit in i32 (-2147483648 to 2147483647)"),
    (chain("x: f32[4]", "f32[4]", "full_like(2.0, 1.0)"), 2, 22, "full_like expects a tensor here, got the scalar 2.0"),
])
def test_creation_refusals_name_the_place(src, line, col, message):
    assert first_error(src) == (line, col, message)
