"""Elementwise kernels that write over a dead input (compiler/transforms/in_place.py): the buffer
they save, and every case where writing over the input would be wrong (a chain argument, a value
read later or returned, a value read at another element), run against the reference on cpu and
cuda-sim, op by op (one kernel per op: the build where most kernels read another's result)."""
import numpy as np
import pytest

import fusec
from fusec.runtime import reference
from fusec.runtime.compare import compare

OP_BY_OP = {"disabled_passes": ["linalg-fuse-elementwise-ops"]}

MLP = """chain mlp(x: f32[M, K], w: f32[K, N], b: f32[N]) -> f32[M, N] {
    return gelu(x @ w + b)
}"""

SAFE = {   # each has a kernel that must not (or may only partly) write over its input
    "returned": """chain f(x: f32[M, N]) -> (f32[M, N], f32[M, N]) {
        a = exp(x)
        return a, tanh(a)
    }""",
    "read_later": """chain f(x: f32[M, N]) -> f32[M, N] {
        a = exp(x)
        b = tanh(a)
        return b * a - a
    }""",
    "read_elsewhere": """chain f(x: f32[N, N]) -> f32[N, N] {
        a = exp(x)
        return a + transpose(a)
    }""",
    "softmax": """chain f(x: f32[M, N]) -> f32[M, N] {
        e = exp(x - max(x, axis=1, keepdims=true))
        return e / sum(e, axis=1, keepdims=true)
    }""",
    "argument": """chain f(x: f32[M, N]) -> f32[M, N] {
        return relu(x) * 2.0
    }""",
}


def _memory(src, chain, binding, target, options=None):
    prog = fusec.compile(src, target=target, options=options, cache=False)
    compiled = getattr(prog, chain).compiled(binding)
    assert compiled.unfused is not None                   # made when first asked for, with its figures
    return dict(compiled.memory["unfused"])


@pytest.mark.parametrize("target", ["cpu", "cuda-sim"])
def test_an_epilogue_writes_over_the_product_it_reads(target):
    # unfused: the matmul's result is the only other buffer, and bias + gelu writes over it
    assert _memory(MLP, "mlp", dict(M=16, K=8, N=32), target) == {
        "intermediate_bytes": 0, "planned_bytes": 0, "intermediates": 0, "outputs": 1}


@pytest.mark.parametrize("target", ["cpu", "cuda-sim"])
def test_each_kernel_of_a_chain_op_by_op_writes_over_the_last_ones_result(target):
    # op by op, softmax's e = exp(x - m) is written over by the division once the sum has read it;
    # what is left is one row vector
    m = _memory(SAFE["softmax"], "f", dict(M=16, N=64), target, OP_BY_OP)
    assert m["intermediates"] == 1 and m["planned_bytes"] == m["intermediate_bytes"] == 16 * 4, m
    # a chain of single-use elementwise ops holds one buffer throughout: the output
    src = "chain g(x: f32[M, N]) -> f32[M, N] { return sqrt(exp(tanh(x) * 2.0) + 1.0) }"
    assert _memory(src, "g", dict(M=16, N=64), target, OP_BY_OP)["intermediates"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("target", ["cpu", "cuda-sim"])
@pytest.mark.parametrize("name", sorted(SAFE))
def test_writing_over_inputs_gives_the_reference_numbers(name, target):
    prog = fusec.compile(SAFE[name], target=target, options=OP_BY_OP, cache=False)
    binding = dict(M=5, N=12)
    binding = {s: binding[s] for s in prog.f.typed.symbols}
    inputs = reference.random_inputs(prog.f.typed, binding, seed=4)
    kept = [np.array(a, copy=True) for a in inputs]
    want = reference.run_chain(prog.f.typed, inputs, binding)
    c = prog.f.compiled(binding)
    for build in (c.unfused, c.fused):
        got = build(*inputs)
        got = list(got) if isinstance(got, (tuple, list)) else [got]
        for g, w, t in zip(got, want, prog.f.typed.output_types):
            assert compare(np.asarray(g), w, t.dtype.name).ok, (name, target)
        for a, k in zip(inputs, kept):                   # the caller's arrays are never written
            np.testing.assert_array_equal(np.asarray(a), k)
