"""The reference semantics of slicing, split, concat, gather and embedding, cumsum and cumprod,
argmax and argmin: each run through `fusec.compile(src, target="reference")` against NumPy
itself, on odd sizes, negative axes, negative, strided and symbolic bounds, f16 and integers;
out-of-range gathers and slices that a binding makes misfit are user errors at the op."""
import os
import textwrap

import numpy as np
import pytest

import fusec
from fusec.cli import main
from fusec.runtime.reference import check_index_inputs, index_params, random_inputs

RNG = np.random.default_rng(17)
NP = {"f32": np.float32, "f16": np.float16, "i32": np.int32, "i64": np.int64, "bool": np.bool_}


def prog(src: str):
    return fusec.compile(textwrap.dedent(src), target="reference", cache=False)


def outs(src: str, *inputs):
    p = prog(src)
    (chain,) = p.chains.values()
    got = chain(*inputs)
    return got if isinstance(got, tuple) else (got,)


def arr(shape, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return RNG.standard_normal(shape).astype(dtype)
    if dtype.kind == "b":
        return RNG.random(shape) < 0.5
    return RNG.integers(-50, 50, size=shape).astype(dtype)


def same(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    np.testing.assert_array_equal(got, want)


# ---- slicing ---------------------------------------------------------------------------------

STATIC_SLICES = [
    # subscript as written in FDSL, the NumPy index it means
    ("x[1:6:2, ::-1]", np.s_[1:6:2, ::-1]),
    ("x[-3:, 0]", np.s_[-3:, 0]),
    ("x[..., -1]", np.s_[..., -1]),
    ("x[::-2, 1:4]", np.s_[::-2, 1:4]),
    ("x[5:1:-2]", np.s_[5:1:-2]),
    ("x[-1:-6:-3, -5:-1]", np.s_[-1:-6:-3, -5:-1]),
    ("x[2]", np.s_[2]),
    ("x[-7, -5]", np.s_[-7, -5]),
    ("x[..., 1:2]", np.s_[..., 1:2]),
    ("x[:, ...]", np.s_[:, ...]),
    ("x[...]", np.s_[...]),
    ("x[0:7:7]", np.s_[0:7:7]),
]


@pytest.mark.parametrize("dtype", ["f32", "f16", "i32", "i64", "bool"])
@pytest.mark.parametrize("sub,index", STATIC_SLICES, ids=[s for s, _ in STATIC_SLICES])
def test_static_slices_are_numpy_basic_indexing(sub, index, dtype):
    x = arr((7, 5), NP[dtype])
    want = x[index]
    shape = ", ".join(map(str, want.shape))
    rtype = f"{dtype}[{shape}]" if want.ndim else dtype
    (got,) = outs(f"chain f(x: {dtype}[7, 5]) -> {rtype} {{\n    return {sub}\n}}\n", x)
    same(got, want)


def test_chained_subscripts_and_subscripts_of_expressions():
    x, y = arr((6, 9), np.float32), arr((6, 9), np.float32)
    a, b, c = outs("""\
        chain f(x: f32[6, 9], y: f32[6, 9]) -> (f32[2], f32[2, 9], f32[4]) {
            return x[1][2:8:2][::-1][1:], (x + y)[1:3], exp(y)[0, :4] * 2.0
        }""", x, y)
    same(a, x[1][2:8:2][::-1][1:])
    same(b, (x + y)[1:3])
    np.testing.assert_allclose(c, np.exp(y)[0, :4] * 2, rtol=1e-6)


@pytest.mark.parametrize("n", [4, 7, 9])
def test_symbolic_bounds_follow_the_binding(n):
    x, z = arr((n, 5), np.float32), arr((3,), np.float32)
    src = """\
        chain f(x: f32[N, 5], z: f32[M]) -> (f32[3, 5], f32[N, 5], f32[M, 5], f32[5], f32[2, 5], f32[3]) {
            return x[-3:], x[::-1], x[:M], x[-1], x[-2:N], x[-1:-4:-1, 2]
        }"""
    got = outs(src, x, z)
    want = [x[-3:], x[::-1], x[:3], x[-1], x[-2:n], x[-1:-4:-1, 2]]
    for g, w in zip(got, want):
        same(g, w)


def test_split_is_numpy_split():
    x = arr((3, 7), np.float16)
    a, b, c = outs("""\
        chain f(x: f16[3, 7]) -> (f16[3, 2], f16[3, 4], f16[3, 1]) {
            a, b, c = split(x, [2, -1, 1], axis=-1)
            return a, b, c
        }""", x)
    for g, w in zip((a, b, c), np.split(x, [2, 6], axis=-1)):
        same(g, w)
    n = arr((5, 2), np.int64)
    top, rest = outs("""\
        chain f(n: i64[5, 2]) -> (i64[1, 2], i64[4, 2]) {
            top, rest = n |> split([1, 4])
            return top, rest
        }""", n)
    same(top, n[:1])
    same(rest, n[1:])
    s = arr((4, 6), np.float32)
    lo, hi = outs("""\
        chain f(x: f32[S, 6]) -> (f32[S, 3], f32[S, 3]) {
            lo, hi = split(x, [3, 3], axis=1)
            return lo, hi
        }""", s)
    same(lo, s[:, :3])
    same(hi, s[:, 3:])


# ---- concat ----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["f32", "f16", "i32", "i64", "bool"])
def test_concat_is_numpy_concatenate(dtype):
    a, b, c = arr((3, 2), NP[dtype]), arr((3, 5), NP[dtype]), arr((3, 1), NP[dtype])
    got = outs(f"""\
        chain f(a: {dtype}[3, 2], b: {dtype}[3, 5], c: {dtype}[3, 1]) -> ({dtype}[3, 8], {dtype}[9, 2], {dtype}[3, 2]) {{
            return concat([a, b, c], axis=1), concat([a, a, a], axis=-2), concat([a])
        }}""", a, b, c)
    same(got[0], np.concatenate([a, b, c], axis=1))
    same(got[1], np.concatenate([a, a, a], axis=0))
    same(got[2], a)


def test_concat_of_expressions_with_symbolic_other_axes():
    x, y = arr((5, 3), np.float32), arr((5, 2), np.float32)
    (got,) = outs("""\
        chain f(x: f32[N, 3], y: f32[N, 2]) -> f32[N, 8] {
            return concat([x, y * 2.0, -x], axis=-1)
        }""", x, y)
    same(got, np.concatenate([x, y * np.float32(2), -x], axis=-1))


def test_rotate_half_rope():
    b, h, s, d = 2, 3, 5, 64
    x = arr((b, h, s, d), np.float32)
    cos, sin = arr((s, d), np.float32), arr((s, d), np.float32)
    (got,) = outs("""\
        chain rope(x: f32[B, H, S, 64], cos: f32[S, 64], sin: f32[S, 64]) -> f32[B, H, S, 64] {
            rot = concat([-x[..., 32:], x[..., :32]], axis=-1)
            return x * cos + rot * sin
        }""", x, cos, sin)
    rot = np.concatenate([-x[..., 32:], x[..., :32]], axis=-1)
    np.testing.assert_allclose(got, x * cos + rot * sin, rtol=1e-6, atol=1e-6)


# ---- gather and embedding --------------------------------------------------------------------

@pytest.mark.parametrize("idx_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("axis", [0, 1, -1, -3])
def test_gather_is_numpy_take(axis, idx_dtype):
    t = arr((5, 4, 3), np.float16)
    n = t.shape[axis]
    idx = RNG.integers(0, n, size=(2, 7)).astype(idx_dtype)
    want = np.take(t, idx, axis=axis)
    shape = ", ".join(map(str, want.shape))
    it = "i32" if idx_dtype == np.int32 else "i64"
    (got,) = outs(f"""\
        chain f(t: f16[5, 4, 3], i: {it}[2, 7]) -> f16[{shape}] {{
            return gather(t, i, axis={axis})
        }}""", t, idx)
    same(got, want)


def test_gather_scalar_index_and_integer_and_bool_tables():
    t, b = arr((6, 3), np.int64), arr((6, 3), bool)
    i = np.array(4, dtype=np.int32)
    row, col, bits = outs("""\
        chain f(t: i64[6, 3], b: bool[6, 3], i: i32) -> (i64[3], i64[6], bool[3]) {
            return gather(t, i), gather(t, cast(i, i64) - 2, axis=1), gather(b, i)
        }""", t, b, i)
    same(row, t[4])
    same(col, t[:, 2])
    same(bits, b[4])


@pytest.mark.parametrize("idx_dtype", [np.int32, np.int64])
def test_embedding_is_a_row_lookup(idx_dtype):
    table = arr((11, 6), np.float32)
    ids = RNG.integers(0, 11, size=(3, 5)).astype(idx_dtype)
    it = "i32" if idx_dtype == np.int32 else "i64"
    (got,) = outs(f"""\
        chain f(table: f32[V, 6], ids: {it}[B, S]) -> f32[B, S, 6] {{
            return embedding(table, ids)
        }}""", table, ids)
    same(got, table[ids])


@pytest.mark.parametrize("bad", [11, -1])
def test_gather_out_of_range_is_a_user_error_at_the_op(bad):
    p = prog("""\
        chain f(table: f32[11, 6], ids: i64[4]) -> f32[4, 6] {
            e = embedding(table, ids)
            return e * 2.0
        }""")
    ids = np.array([0, 3, bad, 1], dtype=np.int64)
    with pytest.raises(fusec.FdslError) as info:
        p.f(arr((11, 6), np.float32), ids)
    d = info.value.diagnostics[0]
    assert (d.span.line, d.span.col) == (2, 9)
    assert d.message == (f"embedding: index {bad} at [2] is outside axis 0 of extent 11 (indices go from 0 to 10)")


def test_gather_out_of_range_through_the_cli_exits_1(tmp_path, capsys):
    f = tmp_path / "g.fdsl"
    f.write_text("chain g(t: f32[5, 3], i: i32[4]) -> f32[3, 4] {\n    j = i + 3\n    return gather(t, j, axis=0) "
                 "|> transpose\n}\n")
    # the seeded inputs are drawn for an index parameter, but i + 3 leaves the axis
    assert main([str(f), "--target", "reference", "-q"]) == 1
    err = capsys.readouterr().err
    assert f"{f}:3:12: error: gather: index " in err and "is outside axis 0 of extent 5 (indices go from 0 to 4)" in err
    assert "Traceback" not in err


# ---- scans and arg-reductions ----------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.int64])
@pytest.mark.parametrize("axis", [0, -1, 1])
def test_cumsum_and_cumprod_are_numpy_scans(axis, dtype):
    x = arr((3, 7), dtype) if np.dtype(dtype).kind == "f" else RNG.integers(-3, 4, size=(3, 7)).astype(dtype)
    d = {np.float32: "f32", np.float16: "f16", np.int32: "i32", np.int64: "i64"}[dtype]
    s, p = outs(f"""\
        chain f(x: {d}[3, 7]) -> ({d}[3, 7], {d}[3, 7]) {{
            return cumsum(x, axis={axis}), cumprod(x, axis={axis})
        }}""", x)
    work = np.float32 if dtype == np.float16 else dtype          # f16 computes in f32, rounded once
    same(s, np.cumsum(x.astype(work), axis=axis, dtype=work).astype(dtype))
    same(p, np.cumprod(x.astype(work), axis=axis, dtype=work).astype(dtype))


def test_cumsum_default_axis_is_the_last_and_integers_wrap():
    x = np.array([[2 ** 31 - 1, 1, 1]], dtype=np.int32)
    (s,) = outs("chain f(x: i32[1, 3]) -> i32[1, 3] { return cumsum(x) }", x)
    assert s.tolist() == [[2 ** 31 - 1, -(2 ** 31), -(2 ** 31) + 1]]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.int64])
def test_argmax_and_argmin_are_numpy_ones(dtype):
    x = arr((4, 5, 6), dtype)
    d = {np.float32: "f32", np.float16: "f16", np.int32: "i32", np.int64: "i64"}[dtype]
    got = outs(f"""\
        chain f(x: {d}[4, 5, 6]) -> (i64[4, 5], i64[5, 6], i64[4, 1, 6], i64[4, 5]) {{
            return argmax(x), argmin(x, axis=0), argmax(x, axis=-2, keepdims=true), argmin(x, axis=2)
        }}""", x)
    want = [np.argmax(x, -1), np.argmin(x, 0), np.argmax(x, -2, keepdims=True), np.argmin(x, 2)]
    for g, w in zip(got, want):
        same(g, w.astype(np.int64))


def test_argmax_ties_take_the_first_and_nan_wins():
    x = np.array([[1.0, 3.0, 3.0, 0.0], [1.0, np.nan, 5.0, np.nan], [-0.0, 0.0, -1.0, -1.0]], dtype=np.float32)
    mx, mn = outs("chain f(x: f32[3, 4]) -> (i64[3], i64[3]) { return argmax(x), argmin(x) }", x)
    assert mx.tolist() == [1, 1, 0]
    assert mn.tolist() == [3, 1, 2]


# ---- inputs for index parameters -------------------------------------------------------------

def test_random_index_inputs_are_drawn_within_the_axis_they_index():
    chain = fusec.check("""\
        chain f(t: f32[V, 8], u: f32[4, 3], ids: i32[B, S], k: i64[2], j: i64[3], n: i32[5]) -> (f32[B, S, 8], f32[4, 5], f32[5]) {
            both = concat([k, reshape(j, [3])], axis=0)
            return embedding(t, ids), gather(u, both, axis=-1), cast(n, f32)
        }""").chains[0]
    binding = {"V": 13, "B": 3, "S": 40}
    assert index_params(chain, binding) == {2: 13, 3: 3, 4: 3}
    t, u, ids, k, j, n = random_inputs(chain, binding, seed=5)
    assert ids.dtype == np.int32 and ids.min() >= 0 and ids.max() <= 12 and len(np.unique(ids)) > 6
    assert k.dtype == np.int64 and 0 <= k.min() and k.max() <= 2 and 0 <= j.min() and j.max() <= 2
    assert n.min() < 0                  # not an index: small integers as before
    again = random_inputs(chain, binding, seed=5)
    assert all((a == b).all() for a, b in zip(again, (t, u, ids, k, j, n)))


def test_an_index_of_two_tables_is_drawn_within_the_smaller():
    chain = fusec.check("""\
        chain f(a: f32[50, 2], b: f32[7, 2], i: i64[64]) -> f32[64, 2] {
            return gather(a, i) + embedding(b, i[::-1])
        }""").chains[0]
    assert index_params(chain, {}) == {2: 7}
    (i,) = random_inputs(chain, {}, seed=0)[2:]
    assert i.min() >= 0 and i.max() <= 6


def test_a_gather_chain_runs_from_the_command_line_without_inputs(tmp_path, capsys):
    f = tmp_path / "emb.fdsl"
    f.write_text("chain emb(table: f32[V, 16], ids: i32[B, S]) -> f32[B, S, 16] {\n"
                 "    return embedding(table, ids) * 4.0\n}\n")
    assert main([str(f), "--target", "reference", "--bind", "V=3,B=4,S=50", "-q"]) == 0
    assert "chain emb [V=3, B=4, S=50]: target reference" in capsys.readouterr().out


def test_check_index_inputs_names_the_gather():
    chain = fusec.check(textwrap.dedent("""\
        chain f(t: f32[6, 2], i: i64[2, 3], w: f32[3, 3]) -> (f32[2, 3, 2], f32[3, 3]) {
            flat = reshape(i, [6])[::2]
            return gather(t, i), gather(w, flat, axis=1) + gather(w, cast(sum(i), i64), axis=0)
        }""")).chains[0]
    t, w = arr((6, 2), np.float32), arr((3, 3), np.float32)
    check_index_inputs(chain, [t, np.array([[0, 5, 1], [5, 2, 5]]), w], {})      # flat: [0, 1, 2]
    with pytest.raises(fusec.FdslError) as info:          # flat: [0, 1, 4], and 4 is outside w's axis 1
        check_index_inputs(chain, [t, np.array([[0, 5, 1], [5, 4, 5]]), w], {})
    (d,) = info.value.diagnostics
    assert (d.span.line, d.span.col) == (3, 26)
    assert d.message == "gather: index 4 at [2] is outside axis 1 of extent 3 (indices go from 0 to 2)"
    with pytest.raises(fusec.FdslError) as info:
        check_index_inputs(chain, [t, np.array([[0, 5, 1], [6, 2, 5]]), w], {})
    assert info.value.diagnostics[0].span.col == 12
    # an index computed inside the chain (sum(i)) is not checked here: sum is 16, outside w's axis 0
    check_index_inputs(chain, [t, np.array([[0, 5, 1], [5, 2, 3]]), w], {})


# ---- a slice that a binding makes misfit -----------------------------------------------------

TAIL = "chain tail(x: f32[N, 8]) -> f32[4, 8] {\n    return x[-4:] * 2.0\n}\n"


def test_a_binding_that_makes_a_slice_misfit_is_refused_from_the_command_line(tmp_path, capsys):
    f = tmp_path / "tail.fdsl"
    f.write_text(TAIL)
    assert main([str(f), "--bind", "N=2", "--target", "reference"]) == 1
    err = capsys.readouterr().err
    assert err == (f"{f}:2:12: error: the slice of axis 0 takes 4 elements but the axis has 2 under this binding "
                   f"(N=2); 'x' is f32[N, 8]\n    return x[-4:] * 2.0\n           ^~~~~~\n")
    assert main([str(f), "--bind", "N=4", "--target", "reference", "-q"]) == 0
    capsys.readouterr()
    # the same refusal before compiling for a compiled target, and for an artifact
    assert main([str(f), "--bind", "N=3", "--target", "cpu"]) == 1
    assert f"{f}:2:12: error: the slice of axis 0 takes 4 elements but the axis has 3" in capsys.readouterr().err
    assert main(["compile", str(f), "--bind", "N=3", "--target", "cpu", "-o", str(tmp_path / "art")]) == 1
    assert "takes 4 elements but the axis has 3" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "art")


