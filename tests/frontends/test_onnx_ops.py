"""Each family of ONNX ops the importer maps: a small graph built with onnx.helper, imported to
FDSL (which re-parses and checks), compiled on cpu and compared with onnxruntime within
runtime/compare.py's tolerances."""
import numpy as np
import pytest

from onnx_helpers import TP, check_against_ort, h, init, model, rand, tensor

F = TP.FLOAT
# every family runs on the NumPy reference (the mapping's meaning) and compiled on cpu; the families
# whose cpu build takes longest (15-35 s on a busy 2-core machine) compile under the slow mark
BOTH = pytest.mark.parametrize("target", ["reference", "cpu"])
SLOW_CPU = pytest.mark.parametrize("target", ["reference", pytest.param("cpu", marks=pytest.mark.slow)])


@SLOW_CPU
def test_unary_and_activation_ops(target, tmp_path):
    ops = ["Neg", "Abs", "Tanh", "Sigmoid", "Relu", "Erf", "Sin", "Cos", "Floor", "Ceil", "Softplus", "Softsign",
           "HardSigmoid", "HardSwish", "Exp"]
    nodes = [h.make_node(op, ["x"], [f"y_{op}"]) for op in ops]
    nodes += [h.make_node("Abs", ["x"], ["ax"]), h.make_node("Add", ["ax", "one"], ["ax1"]),
              h.make_node("Log", ["ax1"], ["y_Log"]), h.make_node("Sqrt", ["ax"], ["y_Sqrt"]),
              h.make_node("Reciprocal", ["ax1"], ["y_Reciprocal"]),
              h.make_node("LeakyRelu", ["x"], ["y_LeakyRelu"], alpha=0.1), h.make_node("Elu", ["x"], ["y_Elu"]),
              h.make_node("Gelu", ["x"], ["y_gelu_erf"]), h.make_node("Gelu", ["x"], ["y_gelu_tanh"], approximate="tanh"),
              # the erf GELU as the legacy exporter spells it: x * 0.5 * (1 + erf(x / sqrt(2)))
              h.make_node("Div", ["x", "sqrt2"], ["g0"]), h.make_node("Erf", ["g0"], ["g1"]),
              h.make_node("Add", ["g1", "one"], ["g2"]), h.make_node("Mul", ["x", "g2"], ["g3"]),
              h.make_node("Mul", ["g3", "half"], ["y_gelu_pattern"]),
              h.make_node("Identity", ["x"], ["y_identity"]), h.make_node("Dropout", ["x"], ["y_dropout"]),
              h.make_node("Cast", ["x"], ["xi"], to=TP.INT64), h.make_node("CastLike", ["xi", "x"], ["y_castlike"])]
    outs = [n.output[0] for n in nodes if n.output[0].startswith("y_")]
    m = model(nodes, [tensor("x", F, ["B", 8])], [tensor(o, 0, None) for o in outs],
              [init("one", np.float32(1)), init("sqrt2", np.float32(np.sqrt(2))), init("half", np.float32(0.5))])
    loaded, _ = check_against_ort(m, {"x": rand((3, 8))}, tmp_path, target)
    assert 'gelu(x, approximate="none")' in loaded.fdsl and 'approximate="tanh"' in loaded.fdsl


