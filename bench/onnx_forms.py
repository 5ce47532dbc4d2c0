"""The micro workloads as ONNX graphs, the form onnxruntime and TVM users are handed: each
workload's PyTorch function (bench/workloads.py, torch_fns) exported with
torch.onnx.export(dynamo=True) at the run's shapes (static), as a PyTorch user deploying to
those runtimes exports it. What the exporter gives (opset 20): ew_chain op by op, Gelu(tanh)
for bias_gelu_res and mlp (after Gemm), Softmax, LayerNormalization, Conv + BatchNormalization
+ Relu, and attention's scaled_dot_product_attention as MatMul/Softmax/MatMul.

attention: the exporter (onnxscript 0.7.2) fails on scaled_dot_product_attention over the
workload's 3-d [B, S, D] tensors; it is exported over [B, 1, S, D] (one head, as multi-head
code calls it), the same computation.
"""
from __future__ import annotations

import contextlib
import io
import logging

import numpy as np

from .workloads import Workload, torch_fns

_CACHE: dict[tuple, tuple] = {}


def onnx_form(w: Workload, inputs: list[np.ndarray]):
    """(ModelProto, {input name: array}, notes) for workload `w` on these inputs; raises
    RuntimeError when PyTorch or its exporter cannot give it."""
    key = (w.name, tuple(x.shape for x in inputs))
    if key not in _CACHE:
        _CACHE[key] = _export(w, inputs)
    model, names, notes = _CACHE[key]
    return model, dict(zip(names, inputs)), list(notes)


def _export(w: Workload, inputs: list[np.ndarray]):
    import torch
    fn = torch_fns(torch)[w.name]
    notes = ["torch.onnx.export(dynamo=True)"]
    if w.name == "attention":
        F = torch.nn.functional

        def fn(q, k, v):      # noqa: F811 (one head: the exporter fails on 3-d SDPA)
            return F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None])[:, 0]
        notes.append("SDPA exported over [B, 1, S, D] (the exporter fails on 3-d inputs)")

    class Wrapped(torch.nn.Module):
        def forward(self, *args):
            return fn(*args)

    args = tuple(torch.from_numpy(x) for x in inputs)
    quiet = logging.getLogger("torch.onnx")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()), torch.no_grad():
            program = torch.onnx.export(Wrapped().eval(), args, dynamo=True, verbose=False)
    except Exception as e:
        raise RuntimeError(f"torch.onnx.export failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}") from None
    finally:
        quiet.setLevel(level)
    model = program.model_proto
    names = [i.name for i in model.graph.input]
    notes.append(f"opset {max(o.version for o in model.opset_import if o.domain in ('', 'ai.onnx'))}, ops: "
                 + " ".join(n.op_type for n in model.graph.node))
    return model, names, tuple(notes)
