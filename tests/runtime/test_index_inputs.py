"""Index inputs out of range (docs/FDSL.md, gather's row): on the `cpu` target an index *input*
outside the axis it indexes is a user error at the gather or embedding before anything is
compiled or runs (through the API and the command line: status 1, file:line:col, no traceback);
an index computed inside the chain is clamped into range. On `cuda-sim` (as on `cuda`) every
index is clamped."""
from __future__ import annotations

import numpy as np
import pytest

import fusec
from fusec.cli import main
from fusec.compiler import pipeline
from fusec.runtime import npz

SRC = """\
chain pick(t: f32[10, 4], i: i64[5], e: f32[3, 4], ids: i32[2, 2]) -> (f32[5, 4], f32[2, 2, 4], f32[4, 4]) {
    moved = reshape(ids, [4])[::-1]
    return gather(t, i) * 2.0, embedding(e, ids), gather(e[:2], moved, axis=0) + 1.0
}
"""
MESSAGE = "gather: index 12 at [3] is outside axis 0 of extent 10 (indices go from 0 to 9)"
T = np.arange(40, dtype=np.float32).reshape(10, 4)
E = np.arange(12, dtype=np.float32).reshape(3, 4) * -1


def _inputs(i=(0, 1, 2, 12, 3), ids=((0, 1), (1, 0))):
    return [T, np.array(i, np.int64), E, np.array(ids, np.int32)]


def _no_compiling(monkeypatch):
    monkeypatch.setattr(pipeline, "build_chain", lambda *a, **k: pytest.fail("compiled"))


def test_cpu_refuses_an_index_input_out_of_range_before_compiling(monkeypatch):
    prog = fusec.compile(SRC, target="cpu", options={"baseline": False})
    _no_compiling(monkeypatch)
    with pytest.raises(fusec.FdslError) as info:
        prog.pick(*_inputs())
    (d,) = info.value.diagnostics
    assert (d.span.line, d.span.col) == (3, 12) and d.message == MESSAGE
    assert prog.pick._builds == {}
    with pytest.raises(fusec.FdslError) as info:                  # a negative index does not count from the end
        prog.pick(*_inputs(i=(0, -1, 2, 3, 4)))
    assert info.value.diagnostics[0].message.startswith("gather: index -1 at [1] is outside axis 0")


def test_cpu_refuses_an_index_moved_from_an_input_at_its_own_gather(monkeypatch):
    prog = fusec.compile(SRC, target="cpu", options={"baseline": False})
    _no_compiling(monkeypatch)
    ok = (0, 1, 2, 9, 3)
    with pytest.raises(fusec.FdslError) as info:                  # ids holds a 3: embedding's, at [1, 0]
        prog.pick(*_inputs(i=ok, ids=((0, 2), (3, 1))))
    (d,) = info.value.diagnostics
    assert (d.span.line, d.span.col) == (3, 32)
    assert d.message == "embedding: index 3 at [1, 0] is outside axis 0 of extent 3 (indices go from 0 to 2)"
    with pytest.raises(fusec.FdslError) as info:                  # a 2 fits e, not e[:2]: reshaped, reversed
        prog.pick(*_inputs(i=ok, ids=((0, 2), (1, 0))))
    (d,) = info.value.diagnostics
    assert (d.span.line, d.span.col) == (3, 51)
    assert d.message == "gather: index 2 at [2] is outside axis 0 of extent 2 (indices go from 0 to 1)"
    with pytest.raises(fusec.FdslError):                          # and Chain.check, with inputs given
        prog.pick.check(_inputs(ids=((0, 2), (3, 1))))


def test_cpu_runs_in_range_inputs_and_clamps_computed_indices():
    prog = fusec.compile(SRC, target="cpu", options={"baseline": False})
    a, b, c = prog.pick(*_inputs(i=(0, 9, 2, 9, 3)))
    np.testing.assert_array_equal(a, T[[0, 9, 2, 9, 3]] * 2)
    np.testing.assert_array_equal(b, E[[[0, 1], [1, 0]]])
    np.testing.assert_array_equal(c, E[[0, 1, 1, 0]] + 1)
    computed = fusec.compile("chain shifted(t: f32[10, 4], i: i64[3]) -> f32[3, 4] {\n"
                             "    return gather(t, i + 8)\n}\n", target="cpu", options={"baseline": False})
    np.testing.assert_array_equal(computed.shifted(T, np.array([0, 1, 5], np.int64)), T[[8, 9, 9]])


def test_cuda_sim_clamps_every_index():
    prog = fusec.compile(SRC, target="cuda-sim", options={"baseline": False})
    a, b, c = prog.pick(*_inputs(i=(0, -1, 2, 12, -7), ids=((0, 5), (-2, 2))))
    np.testing.assert_array_equal(a, T[[0, 0, 2, 9, 0]] * 2)
    np.testing.assert_array_equal(b, E[[[0, 2], [0, 2]]])
    np.testing.assert_array_equal(c, E[[1, 0, 1, 0]] + 1)          # [0, 5, -2, 2] reversed, clamped to e[:2]


@pytest.fixture
def files(tmp_path):
    src = tmp_path / "pick.fdsl"
    src.write_text(SRC)
    bad = tmp_path / "bad.npz"
    npz.save(str(bad), {"pick": (dict(zip(("t", "i", "e", "ids"), _inputs())), [])})
    return src, bad


