"""Regression: every process left a fusec-* directory in the system temp directory
(fusec.compile used mkdtemp and never removed it; an internal error's IR dump did the same)."""
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_compile_run_and_the_main_job_leave_the_temp_directory_empty(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp), FUSEC_CACHE_DIR=os.environ.get("FUSEC_CACHE_DIR", ""))
    code = textwrap.dedent("""
        import numpy as np, fusec
        prog = fusec.compile("chain f(x: f32[M, 8]) -> f32[M, 8] { return exp(x) * 2 }", target="cpu")
        y = prog.f(np.ones((4, 8), np.float32))
        assert np.allclose(y, 2 * np.e)
        assert prog.cache.exists()
    """)
    subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=tmp_path)
    subprocess.run([sys.executable, "-m", "fusec", os.path.join(ROOT, "examples", "softmax.fdsl"), "--target", "cpu",
                    "--chain", "softmax_rows", "--bind", "M=4,N=8"], env=env, check=True, cwd=tmp_path,
                   capture_output=True)
    assert sorted(os.listdir(tmp)) == []


def test_a_given_cache_directory_keeps_the_artifacts(tmp_path):
    import numpy as np

    import fusec
    prog = fusec.compile("chain f(x: f32[M, 8]) -> f32[M, 8] { return exp(x) }", target="cpu",
                         cache_dir=str(tmp_path / "c"))
    prog.f(np.ones((2, 8), np.float32))
    (art,) = (tmp_path / "c").iterdir()
    assert art.name == "f.M2" and (art / "manifest.json").exists()
