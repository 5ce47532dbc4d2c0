"""Regression, both found by the property tests drawing new chains (FUSEC_EXPLORE=1), on
cuda-sim:
- `t0 = tanh(x); t1 = t0 - max(t0, axis=1, keepdims=true); return t1, sum(t1), t0`: the row
  kernel that also writes t0 had two block-level copies of tanh (fused once per use, one writing
  the loop's shared output for the result, so CSE could not merge them); split_rows rewrote one
  and the root's phase read the other, and the emitter refused the buffer ("cannot tell whether
  this block-level buffer is per thread or per block"). The first copy now stands for all.
- With transposes before it, the grower fused a producer into a kernel that writes an
  elementwise result of the chain although the grown kernel had no row-kernel tiling left, the
  only kind that stores such a result on the gpu: "kernel 0 writes an elementwise second output
  but has no row-kernel tiling" (an internal error). The grower now refuses, and says why."""
import pytest

import fusec
from fusec.runtime import reference
from fusec.runtime.compare import compare

TWO_COPIES = """chain r(x: f32[M, N]) -> (f32[M, N], f32, f32[M, N]) {
    t0 = tanh(x)
    t1 = t0 - max(t0, axis=1, keepdims=true)
    return t1, sum(t1), t0
}"""
NO_ROW_KERNEL = """chain r(x: f32[M, N]) -> (f32[M, N], f32, f32[M, N]) {
    t0 = transpose(tanh(transpose(x)) + 1.0)
    t1 = tanh(t0)
    t2 = t1 - max(t1, axis=1, keepdims=true)
    return t2, sum(t2), t1
}"""


@pytest.mark.parametrize("src,binding", [(TWO_COPIES, dict(M=3, N=5)), (NO_ROW_KERNEL, dict(M=2, N=2))],
                         ids=["two_copies", "no_row_kernel"])
def test_row_kernels_that_write_a_result_of_the_chain(src, binding):
    prog = fusec.compile(src, target="cuda-sim", cache=False)
    c = prog.r.compiled(binding)
    inputs = reference.random_inputs(prog.r.typed, binding, seed=1)
    want = reference.run_chain(prog.r.typed, inputs, binding)
    for got, w, t in zip(c.fused(*inputs), want, prog.r.typed.output_types):
        assert compare(got, w, t.dtype.name).ok
    if src is NO_ROW_KERNEL:
        assert any("only a row kernel stores, and it would have no row-kernel tiling" in d
                   for d in c.plan["decisions"]), c.plan["decisions"]
