"""in-place (compiler/transforms/in_place.py): an elementwise kernel root writes over an input of
its type, read at the element it writes, made by another kernel and read by nothing after it;
never over a chain argument, a value read later or returned. The memory each saves and the
numbers on cpu and cuda-sim of every unsafe case are in tests/runtime/test_in_place.py; here,
the rewrite itself: which roots it picks and the destination-passing form it leaves."""
import re

import pytest

from fusec.compiler.mlir import ir
from fusec.compiler.transforms.in_place import write_in_place

from .stages import compile_, count, run_matches

# one kernel per op: the build where most kernels read another's result
OP_BY_OP = dict(fuse=False, disabled_passes=frozenset({"linalg-fuse-elementwise-ops"}))
CHAIN = "chain f(x: f32[M, N]) -> f32[M, N] { return exp(tanh(x) * 2.0) }"
READ_LATER = """chain f(x: f32[M, N]) -> f32[M, N] {
    a = exp(x)
    b = tanh(a)
    return b * a - a
}"""
RETURNED = """chain f(x: f32[M, N]) -> (f32[M, N], f32[M, N]) {
    a = exp(x)
    return a, tanh(a)
}"""
MLP = "chain f(x: f32[M, K], w: f32[K, N], b: f32[N]) -> f32[M, N] { return gelu(x @ w + b) }"
SOFTMAX = "chain f(x: f32[M, N]) -> f32[M, N] { return softmax(x) }"
B = dict(M=4, N=8, K=4)


def _generic(tiled: str, op_id: int) -> str:
    (line,) = [l for l in tiled.splitlines() if "linalg.generic" in l and f"fusec.id = {op_id} :" in l]
    return line


def test_an_op_by_op_chain_writes_one_buffer_throughout():
    tiled = compile_(CHAIN, B, until="tiled", **OP_BY_OP).texts["tiled"]
    assert count(r"memref\.alloc\(", tiled) == 1, tiled        # the output, nothing else
    assert "ins(%subview" in _generic(tiled, 0)                 # tanh reads the argument: never over it
    for op in (1, 2):                                            # * 2 and exp: over the last one's result
        line = _generic(tiled, op)
        assert "ins(" not in line and "outs(%subview" in line, line
    body = tiled.split(_generic(tiled, 2), 1)[1]
    assert re.search(r"math\.exp %out\b", body), body           # the input read through the output


@pytest.mark.parametrize("target", ["cpu", "gpu"])
@pytest.mark.parametrize("src,written", [
    (CHAIN, [1, 2]),
    (READ_LATER, [2, 3]),     # tanh (%1) may not write over a: b * a and - a read it after
    (RETURNED, []),           # a is returned
    (MLP, [2, 3]),            # + b over the product, gelu over the sum
], ids=["chain", "read-later", "returned", "mlp"])
def test_the_roots_that_write_over_an_input(src, written, target):
    st = compile_(src, B, target, until="plan", **OP_BY_OP)
    with st.module.context, ir.Location.unknown():
        assert write_in_place(st.module.body.operations[0], st.plan) == written


@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_a_fused_kernel_reads_its_own_values_and_is_left_alone(target):
    st = compile_(SOFTMAX, B, target, until="plan")
    assert st.plan.kernel_count == 1
    with st.module.context, ir.Location.unknown():
        assert write_in_place(st.module.body.operations[0], st.plan) == []


def test_written_over_the_numbers_are_the_references():
    run_matches(READ_LATER, dict(M=5, N=12), "cuda-sim", **OP_BY_OP)
