"""The checker on issue 17's forms: subscripts (slices and indices), `a, b = split(...)`,
concat's list, gather and embedding, the scans and arg-reductions. Typed nodes follow the
contract the compiler relies on (dsl/ops/); every error has its exact line:col."""
import textwrap

import pytest

import fusec
from fusec.dsl.diagnostics import FdslError

HEAD = "chain f(x: f32[8, N], i: i64[3], t: f32[10, 4], s: f32) -> f32 {\n"


def typed(src: str):
    return fusec.check(textwrap.dedent(src))


def errors(src: str) -> list[tuple[int, int, str]]:
    with pytest.raises(FdslError) as info:
        typed(src)
    return [(d.span.line, d.span.col, d.message) for d in info.value.diagnostics]


def body(line: str) -> str:
    return HEAD + "    " + line.replace("\n", "\n    ") + "\n}\n"


# (a chain body, line, col, exact message of the first error)
BAD = [
    # subscripts: what an item may be
    ("return sum(x[i])", 2, 18,
     "an index must be a compile-time integer; use gather(x, idx, axis=k) for indices computed at run time"),
    ("return sum(x[i + 1])", 2, 18,
     "an index must be a compile-time integer; use gather(x, idx, axis=k) for indices computed at run time"),
    ("return sum(x[[0, 1]])", 2, 18,
     "an index must be a compile-time integer; use gather(x, idx, axis=k) for indices computed at run time"),
    ("return sum(x[:i])", 2, 19,
     "a slice bound must be a compile-time integer or a dimension symbol: slices have extents known when the "
     "chain is compiled (use gather(x, idx, axis=k) for indices computed at run time)"),
    ("return sum(x[x[0, 0]:])", 2, 18,
     "a slice bound must be a compile-time integer or a dimension symbol: slices have extents known when the "
     "chain is compiled (use gather(x, idx, axis=k) for indices computed at run time)"),
    ("return sum(x[::sum(i)])", 2, 20, "a slice step must be a compile-time integer"),
    ("return sum(x[1.5])", 2, 18, "an index must be an integer, got the float 1.5"),
    ("return sum(x[0.0:2])", 2, 18, "a slice bound must be an integer, got the float 0.0"),
    ("return sum(x[::2.0])", 2, 20, "a slice step must be an integer, got the float 2.0"),
    ("return sum(x[true])", 2, 18, "an index must be an integer, got the bool true"),
    ("half = 0.5\nreturn sum(x[half:])", 3, 18, "a slice bound must be an integer, got the float 0.5"),
    ('return sum(x["a"])', 2, 18, "an index must be an integer; a string is not one"),
    ("return sum(x[f32])", 2, 18, "an index must be an integer; a dtype is not one"),
    ("return sum(x[1+1])", 2, 18, "arithmetic is not evaluated in a subscript; declare `const k1 = ...` and write x[k1]"),
    ("return sum(x[:, :N-1])", 2, 22, "arithmetic is not evaluated in a subscript; declare `const k1 = ...` and write "
                                      "x[k1] (or use a symbol itself as a bound)"),
    ("return sum(x[N])", 2, 18, "an index must be an integer; the symbol 'N' can only be a slice bound (x[:N])"),
    ("return sum(x[::N])", 2, 20, "a slice step must be an integer, not the symbol 'N'"),
    ("return sum(x[:, -N:])", 2, 21, "a slice bound cannot be a negated symbol (-N); a bound is an integer or a "
                                     "symbol itself"),
    ("return sum(x[:, :K])", 2, 22, "unknown name 'K'"),
    ("return sum(x[qq])", 2, 18, "unknown name 'qq'"),
    ("return sum(x[-qq])", 2, 19, "unknown name 'qq'"),
    ("return sum(x[qq + 1:])", 2, 18, "unknown name 'qq'"),
    ("return sum(x[:, -(-N):])", 2, 21, "a slice bound cannot be a negated symbol (-N); a bound is an integer or a "
                                        "symbol itself"),
    ("return sum(x[:, None])", 2, 21, "a subscript cannot insert a new axis (x[None]); use reshape(x, [...]) to add "
                                      "an axis of extent 1"),
    ("return sum(x[99999999999999999999])", 2, 18, "the index 99999999999999999999 does not fit in i64"),
    ("return sum(x[-99999999999999999999:])", 2, 18, "the slice bound -99999999999999999999 does not fit in i64"),
    # subscripts: against the tensor
    ("return sum(x[0, 0, 0])", 2, 24, "too many indices: f32[8, N] has 2 axes but the subscript has 3 items"),
    ("return sum(x[..., 0, :, 1:])", 2, 29, "too many indices: f32[8, N] has 2 axes but the subscript has 3 items"),
    ("return sum(i[0][0])", 2, 16, "cannot subscript i64, a scalar: it has no axes to index"),
    ("return s[0]", 2, 12, "cannot subscript f32, a scalar: it has no axes to index"),
    ("return 2.0[0]", 2, 12, "cannot subscript the compile-time scalar 2.0; only a tensor has axes to index"),
    ("c = 3\nreturn c[...]", 3, 12, "cannot subscript the compile-time scalar 3; only a tensor has axes to index"),
    ("return sum(x[..., ...])", 2, 23, "a subscript may hold one '...' only"),
    ("return sum(x[::0])", 2, 18, "the step of axis 0 is 0; a step must be a non-zero integer"),
    ("return sum(x[:, 1:-1:0])", 2, 21, "the step of axis 1 is 0; a step must be a non-zero integer"),
    ("return sum(x[8])", 2, 18, "index 8 is out of range for axis 0 of extent 8"),
    ("return sum(x[-9, 0])", 2, 18, "index -9 is out of range for axis 0 of extent 8"),
    ("return sum(x[0:9])", 2, 18, "the bound 9 is outside axis 0 of extent 8 (slices do not clamp: bounds go from "
                                  "-8 to 8)"),
    ("return sum(x[-9:])", 2, 18, "the bound -9 is outside axis 0 of extent 8 (slices do not clamp: bounds go from "
                                  "-8 to 8)"),
    ("return sum(x[2:1])", 2, 18, "axis 0 would be empty (the slice takes no element of it); a dimension must be "
                                  "positive"),
    ("return sum(x[1:5:-1])", 2, 18, "axis 0 would be empty (the slice takes no element of it); a dimension must "
                                     "be positive"),
    ("return sum(x[:N])", 2, 18, "the bound N is a symbol but axis 0 has the fixed extent 8"),
    ("return sum(x[:, 1:])", 2, 21, "the slice of axis 1 keeps N - 1 elements; a dimension must be a number or a "
                                    "single symbol"),
    ("return sum(x[..., :-1])", 2, 23, "the slice of axis 1 keeps N - 1 elements; a dimension must be a number or a "
                                       "single symbol"),
    ("return sum(x[:, ::2])", 2, 21, "the slice of axis 1 keeps (N) / 2, rounded up, elements; a dimension must be a "
                                     "number or a single symbol"),
    ("return x[0, 0] + x[0, :2]", 2, 12, "returns f32[2] but the chain declares f32"),
    ("return slice(x, 1)", 2, 12, "unknown operator 'slice'; a slice is written as a subscript: x[a:b], x[::2], "
                                  "x[..., 0]"),
    ("return slice", 2, 12, "unknown name 'slice'"),
    ("return sum(slise(x))", 2, 16, "unknown operator 'slise'; did you mean 'split'?"),
    # split
    ("y = split(x, [4, 4])\nreturn sum(y)", 2, 9, "split makes several values: bind them to names with "
                                                  "`a, b = split(...)`, one per part (a split cannot be used "
                                                  "inside an expression)"),
    ("return sum(x |> split([4, 4]))", 2, 21, "split makes several values: bind them to names with "
                                              "`a, b = split(...)`, one per part (a split cannot be used inside "
                                              "an expression)"),
    ("a, b = split(x, [2, 2, -1])\nreturn sum(a)", 2, 5, "split makes 3 parts but 2 names are bound"),
    ("a, b, c = split(x, [4, 4])\nreturn sum(a)", 2, 5, "split makes 2 parts but 3 names are bound"),
    ("a, b = x + 1.0\nreturn sum(a)", 2, 5, "only split(...) makes several values; this binds 2 names to one value "
                                            "(write `name = ...`)"),
    ("a, b = concat([x, x])\nreturn sum(a)", 2, 5, "only split(...) makes several values; this binds 2 names to "
                                                   "one value (write `name = ...`)"),
    ("a, b = split(x, [4, 5])\nreturn sum(a)", 2, 21, "split: the sizes [4, 5] do not add up to the extent 8 of "
                                                      "axis 0"),
    ("a, b = split(x, [9, -1])\nreturn sum(a)", 2, 21, "split: the sizes [9, -1] do not add up to the extent 8 of "
                                                       "axis 0"),
    ("a, b = split(x, [0, 8])\nreturn sum(a)", 2, 21, "split: sizes must be positive (or one -1), got [0, 8]"),
    ("a, b = split(x, [-1, -1])\nreturn sum(a)", 2, 21, "split: only one size may be -1"),
    ("a, b = split(x, [2, -1], axis=1)\nreturn sum(a)", 2, 21,
     "split: axis 1 has the symbolic extent N; the parts' extents would not be numbers or single symbols (split "
     "a dimension of fixed extent)"),
    ("a, b = split(x, 4)\nreturn sum(a)", 2, 21, "split's 'sizes' must be a list of dimensions, such as [64, -1] "
                                                 "(one size per part)"),
    ("a, b = split(x, [4, 4], axis=2)\nreturn sum(a)", 2, 29, "axis 2 is out of range for a tensor of rank 2"),
    ("a, b = split(s, [1, 1])\nreturn sum(a)", 2, 18, "split cuts a tensor along an axis and needs rank 1 or more, "
                                                      "got f32"),
    ("a, b = split(2.0, [1, 1])\nreturn sum(a)", 2, 18, "split expects a tensor here, got the scalar 2.0"),
    ("a, a = split(x, [4, 4])\nreturn sum(a)", 2, 8, "'a' is already defined; names are single-assignment"),
    ("a, N = split(x, [4, 4])\nreturn sum(a)", 2, 8, "'N' is a dimension symbol of this chain and cannot name a "
                                                     "value"),
    # concat
    ("return sum(concat(x, axis=1))", 2, 23, "concat's 'xs' must be a list of tensors in [ ], such as "
                                             "concat([a, b], axis=0)"),
    ("return sum(concat([], axis=1))", 2, 23, "concat needs at least one tensor in its list"),
    ("return sum(concat([x, 2.0]))", 2, 27, "concat expects a tensor here, got the scalar 2.0"),
    ("return sum(concat([x, x], axis=1))", 2, 24, "concat: axis 1 would have 2*N elements; a dimension must be a "
                                                  "number or a single symbol"),
    ("return sum(concat([x[:, :4], t], axis=1))", 2, 34, "concat: f32[10, 4] does not fit f32[8, 4] at axis 0 "
                                                         "(10 vs 8); only axis 1 may differ"),
    ("return sum(concat([t, cast(i, f32)]))", 2, 27, "concat: f32[3] has rank 1 but the first tensor f32[10, 4] "
                                                     "has rank 2"),
    ("return sum(concat([t, cast(t, f16)]))", 2, 27, "concat: f16[10, 4] has dtype f16 but the first tensor is "
                                                     "f32; convert with cast(x, f32)"),
    ("return sum(concat([s, s]))", 2, 24, "concat joins tensors along an axis and needs rank 1 or more, got f32"),
    ("return sum(concat([x], axis=2))", 2, 28, "axis 2 is out of range for a tensor of rank 2"),
    ("return sum(concat([t, [t]]))", 2, 27, "a list is not a value here; it can only be an operator's static "
                                            "argument"),
    # gather and embedding
    ("return sum(gather(t, x))", 2, 26, "gather expects integer indices (i32 or i64), got f32[8, N]"),
    ("return sum(gather(t, 3))", 2, 26, "gather expects a tensor here, got the scalar 3"),
    ("return sum(gather(t, i, axis=2))", 2, 29, "axis 2 is out of range for a tensor of rank 2"),
    ("return sum(gather(s, i))", 2, 23, "gather reads rows of a tensor and needs rank 1 or more, got f32"),
    ("return sum(embedding(x[0], i))", 2, 26, "embedding expects a table of rank 2 [rows, features], got f32[N]"),
    ("return sum(embedding(t, t))", 2, 29, "embedding expects integer indices (i32 or i64), got f32[10, 4]"),
    ("return sum(embedding(t, i > 0))", 2, 29, "embedding expects integer indices (i32 or i64), got bool[3]"),
    # take_along_axis and gather_nd
    ("return sum(take_along_axis(t, t, axis=0))", 2, 35,
     "take_along_axis expects integer indices (i32 or i64), got f32[10, 4]"),
    ("return sum(take_along_axis(t, i, axis=0))", 2, 35,
     "take_along_axis expects indices of x's rank 2, got i64[3] (rank 1); add unit axes with reshape"),
    ("return sum(take_along_axis(t, cast(x, i32), axis=2))", 2, 49, "axis 2 is out of range for a tensor of rank 2"),
    ("return sum(take_along_axis(s, i, axis=0))", 2, 32,
     "take_along_axis reads along an axis and needs rank 1 or more, got f32"),
    ("return sum(take_along_axis(t, cast(t, i32)))", 2, 16,
     "take_along_axis needs argument 'axis' (take_along_axis(x, idx, axis))"),
    ("return sum(take_along_axis(t, cast(x[:, :3], i32), axis=0))", 2, 35,
     "take_along_axis: x f32[10, 4] and the indices i32[8, 3] differ on an axis other than 0: shapes do not "
     "broadcast (4 vs 3); the other axes broadcast as NumPy's"),
    ("return sum(gather_nd(t, t))", 2, 29, "gather_nd expects integer indices (i32 or i64), got f32[10, 4]"),
    ("return sum(gather_nd(t, i))", 2, 29,
     "gather_nd: each index has 3 positions (the last axis of i64[3]) but x f32[10, 4] with batch_dims=0 has 2 to "
     "index; it must be from 1 to 2"),
    ("return sum(gather_nd(t, cast(s, i64)))", 2, 29,
     "gather_nd expects indices of rank 1 or more (the last axis holds one position), got i64"),
    ("return sum(gather_nd(t, cast(x, i64)))", 2, 29,
     "gather_nd: the last axis of the indices i64[8, N] says how many axes of x each index reads; it must be a "
     "number, got the symbol N"),
    ("return sum(gather_nd(t, cast(x, i64), batch_dims=2))", 2, 43,
     "gather_nd: batch_dims=2 must be from 0 to 1 (less than the ranks of x, 2, and of the indices, 2)"),
    ("return sum(gather_nd(t, cast(x, i64), batch_dims=-1))", 2, 43,
     "gather_nd: batch_dims=-1 must be from 0 to 1 (less than the ranks of x, 2, and of the indices, 2)"),
    ("return sum(gather_nd(t, cast(x[:, :1], i64), batch_dims=1))", 2, 29,
     "gather_nd: batch axis 0 of the indices i64[8, 1] (8) differs from x's f32[10, 4] (10); the batch axes must "
     "agree"),
    ("return sum(index(t, [x]))", 2, 26, "index expects integer indices (i32 or i64), got f32[8, N]"),
    ("return sum(index(t, i))", 2, 25, "index's 'idxs' must be a list of tensors in [ ], such as index(x, [a, b])"),
    ("return sum(index(t, [i, i], axes=[0]))", 2, 33,
     "index has 2 index tensors but 1 axes; give one axis per index tensor"),
    ("return sum(index(t, [i, i], axes=[1, 0]))", 2, 33,
     "index: the axes [1, 0] must be increasing, one per index tensor in x's order"),
    ("return sum(index(t, [i], axes=2))", 2, 30, "axes 2 is out of range for a tensor of rank 2"),
    ("return sum(index(s, [i]))", 2, 22, "index reads positions of a tensor and needs rank 1 or more, got f32"),
    ("return sum(index(t, [i, i, i], axes=[0, 1, 2]))", 2, 32, "index has 3 index tensors for x f32[10, 4] of rank 2"),
    ("return sum(index(t, [i, cast(x[:, :2], i64)], axes=[0, 1]))", 2, 29,
     "index: the index tensors do not broadcast together: shapes do not broadcast (3 vs 2)"),
    # scans and arg-reductions
    ("return sum(cumsum(x, axis=2))", 2, 26, "axis 2 is out of range for a tensor of rank 2"),
    ("return sum(cumsum(x > 0.0))", 2, 23, "cumsum expects a numeric tensor, got bool[8, N]"),
    ("return sum(cumprod(s))", 2, 24, "cumprod runs along an axis and needs rank 1 or more, got f32"),
    ("return sum(cast(argmax(x, axis=[0, 1]), f32))", 2, 36, "argmax's 'axis' must be an integer"),
    ("return sum(cast(argmin(s), f32))", 2, 28, "argmin picks a position along an axis and needs rank 1 or more, "
                                                "got f32"),
    ("return sum(argmax(x))", 2, 12, "returns i64 but the chain declares f32"),
]


