"""`fusec FILE --html PATH` and `Program.html(path)`: the page is written (with the kernel report
and each launch's source on cuda-sim), and a path that cannot be written is a user error (exit
1, one line) found before anything is compiled."""
import json
from pathlib import Path

import pytest

import fusec
from fusec.cli import main

ROOT = Path(__file__).resolve().parents[2]
LOG_SOFTMAX = str(ROOT / "examples" / "log_softmax.fdsl")
EW = [str(ROOT / "examples" / "ew_chain.fdsl"), "--chain", "ew_chain", "--bind", "M=8,N=64"]


def test_cli_writes_the_page_with_the_kernel_report_on_cuda_sim(tmp_path, capsys):
    page, report = tmp_path / "sub" / "r.html", tmp_path / "r.json"
    assert main(EW + ["--target", "cuda-sim", "--kernel-report", "--html", str(page), "--report", str(report)]) == 0
    assert f"wrote {page}\n" in capsys.readouterr().out
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and f"fusec report: {EW[0]}" in text
    (chain,) = json.loads(report.read_text())["chains"]
    (launch,) = chain["kernel_report"]
    assert 'id="c0-card-k0"' in text and "kernel report (ptxas -v" in text and "source of k0" in text
    assert "def k0(" in text and "emitted module of ew_chain" in text
    if launch["registers"] is not None:                # ptxas measured it (nvidia-cuda-nvcc, the dev extra)
        assert f"<td>{launch['registers']}</td>" in text and f"{100 * launch['occupancy']:.1f}%" in text
    assert "not measured on cuda-sim" in text          # the time view says why there is no measurement


def test_program_html_writes_the_page_of_a_compiled_program(tmp_path):
    program = fusec.compile(LOG_SOFTMAX, target="cpu")
    path = program.html(tmp_path / "lib.html", {"B": 8, "C": 32}, chains=["log_softmax_rows"], run=False)
    text = path.read_text()
    assert path == tmp_path / "lib.html" and "chain log_softmax_rows [B=8, C=32] on cpu" in text
    assert "not run: not run (run=False)" in text and "nll" not in text
    with pytest.raises(ValueError, match="compiled target"):
        fusec.compile(LOG_SOFTMAX, target="reference").html(tmp_path / "x.html")


@pytest.mark.parametrize("where, why", [
    ("{file}/r.html", "cannot write it: {file} is not a directory"),
    ("{dir}", "is a directory"),
])
def test_an_unwritable_path_is_a_user_error(where, why, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(fusec.program.Program, "_build", lambda *a: pytest.fail("compiled before the check"))
    f = tmp_path / "file"
    f.write_text("")
    path = where.format(file=f, dir=tmp_path)
    assert main([LOG_SOFTMAX, "--html", path]) == 1
    err = capsys.readouterr().err
    assert err == f"fusec: error: --html {path}: {why.format(file=f)}\n"


def test_html_needs_a_compiled_target(tmp_path, capsys):
    assert main([LOG_SOFTMAX, "--target", "reference", "--html", str(tmp_path / "r.html")]) == 1
    assert capsys.readouterr().err.endswith("--html needs a compiled target (cuda, cuda-sim, cpu), not reference\n")
