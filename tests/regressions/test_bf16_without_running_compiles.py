"""Regression (found by fuzzing `--emit kernels`): bf16 was refused as a user error only when a
chain ran; `--emit kernels`, `--dump-dir`, `fusec compile` and `--kernel-report` without a GPU
reached the emitter and ended in an internal error (exit 2). bf16 now runs on the Numba targets
(tests/numerics/test_bf16.py): each of these paths compiles it."""
import pytest

from fusec.cli import main

BF16 = "chain h(x: bf16[4]) -> bf16[4] {\n    return x * 2\n}\n"


@pytest.mark.parametrize("argv, says", [
    (["FILE", "--target", "cpu", "--emit", "kernels"], "_round_bf16"),
    (["FILE", "--target", "cuda-sim", "--emit", "kernels"], "arg0.view(np.uint16)"),
    (["FILE", "--target", "cpu", "--dump-dir", "DIR/dump"], ""),
    (["compile", "FILE", "-o", "DIR/art", "--target", "cpu"], "compiled"),
    (["FILE", "--target", "cuda", "--kernel-report"], "kernel report of the fused build"),
])
def test_bf16_on_a_numba_target_compiles_without_running(tmp_path, capsys, argv, says, monkeypatch):
    from fusec.runtime import targets
    monkeypatch.setattr(targets, "best_available", lambda: "cpu")       # no GPU, whatever this machine has
    f = tmp_path / "h.fdsl"
    f.write_text(BF16)
    argv = [str(f) if a == "FILE" else a.replace("DIR", str(tmp_path)) for a in argv]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert says in out and "error" not in err
    if "--dump-dir" in argv:
        assert "_round_bf16" in "".join(p.read_text() for p in (tmp_path / "dump").rglob("*kernels*"))
    if "--kernel-report" in argv:              # the tracer makes bf16 inputs too
        assert "100.0%" in out and "not traced" not in out
    if "compile" in argv:
        assert (tmp_path / "art").exists()


def test_stages_before_the_emitter_still_print(tmp_path, capsys):
    f = tmp_path / "h.fdsl"
    f.write_text(BF16)
    assert main([str(f), "--target", "cpu", "--emit", "gpu"]) == 0
    assert "scf.parallel" in capsys.readouterr().out
