"""hoist-reshapes (compiler/transforms/hoist_reshapes.py): a reshape of an elementwise op's result
moves onto the op's inputs, so it becomes a view of the chain's arguments and the ops on both
sides of it fuse; what it must leave where it is."""
from fusec.compiler.mlir import parse_module, print_ir, verify
from fusec.compiler.transforms.hoist_reshapes import hoist_reshapes

from .stages import compile_, count, filecheck, graph_jit_matches, texts

OFF = frozenset({"hoist-reshapes"})
BETWEEN = """chain f(x: f32[M, N], s: f32) -> f32[N, M] {
    return reshape(exp(x) * s, [N, M]) * 2.0
}"""
B = dict(M=4, N=6)


def test_the_reshape_moves_onto_the_argument_and_the_ops_become_one():
    graph = texts(BETWEEN, B, until="graph")["graph"]
    filecheck(graph, """
CHECK: %[[C:.+]] = tensor.collapse_shape %arg0
CHECK: %[[E:.+]] = tensor.expand_shape %[[C]] {{.*}} into tensor<6x4xf32>
CHECK: linalg.generic
CHECK-SAME: ins(%[[E]], %arg1 : tensor<6x4xf32>, tensor<f32>)
CHECK: math.exp
CHECK: arith.mulf
CHECK: arith.mulf
CHECK-NOT: linalg.generic
CHECK-NOT: _shape
""")


def test_disabled_the_reshape_stays_between_two_generics_and_two_kernels():
    on = compile_(BETWEEN, B, until="plan")
    off = compile_(BETWEEN, B, until="plan", disabled_passes=OFF)
    assert count("linalg.generic", on.texts["graph"]) == 1
    assert count("linalg.generic", off.texts["graph"]) == 2
    assert "tensor.collapse_shape %arg0" not in off.texts["graph"]
    assert on.plan.kernel_count == 1 and off.plan.kernel_count == 2, off.texts["plan"]


def test_moved_or_not_the_numbers_are_the_references():
    for disabled in ((), OFF):
        graph_jit_matches(BETWEEN, B, disabled)


def _module_with_the_reshape(src, binding):
    """The graph-stage module of `src` with hoist-reshapes left out: the input the pass sees."""
    return parse_module(texts(src, binding, until="graph", disabled_passes=OFF)["graph"])


def test_the_pass_counts_its_moves_and_climbs_a_whole_elementwise_chain():
    # two elementwise ops below the reshape (kept apart with elementwise fusion off): both move
    src = "chain f(x: f32[M, N]) -> f32[N, M] { return reshape(tanh(exp(x)), [N, M]) }"
    m = parse_module(texts(src, B, until="graph",
                           disabled_passes=OFF | {"linalg-fuse-elementwise-ops"})["graph"])
    assert hoist_reshapes(m) == 2 * 2              # a collapse and an expand, each past two ops
    verify(m, "graph")
    text = print_ir(m)
    assert "tensor.collapse_shape %arg0" in text
    assert hoist_reshapes(m) == 0                  # nothing left to move


def test_what_stays():
    cases = {
        # a reduction's result
        "reduction": "chain f(x: f32[4, N]) -> f32[2, 2] { return reshape(sum(x, axis=1), [2, 2]) * 2.0 }",
        # an op with another user: moving the reshape would compute exp twice
        "other users": """chain f(x: f32[M, N]) -> (f32[N, M], f32[M, N]) {
            e = exp(x)
            return reshape(e, [N, M]) * 2.0, e
        }""",
        # an op that broadcasts an input
        "broadcast": """chain f(x: f32[M, N], b: f32[N]) -> f32[N, M] {
            return reshape(exp(x + b), [N, M]) * 2.0
        }""",
        # an op whose body reads its loop indices (a reversed slice)
        "indices": "chain f(x: f32[M, N]) -> f32[N, M] { return reshape(exp(x[:, ::-1]), [N, M]) * 2.0 }",
    }
    for why, src in cases.items():
        m = _module_with_the_reshape(src, B)
        before = print_ir(m)
        assert "_shape" in before, why
        assert hoist_reshapes(m) == 0, why
        assert print_ir(m) == before, why
