"""Regression: an artifact whose manifest was `[1,2]` or `{"format":1}`, whose binding was
"four", or whose `.py` or `source.fdsl` was garbage or missing, was an internal error at `fusec
run`, and a broken source.fdsl was reported at the path the manifest recorded rather than at
the broken file; compiling into an existing `-o` directory left the previous program's modules
there; a cuda artifact without a GPU suggested `--target cpu`, which `fusec run` then refused.
Artifacts now carry a SHA-256 per file (and of the manifest itself), checked before anything is
imported."""
import json
import os
import shutil

import pytest

from fusec.cli import main
from fusec.runtime import artifact as art

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOFTMAX = os.path.join(ROOT, "examples", "softmax.fdsl")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("art") / "softmax"
    assert main(["compile", SOFTMAX, "--target", "cpu", "--bind", "M=4,N=8", "-o", str(d)]) == 0
    return d


def damaged(built, tmp_path, edit) -> str:
    d = tmp_path / "copy"
    shutil.copytree(built, d)
    edit(d)
    return str(d)


def manifest_edit(change):
    def edit(d):
        m = json.loads((d / "manifest.json").read_text())
        m = change(m)
        (d / "manifest.json").write_text(json.dumps(m))
    return edit


def set_binding(m):
    m["chains"]["softmax_rows"]["binding"]["M"] = "four"
    return m


def set_binding_5(m):
    m["chains"]["softmax_rows"]["binding"]["M"] = 5
    return m


CASES = {
    "list": (manifest_edit(lambda m: [1, 2]), "manifest.json: not a JSON object; recompile the artifact"),
    "format": (manifest_edit(lambda m: {"format": 1}), "artifact format 1 is not 2; recompile it"),
    "bare": (manifest_edit(lambda m: {"format": 2}), "manifest.json: 'target' is missing"),
    "four": (manifest_edit(set_binding), "chain 'softmax_rows': binding M is \"four\", not a positive integer"),
    "edited": (manifest_edit(set_binding_5), "manifest.json does not match its checksum: it was changed after compiling"),
    "garbage py": (lambda d: (d / "softmax_rows.fused.py").write_text("garbage ("),
                   "softmax_rows.fused.py does not match its checksum in manifest.json"),
    "missing py": (lambda d: (d / "softmax_rows.unfused.py").unlink(),
                   "softmax_rows.unfused.py is missing; the artifact is incomplete"),
    "garbage source": (lambda d: (d / "source.fdsl").write_text("chain (("),
                       "source.fdsl does not match its checksum in manifest.json"),
    "missing source": (lambda d: (d / "source.fdsl").unlink(), "source.fdsl is missing"),
    "truncated manifest": (lambda d: (d / "manifest.json").write_text((d / "manifest.json").read_text()[:200]),
                           "is not a fusec artifact (no readable manifest.json"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_damaged_artifact_is_a_user_error_naming_the_file(built, tmp_path, capsys, case):
    edit, message = CASES[case]
    d = damaged(built, tmp_path, edit)
    assert main(["run", d]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"fusec: error: {d}") and message in err, err
    assert "internal error" not in err


def test_the_undamaged_artifact_loads(built):
    a = art.load(built)
    assert set(a.chains) == {"softmax_rows", "softmax_temperature"}
    assert a.source_file == built / "source.fdsl"


def test_compiling_into_an_artifact_replaces_it_and_other_directories_are_refused(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["compile", SOFTMAX, "--target", "cpu", "--bind", "M=4,N=8", "-o", str(out)]) == 0
    assert main(["compile", SOFTMAX, "--target", "cpu", "--bind", "M=4,N=8", "-o", str(out),
                 "--chain", "softmax_rows"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "softmax_rows.fused.py", "softmax_rows.plan.txt",
                                                     "softmax_rows.unfused.py", "source.fdsl"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]       # no staging directory left
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    capsys.readouterr()
    assert main(["compile", SOFTMAX, "--target", "cpu", "--bind", "M=4,N=8", "-o", str(mine)]) == 1
    assert "exists and is not a fusec artifact (no manifest.json)" in capsys.readouterr().err
    assert (mine / "notes.txt").read_text() == "keep me"


def test_a_cuda_artifact_without_a_gpu_suggests_what_fusec_run_accepts(tmp_path, capsys, monkeypatch):
    from fusec.runtime import targets
    out = tmp_path / "cuda"
    assert main(["compile", SOFTMAX, "--chain", "softmax_rows", "--bind", "M=4,N=8", "-o", str(out)]) == 0
    capsys.readouterr()
    monkeypatch.setattr(targets, "best_available", lambda: "cpu")
    assert main(["run", str(out)]) == 1
    err = capsys.readouterr().err
    assert "--target cuda-sim" in err and "--target cpu" in err and "fusec compile --target cpu" in err
    assert main(["run", str(out), "--target", "cpu"]) == 1       # and indeed: not on the cpu
    assert "was compiled for cuda; it cannot run on cpu" in capsys.readouterr().err


def test_an_output_directory_that_cannot_be_made_is_refused_before_compiling(tmp_path, capsys, monkeypatch):
    from fusec.compiler import pipeline
    monkeypatch.setattr(pipeline, "build_chain", lambda *a, **k: pytest.fail("compiled"))
    f = tmp_path / "file"
    f.write_text("")
    argv = ["compile", SOFTMAX, "--target", "cpu", "--bind", "M=4,N=8", "-o"]
    assert main(argv + [str(f / "sub")]) == 1          # was an internal error (FileExistsError)
    assert f"fusec: error: cannot write the artifact {f / 'sub'}: {f} is a file, not a directory" in \
        capsys.readouterr().err
    assert main(argv + [str(f)]) == 1
    assert f"fusec: error: {f} exists and is not a directory" in capsys.readouterr().err


def test_a_cached_build_that_is_not_an_artifact_is_moved_aside_and_built_again(tmp_path, capsys):
    import numpy as np
    import fusec
    prog = fusec.compile(SOFTMAX, target="cpu", cache_dir=str(tmp_path))
    entry = tmp_path / "softmax_rows.M4_N8"
    entry.mkdir()
    (entry / "softmax_rows.fused.py").write_text("partial")         # an interrupted build, no manifest
    np.testing.assert_allclose(prog.softmax_rows(np.ones((4, 8), np.float32)), np.full((4, 8), 0.125), rtol=1e-6)
    assert capsys.readouterr().err == (f"fusec: the cached build {entry} exists and is not a fusec artifact (no "
                                       "manifest.json); moved it to softmax_rows.M4_N8.invalid and compiling again\n")
    assert (tmp_path / "softmax_rows.M4_N8.invalid" / "softmax_rows.fused.py").read_text() == "partial"
    assert art.load(entry).chains.keys() == {"softmax_rows"}
