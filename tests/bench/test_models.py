"""The model group of the benchmark (`python -m bench --models`, bench/models.py) at tiny sizes:
every contender that runs agrees with eager PyTorch in the run, fusec's compile and split are
recorded, skips carry their reason, the JSON has the documented shape and docs/PERFORMANCE.md's
models table comes from it. Nothing here asserts a timing."""
from __future__ import annotations

import importlib.util
import json

import numpy as np

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from bench import model_defs, models, table  # noqa: E402
from bench.__main__ import main  # noqa: E402
from bench.timing import Budget  # noqa: E402

TINY = Budget(seconds=0.01, min_runs=2, max_runs=2, warmup=1, quiesce=0)


def test_every_model_builds_at_tiny_size_and_the_issue_sizes_are_recorded():
    import torch
    for name in model_defs.MODELS:
        model, args, cfg = model_defs.build(name, "tiny")
        with torch.no_grad():
            out = model(*args)
        assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
        assert out.shape[0] == cfg["batch"]
        # the full size keeps the issue's widths and says what it cut
        full, issue = model_defs.SIZES["full"][name], model_defs.SIZES["issue"][name]
        assert {k: v for k, v in full.items() if k not in ("layers", "seq", "batch")} == \
               {k: v for k, v in issue.items() if k not in ("layers", "seq", "batch")}
        assert (full != issue) == (name in model_defs.ADJUSTED)


def test_the_command_line_refuses_unknown_models_and_contenders(capsys):
    assert main(["--models", "--only", "gpt3", "--size", "tiny"]) == 1
    assert "unknown model(s): gpt3" in capsys.readouterr().err
    assert main(["--models", "--contenders", "torch,tflite", "--size", "tiny"]) == 1
    assert "unknown contender(s): tflite" in capsys.readouterr().err
    # a flag of the other group would do nothing: refused
    assert main(["--models", "--anchors", "numpy", "--size", "tiny"]) == 1
    assert "--anchors: only for the micro workloads" in capsys.readouterr().err
    assert main(["--contenders", "torch", "--size", "tiny"]) == 1
    assert "--contenders: only for the model group" in capsys.readouterr().err


@pytest.mark.slow
def test_anchors_only_run_records_agreement_and_skips(tmp_path):
    """Eager PyTorch and onnxruntime on the ONNX export (no fusec compile: quick); fusec's ONNX
    path not asked for this model is a skip with its reason."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    r = models.run_models(("bert",), "tiny", TINY, contenders=("torch", "onnxruntime", "tvm", "fusec onnx"),
                          fusec_onnx_models=(), log=lambda s: None)
    row = r["models"][0]
    have_tvm = importlib.util.find_spec("tvm") is not None      # the [bench] extra; CI has no TVM
    assert set(row["contenders"]) == {"torch", "onnxruntime"} | ({"tvm"} if have_tvm else set())
    if not have_tvm:
        assert "tvm" in row["skipped"] and "not installed" in row["skipped"]["tvm"], row["skipped"]
    for e in row["contenders"].values():
        assert e["agreement"]["ok"], e
        assert e["runs"] == 2
    assert "not run for bert" in row["skipped"]["fusec onnx"]
    assert row["contenders"]["onnxruntime"]["detail"]["setup_s"] > 0
    assert row["onnx_export_s"] > 0
    assert r["threads"]["torch"] == r["cores"]
    assert "fusec torch.compile" not in row["ratios"]
    assert r["memory"]["mode"] == "default" and "memory" not in row["contenders"]["torch"]


@pytest.mark.slow
def test_memory_both_times_the_models_again_memory_equalised(tmp_path):
    """`--memory both` (the default): the same models and contenders timed again in a child
    process with huge pages (onnxruntime into preallocated outputs), merged into the result as
    `equalised` (times and agreement per contender, each with its memory note) and shown as a
    second models table."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    out = tmp_path / "results"
    assert main(["--models", "--only", "bert", "--size", "tiny", "--quiesce", "0", "--seconds", "0.01",
                 "--contenders", "torch,onnxruntime", "--memory", "both", "--out", str(out), "-q"]) == 0
    [path] = list(out.glob("models-tiny-*.json"))        # the child's result is not written here
    r = json.loads(path.read_text())
    assert r["memory"]["mode"] == "default"
    eq = r["equalised"]
    assert "failed" not in eq, eq
    assert eq["memory"]["mode"] == "equalised" and eq["memory"]["THP_MEM_ALLOC_ENABLE"] == "1"
    assert "glibc.malloc.hugetlb=1" in eq["memory"]["GLIBC_TUNABLES"].split(":")
    [row] = eq["models"]
    assert row["model"] == "bert" and row["skipped"] == {}
    assert set(row["contenders"]) == {"torch", "onnxruntime"}
    for name, e in row["contenders"].items():
        assert e["median_ms"] > 0 and e["runs"] >= 2 and e["agreement"]["ok"], e
        assert e["memory"] == models.EQUALISED_NOTES[name]
        assert "cold_s" not in e and "detail" not in e          # preparation figures: the default run's
    assert "preallocated" in row["contenders"]["onnxruntime"]["memory"]
    r["_file"] = path.name
    text = table.render_models(r)
    default, equalised = text.split("Memory-equalised (a child process with ")
    assert "THP_MEM_ALLOC_ENABLE=1" in equalised and "| bert |" in default and "| bert |" in equalised
    assert np.isclose(float(equalised.split("| bert |")[1].split("|")[1].split()[0]),
                      row["contenders"]["torch"]["median_ms"], rtol=0.01)


