"""matmul-rows (compiler/transforms/matmul_rows.py): `x[B, S, K] @ w[K, N]`, which elementwise
fusion turns into a contraction generic over (b, s, n, k) with x's producer fused in (computed
again for every n, no BLAS, no GEMM template), is a linalg.matmul on rows again, the producer an
elementwise generic of its own (w transposed is a generic of its own already); a contraction
with work on w's side stays.
Found on imported GPT-2 (issue 39): its region ran 98 ms on one core where 1.6 ms was possible."""
import pytest

from fusec.compiler.mlir import parse_module, print_ir, verify
from fusec.compiler.transforms.matmul_rows import matmul_rows

from .stages import count, filecheck, graph_jit_matches, run_matches, texts

OFF = frozenset({"matmul-rows"})
PLAIN = """chain f(x: f32[2, 16, 128], w: f32[128, 384], c: f32[384]) -> f32[2, 16, 384] {
    return x @ w + c
}"""
NORMED = """chain f(x: f32[2, 16, 128], g: f32[128], b: f32[128], w: f32[128, 384], c: f32[384]) -> f32[2, 16, 384] {
    return layernorm(x, g, b, eps=1e-05) @ w + c
}"""
GELU = """chain f(x: f32[2, 3, 5, 16], w: f32[16, 8]) -> f32[2, 3, 5, 8] {
    return gelu(x) @ w
}"""
W_SIDE = """chain f(x: f32[2, 16, 32], w: f32[32, 24]) -> f32[2, 16, 24] {
    return exp(x) @ (w * 2.0)
}"""
TRANSPOSED = """chain f(x: f32[2, 16, 32], w: f32[24, 32]) -> f32[2, 16, 24] {
    return exp(x) @ transpose(w)
}"""


@pytest.mark.parametrize("src", [PLAIN, NORMED, GELU, TRANSPOSED], ids=["plain", "layernorm", "gelu-4d", "w-transposed"])
def test_the_contraction_is_a_matmul_on_rows_again(src):
    on = texts(src, {}, until="graph")["graph"]
    off = texts(src, {}, until="graph", disabled_passes=OFF)["graph"]
    assert "linalg.matmul" not in off and count(r'"reduction"\]', off) >= 1       # what fusion left
    assert count(r"linalg\.matmul", on) == 1
    # no generic left with a reduction but the layernorm's row statistics
    assert count(r'"reduction"\]', on) == (2 if src == NORMED else 0)
    graph_jit_matches(src, {})


def test_a_fused_layernorm_is_computed_once_per_element_before_the_rows():
    graph = texts(NORMED, {}, until="graph")["graph"]
    filecheck(graph, """
CHECK: %[[N:.+]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel"]{{.*}} outs({{.*}} : tensor<2x16x128xf32>)
CHECK: math.sqrt
CHECK: %[[R:.+]] = tensor.collapse_shape %[[N]] {{\\[}}[0, 1], [2]] : tensor<2x16x128xf32> into tensor<32x128xf32>
CHECK: linalg.matmul ins(%[[R]], %arg3 : tensor<32x128xf32>, tensor<128x384xf32>)
CHECK: tensor.expand_shape {{.*}} : tensor<32x384xf32> into tensor<2x16x384xf32>
""")


def test_a_contraction_with_work_on_ws_side_stays():
    m = parse_module(texts(W_SIDE, {}, until="graph", disabled_passes=OFF)["graph"])
    before = print_ir(m)
    assert matmul_rows(m) == 0
    assert print_ir(m) == before


def test_the_pass_counts_what_it_split_and_leaves_verified_ir():
    m = parse_module(texts(NORMED, {}, until="graph", disabled_passes=OFF)["graph"])
    assert matmul_rows(m) == 1
    verify(m, "graph")
    assert matmul_rows(m) == 0


@pytest.mark.parametrize("target", ["cpu", "cuda-sim"])
@pytest.mark.parametrize("src", [NORMED, GELU], ids=["layernorm", "gelu-4d"])
def test_the_builds_give_the_references_numbers(src, target):
    run_matches(src, {}, target)


def test_the_cpu_build_calls_blas_for_the_rows():
    k = texts(NORMED, {}, until="kernels")["kernels"]
    assert "_sgemm(" in k
