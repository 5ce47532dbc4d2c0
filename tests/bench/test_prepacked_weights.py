"""bench/prepacked_weights.py: fusec's x @ w beside onnxruntime's MatMul with w a constant and an
input, at a small shape (the JSON it writes, the two ONNX graphs, the outputs checked)."""
import json

import numpy as np
import onnx
import pytest

from bench import prepacked_weights


def test_the_constant_graph_holds_w_and_the_input_graph_takes_it():
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    const = prepacked_weights.matmul_model(2, 3, 4, w)
    arg = prepacked_weights.matmul_model(2, 3, 4, None)
    onnx.checker.check_model(const)
    onnx.checker.check_model(arg)
    assert [i.name for i in const.graph.input] == ["a"]
    np.testing.assert_array_equal(onnx.numpy_helper.to_array(const.graph.initializer[0]), w)
    assert [i.name for i in arg.graph.input] == ["a", "b"] and not arg.graph.initializer


@pytest.mark.slow       # a cpu build of the chain: ~18 s
def test_a_run_writes_every_implementation_with_its_times(tmp_path, capsys):
    assert prepacked_weights.main(["--shapes", "8x16x32", "--seconds", "0.05", "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("prepacked-weights-*.json")
    result = json.loads(path.read_text())
    assert [(r["m"], r["k"], r["n"]) for r in result["shapes"]] == [(8, 16, 32)]
    for row in result["shapes"]:
        assert set(row["impls"]) == {"fusec (w an argument)", "onnxruntime (w a constant)", "onnxruntime (w an input)"}
        for s in row["impls"].values():
            assert s["runs"] >= 10 and 0 < s["min_ms"] <= s["median_ms"]
            assert s["gflops_at_min"] == pytest.approx(row["flop"] / (s["min_ms"] * 1e6), rel=1e-3)  # min_ms kept to 4 digits
        assert max(row["max_abs_diff"].values()) < 1e-4
    assert "onnxruntime (w a constant)" in capsys.readouterr().out


def test_a_shape_that_is_not_mxkxn_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        prepacked_weights.main(["--shapes", "8x16"])
    assert e.value.code == 2 and "'8x16' is not MxKxN" in capsys.readouterr().err
