"""`--kernel-report` on the command line (cuda-sim, cuda without a GPU, `fusec run DIR`), its
JSON, its user errors, and cuda-sim running each build once, untimed."""
import json
import math
import os
import subprocess
import sys

import pytest

from fusec.cli import main
from fusec.runtime import executable, targets

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EW = os.path.join(ROOT, "examples", "ew_chain.fdsl")
TINY = [EW, "--chain", "ew_chain", "--bind", "M=8,N=64"]
UNTIMED = "time: not measured on cuda-sim (the simulator runs kernels as Python)"


def test_cuda_sim_prints_the_kernel_report_after_the_run_and_writes_it_to_json(tmp_path, capsys):
    report = tmp_path / "r.json"
    assert main(TINY + ["--target", "cuda-sim", "--kernel-report", "--report", str(report)]) == 0
    out = capsys.readouterr().out
    run, kernels = out.split("  kernel report of the fused build for h200", 1)
    assert "chain ew_chain [M=8, N=64] on cuda-sim" in run and "-> ok" in run
    header, row = kernels.splitlines()[1:3]
    assert header.split()[:5] == ["kernel", "of", "grid", "block", "regs"] and "coalesced" in header
    assert row.split()[:3] == ["k0", "group", "0"]
    (chain,) = json.loads(report.read_text())["chains"]
    (k,) = chain["kernel_report"]
    assert k["kernel"] == "k0" and k["kind"] == "launch" and k["group"] == 0
    assert k["blocks"] == math.prod(k["grid"]) and k["threads_per_block"] == math.prod(k["block"])
    assert k["registers"] > 0 and k["stack_frame_bytes"] == 0 and k["smem_bytes"] == 0 and k["unmeasured"] == {}
    assert k["occupancy"] > 0 and k["limited_by"] and k["waves"] > 0
    assert k["coalescing"]["efficiency"] >= 0.99 and k["coalescing"]["sites"][0]["requests"] > 0


@pytest.mark.parametrize("target", ["cpu", "reference", "mlir-jit"])
def test_kernel_report_needs_a_cuda_target(target, capsys):
    assert main(TINY + ["--target", target, "--kernel-report"]) == 1
    err = capsys.readouterr().err
    assert err == f"fusec: error: --kernel-report needs --target cuda or cuda-sim, not {target}\n"


def test_cuda_sim_runs_each_build_once_untimed(tmp_path, capsys, monkeypatch):
    runs = []
    real = executable.Executable.run_prepared
    monkeypatch.setattr(executable.Executable, "run_prepared",
                        lambda self, args: runs.append(self.name) or real(self, args))
    monkeypatch.setattr(executable.Executable, "time", lambda *a, **k: pytest.fail("timed on cuda-sim"))
    report = tmp_path / "r.json"
    assert main(TINY + ["--target", "cuda-sim", "--report", str(report)]) == 0
    assert sorted(runs) == ["ew_chain/fused", "ew_chain/unfused"]
    out = capsys.readouterr().out
    assert f"  {UNTIMED}\n" in out and "median" not in out
    (chain,) = json.loads(report.read_text())["chains"]
    assert chain["time"] == {"fused": None, "unfused": None, "speedup": None, "note": UNTIMED[len("time: "):]}
    assert chain["kernel_report"] is None


@pytest.mark.slow
def test_fusec_run_dir_reports_the_kernels_of_a_compiled_artifact(tmp_path, capsys, monkeypatch):
    art = tmp_path / "art"
    assert main(["compile", EW, "--chain", "bias_gelu_res", "--bind", "M=8,N=64", "-o", str(art)]) == 0
    manifest = json.loads((art / "manifest.json").read_text())
    (launch,) = manifest["chains"]["bias_gelu_res"]["builds"]["fused"]["launches"]
    assert launch["kernel"] == "k0" and launch["kind"] == "launch" and launch["group"] == 0
    capsys.readouterr()
    report = tmp_path / "r.json"
    assert main(["run", str(art), "--target", "cuda-sim", "--kernel-report", "--report", str(report)]) == 0
    out = capsys.readouterr().out
    assert "-> ok" in out and UNTIMED in out and "kernel report of the fused build for h200" in out
    (k,) = json.loads(report.read_text())["chains"][0]["kernel_report"]
    assert k["registers"] > 0 and k["coalescing"]["efficiency"] >= 0.99
    # the artifact's own target, cuda, where there is no GPU: reported, not run
    monkeypatch.setattr(targets, "best_available", lambda: "cpu")
    assert main(["run", str(art), "--kernel-report", "--report", str(report)]) == 0
    out = capsys.readouterr().out
    assert "chain bias_gelu_res [M=8, N=64] on cuda\n" in out and "  not run: no CUDA GPU here" in out
    (chain,) = json.loads(report.read_text())["chains"]
    assert chain["ran"] is False and chain["kernel_report"][0]["registers"] == k["registers"]


def test_fusec_run_dir_measures_a_dynamic_artifact_at_its_planned_extent(tmp_path, capsys, monkeypatch):
    """M taken at run time: the report makes its inputs at the binding the plan was made for
    (as the compile's own --kernel-report does), so the grid and the coalescing are measured."""
    art = tmp_path / "art"
    assert main(["compile", EW, "--chain", "bias_gelu_res", "--bind", "M=8,N=64", "--dynamic", "M",
                 "-o", str(art)]) == 0
    assert json.loads((art / "manifest.json").read_text())["chains"]["bias_gelu_res"]["inputs"][0].startswith("f32[?")
    monkeypatch.setattr(targets, "best_available", lambda: "cpu")
    report = tmp_path / "r.json"
    capsys.readouterr()
    assert main(["run", str(art), "--kernel-report", "--report", str(report)]) == 0
    (k,) = json.loads(report.read_text())["chains"][0]["kernel_report"]
    assert k["coalescing"]["efficiency"] >= 0.99 and all(isinstance(n, int) for n in k["grid"]), k
    assert "not traced" not in capsys.readouterr().out


def test_cuda_without_a_gpu_compiles_reports_and_exits_0(tmp_path):
    """As a user without a GPU runs it: a fresh process, not the simulator, no device visible."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    report = tmp_path / "r.json"
    r = subprocess.run([sys.executable, "-m", "fusec", *TINY, "--target", "cuda", "--kernel-report",
                        "--report", str(report)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "chain ew_chain [M=8, N=64] on cuda"
    assert "  not run: no CUDA GPU here (the kernel report needs none)" in lines
    assert any(line.split()[:2] == ["k0", "group"] for line in lines)
    (chain,) = json.loads(report.read_text())["chains"]
    assert chain["ran"] is False and chain["kernel_report"][0]["coalescing"]["verified"] is True