def test_inputs_that_make_a_slice_misfit_are_refused_at_the_slice(tmp_path, capsys):
    from fusec.runtime import npz
    f = tmp_path / "tail.fdsl"
    f.write_text(TAIL)
    npz.save(str(tmp_path / "in.npz"), {"tail": ({"x": np.ones((3, 8), np.float32)}, [])})
    assert main([str(f), "--inputs", str(tmp_path / "in.npz"), "--target", "reference"]) == 1
    assert "tail.fdsl:2:12: error: the slice of axis 0 takes 4 elements but the axis has 3 under this binding (N=3)" \
        in capsys.readouterr().err
    p = prog(TAIL)
    with pytest.raises(fusec.FdslError, match="takes 4 elements but the axis has 1"):
        p.tail(np.ones((1, 8), np.float32))
    with pytest.raises(fusec.FdslError, match="takes 4 elements but the axis has 2"):
        p.tail.compiled({"N": 2})
    with pytest.raises(fusec.FdslError, match="takes 4 elements but the axis has 3"):
        p.tail.check(binding={"N": 3})
    assert p.tail(np.ones((5, 8), np.float32)).shape == (4, 8)


def test_every_misfit_of_a_binding_is_reported():
    p = prog("""\
        chain f(x: f32[N], z: f32[M]) -> (f32[M], f32[3], f32[2], f32) {
            return x[:M], x[-1:-4:-1], x[-4:-2], x[-3]
        }""")
    with pytest.raises(fusec.FdslError) as info:
        p.f(np.ones(2, np.float32), np.ones(4, np.float32))
    assert [(d.span.line, d.message) for d in info.value.diagnostics] == [
        (2, "the slice of axis 0 takes 4 elements but the axis has 2 under this binding (N=2, M=4); 'x' is f32[N]"),
        (2, "the slice of axis 0 takes 3 elements but the axis has 2 under this binding (N=2); 'x' is f32[N]"),
        (2, "the slice of axis 0 starts 4 elements before the end, but the axis has 2 under this binding (N=2); "
            "'x' is f32[N]"),
        (2, "the index -3 is outside axis 0, which has 2 elements under this binding (N=2); 'x' is f32[N]"),
    ]


def test_the_documented_binding_error_is_what_fusec_prints(tmp_path, monkeypatch, capsys):
    import re
    from pathlib import Path
    doc = (Path(__file__).resolve().parents[2] / "docs" / "FDSL.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```(\w*)[^\n]*\n(.*?)^```", doc, re.S | re.M)
    (i,) = [k for k, (lang, text) in enumerate(blocks) if lang == "sh" and text.startswith("$ fusec tail.fdsl")]
    program, shown = blocks[i - 1][1], blocks[i][1]
    command, expected = shown.split("\n", 1)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tail.fdsl").write_text(program)
    assert program == TAIL
    assert main(command.split()[2:]) == 1
    assert capsys.readouterr().err == expected
