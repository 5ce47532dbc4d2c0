"""FileCheck tests pinning what the `linalg` stage (lowering) must produce."""
from __future__ import annotations

from chainbuild import ChainBuilder, filecheck
from fusec.compiler.lowering.lower import lower, lower_chain
from fusec.compiler.mlir import print_ir
from fusec.compiler.options import CompileOptions
from fusec.compiler.pipeline import run_stages


def linalg_text(b: ChainBuilder, *outs: int, binding=None, locations=False) -> str:
    return run_stages(b.module(*outs), {b.name: binding or {}}, until="linalg", options=CompileOptions(locations=locations))["linalg"]


def test_function_signature_static_shapes_and_c_interface():
    b = ChainBuilder("f")
    x = b.param("x", "f32", ["M", 8])
    s = b.param("s", "f64", [])
    text = linalg_text(b, b.op("exp", x), b.op("neg", s), binding={"M": 3})
    filecheck(text, """
CHECK: func.func @f(%arg0: tensor<3x8xf32>, %arg1: tensor<f64>) -> (tensor<3x8xf32>, tensor<f64>) attributes {llvm.emit_c_interface}
CHECK: return {{.*}} : tensor<3x8xf32>, tensor<f64>
""")


def test_lower_puts_one_public_function_per_chain():
    b1, b2 = ChainBuilder("one"), ChainBuilder("two")
    c1 = b1.build(b1.op("exp", b1.param("x", "f32", [2])))
    c2 = b2.build(b2.op("log", b2.param("y", "f64", ["N"])))
    from fusec.dsl.typed import TypedModule
    module = lower(TypedModule(b1.file, (c1, c2)), {"two": {"N": 5}})
    filecheck(print_ir(module), """
CHECK: func.func @one(%arg0: tensor<2xf32>) -> tensor<2xf32>
CHECK: func.func @two(%arg0: tensor<5xf64>) -> tensor<5xf64>
""")


def test_broadcasting_is_indexing_maps_not_copies():
    b = ChainBuilder("bc")
    a, c = b.param("a", "f32", [1, 4]), b.param("c", "f32", [3, 1])
    v, s = b.param("v", "f32", [4]), b.param("s", "f32", [])
    text = linalg_text(b, b.op("add", a, c), b.op("mul", b.param("x", "f32", [2, 3, 4]), v), b.op("sub", a, s))
    filecheck(text, """
CHECK-DAG: #[[ROW:.+]] = affine_map<(d0, d1) -> (0, d1)>
CHECK-DAG: #[[COL:.+]] = affine_map<(d0, d1) -> (d0, 0)>
CHECK-DAG: #[[LAST:.+]] = affine_map<(d0, d1, d2) -> (d2)>
CHECK-DAG: #[[SCALAR:.+]] = affine_map<(d0, d1) -> ()>
CHECK: linalg.generic {indexing_maps = [#[[ROW]], #[[COL]], #{{.*}}]{{.*}} ins(%arg0, %arg1 : tensor<1x4xf32>, tensor<3x1xf32>)
CHECK: linalg.generic {indexing_maps = [#{{.*}}, #[[LAST]], #{{.*}}]{{.*}} ins(%arg4, %arg2 : tensor<2x3x4xf32>, tensor<4xf32>)
CHECK: linalg.generic {indexing_maps = [#{{.*}}, #[[SCALAR]], #{{.*}}]{{.*}} ins(%arg0, %arg3 : tensor<1x4xf32>, tensor<f32>)
CHECK-NOT: linalg.broadcast
""")


def test_constants_are_typed_and_inlined():
    b = ChainBuilder("k")
    x32, x64, x16 = b.param("x", "f32", [2]), b.param("y", "f64", [2]), b.param("z", "f16", [2])
    text = linalg_text(b, b.op("mul", x32, b.const(0.1, "f32")), b.op("mul", x64, b.const(0.1, "f64")),
                       b.op("mul", x16, b.const(0.1, "f16")))
    filecheck(text, """
CHECK: ins(%arg0 : tensor<2xf32>)
CHECK: arith.constant 1.000000e-01 : f32
CHECK: ins(%arg1 : tensor<2xf64>)
CHECK: arith.constant 1.000000e-01 : f64
CHECK: ins(%arg2 : tensor<2xf16>)
CHECK: arith.constant 9.99{{[0-9]+}}e-02 : f16
CHECK: arith.extf {{.*}} : f16 to f32
CHECK: arith.truncf {{.*}} : f32 to f16
""")


