"""conv2d with groups (grouped and depthwise) end to end: the planner's view of it (one grid
slice per group on the GPU, each group's own work only), its numbers against the NumPy
reference on cpu and on the simulator (tiny sizes), with its epilogues (bias, batchnorm folded
to a per-channel scale and shift, relu, a hardswish-like map), special values staying in
their group, and the cpu's loop template (no BLAS call, no dense conv with zeros)."""
import numpy as np
import pytest

import fusec
from helpers import stages

DW = """chain dw(x: f32[B, 4, 7, 6], w: f32[4, 1, 3, 3], b: f32[4]) -> f32[B, 4, 7, 6] {
    return relu(conv2d(x, w, bias=b, padding=1, groups=4))
}"""
DWK = """chain dwk(x: f32[B, 3, 9, 8], w: f32[6, 1, 3, 2]) -> f32[B, 6, 5, 4] {
    y = conv2d(x, w, stride=2, dilation=[1, 2], padding=[1, 1], groups=3)
    return y * clamp(y + 3.0, 0.0, 6.0) / 6.0
}"""
GRP = """chain grp(x: f32[B, 8, 7, 6], w: f32[12, 2, 3, 3], mean: f32[12], var: f32[12], g: f32[12], b: f32[12])
              -> f32[B, 12, 7, 6] {
    return relu(batchnorm(conv2d(x, w, padding=1, groups=4), mean, var, g, b, eps=1e-5))
}"""
GRPB = """chain grpb(x: f32[B, 8, 7, 6], w: f32[12, 2, 3, 3], b: f32[12]) -> f32[B, 12, 7, 6] {
    return tanh(conv2d(x, w, bias=b, padding=1, groups=4))
}"""
CASES = [(DW, "dw"), (DWK, "dwk"), (GRP, "grp")]


@pytest.mark.parametrize("target", ["cpu", "cuda-sim"])
@pytest.mark.parametrize("src,name", CASES, ids=[c[1] for c in CASES])
def test_grouped_convs_match_the_reference(src, name, target):
    prog = fusec.compile(src, target=target)
    (c,) = getattr(prog, name).check(binding={"B": 2}, seed=3)
    assert c.ok, c.describe()


def test_each_group_is_its_own_work_and_a_batch_loop_on_the_gpu():
    st = stages(GRP, binding={"B": 2}, plan=None, target="gpu")
    (conv,) = [o for o in st.plan.info.ops if o.name == "linalg.conv_2d_ngchw_gfchw"]
    # (n, g, f, oh, ow, c, kh, kw): 4 groups of 3 filters over 2 channels each, no zeros
    assert conv.loops == (2, 4, 3, 7, 6, 2, 3, 3)
    assert conv.points == 2 * 12 * 7 * 6 * 2 * 9
    assert any("conv_2d_ngchw_gfchw" in d and ("implicit GEMM" in d or "direct convolution" in d)
               for d in st.plan.decisions), st.plan.decisions


def test_grouped_conv_as_implicit_gemm_per_group_on_the_simulator():
    """A hand plan makes the grouped conv a tiled contraction (the groups a grid dimension)
    with a K step of 16 over (c, kh, kw) = 18 and an edge along the rows (7 in tiles of 2)."""
    planned = stages(GRPB, binding={"B": 2}, plan=None, target="gpu").plan
    conv_kernel = [g for g in planned.kernels if any(planned.info.op(m).kind == "contraction" for m in g.ops)][0]
    ops = sorted(m for m in conv_kernel.ops if planned.info.op(m).kind not in ("fill", "pad"))
    plan = {"groups": [{"ops": ops, "block_tiles": [1, 1, 0, 2, 0], "gemm": [16, 1, 2]}]}
    st = stages(GRPB, binding={"B": 2}, plan=plan, target="gpu")
    assert "fusec.block_gemm" in st.texts["gpu"]
    prog = fusec.compile(GRPB, target="cuda-sim", options={"baseline": False, "plans": {"grpb": plan}})
    (c,) = prog.grpb.check(binding={"B": 2}, seed=5)
    assert c.ok, c.describe()


@pytest.mark.parametrize("target", ["cpu", "cuda-sim"])
def test_special_values_stay_in_their_group(target):
    """A NaN in input channel 2 and an inf weight of filter 0 reach only their own group's
    outputs (group 1: filters 3-5; group 0: filters 0-2), whatever the target."""
    src = """chain g(x: f32[1, 8, 5, 5], w: f32[12, 2, 3, 3]) -> f32[1, 12, 5, 5] {
        return conv2d(x, w, padding=1, groups=4)
    }"""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 8, 5, 5)).astype(np.float32)
    w = rng.standard_normal((12, 2, 3, 3)).astype(np.float32)
    x[0, 2, 2, 2] = np.nan
    w[0, 0, 1, 1] = np.inf
    prog = fusec.compile(src, target=target)
    y = np.asarray(prog.g(x, w))
    ref = np.asarray(fusec.compile(src, target="reference").g(x, w))
    nan_at = {f for f in range(12) if np.isnan(y[0, f]).any()}
    assert nan_at == {3, 4, 5} | ({0} if np.isnan(y[0, 0]).any() else set())
    assert np.isinf(y[0, 0]).any() and not np.isinf(y[0, 1:]).any()
    assert not np.isnan(y[0, 6:]).any() and not np.isnan(y[0, 1:3]).any()
    same = np.isnan(y) == np.isnan(ref)
    assert same.all()
    fin = np.isfinite(ref)
    np.testing.assert_allclose(y[fin], ref[fin], rtol=1e-4, atol=1e-4)


def test_cpu_computes_a_grouped_conv_with_its_loop_template():
    """No BLAS call and no dense conv: the emitter's loops over (n, g, f, oh) with an
    accumulator row, the window's taps added along the output row."""
    st = stages(DW, binding={"B": 2}, plan=None, target="cpu")
    src = st.emitted.source
    assert "_sgemm(" not in src
    assert "conv_2d_nchw_fchw" not in st.texts["linalg"] and "conv_2d_ngchw_gfchw" in st.texts["linalg"]
    acc = [line.strip() for line in src.splitlines() if "_acc" in line and "+=" in line]
    assert len(acc) == 1, acc               # the one multiply-add: a tap times a row of the input
