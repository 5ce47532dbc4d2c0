"""Regression (found by tests/fuzz_import.py): attributes onnxruntime refuses were read some
way of fusec's own: `keepdims=-99` as true (onnxruntime: false, another output shape), a FLOAT
`keepdims=1.5` as 1, an attribute the op does not have ignored; and a graph input listed twice
imported as two parameters of one name (a KeyError when the loaded model was called). Now a
node's attributes are checked against the op's ONNX schema (type, name, given once, flags 0 or
1) and a duplicate graph input is refused, each naming the place."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

from fusec.cli import main  # noqa: E402

F = TP.FLOAT


def model(nodes, inputs, outputs, inits=()):
    m = h.make_model(h.make_graph(nodes, "g", inputs, outputs, list(inits)), opset_imports=[h.make_opsetid("", 18)])
    m.ir_version = 10
    return m


def tensor(name, elem, shape):
    return h.make_tensor_value_info(name, elem, shape)


def save(m, path):
    path.write_bytes(m.SerializeToString())
    return str(path)


def refuse(argv, capsys, *expected):
    assert main(["import", *argv]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("fusec: error: ") and len(err.splitlines()) == 1, err
    for e in expected:
        assert e in err, err


def test_attributes_are_checked_against_the_schema(tmp_path, capsys):
    """Attributes onnxruntime would refuse (found by tests/fuzz_import.py): a flag other than 0 or
    1 (keepdims=-99 was read as true, onnxruntime reads it as false), a type other than the
    schema's, a name the op lacks, a name given twice; and a graph input listed twice (a KeyError
    when the loaded model was called)."""
    o = str(tmp_path / "o.fdsl")
    axes = nh.from_array(np.array([1], np.int64), "axes")

    def reduce(**attrs):
        return model([h.make_node("ReduceSum", ["x", "axes"], ["y"], name="rs", **attrs)], [tensor("x", F, [2, 3])],
                     [tensor("y", F, None)], [axes])
    refuse([save(reduce(keepdims=-99), tmp_path / "k.onnx"), "-o", o], capsys, "node 0 'rs' (ReduceSum)",
           "attribute 'keepdims' is -99; ONNX takes 0 or 1")
    refuse([save(reduce(keepdims=1.5), tmp_path / "t.onnx"), "-o", o], capsys, "node 0 'rs' (ReduceSum)",
           "attribute 'keepdims' is of type FLOAT; ReduceSum takes INT")
    refuse([save(reduce(axis=1), tmp_path / "n.onnx"), "-o", o], capsys, "node 0 'rs' (ReduceSum)",
           "has no attribute 'axis'")
    twice = reduce(keepdims=0)
    twice.graph.node[0].attribute.append(h.make_attribute("keepdims", 1))
    refuse([save(twice, tmp_path / "2.onnx"), "-o", o], capsys, "node 0 'rs' (ReduceSum)",
           "attribute 'keepdims' is given twice")
    assert main(["import", save(reduce(keepdims=0), tmp_path / "ok.onnx"), "-o", o]) == 0
    capsys.readouterr()
    dup = model([h.make_node("Relu", ["x"], ["y"])], [tensor("x", F, [4]), tensor("x", F, [4])], [tensor("y", F, [4])])
    refuse([save(dup, tmp_path / "dup.onnx"), "-o", o], capsys, "graph input 'x' is listed twice")