@SLOW_CPU
def test_binary_comparison_logic_and_cast_ops(target, tmp_path):
    nodes = [h.make_node("Add", ["a", "b"], ["y_add"]), h.make_node("Sub", ["a", "b"], ["y_sub"]),
             h.make_node("Mul", ["a", "b"], ["y_mul"]), h.make_node("Div", ["a", "b"], ["y_div"]),
             h.make_node("Max", ["a", "b", "c"], ["y_max"]), h.make_node("Min", ["a", "b"], ["y_min"]),
             h.make_node("Sum", ["a", "b", "c"], ["y_sum"]), h.make_node("Mean", ["a", "b"], ["y_mean"]),
             h.make_node("Abs", ["a"], ["aa"]), h.make_node("Pow", ["aa", "two"], ["y_pow"]),
             h.make_node("Pow", ["aa", "b"], ["y_pow2"]),
             h.make_node("Less", ["a", "b"], ["lt"]), h.make_node("Greater", ["a", "zero"], ["gt"]),
             h.make_node("Equal", ["lt", "gt"], ["y_eq"]), h.make_node("LessOrEqual", ["a", "b"], ["le"]),
             h.make_node("GreaterOrEqual", ["a", "b"], ["ge"]), h.make_node("And", ["le", "gt"], ["y_and"]),
             h.make_node("Or", ["lt", "gt"], ["y_or"]), h.make_node("Xor", ["lt", "gt"], ["y_xor"]),
             h.make_node("Not", ["ge"], ["y_not"]), h.make_node("Where", ["lt", "a", "b"], ["y_where"]),
             h.make_node("Where", ["gt", "a", "zero"], ["y_where_c"]),
             h.make_node("Cast", ["lt"], ["y_cast"], to=TP.FLOAT), h.make_node("Cast", ["a"], ["y_casti"], to=TP.INT32),
             h.make_node("Clip", ["a", "lo", "hi"], ["y_clip"]), h.make_node("Clip", ["a", "", "hi"], ["y_clip_hi"]),
             h.make_node("PRelu", ["a", "slope"], ["y_prelu"]),
             h.make_node("Div", ["a", "zero"], ["inf"]), h.make_node("Sub", ["inf", "inf"], ["nan"]),
             h.make_node("IsNaN", ["nan"], ["y_isnan"])]
    outs = [n.output[0] for n in nodes if n.output[0].startswith("y_")]
    m = model(nodes, [tensor("a", F, ["B", 1, 8]), tensor("b", F, [4, 8]), tensor("c", F, [8])],
              [tensor(o, 0, None) for o in outs],
              [init("two", np.float32(2)), init("zero", np.float32(0)), init("lo", np.float32(-0.5)),
               init("hi", np.float32(0.75)), init("slope", rand((8,), 3))])
    feeds = {"a": rand((2, 1, 8), 1), "b": rand((4, 8), 2, lo=0.5), "c": rand((8,), 4)}
    check_against_ort(m, feeds, tmp_path, target)


@BOTH
def test_integer_ops(target, tmp_path):
    nodes = [h.make_node("Add", ["i", "k"], ["s"]), h.make_node("Mul", ["s", "i"], ["y_mul"]),
             h.make_node("ReduceMax", ["i"], ["y_max"], keepdims=0), h.make_node("Neg", ["i"], ["y_neg"])]
    m = model(nodes, [tensor("i", TP.INT64, [5])], [tensor(o, TP.INT64, None) for o in ("y_mul", "y_max", "y_neg")],
              [init("k", np.int64(3))])
    check_against_ort(m, {"i": np.arange(5, dtype=np.int64) - 2}, tmp_path, target)


@pytest.mark.parametrize("opset", [17, 21])
@SLOW_CPU
def test_reductions_with_axes_as_attribute_or_input(opset, target, tmp_path):
    def red(op, out, axes, keep):
        if opset >= 18 or op == "ReduceSum":
            return h.make_node(op, ["x", f"ax_{out}"], [out], keepdims=keep), init(f"ax_{out}", np.array(axes))
        return h.make_node(op, ["x"], [out], axes=axes, keepdims=keep), None
    specs = [("ReduceSum", "y_sum", [1], 1), ("ReduceMean", "y_mean", [-1, 1], 0), ("ReduceMax", "y_max", [2], 0),
             ("ReduceMin", "y_min", [0, 2], 1), ("ReduceProd", "y_prod", [2], 1),
             ("ReduceSumSquare", "y_ss", [1], 0), ("ReduceL1", "y_l1", [2], 0), ("ReduceL2", "y_l2", [2], 1),
             ("ReduceLogSum", "y_logsum", [1], 1)]
    made = [red(*s) for s in specs]
    nodes = [n for n, _ in made] + [h.make_node("ReduceMean", ["x"], ["y_all"], keepdims=0),
                                    h.make_node("ArgMax", ["x"], ["y_argmax"], axis=1, keepdims=0),
                                    h.make_node("ArgMin", ["x"], ["y_argmin"], axis=-1),
                                    h.make_node("CumSum", ["x", "cax"], ["y_cumsum"])]
    inits = [i for _, i in made if i is not None] + [init("cax", np.int64(1))]
    outs = [n.output[0] for n in nodes]
    m = model(nodes, [tensor("x", F, [2, "N", 4])], [tensor(o, 0, None) for o in outs], inits, opset=opset)
    check_against_ort(m, {"x": rand((2, 3, 4), 5, lo=0.5)}, tmp_path, target)


