"""Issue 38's ops for imported models on the compiled targets, cpu and cuda-sim, against the
reference (runtime/compare.py): the `inf` / `nan` literals, the logical ops and any / all,
relu6 / hardsigmoid / hardswish, and the creation ops full, full_like and arange (static and
symbolic extents, a symbol bound at run time too); and that each fuses into its neighbours as
an elementwise op does (the creation ops leave no kernel and no buffer of their own)."""
from __future__ import annotations

import numpy as np
import pytest

import fusec

TARGETS = ("cpu", "cuda-sim")

# one chain, many outputs: x with NaN, +-inf, +-0 and the hard activations' corners (-3, 3, 6)
SRC = """\
chain ops(x: f32[R, 8], m: bool[R, 8], ids: i64[R]) -> (f32[R, 8], f32[R, 8], bool[R, 8], f32[R, 8], i64[R],
                                                       f32[R, 8], f16[R, 8], bool) {
    act = hardswish(x) + hardsigmoid(x) * 2.0 - relu6(x * 1.5)
    masked = where(x > 2.0, -inf, where(x != x, inf, x))
    logic = logical_xor(logical_or(logical_and(x > 0.0, m), logical_not(m)), x < -1.0)
    causal = reshape(arange(R), [R, 1]) >= arange(8)
    scores = where(causal, x, full([R, 8], -inf))
    c = clamp(x, 0, 6) + masked * 0.5
    p = ids + arange(R) * 2
    f = full_like(x, nan) + cast(arange(2, 18, 2), f32)
    h = hardswish(cast(x, f16))
    none = any(logical_and(m, full_like(m, false)))
    return act, c, logic, scores, p, f, h, none
}

# apart: a row reduction beside two elementwise outputs trips a GPU tiling bug that main has too
# ("operand does not dominate this use" in stage tiled, with exp, where and max alone)
chain red(x: f32[R, 8], m: bool[R, 8]) -> (bool[R], bool[R, 1]) {
    return any(x > 1.0, axis=1), all(logical_or(m, x == x), axis=-1, keepdims=true)
}
"""


def _inputs(rows: int):
    rng = np.random.default_rng(38)
    x = (rng.normal(size=(rows, 8)) * 4).astype(np.float32)
    x.reshape(-1)[:12] = [np.nan, np.inf, -np.inf, 0.0, -0.0, -3.0, 3.0, 6.0, -4.0, 7.5, 1e-40, -1e-40]
    m = rng.random((rows, 8)) > 0.4
    m[1] = True
    return [x, m, np.arange(rows, dtype=np.int64) * 7]


@pytest.mark.parametrize("target", TARGETS)
def test_the_new_ops_match_the_reference(target, fast_simulator):
    prog = fusec.compile(SRC, target=target)
    for rows in (3, 5):
        inputs = _inputs(rows)
        for chain, args in ((prog.ops, inputs), (prog.red, inputs[:2])):
            bad = [f"output {i}: {c.reason or c}" for i, c in enumerate(chain.check(args)) if not c.ok]
            assert not bad, "\n".join(bad)


@pytest.mark.slow
def test_a_symbolic_extent_bound_at_run_time():
    prog = fusec.compile(SRC, target="cpu", options={"dynamic": ("R",)})
    for rows in (2, 7):
        inputs = _inputs(rows)
        assert all(c.ok for c in prog.ops.check(inputs)) and all(c.ok for c in prog.red.check(inputs[:2]))


def _kernels(src: str, target: str = "cpu", **binding) -> list[dict]:
    return fusec.compile(src, target=target).chains["c"].plan(binding)["groups"]


@pytest.mark.parametrize("target", ["cpu", "cuda-sim"])
def test_the_elementwise_ones_fuse_with_their_neighbours_as_relu_does(target):
    one = "chain c(x: f32[N, 64], m: bool[N, 64]) -> (f32[N, 64], bool[N, 64]) {\n    return {body}\n}\n"
    for body in ("hardswish(exp(x) * 2.0) + relu6(x) - hardsigmoid(x)",
                 "where(logical_and(m, logical_not(x > 0.0)), -inf, relu6(x)), logical_xor(m, x != x)"):
        src = one.replace("{body}", body if "," in body else body + ", m")
        assert len(_kernels(src, target, N=16)) == 1, body


def test_any_all_fuse_as_a_reduction_with_its_prologue_and_epilogue():
    src = ("chain c(x: f32[N, 64]) -> f32[N, 64] {\n"
           "    return where(any(logical_not(x == x), axis=1, keepdims=true), 0.0, x) + cast(all(x > 0.0, axis=1, "
           "keepdims=true), f32)\n}\n")
    groups = _kernels(src, "cuda-sim", N=16)
    assert len(groups) == 1


def test_creation_ops_leave_no_kernel_and_no_buffer():
    src = ("chain c(x: f32[S, S]) -> f32[S, S] {\n"
           "    mask = reshape(arange(S), [S, 1]) >= arange(S)\n"
           "    return softmax(where(mask, x, full_like(x, -inf)) * full([S, S], 0.125), axis=-1)\n}\n")
    for target in ("cpu", "cuda-sim"):
        groups = _kernels(src, target, S=32)
        assert len(groups) == 1, groups
    # the mlir: the full is an arith.constant in the consumer's body, the arange a linalg.index
    linalg = fusec.compile(src, target="cpu").chains["c"].stages({"S": 32})["linalg"]
    assert "linalg.index 0" in linalg and "0xFF800000" in linalg and "tensor<32x32xf32>" in linalg
