"""bench/runtimes.py: the onnxruntime and TVM runners on a small ONNX graph (configuration,
outputs against NumPy, the ir_version lowering, MetaSchedule's bounded child). onnxruntime is in
the dev extra, so its tests always run; TVM (apache-tvm, the bench extra only) is skipped where
it is not installed."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from bench import runtimes


def _softmax_model(m=8, n=64, ir_version=None):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, n])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])
    model = helper.make_model(helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 18)])
    if ir_version is not None:
        model.ir_version = ir_version
    return model


def _want(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


X = np.random.default_rng(0).standard_normal((8, 64), dtype=np.float32)


@pytest.mark.parametrize("preallocate", [False, True])
def test_ort_runner_runs_the_model_as_configured(preallocate, tmp_path):
    path = tmp_path / "softmax.onnx"
    onnx.save(_softmax_model(), str(path))
    r = runtimes.ort_runner(path, {"x": X}, threads=2, preallocate=preallocate)
    outs = r.call()
    np.testing.assert_allclose(outs[0], _want(X), rtol=1e-5, atol=1e-7)
    assert r.detail["threads"] == 2 and r.detail["preallocated"] is preallocate and r.setup_s > 0
    assert "spinning off" in r.notes[0] and "ORT_ENABLE_ALL" in r.notes[0]
    if preallocate:      # the same buffer every call, rewritten in place
        again = r.call()
        assert again[0] is outs[0]
        np.testing.assert_allclose(r.result(), _want(X), rtol=1e-5, atol=1e-7)


def test_ort_runner_lowers_an_ir_version_it_refuses():
    r = runtimes.ort_runner(_softmax_model(ir_version=99), {"x": X}, threads=1)
    np.testing.assert_allclose(r.call()[0], _want(X), rtol=1e-5, atol=1e-7)
    assert any(f"ir_version 99 lowered to {runtimes.ORT_MAX_IR}" in n for n in r.notes)


def test_ort_runner_names_what_it_cannot_run():
    bad = _softmax_model()
    bad.graph.node[0].op_type = "NoSuchOp"
    with pytest.raises(runtimes.RuntimeUnavailable, match="onnxruntime refused"):
        runtimes.ort_runner(bad, {"x": X}, threads=1)


def test_tvm_runner_builds_for_the_host_and_agrees_with_numpy():     # needs apache-tvm (bench extra)
    tvm = pytest.importorskip("tvm")
    r = runtimes.tvm_runner(_softmax_model(), {"x": X}, threads=2)
    np.testing.assert_allclose(r.call()[0].numpy(), _want(X), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(r.result(), _want(X), rtol=1e-5, atol=1e-7)
    assert r.detail["target"]["mcpu"] == str(tvm.target.codegen.llvm_get_system_cpu())
    assert r.detail["target"]["num-cores"] == 2 and tvm.get_global_func("runtime.NumThreads")() == 2
    assert r.detail["tuned"] is False and r.detail["untuned_reason"] == "not asked for"


def test_metaschedule_runs_in_a_bounded_child(monkeypatch):       # needs apache-tvm (bench extra)
    pytest.importorskip("tvm")
    monkeypatch.setattr(runtimes, "_MS_BROKEN", [])
    monkeypatch.setattr(runtimes, "_TUNE_SCRIPT", "import time; time.sleep(30)")
    db, why = runtimes._metaschedule(_softmax_model(), {"kind": "llvm"}, 2.0, 4)
    assert db is None and why == "did not finish in 2 s"
    monkeypatch.setattr(runtimes, "_TUNE_SCRIPT", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    db, why = runtimes._metaschedule(_softmax_model(), {"kind": "llvm"}, 30.0, 4)
    assert db is None and why.startswith("crashed (signal 11)")
    db, again = runtimes._metaschedule(_softmax_model(), {"kind": "llvm"}, 30.0, 4)   # not tried again
    assert db is None and again.startswith(why) and "not tried again" in again