def _refused(capsys, src) -> None:
    err = capsys.readouterr().err
    assert err.startswith(f"{src}:3:12: error: {MESSAGE}\n"), err
    assert "    return gather(t, i) * 2.0, embedding(e, ids), gather(e[:2], moved, axis=0) + 1.0\n           ^~~~~~" in err
    assert "Traceback" not in err and "internal error" not in err


def test_the_command_line_refuses_it_on_cpu_with_status_1(files, capsys, monkeypatch):
    src, bad = files
    _no_compiling(monkeypatch)
    assert main([str(src), "--target", "cpu", "--inputs", str(bad), "-q"]) == 1
    _refused(capsys, src)


def test_fusec_run_refuses_it_for_a_cpu_artifact(files, tmp_path, capsys):
    src, bad = files
    out = tmp_path / "art"
    assert main(["compile", str(src), "--target", "cpu", "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["run", str(out), "--inputs", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f":3:12: error: {MESSAGE}" in err and "Traceback" not in err


# ---- take_along_axis, gather_nd and index: a negative index counts once from the end ----------

ALONG = """\
chain along(x: f32[3, 5], i: i32[3, 2], y: f32[4, 3, 2], j: i64[2, 2]) -> (f32[3, 2], f32[2, 2], f32[3, 2], f32[2, 3]) {
    picked = index(y, [j[:, 0], j[:, 1] - 1], axes=[0, 2])
    return take_along_axis(x, i, axis=1), gather_nd(y, j), take_along_axis(x, i * 4, axis=-1), picked
}
"""
X = np.arange(15, dtype=np.float32).reshape(3, 5)
Y = np.arange(24, dtype=np.float32).reshape(4, 3, 2) * -1


def _along(i=((0, -1), (4, -5), (2, 3)), j=((3, -3), (-4, 1))):
    return [X, np.array(i, np.int32), Y, np.array(j, np.int64)]


def test_take_along_axis_gather_nd_and_index_wrap_negative_indices_once(monkeypatch):
    want = [np.take_along_axis(X, np.array([[0, 4], [4, 0], [2, 3]]), axis=1),
            Y[[3, 0], [0, 1]], np.take_along_axis(X, np.array([[0, 1], [4, 0], [4, 4]]), axis=1),
            Y[[3, 0], :, [0, 0]]]                     # j[:, 1] - 1 is computed: -4, wrapped to -2, clamped to 0
    for target in ("cpu", "cuda-sim"):      # i * 4 is computed: [0, -4], [16, -20], [8, 12], wrapped then clamped
        got = fusec.compile(ALONG, target=target, options={"baseline": False}).along(*_along())
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w, err_msg=target)
    prog = fusec.compile(ALONG, target="cpu", options={"baseline": False})
    _no_compiling(monkeypatch)
    with pytest.raises(fusec.FdslError) as info:
        prog.along(*_along(i=((0, -6), (4, -5), (2, 3))))
    (d,) = info.value.diagnostics
    assert (d.span.line, d.span.col) == (3, 12)
    assert d.message == ("take_along_axis: index -6 at [0, 1] is outside axis 1 of extent 5 "
                         "(indices go from -5 to 4)")
    with pytest.raises(fusec.FdslError) as info:
        prog.along(*_along(j=((3, -3), (-4, 3))))
    (d,) = info.value.diagnostics
    assert (d.span.line, d.span.col) == (3, 43)
    assert d.message == "gather_nd: index 3 at [1, 1] is outside axis 1 of extent 3 (indices go from -3 to 2)"


def test_cuda_sim_clamps_take_along_axis_gather_nd_and_index_indices_after_wrapping():
    prog = fusec.compile(ALONG, target="cuda-sim", options={"baseline": False})
    a, b, _, d = prog.along(*_along(i=((9, -9), (5, -6), (2, 3)), j=((7, -9), (-4, 1))))
    np.testing.assert_array_equal(a, np.take_along_axis(X, np.array([[4, 0], [4, 0], [2, 3]]), axis=1))
    np.testing.assert_array_equal(b, Y[[3, 0], [0, 1]])
    np.testing.assert_array_equal(d, Y[[3, 0], :, [0, 0]])          # [7, -4] and [-10, 0], wrapped and clamped


def test_cpu_refuses_an_index_input_of_index_naming_its_axis(monkeypatch):
    src = ("chain idx(y: f32[4, 3, 2], r: i64[2], c: i32[2]) -> f32[2, 3] {\n"
           "    return index(y, [r, c], axes=[0, 2])\n}\n")
    prog = fusec.compile(src, target="cpu", options={"baseline": False})
    r = np.array([3, -4], np.int64)
    np.testing.assert_array_equal(prog.idx(Y, r, np.array([1, -2], np.int32)), Y[[3, 0], :, [1, 0]])
    _no_compiling(monkeypatch)
    with pytest.raises(fusec.FdslError) as info:
        prog.idx(Y, r, np.array([1, -3], np.int32))
    (d,) = info.value.diagnostics
    assert (d.span.line, d.span.col) == (2, 12)
    assert d.message == "index: index -3 at [1] is outside axis 2 of extent 2 (indices go from -2 to 1)"