@SLOW_CPU
def test_matmul_and_gemm(target, tmp_path):
    nodes = [h.make_node("MatMul", ["a", "b"], ["y_bmm"]), h.make_node("MatMul", ["v", "w"], ["y_vec"]),
             h.make_node("MatMul", ["m", "v2"], ["y_mv"]),
             h.make_node("Gemm", ["m", "w", "cb"], ["y_gemm"], alpha=0.5, beta=2.0),
             h.make_node("Gemm", ["mt", "wt"], ["y_gemm_t"], transA=1, transB=1),
             h.make_node("Gemm", ["m", "wc", "cm"], ["y_gemm_c"], transB=1, beta=0.25)]
    m = model(nodes, [tensor("a", F, [2, "S", 6]), tensor("b", F, [1, 6, 5]), tensor("v", F, [4]),
                      tensor("w", F, [4, 3]), tensor("m", F, ["S", 4]), tensor("v2", F, [4]),
                      tensor("mt", F, [4, "S"]), tensor("wt", F, [3, 4]), tensor("cb", F, [3])],
              [tensor(n.output[0], 0, None) for n in nodes],
              [init("wc", rand((3, 4), 9)), init("cm", rand((1, 3), 10))])
    feeds = {"a": rand((2, 3, 6), 1), "b": rand((1, 6, 5), 2), "v": rand((4,), 3), "w": rand((4, 3), 4),
             "m": rand((3, 4), 5), "v2": rand((4,), 6), "mt": rand((4, 3), 7), "wt": rand((3, 4), 8),
             "cb": rand((3,), 11)}
    loaded, _ = check_against_ort(m, feeds, tmp_path, target)
    assert "wc_t" in loaded.imported.weights           # a constant transB is transposed once, at import


@SLOW_CPU
def test_small_cnn_conv_batchnorm_pooling_flatten(target, tmp_path):
    nodes = [h.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
             h.make_node("BatchNormalization", ["c1", "s", "bb", "mu", "var"], ["n1"], epsilon=1e-3),
             h.make_node("Relu", ["n1"], ["r1"]),
             h.make_node("Conv", ["r1", "w2"], ["c2"], dilations=[2, 1], auto_pad="VALID"),
             h.make_node("Conv", ["r1", "w3"], ["c3"], auto_pad="SAME_UPPER"),
             h.make_node("GlobalAveragePool", ["c2"], ["p"]), h.make_node("GlobalMaxPool", ["c3"], ["y_gmax"]),
             h.make_node("Flatten", ["p"], ["f"]), h.make_node("Gemm", ["f", "fc", "fcb"], ["y"], transB=1)]
    inits = [init("w1", rand((4, 3, 3, 3), 1)), init("b1", rand((4,), 2)), init("s", rand((4,), 3)),
             init("bb", rand((4,), 4)), init("mu", rand((4,), 5)), init("var", rand((4,), 6, lo=0.5)),
             init("w2", rand((6, 4, 2, 2), 7)), init("w3", rand((5, 4, 3, 3), 12)),
             init("fc", rand((10, 6), 8)), init("fcb", rand((10,), 9))]
    m = model(nodes, [tensor("x", F, ["N", 3, 12, 12])], [tensor("y", F, None), tensor("y_gmax", F, None)], inits)
    loaded, _ = check_against_ort(m, {"x": rand((2, 3, 12, 12), 10)}, tmp_path, target)
    assert "conv2d(x, w1, bias=b1, stride=2, padding=1)" in loaded.fdsl


