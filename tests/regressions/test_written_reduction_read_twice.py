"""Regression: a reduction that a kernel also writes for a later kernel, and that two members of
the kernel read, was computed twice by tile-and-fuse (a copy per reader) with the fill of its
init fused into one copy only: the copy that wrote the result accumulated into an uninitialised
buffer. `log_softmax(x, axis=0) + x + x` masked by an `any` over the same axis and read by a
gather gave inf and wrong values on cuda-sim (the max of log_softmax, read by its sum and by the
`any`, was the kernel's second output). The planner now leaves such a reduction to a kernel of
its own (compiler/plan/horizontal.py: written_reduction_read_twice). Found by the torch oracle
(tests/differential, seeds 1019 and 1224: a layernorm over axis 0 whose statistics a
cumprod's kernel reads again; and 20112: the copies come from an elementwise reader fused
once per its own readers, `t0 = x - max(x); t0 + argmax(t0)`, which read an uninitialised
max on integers). A reader that is elementwise counts once per its own readers in the kernel
(grower.read_paths)."""
import numpy as np
import pytest

import fusec
from fusec.runtime import reference
from fusec.runtime.compare import compare

SRC = """\
chain r(p1: f32[2, N], p3: i32[N]) -> f32[2, N] {
    t1 = log_softmax(p1, axis=0) + p1 + p1
    t2 = t1 * cast(any(t1 > 1.0, axis=0, keepdims=true), f32)
    return gather(t2, p3, axis=1)
}
"""

NORM = """\
chain r(p1: f32[4, N], p2: f32[N], p3: f32[4, N]) -> (f32[4, N], f32[4, N]) {
    t0 = layernorm(p1, p2, p3, axis=-2)
    t1 = (t0 + sum(concat([t0[..., :1], t0[..., -1:] * 0.5], axis=-1), axis=-1, keepdims=true)) + p1
    t2 = (cumprod(1.0 + 0.1 * tanh(t1), axis=1)) + t0
    return t2, t1
}
"""


@pytest.mark.parametrize("target", ["cuda-sim", "cpu"])
def test_written_reduction_read_twice_is_initialised(target):
    prog = fusec.compile(SRC, target=target, options={"baseline": False})
    typed = prog.r.typed
    cases = [[np.array([[-0.3, -1.0, -0.8], [-0.2, -0.03, -1.2]], np.float32), np.array([0, 2, 1], np.int32)]]
    cases += [reference.random_inputs(typed, {"N": 3}, seed) for seed in range(6)]
    for xs in cases:
        want = reference.run_chain(typed, xs, {"N": 3})[0]
        got = prog.r(*xs)
        c = compare(got, want, "f32")
        assert c.ok, f"{c.describe()}\n{xs}"
    plan = prog.r.compiled({"N": 3}).texts["plan"]
    assert "only one of the copies tile-and-fuse makes" in plan, plan


def test_layernorm_statistics_read_again_on_cuda_sim():
    prog = fusec.compile(NORM, target="cuda-sim", options={"baseline": False})
    typed = prog.r.typed
    for seed in range(4):
        xs = reference.random_inputs(typed, {"N": 4}, seed)
        want = reference.run_chain(typed, xs, {"N": 4})
        for g, w in zip(prog.r(*xs), want):
            c = compare(g, w, "f32")
            assert c.ok, f"{c.describe()}\n{xs}"


INT = """\
chain r(p1: i32[3, N]) -> (i32[3, N], i32[3, N]) {
    t0 = p1 - max(p1, axis=-1, keepdims=true)
    t1 = t0 + cast(argmax(t0, axis=1, keepdims=true), i32)
    return t1 - t1[:, :1], t1
}
"""


def test_a_max_read_through_an_elementwise_op_twice_on_cuda_sim():
    prog = fusec.compile(INT, target="cuda-sim", options={"baseline": False})
    x = np.array([[8, -1], [3, -7], [-6, -5]], np.int32)
    a, b = prog.r(x)
    assert b.tolist() == [[0, -9], [0, -10], [0, 1]]
    assert a.tolist() == [[0, -9], [0, -10], [0, 1]]
