"""inline-indexed-reads (compiler/transforms/indexed_reads.py): an elementwise value that a concat,
gather or reversed slice reads at a computed index (tensor.extract in the reader's body) is
computed there, from its own inputs, so the reader reads only what the producers read."""
import re

from fusec.compiler.mlir import parse_module, print_ir, verify
from fusec.compiler.transforms.indexed_reads import inline_indexed_reads

from .stages import compile_, count, graph_jit_matches, texts

OFF = frozenset({"inline-indexed-reads"})
NESTED = """chain f(a: f32[M, 6], b: f32[M, 2], c: f32[M, 8]) -> f32[M, 16] {
    return concat([concat([exp(a), b * 2.0], axis=1), -c], axis=1)
}"""
B = dict(M=4)


def _extracted(text: str) -> set[str]:
    return set(re.findall(r"tensor\.extract (%\w+)\[", text))


def test_a_nested_concat_of_elementwise_values_is_one_op_reading_the_arguments():
    on = compile_(NESTED, B, until="plan")
    graph = on.texts["graph"]
    assert count("linalg.generic", graph) == 1, graph
    assert _extracted(graph) == {"%arg0", "%arg1", "%arg2"}, graph
    assert "math.exp" in graph and "arith.negf" in graph and "arith.mulf" in graph
    assert on.plan.kernel_count == 1, on.texts["plan"]


def test_disabled_each_producer_is_a_kernel_the_concat_reads_from_memory():
    off = compile_(NESTED, B, until="plan", disabled_passes=OFF)
    assert count("linalg.generic", off.texts["graph"]) == 5
    assert not _extracted(off.texts["graph"]) & {"%arg0", "%arg1", "%arg2"}
    assert off.plan.kernel_count == 5, off.texts["plan"]


def test_inlined_or_not_the_numbers_are_the_references():
    for disabled in ((), OFF):
        graph_jit_matches(NESTED, B, disabled)


def test_the_pass_inlines_until_no_read_of_an_elementwise_value_is_left():
    m = parse_module(texts(NESTED, B, until="graph", disabled_passes=OFF)["graph"])
    assert inline_indexed_reads(m) == 4     # the inner concat's two reads, the outer's two
    verify(m, "graph")
    outer = print_ir(m).rsplit("tensor.empty() : tensor<4x16xf32>", 1)[1]
    assert _extracted(outer) == {"%arg0", "%arg1", "%arg2"}, outer
    assert inline_indexed_reads(m) == 0


def test_a_reduction_read_at_computed_indices_is_not_inlined():
    src = """chain f(x: f32[M, 8]) -> f32[M, 8] {
        s = sum(x, axis=1, keepdims=true)
        return concat([x[:, :7], s], axis=1) * x
    }"""

    def reduction(text: str) -> str:
        (name,) = [l.split(" = ")[0].strip() for l in text.splitlines()
                   if "linalg.generic" in l and '"reduction"' in l]
        return name

    graph = texts(src, B, until="graph")["graph"]
    assert reduction(graph) in _extracted(graph), graph      # still read from the sum's result
    m = parse_module(texts(src, B, until="graph", disabled_passes=OFF)["graph"])
    assert inline_indexed_reads(m) == 1                      # the slice x[:, :7]: a copy, elementwise
    text = print_ir(m)
    assert _extracted(text) >= {reduction(text), "%arg0"}, text
