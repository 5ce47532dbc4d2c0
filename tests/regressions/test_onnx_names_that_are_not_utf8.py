"""Regression (found by tests/fuzz_import.py, a block exported by torch.onnx.export with five
bytes overwritten): a protobuf string that is not valid UTF-8 comes back from protobuf as bytes,
and the importer's first use of it (the graph's name, made an identifier) raised TypeError:
exit 2, an internal error, on a damaged file. Every string field of the model is now checked
first: exit 1 naming the field."""
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper as h  # noqa: E402

import fusec.onnx as fonnx  # noqa: E402
from fusec.cli import main  # noqa: E402
from fusec.errors import UsageError  # noqa: E402


def damaged(tmp_path, old: bytes, new: bytes):
    g = h.make_graph([h.make_node("Relu", ["x"], ["hidden"], name="relu0"), h.make_node("Neg", ["hidden"], ["y"])],
                     "graphname", [h.make_tensor_value_info("x", TP.FLOAT, [4])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [4])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    m.ir_version = 10
    data = m.SerializeToString()
    assert data.count(old) >= 1 and len(old) == len(new)
    path = tmp_path / "m.onnx"
    path.write_bytes(data.replace(old, new))
    return str(path)


@pytest.mark.parametrize("old, new, field", [
    (b"graphname", b"\xf0raphname", "graph.name"),
    (b"relu0", b"rel\xffu", "graph.node[0].name"),
    (b"hidden", b"hid\xc3en", "graph.node[0].output[0]"),
])
def test_a_string_that_is_not_utf8_is_a_located_user_error(old, new, field, tmp_path, capsys):
    path = damaged(tmp_path, old, new)
    assert main(["import", path, "-o", str(tmp_path / "o.fdsl")]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"fusec: error: {path} is damaged: its {field} is not valid UTF-8 (a protobuf string)"
    with pytest.raises(UsageError, match="not valid UTF-8"):
        fonnx.load(path, target="reference")
