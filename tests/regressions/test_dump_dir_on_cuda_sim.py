"""Regression: `fusec f.fdsl --target cuda-sim --dump-dir D` was an internal error ("CUDA driver
library cannot be found"): writing the stages imported numba.cuda before the simulator was
chosen, and the run then found the real CUDA module. The simulator is now chosen first."""
import os
import subprocess
import sys

SRC = """chain c(x: f32[M, 64], w: f32[64]) -> f32[M, 64] {
    return exp(x) * w + 1.0
}
"""


def test_dump_dir_with_the_simulator_runs(tmp_path):
    path = tmp_path / "a.fdsl"
    path.write_text(SRC)
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run([sys.executable, "-m", "fusec", str(path), "--target", "cuda-sim", "--bind", "M=16",
                        "--dump-dir", str(tmp_path / "d"), "--no-cache", "-q"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "-> ok" in r.stdout
    assert (tmp_path / "d" / "c.07-kernels.py").exists(), sorted(os.listdir(tmp_path / "d"))