def test_a_failed_equalised_run_is_recorded_and_shown(tmp_path, monkeypatch):
    """The child's failure is logged, kept in the JSON with its reason and named in the table:
    never silently dropped."""
    import bench.__main__ as cli
    monkeypatch.setattr(cli, "_child", lambda cmd, env: (1, "starting\nRuntimeError: no huge pages today\n"))
    out = tmp_path / "results"
    assert main(["--models", "--only", "bert", "--size", "tiny", "--quiesce", "0", "--seconds", "0.01",
                 "--contenders", "torch", "--out", str(out), "-q"]) == 0
    [path] = list(out.glob("models-tiny-*.json"))
    r = json.loads(path.read_text())
    assert r["models"][0]["contenders"]["torch"]["agreement"]["ok"]
    assert r["equalised"]["failed"] == "exit 1: RuntimeError: no huge pages today"
    assert r["equalised"]["models"] == []
    r["_file"] = path.name
    assert "The memory-equalised run failed (exit 1: RuntimeError: no huge pages today)." in table.render_models(r)


@pytest.mark.slow
@pytest.mark.parametrize("name,memory", [("gpt2", "both"), ("resnet18", "default")])
def test_fusec_eager_and_onnxruntime_agree_and_the_split_is_recorded(name, memory, tmp_path):
    """fusec through torch.compile beside eager and onnxruntime at tiny size (a fresh compile:
    minutes on 2 cores), through the command line; the JSON and the models table. GPT-2 with
    `--memory both`: its equalised child finds fusec's builds in the parent's cache, and fusec
    hands back fresh outputs there."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    out = tmp_path / "results"
    assert main(["--models", "--only", name, "--size", "tiny", "--quiesce", "0", "--seconds", "0.01",
                 "--contenders", "fusec torch.compile,torch,onnxruntime", "--memory", memory,
                 "--out", str(out), "-q"]) == 0
    [path] = list(out.glob("models-tiny-*.json"))
    r = json.loads(path.read_text())
    assert r["suite"] == models.SUITE and r["size"] == "tiny"
    row = r["models"][0]
    assert row["skipped"] == {}
    assert set(row["contenders"]) == {"fusec torch.compile", "torch", "onnxruntime"}
    for e in row["contenders"].values():
        assert e["agreement"]["ok"], e
    f = row["contenders"]["fusec torch.compile"]
    assert f["cold_s"] > 0 and f["cached_s"] > 0
    d = f["detail"]
    assert d["in_fusec"] + sum(d["eager_ops"].values()) == d["aten_ops"]
    assert d["cache_hits"] >= 1                    # the cached compile loaded fusec's builds
    split = row["fusec_split"]
    assert len(split["kernels"]) == d["kernels"]   # every kernel of every region has its prediction
    assert all(k["predicted_ms"] > 0 for k in split["kernels"])
    assert 0 <= split["outside_share"] <= 1
    assert split["in_regions_ms"] <= split["call_ms"]
    fastest = row["ratios"]["fusec torch.compile"]["fastest_anchor"]
    times = {n: e["median_ms"] for n, e in row["contenders"].items() if n in models.ANCHORS}
    assert fastest["name"] == min(times, key=times.get)
    # the models table comes from this JSON (bench/table.py reads full-size runs: render it directly)
    r["_file"] = path.name
    text = table.render_models(r)
    assert f"| {name} |" in text and "fusec torch.compile" in text and path.name in text
    assert np.isclose(float(text.split(f"| {name} |")[1].split("|")[1].split()[0]),
                      row["contenders"]["fusec torch.compile"]["median_ms"], rtol=0.01)
    if memory == "default":
        assert "equalised" not in r and "`--memory default`: no memory-equalised run" in text
        return
    eq = r["equalised"]
    assert "failed" not in eq, eq
    [erow] = eq["models"]
    assert set(erow["contenders"]) == {"fusec torch.compile", "torch", "onnxruntime"}
    for n, e in erow["contenders"].items():
        assert e["agreement"]["ok"] and e["median_ms"] > 0, (n, e)
        assert e["memory"] == models.EQUALISED_NOTES[n]
    assert erow["ratios"]["fusec torch.compile"]["fastest_anchor"]["median"] > 0
    eq_text = text.split("Memory-equalised (a child process with ")[1]
    assert np.isclose(float(eq_text.split(f"| {name} |")[1].split("|")[1].split()[0]),
                      erow["contenders"]["fusec torch.compile"]["median_ms"], rtol=0.01)
