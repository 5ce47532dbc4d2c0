"""--explain, --report and --plot: on every example, and end to end through the CLI."""
import glob
import json
import os
from types import SimpleNamespace

import pytest

import fusec
from fusec.cli import main
from fusec.compiler.options import CompileOptions
from fusec.compiler.pipeline import compile_typed
from fusec.plots import PICTURES, figures, write_plots
from fusec.compiler.calibrate import cpu_profile
from fusec.compiler.plan.describe import format_plan
from fusec.compiler.plan.hardware import GPUS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = sorted(glob.glob(os.path.join(ROOT, "examples", "*.fdsl")))


def _plans(path, target):
    out = []
    for chain in fusec.check(path).chains:
        binding = {s: 64 for s in chain.symbols}
        st = compile_typed(chain, binding, options=CompileOptions(target=target, hardware=cpu_profile() if target == "cpu" else None), until="plan")
        out.append((chain.name, binding, st.plan.summary()))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("path", EXAMPLES, ids=[os.path.basename(p) for p in EXAMPLES])
@pytest.mark.parametrize("target", ["gpu", "cpu"])
def test_explain_and_plots_for_every_example(path, target, tmp_path):
    plans = _plans(path, target)
    for name, binding, plan in plans:
        text = format_plan(plan, explain=True, binding=binding)
        assert text.startswith(f"explain {name} [")
        for g in plan["groups"]:
            assert f"  kernel {g['kernel']}: " in text
        for needle in ("    tiles: ", "    FLOPs ", "B unfused -> ", "B fused", "intensity", "-bound: predicted ",
                       "  predicted: fused ", "  rejected fusions:"):
            assert needle in text, (needle, text)
        for d in plan["decisions"]:
            assert d in text
    if target == "cpu":
        return                      # the pictures do not depend on the target: drawn once per example
    reports = [SimpleNamespace(chain=n, plan=p, fused=None, unfused=None) for n, _, p in plans]
    figs = figures(reports)
    assert sorted(figs) == sorted(PICTURES)
    roof = figs["roofline.png"].axes[0]
    assert roof.get_xscale() == "log" and roof.get_yscale() == "log"
    assert "arithmetic intensity" in roof.get_xlabel() and "FLOP/s" in roof.get_ylabel()
    traffic = figs["traffic.png"].axes[0]
    assert "MB" in traffic.get_ylabel() and len(traffic.get_xticklabels()) == sum(len(p["groups"]) for *_, p in plans)
    breakdown = [a for a in figs["breakdown.png"].axes if a.get_title()]
    assert [a.get_title() for a in breakdown] == [n for n, *_ in plans]
    assert all(a.get_ylabel() == "time (ms)" for a in breakdown)
    import matplotlib.pyplot as plt
    for f in figs.values():
        plt.close(f)


def test_plots_are_png_files(tmp_path):
    plans = _plans(os.path.join(ROOT, "examples", "softmax.fdsl"), "gpu")
    reports = [SimpleNamespace(chain=n, plan=p, fused=None, unfused=None) for n, _, p in plans]
    paths = write_plots(reports, tmp_path / "pictures")
    assert [p.name for p in paths] == list(PICTURES)
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000


@pytest.mark.slow
def test_cli_explain_report_plot_end_to_end(tmp_path, capsys):
    report, pictures = tmp_path / "r.json", tmp_path / "pics"
    f = os.path.join(ROOT, "examples", "conv_bn_relu.fdsl")
    assert main([f, "--target", "cpu", "--chain", "conv_bn_relu", "--bind", "B=2", "--explain",
                 "--report", str(report), "--plot", str(pictures)]) == 0
    out = capsys.readouterr().out
    assert "explain conv_bn_relu [B=2] on cpu, hardware cpu: 4 ops -> 1 kernel" in out
    assert "intermediate-sized global reads/writes: 6 op by op, 4 unfused, 2 fused (-67%)" in out
    assert "  model (cpu): predicted fused " in out and "; measured (min) fused " in out
    for name in PICTURES:
        assert (pictures / name).exists() and f"wrote {pictures / name}" in out
    (c,) = json.loads(report.read_text())["chains"]
    m = c["model"]
    assert m["hardware"] == "cpu" and m["fused_s"] > 0 and m["fused_measured_s"] > 0
    assert m["fused_ratio"] == pytest.approx(m["fused_measured_s"] / m["fused_s"])
    assert m["measured_speedup"] > 0 and m["speedup"] > 0
    (k,) = m["kernels"]
    assert k["measured_as"] == "the whole chain (one kernel)" and k["ratio"] > 0
    assert c["plan"]["model"]["big_transfers"] == {"eager": 6, "unfused": 4, "fused": 2}
    assert c["plan"]["groups"][0]["cost"]["bytes_unfused"] > c["plan"]["groups"][0]["cost"]["bytes"]


def test_hw_flag_changes_the_profile_the_plan_is_made_for(capsys):
    f = os.path.join(ROOT, "examples", "softmax.fdsl")
    assert main([f, "--chain", "softmax_rows", "--bind", "M=64,N=128", "--emit", "plan", "--hw", "a100"]) == 0
    assert "predicted on a100:" in capsys.readouterr().out
    chain = fusec.check(f).chain("softmax_rows")
    st = compile_typed(chain, {"M": 8192, "N": 16381}, options=CompileOptions(hardware=GPUS["a100"]), until="plan")
    assert "164 KiB of shared memory/L1 per SM" in st.texts["plan"]
    assert main([f, "--chain", "softmax_rows", "--bind", "M=8,N=16", "--emit", "plan", "--hw", "v100"]) == 1
    assert "invalid choice: 'v100'" in capsys.readouterr().err


def test_explain_needs_a_compiled_target(capsys):
    f = os.path.join(ROOT, "examples", "softmax.fdsl")
    assert main([f, "--target", "reference", "--explain"]) == 1
    assert "--explain, --plot and --autotune need a compiled target" in capsys.readouterr().err
