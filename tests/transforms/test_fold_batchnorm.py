"""fold-batchnorm: inference batchnorm becomes a per-channel scale-and-shift (graph stage)."""
from __future__ import annotations

import numpy as np

from chainbuild import ChainBuilder, filecheck, random_input
from fusec.compiler.jit import jit_run
from fusec.compiler.options import CompileOptions
from fusec.compiler.pipeline import run_stages
from fusec.runtime.compare import compare
from fusec.runtime.reference import run_chain


def conv_bn_relu(dtype="f32") -> ChainBuilder:
    b = ChainBuilder("cbr")
    x, w = b.param("x", dtype, [1, 2, 6, 6]), b.param("w", dtype, [4, 2, 3, 3])
    stats = [b.param(n, dtype, [4]) for n in ("mean", "var", "gamma", "beta")]
    y = b.op("conv2d", x, w, padding=1)
    b.out = b.op("relu", b.op("batchnorm", y, *stats))
    return b


def test_linalg_stage_has_the_textbook_batchnorm():
    b = conv_bn_relu()
    text = run_stages(b.module(b.out), until="linalg")["linalg"]
    filecheck(text, """
CHECK: linalg.conv_2d_nchw_fchw
CHECK: linalg.generic {{.*}}fusec.batchnorm = 1.000000e-05 : f64
CHECK: arith.subf
CHECK: math.sqrt
CHECK: arith.divf
""")


def test_graph_stage_has_scale_and_shift():
    b = conv_bn_relu()
    text = run_stages(b.module(b.out))["graph"]
    filecheck(text, """
CHECK: %[[CONV:.+]] = linalg.conv_2d_nchw_fchw
CHECK: %[[SS:.+]]:2 = linalg.generic {{.*}}iterator_types = ["parallel"]} ins(%arg2, %arg3, %arg4, %arg5 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
CHECK: math.rsqrt
CHECK: %[[SCALE:.+]] = arith.mulf
CHECK: arith.mulf {{.*}}%[[SCALE]]
CHECK: arith.subf
CHECK: linalg.yield %[[SCALE]], %{{.*}} : f32, f32
CHECK: linalg.generic {{.*}} ins(%[[CONV]], %[[SS]]#0, %[[SS]]#1 : tensor<1x4x6x6xf32>, tensor<4xf32>, tensor<4xf32>)
CHECK-NEXT: ^bb0
CHECK-NEXT: arith.mulf
CHECK-NEXT: arith.addf
CHECK-NEXT: arith.maximumf
CHECK-NEXT: linalg.yield
CHECK-NOT: math.sqrt
CHECK-NOT: arith.divf
""")
    assert "fusec.batchnorm" not in text


def test_disabled_keeps_the_textbook_form():
    b = conv_bn_relu()
    text = run_stages(b.module(b.out), options=CompileOptions(disabled_passes={"fold-batchnorm"}))["graph"]
    # (relu fused into the batchnorm generic; the fused op no longer carries the tag)
    filecheck(text, """
CHECK: linalg.conv_2d_nchw_fchw
CHECK: linalg.generic
CHECK: arith.subf
CHECK: math.sqrt
CHECK: arith.divf
CHECK-NOT: math.rsqrt
""")


def test_folded_and_unfolded_agree_with_reference():
    for dtype in ("f32", "f16"):
        b = conv_bn_relu(dtype)
        chain = b.build(b.out)
        rng = np.random.default_rng(7)
        shapes = [p.type.shape for p in chain.param_nodes]
        inputs = [random_input(rng, dtype, s, positive=(i == 3)) for i, s in enumerate(shapes)]
        (want,) = run_chain(chain, inputs)
        for disabled in ((), ("fold-batchnorm",)):
            (got,) = jit_run(chain, "cbr", inputs, disabled_passes=disabled)
            c = compare(got, want, dtype)
            assert c.ok, f"{dtype} disabled={disabled}: {c.describe()}"