@SLOW_CPU
def test_grouped_and_depthwise_conv(target, tmp_path):
    """Conv's group: depthwise (group = C, and 2 filters per channel) and grouped, with a bias,
    batchnorm and relu after, and a grouped 1-D conv: conv2d's groups."""
    nodes = [h.make_node("Conv", ["x", "wd", "bd"], ["d"], group=4, pads=[1, 1, 1, 1]),
             h.make_node("BatchNormalization", ["d", "s", "bb", "mu", "var"], ["n"], epsilon=1e-3),
             h.make_node("Relu", ["n"], ["y_dw"]),
             h.make_node("Conv", ["x", "wk"], ["y_dwk"], group=4, strides=[2, 2]),
             h.make_node("Conv", ["y_dw", "wg"], ["y_grp"], group=2, pads=[0, 1, 0, 1], dilations=[1, 2]),
             h.make_node("Conv", ["x1", "w1"], ["y_1d"], group=2, pads=[1, 1])]
    inits = [init("wd", rand((4, 1, 3, 3), 1)), init("bd", rand((4,), 2)), init("s", rand((4,), 3)),
             init("bb", rand((4,), 4)), init("mu", rand((4,), 5)), init("var", rand((4,), 6, lo=0.5)),
             init("wk", rand((8, 1, 3, 3), 7)), init("wg", rand((6, 2, 3, 3), 8)), init("w1", rand((4, 3, 3), 9))]
    m = model(nodes, [tensor("x", F, ["N", 4, 9, 9]), tensor("x1", F, ["N", 6, 10])],
              [tensor(n, F, None) for n in ("y_dw", "y_dwk", "y_grp", "y_1d")], inits)
    loaded, _ = check_against_ort(m, {"x": rand((2, 4, 9, 9), 10), "x1": rand((2, 6, 10), 11)}, tmp_path, target)
    assert "conv2d(x, wd, bias=bd, padding=1, groups=4)" in loaded.fdsl
    assert "groups=2" in loaded.fdsl


@SLOW_CPU
def test_conv1d(target, tmp_path):
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["y"], pads=[2, 2], strides=[2], dilations=[2]),
             h.make_node("Conv", ["x", "wt"], ["y2"], auto_pad="SAME_UPPER")]
    m = model(nodes, [tensor("x", F, ["N", 3, 16]), tensor("wt", F, [2, 3, 3])],
              [tensor(n.output[0], 0, None) for n in nodes], [init("w", rand((4, 3, 3), 1)), init("b", rand((4,), 2))])
    loaded, _ = check_against_ort(m, {"x": rand((2, 3, 16), 3), "wt": rand((2, 3, 3), 4)}, tmp_path, target)
    assert "w_2d" in loaded.imported.weights            # constant 1-D weights are reshaped to 2-D at import


@SLOW_CPU
def test_normalisations(target, tmp_path):
    nodes = [h.make_node("LayerNormalization", ["x", "g", "b"], ["y_ln"], epsilon=1e-6),
             h.make_node("LayerNormalization", ["x", "g2"], ["y_ln2"], axis=1),
             h.make_node("Softmax", ["x"], ["y_sm"]), h.make_node("Softmax", ["x"], ["y_sm1"], axis=1),
             h.make_node("LogSoftmax", ["x"], ["y_lsm"], axis=-1)]
    m = model(nodes, [tensor("x", F, ["B", 4, 8])], [tensor(n.output[0], 0, None) for n in nodes],
              [init("g", rand((8,), 1)), init("b", rand((8,), 2)), init("g2", rand((4, 8), 3))])
    check_against_ort(m, {"x": rand((3, 4, 8), 4)}, tmp_path, target)


