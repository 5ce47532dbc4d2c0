"""`fresh_outputs` through the frontends (the bench's memory-equalised timing of whole models):
the torch.compile backend's option and `fusec.onnx.load`'s keyword make every build they run
hand back its outputs in newly allocated arrays (Executable.fresh_outputs) instead of the
planned pool's reused buffers; the results are unchanged, and a value other than True or False
is refused, naming the option."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from fusec.errors import UsageError


def steady_calls(call, n: int = 3):
    """The data addresses of `n` calls' first outputs, each dropped before the next call, and
    the peak of the memory traced (NumPy's allocations) during them."""
    ptrs = []
    tracemalloc.start()
    try:
        for _ in range(n):
            ptrs.append(call())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return ptrs, peak


# ---- torch.compile(backend="fusec", options={"fresh_outputs": True}) -----------------------------

def test_the_torch_backend_hands_back_fresh_outputs_when_asked(monkeypatch):
    torch = pytest.importorskip("torch")
    from fusec.frontends.torch_backend import FusecRegion

    class Scaled(torch.nn.Module):
        def forward(self, x):
            return torch.tanh(x) * 2.0 + 1.0
    regions = []
    forward = FusecRegion.forward

    def spy(self, *args):
        regions.append(self)
        return forward(self, *args)
    monkeypatch.setattr(FusecRegion, "forward", spy)
    m, x = Scaled(), torch.randn(256, 256)
    want = m(x)

    def run(options):
        torch._dynamo.reset()
        regions.clear()
        c = torch.compile(m, backend="fusec", options={"target": "cpu", "cache": False, **options})
        with torch.no_grad():
            for _ in range(2):                 # the compile, the first call's check, the pool filled
                assert torch.allclose(c(x), want, atol=1e-6)

            def call():
                y = c(x)
                assert torch.allclose(y, want, atol=1e-6)
                return y.data_ptr()
            ptrs, peak = steady_calls(call)
        torch._dynamo.reset()
        return ptrs, peak, set(regions)

    try:
        ptrs, peak, regs = run({})
        # the planned pool: the output dropped before the next call is that call's buffer again
        assert len(set(ptrs)) == 1 and peak < x.nbytes, (ptrs, peak)
        assert regs and not any(r.fresh_outputs for r in regs)
        ptrs, peak, regs = run({"fresh_outputs": True})
        assert peak >= x.nbytes                # each call's output newly allocated
        assert regs and all(r.fresh_outputs for r in regs)
        builds = [b for r in regs for b in r.chain._builds.values()]
        assert builds and all(b.fused.fresh_outputs for b in builds)
    finally:
        torch._dynamo.reset()


def test_the_torch_backend_refuses_a_fresh_outputs_that_is_not_a_bool():
    pytest.importorskip("torch")
    import fusec.torch as ft
    with pytest.raises(UsageError, match="option fresh_outputs takes True or False, not 'yes'"):
        ft.make_backend({"target": "cpu", "fresh_outputs": "yes"})


# ---- fusec.onnx.load(path, fresh_outputs=True) -------------------------------------------------

def _tanh_model(tmp_path) -> str:
    pytest.importorskip("onnx")
    from onnx import TensorProto as TP
    from onnx import helper as h
    import onnx
    nodes = [h.make_node("Tanh", ["x"], ["t"]), h.make_node("Mul", ["t", "two"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, ["N", 256])],
                     [h.make_tensor_value_info("y", TP.FLOAT, ["N", 256])],
                     [onnx.numpy_helper.from_array(np.full((256,), 2.0, np.float32), "two")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 20)])
    m.ir_version = 10
    path = str(tmp_path / "tanh.onnx")
    onnx.save(m, path)
    return path


def test_onnx_load_hands_back_fresh_outputs_when_asked(tmp_path):
    import fusec.onnx as fonnx
    path = _tanh_model(tmp_path)
    x = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
    want = np.tanh(x) * 2.0

    def run(**kw):
        model = fonnx.load(path, target="cpu", cache=False, **kw)
        for _ in range(2):
            np.testing.assert_allclose(model(x=x)[0], want, rtol=1e-5, atol=1e-6)

        def call():                  # (NumPy's comparison would allocate: the calls before and after check)
            (y,) = model(x=x)
            return y.ctypes.data
        ptrs, peak = steady_calls(call)
        np.testing.assert_allclose(model(x=x)[0], want, rtol=1e-5, atol=1e-6)
        return model, ptrs, peak

    model, ptrs, peak = run()
    assert not model.fresh_outputs
    assert len(set(ptrs)) == 1 and peak < x.nbytes, (ptrs, peak)     # the planned pool's buffer
    model, ptrs, peak = run(fresh_outputs=True)
    assert model.fresh_outputs
    assert peak >= x.nbytes                                          # a new output every call
    # another size (a build of its own, or the same dynamic one): fresh outputs too
    (y,) = model(x=x[:64])
    np.testing.assert_allclose(y, want[:64], rtol=1e-5, atol=1e-6)
    builds = list(model.chain._builds.values())
    assert builds and all(b.fused.fresh_outputs for b in builds)


def test_onnx_load_refuses_a_fresh_outputs_that_is_not_a_bool(tmp_path):
    import fusec.onnx as fonnx
    path = _tanh_model(tmp_path)
    with pytest.raises(UsageError, match="fresh_outputs takes True or False, not 1"):
        fonnx.load(path, target="cpu", cache=False, fresh_outputs=1)
