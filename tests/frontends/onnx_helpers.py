"""Helpers of the ONNX importer's tests: small graphs built with onnx.helper, imported, compiled
on cpu and compared with onnxruntime within runtime/compare.py's tolerances."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

import fusec
import fusec.onnx as fonnx
from fusec.runtime.compare import compare

FDSL_DTYPE = {np.dtype("float32"): "f32", np.dtype("float16"): "f16", np.dtype("float64"): "f64",
              np.dtype("int32"): "i32", np.dtype("int64"): "i64", np.dtype("bool"): "bool"}


def tensor(name, elem, shape):
    return h.make_tensor_value_info(name, elem, shape)


def init(name, value):
    return nh.from_array(np.asarray(value), name)


def model(nodes, inputs, outputs, inits=(), opset=20, name="g"):
    """A model; outputs given with element type 0 get their type from onnx's shape inference."""
    g = h.make_graph(nodes, name, inputs, outputs, list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 10
    if any(o.type.tensor_type.elem_type == 0 for o in m.graph.output):
        bare = onnx.ModelProto()
        bare.CopyFrom(m)
        del bare.graph.output[:]
        inferred = onnx.shape_inference.infer_shapes(bare)
        types = {v.name: v.type for v in inferred.graph.value_info}
        for o in m.graph.output:
            if o.type.tensor_type.elem_type == 0 and o.name in types:
                o.type.tensor_type.elem_type = types[o.name].tensor_type.elem_type
    return m


def save(m, path) -> str:
    onnx.save(m, str(path))
    return str(path)


def ort_run(path, feeds):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"]).run(None, feeds)


def check_against_ort(m, feeds, tmp_path, target="cpu", name="m.onnx"):
    """Import `m`, check the FDSL re-parses, run it compiled on `target` and onnxruntime on the same
    feeds; every output within tolerance. Returns (the loaded model, the outputs)."""
    path = save(m, tmp_path / name)
    loaded = fonnx.load(path, target=target, cache=False)
    fusec.check(loaded.fdsl)                         # the text re-parses and checks
    got = loaded(**feeds)
    want = ort_run(path, feeds)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, (k, g.shape, w.shape, loaded.fdsl)
        assert g.dtype == w.dtype, (k, g.dtype, w.dtype)
        c = compare(g, w, FDSL_DTYPE[w.dtype])
        assert c.ok, f"output {k} ({m.graph.output[k].name}): {c}\n{loaded.fdsl}"
    return loaded, got


def rand(shape, seed=0, dtype=np.float32, lo=-2.0, hi=2.0):
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(dtype)


__all__ = ["TP", "h", "tensor", "init", "model", "save", "ort_run", "check_against_ort", "rand", "onnx", "np"]
