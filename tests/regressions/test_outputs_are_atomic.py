"""Regression: outputs were not atomic (a `--save` interrupted by `ulimit -f` left an npz that
could not be loaded); on exit 3 `--save` and `--report` wrote the failing outputs with no
marker; `--report` with `--target reference` wrote nothing and said nothing."""
import json
import os
import resource
import subprocess
import sys

import numpy as np
import pytest

from fusec.cli import main
from fusec.runtime import compare as compare_module, npz

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOFTMAX = os.path.join(ROOT, "examples", "softmax.fdsl")


@pytest.mark.slow
def test_an_interrupted_save_leaves_the_previous_file_whole(tmp_path):
    out = tmp_path / "out.npz"
    cmd = [sys.executable, "-m", "fusec", SOFTMAX, "--target", "reference", "--save", str(out)]
    subprocess.run(cmd + ["--bind", "M=300,N=300"], check=True, capture_output=True, cwd=tmp_path)
    before = out.read_bytes()

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (100 * 1024, 100 * 1024))
    r = subprocess.run(cmd + ["--bind", "M=400,N=400"], capture_output=True, text=True, preexec_fn=small_files,
                       cwd=tmp_path)
    assert r.returncode == 1
    assert f"fusec: error: --save: cannot write {out}: File too large" in r.stderr
    assert out.read_bytes() == before                       # untouched, and still loads
    assert npz.load_npz(str(out))["softmax_rows"]["in"]["x"].shape == (300, 300)
    assert sorted(os.listdir(tmp_path)) == ["out.npz"]      # no temporary file left


def test_a_numerics_failure_is_recorded_in_the_saved_file_and_the_report(tmp_path, capsys, monkeypatch):
    real = compare_module.compare

    def wrong_row_sums(actual, expected, dtype):
        return real(np.asarray(actual) * 1.5 if np.asarray(actual).ndim == 2 else actual, expected, dtype)
    monkeypatch.setattr("fusec.report.compare", wrong_row_sums)
    saved, report = tmp_path / "s.npz", tmp_path / "r.json"
    rc = main([SOFTMAX, "--target", "mlir-jit", "--bind", "M=2,N=3", "--save", str(saved), "--report", str(report)])
    assert rc == 3
    assert "fusec: numerics failure: chain softmax_rows output 0" in capsys.readouterr().err
    data = npz.load_npz(str(saved))
    assert "max abs err" in data["softmax_rows"]["failed"]["0"]
    assert "0" in data["softmax_rows"]["out"] and data["softmax_temperature"]["failed"].keys() == {"0"}
    r = json.loads(report.read_text())
    assert r["status"] == "numerics mismatch" and r["exit_status"] == 3
    assert [f.split(":")[0] for f in r["failed"]] == ["chain softmax_rows output 0", "chain softmax_temperature output 0"]
    assert r["chains"][0]["numerics"][0]["ok"] is False


def test_report_works_on_the_reference_target(tmp_path, capsys):
    report = tmp_path / "r.json"
    assert main([SOFTMAX, "--target", "reference", "--bind", "M=2,N=3", "--report", str(report)]) == 0
    r = json.loads(report.read_text())
    assert r["status"] == "ok" and r["failed"] == []
    assert [c["chain"] for c in r["chains"]] == ["softmax_rows", "softmax_temperature"]
    first = r["chains"][0]
    assert first["target"] == "reference" and first["binding"] == {"M": 2, "N": 3}
    assert first["outputs"][0]["type"] == "f32[2, 3]" and abs(first["outputs"][0]["sum"] - 2.0) < 1e-6
    assert first["numerics"] is None                       # the reference is not compared with itself


def test_an_unwritable_report_or_save_is_a_user_error(tmp_path, capsys):
    assert main([SOFTMAX, "--target", "reference", "--bind", "M=2,N=3", "--report", str(tmp_path)]) == 1
    assert f"fusec: error: --report {tmp_path}: cannot write it: Is a directory" in capsys.readouterr().err
    assert main([SOFTMAX, "--target", "reference", "--bind", "M=2,N=3", "--save", str(tmp_path)]) == 1
    assert f"fusec: error: --save: cannot write {tmp_path}" in capsys.readouterr().err


def test_a_dump_dir_that_cannot_be_made_is_a_user_error(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("")
    rc = main([SOFTMAX, "--target", "cpu", "--bind", "M=2,N=3", "--emit", "ast", "--dump-dir", str(f / "sub")])
    assert rc == 1                                       # was an internal error (NotADirectoryError)
    assert capsys.readouterr().err == (f"fusec: error: --dump-dir {f / 'sub'}: cannot create the directory: Not a "
                                       "directory\n")


@pytest.mark.slow
def test_a_numerics_failure_on_a_compiled_target_is_recorded_too(tmp_path, capsys, monkeypatch):
    real, real_truth = compare_module.compare, compare_module.compare_to_truth
    monkeypatch.setattr("fusec.report.compare", lambda a, e, d: real(np.asarray(a) * 1.5, e, d))
    monkeypatch.setattr("fusec.report.compare_to_truth", lambda a, e, t, d: real_truth(np.asarray(a) * 1.5, e, t, d))
    saved, report = tmp_path / "s.npz", tmp_path / "r.json"
    rc = main([SOFTMAX, "--chain", "softmax_rows", "--target", "cpu", "--bind", "M=2,N=3", "--save", str(saved),
               "--report", str(report)])
    assert rc == 3
    assert "fusec: numerics failure: chain softmax_rows output 0 (f32[2, 3])" in capsys.readouterr().err
    data = npz.load_npz(str(saved))["softmax_rows"]
    assert data["failed"].keys() == {"0"} and data["out"]["0"].shape == (2, 3)
    r = json.loads(report.read_text())
    assert r["status"] == "numerics mismatch" and r["exit_status"] == 3
    assert [f.split(" (")[0] for f in r["failed"]] == ["chain softmax_rows output 0"]
    assert r["chains"][0]["numerics"][0]["ok"] is False