def test_softmax_is_two_reductions_and_two_elementwise_generics():
    b = ChainBuilder("sm")
    text = linalg_text(b, b.op("softmax", b.param("x", "f32", [4, 16])))
    filecheck(text, """
CHECK: arith.constant 0xFF800000 : f32
CHECK: linalg.fill
CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]
CHECK: arith.maximumf
CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel"]
CHECK: arith.subf
CHECK-NEXT: math.exp
CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]
CHECK: arith.addf
CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel"]
CHECK: arith.divf
CHECK-NOT: linalg.generic
""")
    assert text.count("linalg.generic") == 4


def test_reduction_axis_list_and_keepdims():
    b = ChainBuilder("r")
    x = b.param("x", "f32", [2, 3, 4])
    text = linalg_text(b, b.op("sum", x, axis=[0, 2], keepdims=True), b.op("max", x, axis=-1))
    filecheck(text, """
CHECK: linalg.generic {indexing_maps = [#{{.*}}, #[[RED:.+]]], iterator_types = ["reduction", "parallel", "reduction"]}
CHECK: tensor.expand_shape {{.*}} : tensor<3xf32> into tensor<1x3x1xf32>
CHECK: iterator_types = ["parallel", "parallel", "reduction"]
CHECK: arith.maximumf
CHECK: return {{.*}} : tensor<1x3x1xf32>, tensor<2x3xf32>
""")


def test_matmul_forms():
    b = ChainBuilder("mm")
    text = linalg_text(
        b,
        b.op("matmul", b.param("a", "f32", [3, 4]), b.param("b", "f32", [4, 5])),
        b.op("matmul", b.param("c", "f32", [2, 3, 4]), b.param("d", "f32", [4, 5])),
        b.op("matmul", b.param("e", "f32", [2, 3, 4]), b.param("f", "f32", [2, 4, 5])),
        b.op("matmul", b.param("g", "f32", [2, 1, 4, 8]), b.param("h", "f32", [3, 8, 5])))
    filecheck(text, """
CHECK: linalg.matmul ins(%arg0, %arg1 : tensor<3x4xf32>, tensor<4x5xf32>)
CHECK: tensor.collapse_shape %arg2 {{.*}} into tensor<6x4xf32>
CHECK: linalg.matmul ins(%{{.*}}, %arg3 : tensor<6x4xf32>, tensor<4x5xf32>)
CHECK: tensor.expand_shape {{.*}} into tensor<2x3x5xf32>
CHECK: linalg.batch_matmul ins(%arg4, %arg5 : tensor<2x3x4xf32>, tensor<2x4x5xf32>)
CHECK: linalg.generic {indexing_maps = [#[[A:.+]], #[[B:.+]], #{{.*}}], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%arg6, %arg7 : tensor<2x1x4x8xf32>, tensor<3x8x5xf32>)
CHECK: arith.mulf
CHECK: arith.addf
""")
    assert "affine_map<(d0, d1, d2, d3, d4) -> (d0, 0, d2, d4)>" in text
    assert "affine_map<(d0, d1, d2, d3, d4) -> (d1, d4, d3)>" in text


def test_f16_matmul_accumulates_in_f32():
    b = ChainBuilder("mm16")
    text = linalg_text(b, b.op("matmul", b.param("a", "f16", [3, 4]), b.param("b", "f16", [4, 5])))
    filecheck(text, """
CHECK: linalg.fill {{.*}} -> tensor<3x5xf32>
CHECK: linalg.matmul ins(%arg0, %arg1 : tensor<3x4xf16>, tensor<4x5xf16>) outs(%{{.*}} : tensor<3x5xf32>)
CHECK: arith.truncf {{.*}} : f32 to f16
""")


