"""Regression: `--inputs` that was missing, a directory, not a zip, truncated, with keys outside
the layout or object arrays, or a 0-row array on cpu, was an internal error (exit 2); an npz
whose chain name did not match (`softmax_rowz/in/x`), or that held only outputs, was silently
ignored and random inputs used (exit 0). Each is now an error naming the flag and the file, and
a mismatch lists what the file holds and what the chain expects."""
import os

import numpy as np

from fusec.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOFTMAX = os.path.join(ROOT, "examples", "softmax.fdsl")
X = np.ones((2, 3), np.float32)


def npz(path, **arrays):
    np.savez(path, **arrays)
    return str(path)


def run(capsys, inputs, *flags):
    rc = main([SOFTMAX, "--chain", "softmax_rows", "--target", "reference", "--inputs", str(inputs), *flags])
    out, err = capsys.readouterr()
    return rc, err


def test_files_that_are_not_inputs(tmp_path, capsys):
    good = npz(tmp_path / "good.npz", **{"softmax_rows/in/x": X})
    (tmp_path / "text.npz").write_text("hello")
    (tmp_path / "cut.npz").write_bytes(open(good, "rb").read()[:300])
    cases = {
        tmp_path / "missing.npz": f"--inputs {tmp_path / 'missing.npz'}: no such file",
        tmp_path: f"--inputs {tmp_path} is a directory, not an npz file",
        tmp_path / "text.npz": "is not an npz file (not a zip archive)",
        tmp_path / "cut.npz": "is truncated or damaged",
        npz(tmp_path / "key.npz", x=X): "key 'x' is not CHAIN/in/ARG, CHAIN/out/K or CHAIN/failed/K",
        npz(tmp_path / "obj.npz", **{"softmax_rows/in/x": np.array([{}], dtype=object)}):
            "'softmax_rows/in/x' holds Python objects (dtype object)",
    }
    for path, message in cases.items():
        rc, err = run(capsys, path)
        assert rc == 1 and err.startswith("fusec: error: --inputs ") and message in err, (path, err)
    assert run(capsys, good)[0] == 0


def test_inputs_that_do_not_match_the_chains(tmp_path, capsys):
    cases = {
        npz(tmp_path / "rowz.npz", **{"softmax_rowz/in/x": X}):
            "holds chain 'softmax_rowz', which " + SOFTMAX + " does not define (its chains: softmax_rows, "
            "softmax_temperature); the file holds softmax_rowz/in/x",
        npz(tmp_path / "outs.npz", **{"softmax_rows/out/0": X}):
            "has no softmax_rows/in/x for chain 'softmax_rows' (the chain takes softmax_rows/in/x; the file holds "
            "softmax_rows/out/0)",
        npz(tmp_path / "extra.npz", **{"softmax_rows/in/x": X, "softmax_rows/in/y": X}):
            "holds softmax_rows/in/y, which is not a parameter of chain 'softmax_rows' (it takes softmax_rows/in/x)",
        npz(tmp_path / "out9.npz", **{"softmax_rows/in/x": X, "softmax_rows/out/9": X}):
            "holds softmax_rows/out/9, but chain 'softmax_rows' has 1 output (0 to 0)",
    }
    for path, message in cases.items():
        rc, err = run(capsys, path)
        assert rc == 1 and message in err, (path, err)


def test_a_zero_row_input_is_a_user_error_on_cpu(tmp_path, capsys):
    path = npz(tmp_path / "zero.npz", **{"softmax_rows/in/x": np.ones((0, 3), np.float32)})
    rc = main([SOFTMAX, "--chain", "softmax_rows", "--target", "cpu", "--inputs", path])
    err = capsys.readouterr().err
    assert rc == 1
    assert "softmax.fdsl:2:20: error: input 'x' has shape (0, 3), so M = 0; sizes must be positive" in err


def test_fusec_run_checks_its_inputs_too(tmp_path, capsys):
    art = tmp_path / "art"
    assert main(["compile", SOFTMAX, "--chain", "softmax_rows", "--bind", "M=2,N=3", "--target", "cpu",
                 "-o", str(art)]) == 0
    capsys.readouterr()
    bad = npz(tmp_path / "rowz.npz", **{"softmax_rowz/in/x": X})
    assert main(["run", str(art), "--inputs", bad]) == 1
    assert f"--inputs {bad} holds chain 'softmax_rowz', which {art} does not define" in capsys.readouterr().err


def test_a_file_for_one_of_the_chains_says_how_to_run_only_that_one(tmp_path, capsys):
    path = npz(tmp_path / "rows.npz", **{"softmax_rows/in/x": X})
    assert main([SOFTMAX, "--target", "reference", "--inputs", path]) == 1
    assert (f"fusec: error: --inputs {path} holds no inputs for chain 'softmax_temperature' (it takes "
            "softmax_temperature/in/t, softmax_temperature/in/x; the file holds softmax_rows/in/x); run only the "
            "chains it holds with --chain NAME") in capsys.readouterr().err
    assert main([SOFTMAX, "--target", "reference", "--inputs", path, "--chain", "softmax_rows"]) == 0
