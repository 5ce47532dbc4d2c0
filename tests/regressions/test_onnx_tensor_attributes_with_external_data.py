"""Regression (found by tests/fuzz_import.py): a ConstantOfShape's `value` tensor whose data was
external was handed to onnx's numpy_helper, which read it relative to the working directory,
wherever the model lay: a model could read a file outside its folder (the external-data checks
covered initializers only). A tensor attribute with external data (a Constant's or a
ConstantOfShape's value, in a subgraph too) is now refused, naming the node, before anything is
read; the file in the working directory keeps its access time."""
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

import fusec.onnx as fonnx  # noqa: E402
from fusec.cli import main  # noqa: E402
from fusec.errors import UsageError  # noqa: E402


def external_value(location):
    v = onnx.TensorProto(name="v", data_type=TP.FLOAT, dims=[1], data_location=TP.EXTERNAL)
    v.external_data.add(key="location", value=location)
    return v


def with_value(op, v):
    node = h.make_node(op, ["shp"] if op == "ConstantOfShape" else [], ["c"], name="cv", value=v)
    g = h.make_graph([node, h.make_node("Add", ["x", "c"], ["y"])], "g", [h.make_tensor_value_info("x", TP.FLOAT, [2, 2])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [2, 2])], [nh.from_array(np.array([2, 2], np.int64), "shp")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    m.ir_version = 10
    return m


@pytest.mark.parametrize("op", ["ConstantOfShape", "Constant"])
@pytest.mark.parametrize("where", ["cwd", "absolute"])
def test_a_tensor_attribute_with_external_data_is_refused(op, where, tmp_path, capsys, monkeypatch):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    secret = cwd / "secret.bin"
    secret.write_bytes(np.full(4, 42.0, np.float32).tobytes())
    os.utime(secret, (1000.0, 2000.0))
    monkeypatch.chdir(cwd)
    m = with_value(op, external_value("secret.bin" if where == "cwd" else str(secret)))
    folder = tmp_path / "model"
    folder.mkdir()
    path = folder / "m.onnx"
    path.write_bytes(m.SerializeToString())
    assert main(["import", str(path), "-o", str(tmp_path / "o.fdsl")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("fusec: error: ") and len(err.splitlines()) == 1, err
    assert f"node 0 'cv' ({op}): attribute 'value' holds a tensor with external data" in err
    with pytest.raises(UsageError, match="external data"):
        fonnx.import_model(m)                   # a ModelProto: its external data would lie in the working directory
    assert os.stat(secret).st_atime == 1000.0
    assert not (tmp_path / "o.fdsl").exists()


def test_a_subgraph_attribute_or_initializer_with_external_data_is_refused(tmp_path):
    inner = h.make_graph([h.make_node("Constant", [], ["k"], value=external_value("secret.bin"))], "then", [],
                         [h.make_tensor_value_info("k", TP.FLOAT, [1])])
    g = h.make_graph([h.make_node("If", ["cond"], ["y"], name="branch", then_branch=inner, else_branch=inner)], "g",
                     [h.make_tensor_value_info("cond", TP.BOOL, [])], [h.make_tensor_value_info("y", TP.FLOAT, [1])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    subgraph = r"node 0 'branch' \(If\), attribute '(then|else)_branch': node 0 \(Constant\).*external data"
    with pytest.raises(UsageError, match=subgraph):
        fonnx.import_model(m)
    t = external_value("secret.bin")
    t.name = "w"
    inner.initializer.append(t)
    del inner.node[:]
    inner.node.append(h.make_node("Identity", ["w"], ["k"]))
    m = h.make_model(h.make_graph([h.make_node("If", ["cond"], ["y"], name="branch", then_branch=inner,
                                                else_branch=inner)], "g", list(g.input), list(g.output)),
                     opset_imports=[h.make_opsetid("", 18)])
    with pytest.raises(UsageError, match="initializer 'w' of a subgraph has external data"):
        fonnx.import_model(m)