@pytest.mark.parametrize("line,at_line,col,message", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_program_reports_exact_position(line, at_line, col, message):
    errs = errors(body(line))
    assert errs[0] == (at_line, col, message)


def test_errors_never_leak_exceptions_and_are_collected():
    errs = errors(body("a = x[i]\n"
                       "b = a + 1.0\n"
                       "c, d = split(x, [3, 3])\n"
                       "e = c * 2.0\n"
                       "f = concat([t, 1.0])\n"
                       "g = x[0, 0, 0]\n"
                       "h = x[::0] + x[9]\n"
                       "return sum(t[:, 2:])"))
    # b and e use poisoned names: nothing more for them; h reports both of its subscripts
    assert [(l, c) for l, c, _ in errs] == [(2, 11), (4, 21), (6, 20), (7, 17), (8, 11), (8, 20)]


def test_an_error_in_a_bound_and_in_the_value_are_both_reported():
    errs = errors(body("return sum(exp(qq)[:zz])"))
    assert [m for _, _, m in errs] == ["unknown name 'zz'", "unknown name 'qq'"]


# ---- typed nodes (the compiler's contract) -------------------------------------------------------

def nodes(src: str, *ops: str):
    c = typed(src).chains[0]
    return c, [n for n in c.nodes if n.op in ops]


def test_slices_are_slice_nodes_with_start_step_drop():
    c, sl = nodes("""\
        chain f(x: f32[7, N, 5]) -> (f32[3, N], f32[2, N, 5], f32[5], f32[4, N, 5], f32[7, N, 2]) {
            return x[1:6:2, :, -1], x[-2:], x[0, -1], x[-1::-2, ::-1], x[..., 4:1:-2]
        }""", "slice")
    got = [(str(n.type), n.attr("start"), n.attr("step"), n.attr("drop")) for n in sl]
    assert got == [
        ("f32[3, N]", (1, 0, 4), (2, 1, 1), (2,)),
        ("f32[2, N, 5]", (5, 0, 0), (1, 1, 1), ()),
        ("f32[5]", (0, ("N", -1), 0), (1, 1, 1), (0, 1)),
        ("f32[4, N, 5]", (6, ("N", -1), 0), (-2, -1, 1), ()),
        ("f32[7, N, 2]", (0, 0, 4), (1, 1, -2), ()),
    ]
    assert [n.inputs for n in sl] == [(0,)] * 5
    assert [dict(n.attrs).keys() for n in sl] == [{"start": 0, "step": 0, "drop": 0}.keys()] * 5
    assert (sl[0].span.line, sl[0].span.col, sl[0].span.end_col) == (2, 12, 27)


def test_symbolic_bounds_and_extents():
    c, sl = nodes("""\
        chain f(x: f32[N, 8], m: f32[M]) -> (f32[M, 8], f32[4, 8], f32[N, 8], f32[3, 8], f32[8]) {
            return x[:M], x[-4:], x[:N], x[-1:-4:-1], x[-2]
        }""", "slice")
    assert [(str(n.type), n.attr("start"), n.attr("step")) for n in sl] == [
        ("f32[M, 8]", (0, 0), (1, 1)),
        ("f32[4, 8]", (("N", -4), 0), (1, 1)),
        ("f32[N, 8]", (0, 0), (1, 1)),
        ("f32[3, 8]", (("N", -1), 0), (-1, 1)),
        ("f32[8]", (("N", -2), 0), (1, 1)),
    ]
    assert c.symbols == ("N", "M")


def test_a_symbolic_start_follows_unification():
    c, sl = nodes("""\
        chain f(x: f32[N], z: f32[8], y: f32[K], w: f32[P]) -> (f32[4], f32[8], f32[K], f32[2]) {
            a = x[-4:]
            b = y[-2:]
            return a, x + z, y + w, b
        }""", "slice")
    # N met 8 (a number now), K met P (K stays the representative)
    assert [(str(n.type), n.attr("start")) for n in sl] == [("f32[4]", (4,)), ("f32[2]", (("K", -2),))]
    assert c.symbols == ("K",)


def test_a_slice_that_unification_makes_misfit_is_an_error_at_the_slice():
    errs = errors("""\
        chain f(x: f32[N], z: f32[2]) -> (f32[4], f32[N]) {
            y = x[:4]
            return y, x + z
        }""")
    assert errs == [(2, 9, "the slice of axis 0 reads elements 0 to 3 but the axis has 2 (the input is f32[2] once "
                           "its symbols are unified with the sizes they meet later in the chain)")]


def test_ellipsis_and_missing_items_are_full_slices():
    c, sl = nodes("""\
        chain f(x: f32[2, 3, 4, 5]) -> (f32[3, 4], f32[2, 3, 4, 5], f32[2, 3, 4, 5], f32[2, 3, 4]) {
            return x[0, ..., 1], x[...], x[:, ...], x[..., -1]
        }""", "slice")
    assert [(str(n.type), n.attr("start"), n.attr("drop")) for n in sl] == [
        ("f32[3, 4]", (0, 0, 0, 1), (0, 3)),
        ("f32[2, 3, 4, 5]", (0, 0, 0, 0), ()),
        ("f32[2, 3, 4, 5]", (0, 0, 0, 0), ()),
        ("f32[2, 3, 4]", (0, 0, 0, 4), (3,)),
    ]
    _, (one,) = nodes("chain f(x: f32[2, 3]) -> f32[3] { return x[1] }", "slice")
    assert (str(one.type), one.attr("start"), one.attr("step"), one.attr("drop")) == ("f32[3]", (1, 0), (1, 1), (0,))


def test_bounds_from_consts_and_compile_time_values():
    _, (a, b, c) = nodes("""\
        const lo = 2
        const back = -1
        chain f(x: f32[10]) -> (f32[2], f32) {
            k = 5
            const step = 2
            return x[lo:k:step][::back], x[-lo]
        }""", "slice")
    assert (str(a.type), a.attr("start"), a.attr("step")) == ("f32[2]", (2,), (2,))
    assert (str(b.type), b.attr("start"), b.attr("step")) == ("f32[2]", (1,), (-1,))
    assert (str(c.type), c.attr("start"), c.attr("drop")) == ("f32", (8,), (0,))


def test_any_dtype_and_subscripts_of_expressions():
    c, sl = nodes("""\
        chain f(b: bool[4, 4], n: i32[4, 4]) -> (bool[4], i32[2, 4]) {
            return b[:, 0], (n * 2)[1:3]
        }""", "slice")
    assert [str(n.type) for n in sl] == ["bool[4]", "i32[2, 4]"]
    assert c.nodes[sl[1].inputs[0]].op == "mul"


def test_split_is_one_slice_per_part_named_by_the_binding():
    c, sl = nodes("""\
        chain f(x: f32[B, 10]) -> (f32[B, 3], f32[B, 6], f32[B, 1]) {
            q, k, v = split(x, [3, -1, 1], axis=-1)
            return q, k, v
        }""", "slice")
    assert [n.op for n in c.nodes if n.op != "param"] == ["slice", "slice", "slice"]
    assert [(n.name, str(n.type), n.attr("start"), n.attr("step"), n.attr("drop")) for n in sl] == [
        ("q", "f32[B, 3]", (0, 0), (1, 1), ()),
        ("k", "f32[B, 6]", (0, 3), (1, 1), ()),
        ("v", "f32[B, 1]", (0, 9), (1, 1), ()),
    ]
    assert all((n.span.line, n.span.col) == (2, 15) for n in sl)
    _, (a, b) = nodes("""\
        chain f(x: f32[4, N]) -> (f32[1, N], f32[3, N]) {
            a, b = x |> split([1, 3])
            return a, b
        }""", "slice")
    assert [(str(a.type), a.attr("start")), (str(b.type), b.attr("start"))] == [("f32[1, N]", (0, 0)),
                                                                                 ("f32[3, N]", (1, 0))]


def test_concat_inputs_are_the_list_in_order():
    c, (cat, _) = nodes("""\
        chain f(a: f32[N, 2], b: f32[N, 3]) -> (f32[N, 10], f32[N, 5]) {
            return concat([a, b * 2.0, a, b[..., ::-1]], axis=1), concat([b, a], axis=-1)
        }""", "concat")
    assert str(cat.type) == "f32[N, 10]" and dict(cat.attrs) == {"axis": 1}
    ins = [c.nodes[i] for i in cat.inputs]
    assert [n.op if n.op != "param" else n.name for n in ins] == ["a", "mul", "a", "slice"]
    _, cats = nodes("chain f(a: f32[2, M], b: f32[3, M]) -> f32[5, M] { return concat([a, b]) }", "concat")
    assert [(str(n.type), n.attr("axis")) for n in cats] == [("f32[5, M]", 0)]
    _, cats = nodes("chain f(a: i32[2, M]) -> i32[2, M] { return [a] |> concat(axis=-2) }", "concat")
    assert [(str(n.type), n.attr("axis")) for n in cats] == [("i32[2, M]", 0)]


def test_concat_unifies_the_other_axes():
    c = typed("""\
        chain f(a: f32[N, 2], b: f32[M, 3]) -> f32[N, 5] {
            return concat([a, b], axis=1)
        }""").chains[0]
    assert [str(p.type) for p in c.param_nodes] == ["f32[N, 2]", "f32[N, 3]"]


def test_gather_embedding_scans_and_arg_reductions():
    c = typed("""\
        chain f(t: f16[V, 8], ids: i32[B, S], w: f32[4, 6, 5], j: i64[2]) -> f32 {
            e = embedding(t, ids)
            g = gather(w, j, axis=-2)
            g0 = gather(w, j)
            s = cumsum(w, axis=0)
            p = cumprod(ids)
            m = argmax(w)
            n = argmin(w, axis=1, keepdims=true)
            return 0.0
        }""").chains[0]
    got = {n.name: (n.op, n.inputs, dict(n.attrs), str(n.type)) for n in c.nodes if n.name and n.op != "param"}
    assert got == {
        "e": ("embedding", (0, 1), {"axis": 0}, "f16[B, S, 8]"),
        "g": ("gather", (2, 3), {"axis": 1}, "f32[4, 2, 5]"),
        "g0": ("gather", (2, 3), {"axis": 0}, "f32[2, 6, 5]"),
        "s": ("cumsum", (2,), {"axis": 0}, "f32[4, 6, 5]"),
        "p": ("cumprod", (1,), {"axis": 1}, "i32[B, S]"),
        "m": ("argmax", (2,), {"axis": 2, "keepdims": False}, "i64[4, 6]"),
        "n": ("argmin", (2,), {"axis": 1, "keepdims": True}, "i64[4, 1, 5]"),
    }


def test_take_along_axis_and_gather_nd_shapes():
    c = typed("""\
        chain f(x: f32[4, N, 6], i: i32[4, 3, 1], j: i64[1, 2, 6], k: i64[5, 2], b: i32[4, 7, 1], w: f16[V, 3]) -> f32 {
            a = take_along_axis(x, i, axis=1)
            r = take_along_axis(x, j, axis=-2)
            g = gather_nd(x, k)
            h = gather_nd(x, b, batch_dims=1)
            e = gather_nd(w, k[:, :1])
            return 0.0
        }""").chains[0]
    got = {n.name: (n.op, dict(n.attrs), str(n.type)) for n in c.nodes if n.name and n.op not in ("param", "slice")}
    assert got == {
        "a": ("take_along_axis", {"axis": 1}, "f32[4, 3, 6]"),       # idx's axis 2 of one broadcasts to 6
        "r": ("take_along_axis", {"axis": 1}, "f32[4, 2, 6]"),       # idx's axis 0 of one broadcasts to 4
        "g": ("gather_nd", {"batch_dims": 0}, "f32[5, 6]"),           # x[k[:, 0], k[:, 1]]: one axis left
        "h": ("gather_nd", {"batch_dims": 1}, "f32[4, 7, 6]"),        # out[p, m, :] = x[p, b[p, m, 0], :]
        "e": ("gather_nd", {"batch_dims": 0}, "f16[5, 3]"),
    }
    c = typed("""\
        chain f(x: f32[4, 5, 6], i: i64[2, 3], j: i32[3], k: i64[1]) -> f32 {
            a = index(x, [i, j], axes=[0, 2])
            b = index(x, [i, j], axes=[1, 2])
            d = index(x, [k])
            e = index(x, [i], axes=-1)
            return 0.0
        }""").chains[0]
    got = {n.name: (n.op, dict(n.attrs), str(n.type)) for n in c.nodes if n.name and n.op != "param"}
    assert got == {
        "a": ("index", {"axes": (0, 2)}, "f32[2, 3, 5]"),        # x[i, :, j]: the index axes lead
        "b": ("index", {"axes": (1, 2)}, "f32[4, 2, 3]"),        # x[:, i, j]: in place of the indexed axes
        "d": ("index", {"axes": (0,)}, "f32[1, 5, 6]"),
        "e": ("index", {"axes": (2,)}, "f32[4, 5, 2, 3]"),
    }


def test_the_typed_text_shows_the_new_nodes():
    text = typed("""\
        chain f(x: f32[N, 6]) -> (f32[2, 6], f32[N, 3]) {
            a, b = split(x, [3, 3], axis=1)
            return x[-2:], concat([a[:, :1], b[:, 1:]], axis=1)
        }""").format()
    assert '%a = slice %x {start=[0, 0], step=[1, 1], drop=[]} : f32[N, 3]  # 2:12' in text
    assert '= slice %x {start=[["N", -2], 0], step=[1, 1], drop=[]} : f32[2, 6]  # 3:12' in text
    assert "concat %" in text and "{axis=1} : f32[N, 3]" in text
