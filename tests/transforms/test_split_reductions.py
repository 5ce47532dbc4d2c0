"""split-reductions (compiler/transforms/split_reductions.py): on a GPU, a reduction with too few
outputs to fill the device becomes partials over G chunks of its axis (from the combiner's
neutral element) and their combine (into the original init): two kernels. The cpu never splits."""
import pytest

from fusec.compiler.jit import jit_compile_module
from fusec.compiler.marks import NOTE
from fusec.compiler.mlir import parse_module, print_ir, verify
from fusec.compiler.transforms.split_reductions import (MIN_BLOCK_CHUNK, MIN_THREAD_CHUNK, split_factor,
                                                        split_reductions)

from .stages import CPU, GPU, assert_matches, compile_, filecheck, inputs_and_reference, texts

OFF = frozenset({"split-reductions"})
FULL = ("chain f(x: f32[N]) -> f32 { return sum(x) }", dict(N=1 << 16))
COLUMNS = ("chain f(x: f32[M, N]) -> f32[N] { return max(x, axis=0) }", dict(M=256, N=16))


def test_a_whole_sum_is_64_contiguous_partials_and_their_combine():
    st = compile_(*FULL, "gpu", until="plan")
    filecheck(st.texts["graph"], f"""
CHECK: %[[INIT:.+]] = linalg.fill
CHECK: %[[X:.+]] = tensor.expand_shape %arg0 {{{{.*}}}} output_shape [64, 1024]
CHECK: %[[P0:.+]] = linalg.fill {{{{.*}}}} -> tensor<64xf32>
CHECK: %[[P:.+]] = linalg.generic {{{{.*}}}}["parallel", "reduction"]{{{{.*}}}} ins(%[[X]] : tensor<64x1024xf32>) outs(%[[P0]] : tensor<64xf32>)
CHECK-SAME: {NOTE} = "split-reductions: 65536 steps per output as 64 partials of 1024, then their combine"
CHECK: arith.addf
CHECK: linalg.generic {{{{.*}}}}["reduction"]{{{{.*}}}} ins(%[[P]] : tensor<64xf32>) outs(%[[INIT]] : tensor<f32>)
CHECK: arith.addf
""")
    assert st.plan.kernel_count == 2
    assert any("64 partials of 1024" in d for d in st.plan.decisions), st.texts["plan"]
    off = compile_(*FULL, "gpu", until="plan", disabled_passes=OFF)
    assert NOTE not in off.texts["graph"] and off.plan.kernel_count == 1


def test_a_column_max_splits_its_strided_axis_with_minus_infinity_partials():
    graph = texts(*COLUMNS, "gpu", until="graph")["graph"]
    filecheck(graph, """
CHECK: %[[NEG:.+]] = arith.constant 0xFF800000 : f32
CHECK: %[[X:.+]] = tensor.expand_shape %arg0 [[0, 1], [2]] output_shape [4, 64, 16]
CHECK: linalg.fill ins(%[[NEG]] : f32) {{.*}} -> tensor<4x16xf32>
CHECK: 256 steps per output as 4 partials of 64
CHECK: arith.maximumf
CHECK: -> tensor<16xf32>
""")


@pytest.mark.parametrize("case", [FULL, COLUMNS], ids=["full", "columns"])
def test_the_split_graph_gives_the_reference_numbers(case):
    src, binding = case
    st = compile_(src, binding, "gpu", until="graph")
    assert NOTE in st.texts["graph"]
    chain, inputs, want = inputs_and_reference(src, binding)
    assert_matches(jit_compile_module(st.module, chain, binding)(inputs), want, chain)


def test_the_pass_splits_only_for_a_gpu():
    text = texts(*FULL, "gpu", until="graph", disabled_passes=OFF)["graph"]
    for hw in (None, CPU):
        m = parse_module(text)
        assert split_reductions(m, hw) == 0 and print_ir(m) == text
    m = parse_module(text)
    assert split_reductions(m, GPU) == 1
    verify(m, "graph")
    assert NOTE not in texts(*FULL, "cpu", until="graph")["graph"]


def test_split_factor():
    units = GPU.units
    assert split_factor(1, 1 << 16, True, GPU) == 64                # chunks of MIN_BLOCK_CHUNK
    assert split_factor(16, 256, False, GPU) == 256 // MIN_THREAD_CHUNK
    assert split_factor(1, 2 * MIN_BLOCK_CHUNK - 1, True, GPU) == 1  # no two chunks worth a block
    assert split_factor(4 * units, 1 << 20, True, GPU) == 1         # the rows fill a wave already
    assert split_factor(1, 65537, True, GPU) == 1                   # a prime: no equal chunks
    g = split_factor(3, 3 * 7 * 1024, True, GPU)
    assert g > 1 and (3 * 7 * 1024) % g == 0 and (3 * 7 * 1024) // g >= MIN_BLOCK_CHUNK