@SLOW_CPU
def test_shape_ops_with_constant_shapes(target, tmp_path):
    i64 = lambda name, v: init(name, np.array(v, dtype=np.int64))   # noqa: E731
    nodes = [h.make_node("Transpose", ["x"], ["y_t"], perm=[0, 2, 1]),
             h.make_node("Reshape", ["x", "shp"], ["y_r"]),                        # [0, -1]: copy a dim, infer one
             h.make_node("Unsqueeze", ["x", "ax0"], ["u"]), h.make_node("Squeeze", ["u", "ax0"], ["y_sq"]),
             h.make_node("Flatten", ["x"], ["y_fl"], axis=1),
             h.make_node("Expand", ["row", "eshape"], ["y_ex"]),
             h.make_node("Concat", ["x", "x"], ["y_cat"], axis=-1),
             h.make_node("Split", ["x"], ["y_s0", "y_s1"], axis=2, num_outputs=2),
             h.make_node("Split", ["x", "sizes"], ["y_p0", "y_p1", "y_p2"], axis=1),
             h.make_node("Slice", ["x", "st", "en", "axs", "stp"], ["y_sl"]),              # ends past the axis clamp
             h.make_node("Slice", ["x", "st2", "en2", "axs2", "stp2"], ["y_rev"]),          # a reversed axis
             h.make_node("Slice", ["x", "st3", "en3", "axs3"], ["y_last"]),                  # the last 2 of symbolic S
             h.make_node("Gather", ["x", "k"], ["y_g0"], axis=1),
             h.make_node("Gather", ["x", "idx"], ["y_g1"], axis=2),
             h.make_node("Gather", ["tab", "ids"], ["y_emb"]),
             h.make_node("Constant", [], ["cst"], value=h.make_tensor("v", TP.FLOAT, [4], [1, 2, 3, 4])),
             h.make_node("Add", ["x", "cst"], ["y_const"]),
             h.make_node("ConstantOfShape", ["cshape"], ["ones"], value=h.make_tensor("o", TP.FLOAT, [1], [1.5])),
             h.make_node("Mul", ["x", "ones"], ["y_cos"]),
             h.make_node("Tile", ["row", "reps"], ["y_tile"]),
             h.make_node("Range", ["r0", "r1", "r2"], ["rg"]), h.make_node("Cast", ["rg"], ["rgf"], to=TP.FLOAT),
             h.make_node("Add", ["x", "rgf"], ["y_range"])]
    inits = [i64("shp", [0, -1]), i64("ax0", [0]), i64("eshape", [3, 1, 4]), i64("sizes", [1, 1, 1]),
             i64("st", [1, 0]), i64("en", [100, 2 ** 63 - 1]), i64("axs", [2, 1]), i64("stp", [2, 1]),
             i64("st2", [-1]), i64("en2", [-(2 ** 63)]), i64("axs2", [2]), i64("stp2", [-1]),
             i64("st3", [-2]), i64("en3", [2 ** 63 - 1]), i64("axs3", [0]),
             i64("k", -1), i64("idx", [[0, 3], [-1, 1]]), i64("cshape", [3, 4]), i64("r0", 0), i64("r1", 4), i64("r2", 1), i64("reps", [3, 2]),
             init("tab", rand((10, 4), 7))]
    outs = [n.output[k] for n in nodes for k in range(len(n.output)) if n.output[k].startswith("y_")]
    m = model(nodes, [tensor("x", F, ["S", 3, 4]), tensor("row", F, [1, 4]), tensor("ids", TP.INT64, ["S", 2])],
              [tensor(o, 0, None) for o in outs], inits)
    feeds = {"x": rand((3, 3, 4), 1), "row": rand((1, 4), 2),
             "ids": np.array([[0, 9], [3, -1], [5, 5]], dtype=np.int64)}      # -1 counts from the end, as in ONNX
    loaded, _ = check_against_ort(m, feeds, tmp_path, target)
    assert "x[-2:]" in loaded.fdsl and "::-1" in loaded.fdsl


