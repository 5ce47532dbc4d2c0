"""fold-unit-reshapes (compiler/transforms/fold_unit_reshapes.py): a reshape that only inserts or
drops unit dims (keepdims) folds into the index maps of the generics reading it, so the
producer feeds its consumer directly; a reshape that moves more than unit dims stays."""
from fusec.compiler.mlir import parse_module, print_ir, verify
from fusec.compiler.transforms.fold_unit_reshapes import fold_unit_reshapes

from .stages import compile_, filecheck, graph_jit_matches, texts

OFF = frozenset({"fold-unit-reshapes"})
# a softmax written by hand: the row sum reads exp's result through expand_shape [M, 1, N]
BY_HAND = """chain f(x: f32[M, N]) -> f32[M, N] {
    e = exp(x)
    return e / sum(e, axis=1, keepdims=true)
}"""
B = dict(M=4, N=6)


def test_the_row_sum_reads_exp_directly_through_its_map():
    graph = texts(BY_HAND, B, until="graph")["graph"]
    filecheck(graph, """
CHECK: #[[READ:.+]] = affine_map<(d0, d1, d2) -> (d0, d2)>
CHECK: %[[E:.+]] = linalg.generic {{.*}} ins(%arg0 : tensor<4x6xf32>)
CHECK: math.exp
CHECK: linalg.generic {indexing_maps = [#[[READ]], {{.*}}"reduction"]} ins(%[[E]] : tensor<4x6xf32>)
CHECK: arith.addf
""")
    # the only reshape left is of the sum's init (a tensor.empty), read by no generic
    (line,) = [l for l in graph.splitlines() if "expand_shape" in l or "collapse_shape" in l]
    assert "tensor<4xf32> into tensor<4x1xf32>" in line


def test_disabled_the_sum_reads_a_reshaped_view_and_the_plan_says_so():
    off = compile_(BY_HAND, B, until="plan", disabled_passes=OFF)
    assert "tensor.expand_shape %1 [[0, 1], [2]] output_shape [4, 1, 6]" in off.texts["graph"]
    on = compile_(BY_HAND, B, until="plan")
    assert on.plan.kernel_count == 1, on.texts["plan"]
    assert off.plan.kernel_count == 2, off.texts["plan"]


def test_folded_or_not_the_numbers_are_the_references():
    for disabled in ((), OFF):
        graph_jit_matches(BY_HAND, B, disabled)


def test_the_pass_counts_the_operands_it_folds_and_leaves_verified_ir():
    m = parse_module(texts(BY_HAND, B, until="graph", disabled_passes=OFF)["graph"])
    assert fold_unit_reshapes(m) == 1
    verify(m, "graph")
    assert "ins(%1 : tensor<4x6xf32>)" in print_ir(m)
    assert fold_unit_reshapes(m) == 0              # the reshape is left for canonicalize, unread


def test_a_reshape_that_moves_more_than_unit_dims_stays():
    # x as [2, 2, 6] (4 rows split in two) is read by exp: no unit dim, nothing to fold; the
    # keepdims view of exp's result [2, 2, 1, 6] that the row sum reads is folded
    src = """chain f(x: f32[4, 6]) -> f32[2, 2, 6] {
        e = exp(reshape(x, [2, 2, 6]))
        return sum(e, axis=2, keepdims=true) * e
    }"""
    m = parse_module(texts(src, {}, until="graph", disabled_passes=OFF)["graph"])
    before = print_ir(m)
    assert "ins(%expanded : tensor<2x2x6xf32>)" in before and "ins(%expanded_1 : tensor<2x2x1x6xf32>)" in before
    assert fold_unit_reshapes(m) == 1
    after = print_ir(m)
    assert "ins(%expanded : tensor<2x2x6xf32>)" in after and "ins(%1 : tensor<2x2x6xf32>)" in after
