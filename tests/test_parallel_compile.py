"""`fusec compile -j N`: the chains compiled in worker processes give the same artifact, byte for
byte, as one process; the lines come in the file's order; bad input is one line, as without
workers; an exception raised in a worker comes back whole (ours take other arguments than
their message)."""
import filecmp
import os

import pytest

from fusec.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ATTENTION = os.path.join(ROOT, "examples", "attention.fdsl")


def _same_tree(a, b) -> bool:
    cmp = filecmp.dircmp(a, b)
    if cmp.left_only or cmp.right_only or cmp.funny_files:
        return False
    match, mismatch, errors = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)
    return not mismatch and not errors and all(_same_tree(os.path.join(a, d), os.path.join(b, d))
                                               for d in cmp.common_dirs)


def test_j2_writes_the_same_bytes_as_j1(tmp_path, capsys):
    outs = {}
    for j in (1, 2):
        assert main(["compile", ATTENTION, "-o", str(tmp_path / f"j{j}"), "--target", "cpu", "-j", str(j),
                     "--bind", "B=2,S=16,H=4"]) == 0
        outs[j] = capsys.readouterr().out.splitlines()
    assert _same_tree(tmp_path / "j1", tmp_path / "j2")
    assert [ln for ln in outs[1] if ln.startswith("compiled")] == [ln for ln in outs[2] if ln.startswith("compiled")]
    assert [ln.split()[1] for ln in outs[2] if ln.startswith("compiled")] == [
        "attention", "multihead", "causal", "masked", "cross", "by_hand"]


def test_bad_input_with_workers_is_one_line(tmp_path, capsys):
    f = tmp_path / "bad.fdsl"
    f.write_text("chain a(x: f32[4, 8]) -> f32[4, 8] {\n    return x * 2.0\n}\n"
                 "chain b(x: f32[100000, 100000]) -> f32[100000, 100000] {\n    return x * 2.0\n}\n")
    assert main(["compile", str(f), "-o", str(tmp_path / "out"), "--target", "cpu", "-j", "2"]) == 1
    err = capsys.readouterr().err
    assert "bad.fdsl:4:9: error: input 'x' is f32[100000, 100000]" in err and "Traceback" not in err
    assert main(["compile", str(f), "-o", str(tmp_path / "out"), "--target", "cpu", "-j", "0"]) == 1
    assert "is not a number of worker processes" in capsys.readouterr().err


def test_a_workers_exception_comes_back_whole():
    from fusec.compiler.errors import CompilerInternalError
    from fusec.parallel import _Failure, _guarded

    def boom(_job):
        raise CompilerInternalError("plan", "no kernel", "/tmp/dump")
    failure = _guarded(boom, None)
    assert isinstance(failure, _Failure)
    e = failure.rebuild()
    assert isinstance(e, CompilerInternalError) and (e.stage, e.dump_path) == ("plan", "/tmp/dump")
    assert str(e).startswith("internal compiler error in stage 'plan': no kernel")


@pytest.mark.slow
def test_the_api_prepares_every_chain_in_workers(tmp_path):
    import numpy as np

    import fusec
    p = fusec.compile(ATTENTION, target="cpu", cache=True, cache_dir=str(tmp_path / "c"), jobs=2)
    sizes = {"B": 2, "S": 16, "H": 4, "T": 16}
    p.prepare({name: sizes for name in p.chains})
    built = {name: c.compiled({s: sizes[s] for s in c.typed.symbols}) for name, c in p.chains.items()}
    assert {b.cache for b in built.values()} == {"miss"}
    assert len(list((tmp_path / "c").glob("*.*.*"))) == 6
    q = np.random.default_rng(0).standard_normal((2, 16, 64)).astype(np.float32)
    (ok,) = p.attention.check([q, q, q])
    assert ok.ok
    again = fusec.compile(ATTENTION, target="cpu", cache=True, cache_dir=str(tmp_path / "c"), jobs=2)
    again.prepare({name: sizes for name in p.chains})
    assert again.attention.compiled({"B": 2, "S": 16}).cache == "hit"