@BOTH
def test_shape_arithmetic_folds_to_symbols(target, tmp_path):
    """Shape -> Gather -> Concat -> Reshape, and Shape -> ConstantOfShape -> Expand, as dynamic
    exports leave them: folded to the symbols B and S, with no shape value left in the chain."""
    i64 = lambda name, v: init(name, np.array(v, dtype=np.int64))   # noqa: E731
    nodes = [h.make_node("Shape", ["x"], ["shp"]), h.make_node("Gather", ["shp", "i0"], ["b"]),
             h.make_node("Gather", ["shp", "i1"], ["s"]), h.make_node("Unsqueeze", ["b", "z"], ["b1"]),
             h.make_node("Unsqueeze", ["s", "z"], ["s1"]),
             h.make_node("Concat", ["b1", "s1", "heads", "m1"], ["tshape"], axis=0),
             h.make_node("Reshape", ["x", "tshape"], ["xr"]), h.make_node("Transpose", ["xr"], ["y"], perm=[0, 2, 1, 3]),
             h.make_node("Shape", ["x"], ["shp2"], start=0, end=2),
             h.make_node("ConstantOfShape", ["shp2"], ["zeros"], value=h.make_tensor("o", TP.FLOAT, [1], [0.0])),
             h.make_node("Equal", ["shp2", "neg1"], ["isneg"]), h.make_node("Where", ["isneg", "one2", "shp2"], ["eshape"]),
             h.make_node("Concat", ["eshape", "eight"], ["eshape2"], axis=0),
             h.make_node("Expand", ["bias", "eshape2"], ["bexp"]), h.make_node("Add", ["x", "bexp"], ["xb"]),
             h.make_node("ReduceSum", ["xb", "ax2"], ["rs"], keepdims=0), h.make_node("Add", ["rs", "zeros"], ["y2"]),
             h.make_node("Size", ["bias"], ["n8"]), h.make_node("Reshape", ["n8", "one1"], ["n8v"]),
             h.make_node("Concat", ["b1", "s1", "n8v"], ["xshape"], axis=0), h.make_node("Reshape", ["x", "xshape"], ["y3"])]
    inits = [i64("i0", 0), i64("i1", 1), i64("z", [0]), i64("heads", [2]), i64("m1", [-1]), i64("neg1", [-1, -1]),
             i64("one2", [1, 1]), i64("eight", [8]), i64("ax2", [2]), init("bias", rand((1, 1, 8), 3)), i64("one1", [1])]
    m = model(nodes, [tensor("x", F, ["B", "S", 8])], [tensor(y, F, None) for y in ("y", "y2", "y3")], inits)
    for shape in [(2, 3, 8), (1, 5, 8)]:
        loaded, _ = check_against_ort(m, {"x": rand(shape, 1)}, tmp_path, target)
    text = loaded.fdsl
    assert "reshape(x, [B, S, 2, -1])" in text and "broadcast_to(" in text and "[B, S]" in text


