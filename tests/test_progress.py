"""Progress on long work (fusec/progress.py): a status line on stderr on a terminal, nothing
when stderr is not a terminal or with --quiet; the report on stdout is the same either way."""
import io
import os

import pytest

from fusec import progress as progress_mod
from fusec.cli import main
from fusec.progress import Progress

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")
EW = os.path.join(EXAMPLES, "ew_chain.fdsl")


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_the_line_is_drawn_in_place_and_wiped(monkeypatch):
    monkeypatch.delenv("TERM", raising=False)
    t = Terminal()
    p = Progress(t)
    assert p.enabled
    p.show("compiling a long chain")
    p.show("short")
    p.clear()
    out = t.getvalue()
    assert out.startswith("\rcompiling a long chain\rshort")
    # the shorter line is padded over the longer one, and clear() leaves a blank line at column 0
    assert out.endswith("\r" + " " * len("compiling a long chain") + "\r")
    before = t.getvalue()
    p.clear()                           # nothing shown: nothing written
    assert t.getvalue() == before


@pytest.mark.parametrize("stream, quiet, term", [(io.StringIO(), False, None), (Terminal(), True, None),
                                                 (Terminal(), False, "dumb")])
def test_silent_off_a_terminal_with_quiet_or_a_dumb_terminal(monkeypatch, stream, quiet, term):
    if term:
        monkeypatch.setenv("TERM", term)
    else:
        monkeypatch.delenv("TERM", raising=False)
    p = Progress(stream, quiet=quiet)
    p.show("x")
    p.stage("chain: compiling")("tiled")
    p.clear()
    assert not p.enabled and stream.getvalue() == ""


def _run(monkeypatch, capsys, tty: bool, *flags):
    monkeypatch.setattr(progress_mod, "on_terminal", lambda stream: tty)
    assert main([EW, "--target", "cuda-sim", "--chain", "ew_chain", "--bind", "M=4,N=8", "--no-cache", *flags]) == 0
    return capsys.readouterr()


def test_a_compile_on_a_terminal_shows_its_stages(monkeypatch, capsys):
    shown = _run(monkeypatch, capsys, True)
    for what in ("ew_chain: compiling (fused: linalg", "fused: tiled", "unfused: kernels",
                 "ew_chain: running and checking"):
        assert what in shown.err, shown.err
    assert "\r" in shown.err and "\r" not in shown.out
    assert shown.err.endswith("\r")      # wiped before the report was printed
    quiet = _run(monkeypatch, capsys, True, "--quiet")
    assert quiet.err == ""
    piped = _run(monkeypatch, capsys, False)
    assert piped.err == ""
    # the report is the same with or without the line (bar the times)
    assert shown.out.splitlines()[0] == quiet.out.splitlines()[0] == piped.out.splitlines()[0]


def test_fusec_test_counts_the_files(monkeypatch, capsys, tmp_path):
    for name in ("a", "b"):
        (tmp_path / f"{name}.fdsl").write_text(f"chain {name}(x: f32[M]) -> f32[M] {{\n    return x * 2.0\n}}\n")
    assert main(["test", str(tmp_path), "--update", "--bind", "M=3"]) == 0
    capsys.readouterr()
    monkeypatch.setattr(progress_mod, "on_terminal", lambda stream: True)
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["test", str(tmp_path)]) == 0
    shown = capsys.readouterr()
    assert "[1/2]" in shown.err and "[2/2]" in shown.err and "b.fdsl::b: running" in shown.err
    assert "2 passed, 0 failed" in shown.out
    assert main(["test", str(tmp_path), "-q"]) == 0
    assert capsys.readouterr().err == ""


def test_the_bench_logger_wipes_the_line_before_a_result(monkeypatch, capsys):
    from bench.__main__ import _logger, _parser
    monkeypatch.setattr(progress_mod, "on_terminal", lambda stream: True)
    log, status, clear = _logger(_parser().parse_args(["scaling"]))
    status("compiling the mixed chain of 1000 ops")
    log("  mixed n=1000: ...")
    clear()
    shown = capsys.readouterr()
    assert "compiling the mixed chain of 1000 ops" in shown.err and shown.out == "  mixed n=1000: ...\n"
    log, status, clear = _logger(_parser().parse_args(["scaling", "--quiet"]))
    status("x")
    assert capsys.readouterr().err == ""


def test_autotuning_says_which_candidate_it_times(monkeypatch, tmp_path):
    import fusec
    from fusec.compiler import pipeline
    from fusec.compiler.options import CompileOptions
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path))          # a fresh autotune cache
    chain = fusec.check("chain t(x: f32[64, 64]) -> f32[64, 64] {\n    return tanh(x) * 2.0\n}\n").chains[0]
    told, timed = [], []

    def timer(source: str, host: str) -> float:
        timed.append(host)
        return 1e-3 * len(timed)
    pipeline.build_chain(chain, {}, CompileOptions(target="gpu", autotune=True, baseline=False), timer, told.append)
    assert timed and told[0] == "autotune: planning"
    assert f"autotune: candidate {len(timed)} (timing)" in told
    assert told[-len(pipeline.STAGE_NAMES) + 2:] == [f"fused: {s}" for s in pipeline.STAGE_NAMES[2:]]
