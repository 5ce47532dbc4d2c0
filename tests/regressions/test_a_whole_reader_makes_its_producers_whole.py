"""Regression (found by the property tests of issue 17's ops): `t1 = exp(x); t2 = t1 + x[:, :1];
return t2 * t2[-1:] + t1` gave wrong numbers on cpu when fused (the main job fell back, exit 4).
The last row of t2 is read by every row tile, so t2 is fused whole into each tile, and with it
its producer exp(x), whole too. exp's destination was the loop's shared output, which
fuse_into_containing_op rewires onto the loop's block argument: every tile wrote exp over the
whole result. tile_and_fuse._tiles_like_root judged exp by its reader's map alone (t2 reads it
at its own tile); it now also asks whether that reader's copy tiles like the root.

And: the recompute pass put an elementwise op into a scan's kernel (`t0 = x - x[:, :1];
cumsum(t0) ...`), whose template runs the scan's own body only: the scan read t0 unwritten. The
first fix then asked a reduction reading such a producer for its result's dims against the
root's (an IndexError in stage tiled for `t0 = softmax(x); t0 - t0[:, :1]`): a reader of another
rank now counts as whole unless it moves with every tiled loop."""
import pytest

import fusec

SRC = """chain f(x: f32[M, N]) -> f32[M, N] {
    t1 = exp(x)
    t2 = (t1 - t1[:, :1]) + x
    return (t2 * t2[-1:]) + t1
}

chain h(x: f32[M, N]) -> f32[M, N] {
    t0 = softmax(x, axis=-1)
    return t0 - t0[:, :1]
}

chain g(x: f32[M, N]) -> (f32[M, N], f32) {
    t0 = x - x[:, :1]
    t1 = cumsum(t0, axis=1) * 0.1
    t2 = (t1 * t1[-1:]) + t0
    return t2, sum(t2)
}
"""


@pytest.mark.parametrize("target", ["cpu", "cuda-sim"])
def test_producers_of_a_whole_reader_are_whole_too(target):
    prog = fusec.compile(SRC, target=target, options={"baseline": False}, cache=False)
    assert prog.f.plan({"M": 4, "N": 5})["kernels"] == 1            # the fused kernel that was wrong
    for chain in prog.chains.values():
        assert all(c.ok for c in chain.check(binding={"M": 4, "N": 5})), chain.name