@SLOW_CPU
def test_pooling_ops(target, tmp_path):
    """MaxPool and AveragePool with ONNX's attributes (strides default 1, count_include_pad 0,
    ceil_mode, dilations), GlobalAveragePool as adaptive_avg_pool2d; MaxPool's unused Indices."""
    nodes = [h.make_node("MaxPool", ["x"], ["y_max"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             h.make_node("MaxPool", ["x"], ["y_max_ceil", "unused_indices"], kernel_shape=[2, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1], dilations=[2, 1], ceil_mode=1),
             h.make_node("MaxPool", ["x"], ["y_max_s1"], kernel_shape=[2, 2]),
             h.make_node("AveragePool", ["x"], ["y_avg"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             h.make_node("AveragePool", ["x"], ["y_avg_inc"], kernel_shape=[3, 2], strides=[2, 2], pads=[1, 1, 1, 1],
                         count_include_pad=1),
             h.make_node("AveragePool", ["x"], ["y_avg_ceil"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1,
                         auto_pad="VALID"),
             h.make_node("AveragePool", ["x"], ["y_avg_ceil_inc"], kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1], ceil_mode=1, count_include_pad=1),
             h.make_node("GlobalAveragePool", ["x"], ["y_gap"])]
    outs = [n.output[0] for n in nodes]
    m = model(nodes, [tensor("x", F, ["N", 3, 7, 9])], [tensor(o, F, None) for o in outs])
    loaded, _ = check_against_ort(m, {"x": rand((2, 3, 7, 9), 11)}, tmp_path, target)
    assert "max_pool2d(x, 3, stride=2, padding=1)" in loaded.fdsl
    assert "avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=false)" in loaded.fdsl
    assert "adaptive_avg_pool2d(x, 1)" in loaded.fdsl
@SLOW_CPU
def test_issue38_ops_map_to_fdsl_s_own(target, tmp_path):
    """HardSwish, PyTorch's HardSigmoid, Not/And/Or/Xor, IsInf, a ConstantOfShape of a symbolic
    shape and a Range(0, n, 1) over an input's size: each to FDSL's op of the same meaning
    (hardswish, logical_and, full, arange...), checked against onnxruntime with NaN and +-inf."""
    i64 = lambda name, v: init(name, np.array(v, dtype=np.int64))   # noqa: E731
    nodes = [h.make_node("HardSwish", ["x"], ["y_hardswish"]),
             h.make_node("HardSigmoid", ["x"], ["y_hardsigmoid_torch"], alpha=1 / 6, beta=0.5),
             h.make_node("HardSigmoid", ["x"], ["y_hardsigmoid"], alpha=0.3, beta=0.4),
             h.make_node("Greater", ["x", "zero"], ["pos"]), h.make_node("Less", ["x", "one"], ["small"]),
             h.make_node("Not", ["pos"], ["y_not"]), h.make_node("And", ["pos", "small"], ["y_and"]),
             h.make_node("Or", ["pos", "m"], ["y_or"]), h.make_node("Xor", ["small", "m"], ["y_xor"]),
             h.make_node("IsInf", ["x"], ["y_isinf"]), h.make_node("IsInf", ["x"], ["y_isneginf"], detect_positive=0),
             h.make_node("Shape", ["x"], ["shp"]), h.make_node("Gather", ["shp", "i1"], ["s"]),
             h.make_node("Range", ["r0", "s", "r1"], ["pos_ids"]), h.make_node("Add", ["pos_ids", "ids"], ["y_range"]),
             h.make_node("ConstantOfShape", ["shp"], ["ninf"], value=h.make_tensor("v", F, [1], [-np.inf])),
             h.make_node("Where", ["pos", "x", "ninf"], ["y_masked"])]
    outs = [n.output[0] for n in nodes if n.output[0].startswith("y_")]
    m = model(nodes, [tensor("x", F, ["B", "S"]), tensor("m", TP.BOOL, ["B", "S"]), tensor("ids", TP.INT64, ["S"])],
              [tensor(o, 0, None) for o in outs],
              [init("zero", np.float32(0)), init("one", np.float32(1)), i64("i1", 1), i64("r0", 0), i64("r1", 1)])
    for shape in [(2, 7), (3, 4)]:
        x = rand(shape, 5, lo=-5, hi=5)
        x.reshape(-1)[:5] = [np.nan, np.inf, -np.inf, -3.0, 3.0]
        feeds = {"x": x, "m": rand(shape, 6) > 0, "ids": np.arange(shape[1], dtype=np.int64) * 10}
        loaded, _ = check_against_ort(m, feeds, tmp_path, target)
    text = loaded.fdsl
    for want in ("hardswish(x)", "hardsigmoid(x)", "clamp(add(mul(x, 0.3", "logical_not(", "logical_and(",
                 "logical_or(", "logical_xor(", "eq(abs(x), inf)", "eq(x, -inf)", "arange(S, dtype=i64)",
                 "full([B, S], (-inf), dtype=f32)"):
        assert want in text, (want, text)
@SLOW_CPU
def test_gather_elements_and_gather_nd(target, tmp_path):
    """GatherElements as take_along_axis (indices shorter than the data on another axis read its
    first positions, as ONNX and torch.gather do), GatherND as gather_nd with and without batch
    axes; negative indices count from the end, constant indices become parameters."""
    nodes = [h.make_node("GatherElements", ["x", "i"], ["y_ge"], axis=1),
             h.make_node("GatherElements", ["x", "ishort"], ["y_short"], axis=-1),       # [S, 2, 3] of [S, 3, 4]
             h.make_node("GatherElements", ["x", "kc"], ["y_const"], axis=0),
             h.make_node("Exp", ["x"], ["ex"]),
             h.make_node("GatherND", ["ex", "nd"], ["y_nd"]),
             h.make_node("GatherND", ["x", "ndb"], ["y_ndb"], batch_dims=1),
             h.make_node("GatherND", ["x", "ndc"], ["y_ndc"])]
    inits = [init("kc", np.array([[[0, -1, 1, 0]], [[-2, 2, 0, 1]]], dtype=np.int64)),
             init("ndc", np.array([[1, 2, 3], [-1, 0, -4]], dtype=np.int64))]
    outs = ["y_ge", "y_short", "y_const", "y_nd", "y_ndb", "y_ndc"]
    m = model(nodes, [tensor("x", F, ["S", 3, 4]), tensor("i", TP.INT64, ["S", 5, 4]),
                      tensor("ishort", TP.INT64, ["S", 2, 3]), tensor("nd", TP.INT64, [6, 2]),
                      tensor("ndb", TP.INT64, ["S", 2, 1])],
              [tensor(o, 0, None) for o in outs], inits)
    rng = np.random.default_rng(3)
    feeds = {"x": rand((3, 3, 4), 1), "i": rng.integers(-3, 3, (3, 5, 4)).astype(np.int64),
             "ishort": rng.integers(-4, 4, (3, 2, 3)).astype(np.int64),
             "nd": np.array([[0, 0], [2, -1], [-3, 1], [1, 2], [-1, -3], [0, 2]], dtype=np.int64),
             "ndb": np.array([[[2], [-1]], [[0], [1]], [[-3], [2]]], dtype=np.int64)}
    loaded, _ = check_against_ort(m, feeds, tmp_path, target)
    assert "= x[:, :2, :]" in loaded.fdsl and "ishort, axis=2)" in loaded.fdsl, loaded.fdsl
    assert "gather_nd(x, ndb, batch_dims=1)" in loaded.fdsl, loaded.fdsl


def test_gather_elements_folded_on_constants_with_shorter_indices(tmp_path):
    """A GatherElements on constants whose indices are shorter than the data off the axis (BERT's
    token_type_ids buffer, as torch's exporter writes it) is folded at import, as ONNX defines it."""
    data = init("buf", np.arange(12, dtype=np.int64).reshape(1, 12) % 5)
    idx = init("pos", np.array([[3, 1, -2, 0]], dtype=np.int64))
    nodes = [h.make_node("GatherElements", ["buf", "pos"], ["tt"], axis=1),
             h.make_node("Cast", ["tt"], ["ttf"], to=TP.FLOAT),
             h.make_node("Add", ["x", "ttf"], ["y"])]
    m = model(nodes, [tensor("x", F, [2, 4])], [tensor("y", F, [2, 4])], [data, idx])
    loaded, _ = check_against_ort(m, {"x": rand((2, 4), 3)}, tmp_path, "reference")
    assert "take_along_axis" not in loaded.fdsl
