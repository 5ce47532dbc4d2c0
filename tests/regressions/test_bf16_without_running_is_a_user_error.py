"""Regression (found by fuzzing `--emit kernels`): bf16 was refused as a user error only when a
chain ran; `--emit kernels`, `--dump-dir`, `fusec compile` and `--kernel-report` without a GPU
reached the emitter and ended in an internal error (exit 2)."""
import pytest

from fusec.cli import main

BF16 = "chain h(x: bf16[4]) -> bf16[4] {\n    return x * 2\n}\n"


@pytest.mark.parametrize("argv", [
    ["FILE", "--target", "cpu", "--emit", "kernels"],
    ["FILE", "--target", "cuda-sim", "--emit", "kernels"],
    ["FILE", "--target", "cpu", "--dump-dir", "DIR/dump"],
    ["compile", "FILE", "-o", "DIR/art", "--target", "cpu"],
    ["FILE", "--target", "cuda", "--kernel-report"],
])
def test_bf16_on_a_numba_target_is_refused_at_the_parameter(tmp_path, capsys, argv, monkeypatch):
    from fusec.runtime import targets
    monkeypatch.setattr(targets, "best_available", lambda: "cpu")       # no GPU, whatever this machine has
    f = tmp_path / "h.fdsl"
    f.write_text(BF16)
    argv = [str(f) if a == "FILE" else a.replace("DIR", str(tmp_path)) for a in argv]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert f"{f}:1:9: error: bf16 is not supported on the " in err and "internal error" not in err
    assert not (tmp_path / "art").exists()


def test_stages_before_the_emitter_still_print(tmp_path, capsys):
    f = tmp_path / "h.fdsl"
    f.write_text(BF16)
    assert main([str(f), "--target", "cpu", "--emit", "gpu"]) == 0
    assert "scf.parallel" in capsys.readouterr().out
