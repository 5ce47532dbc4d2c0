"""Regression: the reproduction hint of an internal error added `--dump-dir` to `fusec run` and
`fusec test`, which reject it (and to a command line that already had one)."""
import os

from fusec import cli
from fusec.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOFTMAX = os.path.join(ROOT, "examples", "softmax.fdsl")


def hint(capsys) -> str:
    err = capsys.readouterr().err
    (line,) = [x for x in err.splitlines() if "reproduce with:" in x]
    return line.split("reproduce with: ", 1)[1]


def test_only_the_main_command_gets_dump_dir(monkeypatch, capsys, tmp_path):
    def broken(args):
        raise RuntimeError("synthetic")
    for name in ("_cmd_main", "_cmd_run", "_cmd_test", "_cmd_compile"):
        monkeypatch.setattr(cli, name, broken)
    assert main([SOFTMAX, "--target", "reference"]) == 2
    assert hint(capsys) == f"fusec {SOFTMAX} --target reference --dump-dir /tmp/fusec-dump"
    assert main([SOFTMAX, "--dump-dir", str(tmp_path)]) == 2
    assert hint(capsys) == f"fusec {SOFTMAX} --dump-dir {tmp_path}"
    for argv in (["run", str(tmp_path)], ["test", SOFTMAX], ["compile", SOFTMAX, "-o", str(tmp_path / "o")]):
        assert main(argv) == 2
        shown = hint(capsys)
        assert "--dump-dir" not in shown and shown == "fusec " + " ".join(argv)
    # and what the hint says is accepted by the subcommand's parser (the run fails for its own reasons)
    monkeypatch.undo()
    assert main(["run", str(tmp_path)]) == 1
    assert "unrecognized arguments" not in capsys.readouterr().err
