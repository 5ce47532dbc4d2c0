"""Running compiled chains: every example on cpu and cuda-sim, the main job, artifacts, the API."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fusec
from fusec.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
FUSEC = [sys.executable, "-m", "fusec"]


GOLDEN = sorted(f for f in os.listdir(EXAMPLES) if f.endswith(".golden.npz"))


def _golden_chains(golden: str) -> int:
    with np.load(os.path.join(EXAMPLES, golden)) as z:
        return len({k.split("/")[0] for k in z.files})


@pytest.mark.slow
@pytest.mark.parametrize("golden", GOLDEN)
def test_every_example_matches_golden_on_cpu(golden, capsys):
    path = os.path.join(EXAMPLES, golden.replace(".golden.npz", ".fdsl"))
    assert main(["test", path, "--target", "cpu"]) == 0
    out = capsys.readouterr().out
    assert f"{_golden_chains(golden)} passed, 0 failed" in out, out


@pytest.mark.slow
@pytest.mark.parametrize("golden", GOLDEN)
def test_every_example_matches_golden_on_cuda_sim(golden, capsys):
    path = os.path.join(EXAMPLES, golden.replace(".golden.npz", ".fdsl"))
    want = f"{_golden_chains(golden)} passed, 0 failed"
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":      # this process runs the simulator (conftest)
        assert main(["test", path, "--target", "cuda-sim"]) == 0
        out = capsys.readouterr().out
    else:                                                   # the simulator is process-wide: its own process
        r = subprocess.run(FUSEC + ["test", path, "--target", "cuda-sim"], capture_output=True, text=True,
                           timeout=600, env={**os.environ, "NUMBA_ENABLE_CUDASIM": "1"})
        assert r.returncode == 0, r.stdout + r.stderr
        out = r.stdout
    assert want in out and "[cuda-sim] ok" in out, out


@pytest.mark.slow
def test_main_job_reports_kernels_times_and_numerics(tmp_path, capsys):
    report = tmp_path / "r.json"
    saved = tmp_path / "o.npz"
    assert main([os.path.join(EXAMPLES, "mlp.fdsl"), "--target", "cpu", "--chain", "mlp_piped",
                 "--bind", "M=16,D=32,H=64", "--report", str(report), "--save", str(saved)]) == 0
    out = capsys.readouterr().out
    assert "chain mlp_piped [M=16, D=32, H=64] on cpu" in out
    assert "2 ops -> 1 kernel (unfused: 2)" in out
    assert "kernel 0: %1 matmul, %2 map(addf,mulf,tanh) [root]; block tile" in out
    assert "time: fused " in out and "speedup" in out and "-> ok" in out
    data = json.loads(report.read_text())
    (c,) = data["chains"]
    assert c["plan"]["kernels"] == 1 and c["unfused_kernels"] == 2
    assert c["time"]["fused"]["median_ms"] > 0 and c["time"]["unfused"]["runs"] >= 3
    assert c["numerics"][0]["ok"] and c["numerics"][0]["max_abs_err"] < 1e-4
    assert {"fused.linalg", "fused.plan", "fused.kernels", "unfused.kernels"} <= set(c["compile_seconds"])
    assert np.load(saved)["mlp_piped/out/0"].shape == (16, 64)


@pytest.mark.slow
def test_no_fuse_runs_the_unfused_build(tmp_path, capsys, monkeypatch):
    f = os.path.join(EXAMPLES, "softmax.fdsl")
    assert main([f, "--target", "cpu", "--chain", "softmax_rows", "--bind", "M=8,N=16", "--no-fuse"]) == 0
    out = capsys.readouterr().out
    assert "(unfused build: --no-fuse)" in out and "4 ops -> 4 kernels" in out
    monkeypatch.setenv("FUSEC_NO_FUSE", "1")
    assert main([f, "--target", "cpu", "--chain", "softmax_rows", "--bind", "M=8,N=16"]) == 0
    assert "4 ops -> 4 kernels" in capsys.readouterr().out


def test_numerics_failure_exits_3_and_names_output_and_place(monkeypatch, capsys):
    from fusec.runtime import reference

    real = reference.run_chain

    def wrong(chain, inputs, binding=None, compute_f64=False):
        outs = real(chain, inputs, binding, compute_f64)
        outs[0] = outs[0].copy()
        outs[0][1, 2] += 1.0
        return outs

    monkeypatch.setattr(reference, "run_chain", wrong)
    assert main([os.path.join(EXAMPLES, "ew_chain.fdsl"), "--target", "cpu", "--chain", "ew_chain",
                 "--bind", "M=4,N=8"]) == 3
    captured = capsys.readouterr()
    assert "MISMATCH" in captured.out
    assert "chain ew_chain output 0 (f32[4, 8]): max abs err 1" in captured.err
    assert "worst at [1, 2]" in captured.err


@pytest.mark.slow
def test_compile_then_run_an_artifact_without_mlir(tmp_path):
    out = tmp_path / "art"
    r = subprocess.run(FUSEC + ["compile", os.path.join(EXAMPLES, "layernorm.fdsl"), "-o", str(out),
                                "--target", "cpu", "--bind", "T=8"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["target"] == "cpu" and set(manifest["chains"]) == {"layernorm_builtin", "layernorm_by_hand"}
    assert (out / "layernorm_builtin.fused.py").exists() and (out / "source.fdsl").exists()
    # the options and the profile the plans were made for, and the options' hash
    assert manifest["hardware"]["name"] == "cpu" and manifest["hardware"]["kind"] == "cpu"
    assert manifest["options"]["fuse"] is True and manifest["options"]["target"] == "cpu"
    from fusec.compiler.calibrate import cpu_profile
    from fusec.compiler.options import CompileOptions
    assert manifest["options_key"] == CompileOptions(target="cpu", hardware=cpu_profile()).key()
    # a torch_mlir (and mlir) that cannot be imported: the runtime must not need them
    blocker = tmp_path / "blocker"
    for name in ("torch_mlir", "mlir"):
        (blocker / name).mkdir(parents=True)
        (blocker / name / "__init__.py").write_text("raise ImportError('MLIR is blocked in this test')\n")
    env = {**os.environ, "PYTHONPATH": str(blocker)}
    r = subprocess.run(FUSEC + ["run", str(out), "--report", str(tmp_path / "r.json")], capture_output=True,
                       text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "chain layernorm_builtin [T=8] on cpu" in r.stdout and "-> ok" in r.stdout
    assert "torch_mlir" not in r.stderr
    # Numba cached what it compiled beside the modules: a second run loads its machine code
    assert (out / "__pycache__").is_dir()
    r = subprocess.run(FUSEC + ["run", str(out), "--report", str(tmp_path / "r2.json")], capture_output=True,
                       text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    first, again = (json.loads((tmp_path / n).read_text()) for n in ("r.json", "r2.json"))
    jit = [[c["compile_seconds"]["numba.fused"] for c in rep["chains"]] for rep in (first, again)]
    assert all(b < a / 5 for a, b in zip(*jit)), jit


def test_api_compile_returns_callable_chains_and_exposes_plan_and_stages():
    prog = fusec.compile(textwrap.dedent("""\
        chain f(x: f32[M, 8], b: f32[8]) -> f32[M, 8] {
            return relu(x + b) * 2.0
        }"""), target="cpu")
    x = np.linspace(-1, 1, 24, dtype=np.float32).reshape(3, 8)
    b = np.full(8, 0.25, np.float32)
    y = prog.f(x, b)
    np.testing.assert_allclose(y, np.maximum(x + b, 0) * 2, rtol=1e-6)
    compiled = prog.f.compiled({"M": 3})
    assert compiled is prog.chains["f"].compiled({"M": 3})          # one build per binding
    assert prog.f.plan({"M": 3})["kernels"] == 1
    assert "numba.prange" in prog.f.stages({"M": 3})["kernels"]
    assert all(c.ok for c in prog.f.check(binding={"M": 5}))
    y5 = prog.f(np.ones((5, 8), np.float32), b)                      # M=5 was built by check() above
    assert y5.shape == (5, 8) and sorted(prog.f._builds) == [(("M", 3),), (("M", 5),)]


def test_api_hand_plan_option():
    prog = fusec.compile(os.path.join(EXAMPLES, "softmax.fdsl"), target="cpu",
                         options={"plans": {"softmax_rows": {"groups": [{"ops": [1, 2]}, {"ops": [4, 5]}]}},
                                  "baseline": False})
    assert prog.softmax_rows.plan({"M": 4, "N": 8})["kernels"] == 2
    assert all(c.ok for c in prog.softmax_rows.check(binding={"M": 4, "N": 8}))


def test_cuda_sim_must_be_chosen_before_numba_cuda(tmp_path):
    code = ("import numba.cuda, fusec\n"
            "try:\n    fusec.compile('chain f(x: f32[2]) -> f32[2] { return x }', target='cuda-sim')\n"
            "except Exception as e:\n    print(type(e).__name__, e)\n")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert "TargetError cuda-sim must be chosen before numba.cuda is imported" in r.stdout, r.stdout + r.stderr


def test_cuda_target_without_a_gpu_is_a_clear_error():
    if os.environ.get("FUSEC_TEST_GPU") == "1":
        pytest.skip("this machine has a GPU; the gpu-marked tests cover the cuda target")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run(FUSEC + [os.path.join(EXAMPLES, "ew_chain.fdsl"), "--target", "cuda"], capture_output=True,
                       text=True, timeout=120, env=env)
    assert r.returncode == 1
    assert "fusec: error: no CUDA GPU is available; use --target cpu or --target cuda-sim" in r.stderr


@pytest.mark.gpu
@pytest.mark.skipif(os.environ.get("FUSEC_TEST_GPU") != "1", reason="set FUSEC_TEST_GPU=1 on a machine with a GPU")
def test_examples_on_a_real_gpu():
    assert main(["test", EXAMPLES, "--target", "cuda"]) == 0