def test_conv_with_padding_is_tensor_pad_then_named_conv():
    b = ChainBuilder("cv")
    x, w, bias = b.param("x", "f32", [1, 2, 6, 6]), b.param("w", "f32", [3, 2, 3, 3]), b.param("bias", "f32", [3])
    text = linalg_text(b, b.op("conv2d", x, w, bias, stride=(2, 1), padding=(1, 2), dilation=(1, 2)),
                       b.op("conv2d", x, w))
    filecheck(text, """
CHECK: %[[P:.+]] = tensor.pad %arg0 low[0, 0, 1, 2] high[0, 0, 1, 2]
CHECK: tensor.yield
CHECK: } : tensor<1x2x6x6xf32> to tensor<1x2x8x10xf32>
CHECK: linalg.fill
CHECK: linalg.conv_2d_nchw_fchw {dilations = dense<[1, 2]> : tensor<2xi64>, strides = dense<[2, 1]> : tensor<2xi64>} ins(%[[P]], %arg1 : tensor<1x2x8x10xf32>, tensor<3x2x3x3xf32>)
CHECK: linalg.generic {indexing_maps = [#{{.*}}, #[[CH:.+]], #{{.*}}]
CHECK: arith.addf
CHECK-NOT: tensor.pad
CHECK: linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>} ins(%arg0, %arg1
""")
    assert "affine_map<(d0, d1, d2, d3) -> (d1)>" in text


def test_shape_ops():
    b = ChainBuilder("sh")
    x = b.param("x", "f32", [2, 3, 4])
    text = linalg_text(b, b.op("permute", x, perm=[2, 0, 1]), b.op("transpose", x),
                       b.op("reshape", x, shape=[6, 4]), b.op("reshape", x, shape=[2, 3, 2, 2]),
                       b.op("reshape", x, shape=[4, 6]), b.op("broadcast_to", b.param("y", "f32", [3, 1]), shape=[2, 3, 4]))
    filecheck(text, """
CHECK: linalg.transpose ins(%arg0 : tensor<2x3x4xf32>) outs({{.*}} : tensor<4x2x3xf32>) permutation = [2, 0, 1]
CHECK: linalg.transpose ins(%arg0 : tensor<2x3x4xf32>) outs({{.*}} : tensor<2x4x3xf32>) permutation = [0, 2, 1]
CHECK: tensor.collapse_shape %arg0 {{\\[\\[}}0, 1], [2]] : tensor<2x3x4xf32> into tensor<6x4xf32>
CHECK: tensor.expand_shape %arg0 {{\\[\\[}}0], [1], [2, 3]] output_shape [2, 3, 2, 2]
CHECK: tensor.collapse_shape %arg0 {{\\[\\[}}0, 1, 2]] : tensor<2x3x4xf32> into tensor<24xf32>
CHECK: tensor.expand_shape {{.*}} into tensor<4x6xf32>
CHECK: linalg.generic {indexing_maps = [#[[BC:.+]], #{{.*}}]{{.*}} ins(%arg1 : tensor<3x1xf32>) outs({{.*}} : tensor<2x3x4xf32>)
CHECK-NEXT: ^bb0(%[[IN:.+]]: f32, %{{.*}}: f32):
CHECK-NEXT: linalg.yield %[[IN]] : f32
""")
    assert "affine_map<(d0, d1, d2) -> (d1, 0)>" in text


def test_locations_show_file_line_col():
    b = ChainBuilder("loc", path="examples/demo.fdsl")
    x = b.param("x", "f32", [4])             # line 2
    y = b.op("exp", x)                       # line 3
    z = b.op("softmax", y)                   # line 4
    text = linalg_text(b, z, locations=True)
    # MLIR prints locations as aliases (#locN = loc("file":line:col)), defined before the module.
    filecheck(text, """
CHECK-DAG: #[[EXP:loc[0-9]+]] = loc("examples/demo.fdsl":3:5)
CHECK-DAG: #[[SM:loc[0-9]+]] = loc("examples/demo.fdsl":4:5)
CHECK: func.func @loc(%arg0: tensor<4xf32> loc("examples/demo.fdsl":2:5))
CHECK: math.exp {{.*}} loc(#[[EXP]])
CHECK: arith.maximumf {{.*}} loc(#[[SM]])
CHECK: arith.divf {{.*}} loc(#[[SM]])
""")
    assert 'loc("examples/demo.fdsl"' not in linalg_text(b, z, locations=False)


def test_print_ir_is_deterministic():
    b = ChainBuilder("det")
    x = b.param("x", "f32", [3, 4])
    chain = b.build(b.op("layernorm", x, b.param("g", "f32", [4]), b.param("b", "f32", [4])))
    texts = {print_ir(lower_chain(chain), locations=True) for _ in range(3)}
    assert len(texts) == 1
    assert "0x" not in texts.pop().replace("0xFF800000", "")
