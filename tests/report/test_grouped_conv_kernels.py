"""conv2d with groups on the GPU, judged by the kernel report (ptxas -v for sm_90, accesses
traced on the simulator): a MobileNet-like depthwise 3x3 (a direct kernel: one dot product of
the 9 taps per output) and a grouped conv of 4 groups (implicit GEMM per group, the groups a
grid dimension). No local memory, no spills, coalesced global accesses, and only each group's
own work (no dense conv with zeros)."""
from __future__ import annotations

import math

import pytest

import fusec
from fusec.compiler.options import CompileOptions
from fusec.compiler.pipeline import compile_typed
from fusec.compiler.plan.hardware import GPUS
from fusec.compiler.report import report_kernels

H200 = GPUS["h200"]
DEPTHWISE = """chain dw(x: f32[2, 64, 32, 32], w: f32[64, 1, 3, 3], b: f32[64]) -> f32[2, 64, 32, 32] {
    return relu(conv2d(x, w, bias=b, padding=1, groups=64))
}"""
GROUPED = """chain grp(x: f32[2, 64, 32, 32], w: f32[64, 16, 3, 3], mean: f32[64], var: f32[64], gamma: f32[64],
             beta: f32[64]) -> f32[2, 64, 32, 32] {
    return relu(batchnorm(conv2d(x, w, padding=1, groups=4), mean, var, gamma, beta, eps=1e-5))
}"""


def _report(src, chain):
    st = compile_typed(fusec.check(src).chain(chain), {}, options=CompileOptions(target="gpu", hardware=H200))
    reports = report_kernels(st.emitted.source, st.emitted.entries[chain], H200, blocks=("middle",))
    convs = [g for g in st.plan.kernels if any(st.plan.info.op(m).name == "linalg.conv_2d_ngchw_gfchw" for m in g.ops)]
    assert len(convs) == 1, st.plan
    (r,) = [r for r in reports if r.group == convs[0].id]
    (c,) = [st.plan.info.op(m) for m in convs[0].ops if st.plan.info.op(m).kind == "contraction"]
    return st, convs[0], c, r


def _clean(what, r):
    assert r.registers is not None, (what, r.unmeasured)
    assert r.stack_frame_bytes == 0 and r.local_bytes == 0, f"{what}: local memory"
    assert r.spill_store_bytes == 0 and r.spill_load_bytes == 0, f"{what}: spills"
    assert r.blocks >= H200.units and r.threads_per_block >= 64, f"{what}: {r.blocks} blocks of {r.threads_per_block}"


@pytest.mark.slow
def test_depthwise_3x3_is_a_coalesced_direct_kernel():
    st, g, c, r = _report(DEPTHWISE, "dw")
    # (n, g, f, oh, ow, c, kh, kw): 64 groups of 1 channel and 1 filter, 9 taps per output
    assert c.loops == (2, 64, 1, 32, 32, 1, 3, 3)
    assert c.points == 2 * 64 * 32 * 32 * 9
    assert g.template != "contraction", "K = 9 and one filter per group: no GEMM tile to fill"
    assert len(st.plan.kernels) == 1, "pad, conv, bias and relu: one kernel"
    _clean("depthwise", r)
    co = r.coalescing
    assert co is not None
    for site in co.sites:
        assert site.efficiency >= 0.9, f"line {site.line} {site.expr}: {site.efficiency:.2f} coalesced"


@pytest.mark.slow
def test_grouped_conv_is_implicit_gemm_per_group():
    st, g, c, r = _report(GROUPED, "grp")
    assert c.loops == (2, 4, 16, 32, 32, 16, 3, 3)
    assert g.template == "contraction"
    assert len(st.plan.kernels) == 2, "the batchnorm's scale and shift, then pad + conv + scale-shift + relu"
    _clean("grouped", r)
    assert r.smem_bytes > 0
    assert 4 in r.grid, f"the groups are no grid dimension: {r.grid}"
    co = r.coalescing
    assert co is not None
    total = sum(site.requests for site in co.sites)
    for site in co.sites:
        if site.requests < 0.02 * total:
            continue
        # the padded window of the input, read shifted by (kh, kw) - padding (as the dense conv's
        # in test_contraction_kernels.py); every other operand whole sectors
        least = 0.6 if site.array == "arg0" and " if " in site.expr else 0.9
        assert site.efficiency >= least, f"line {site.line} {site.expr}: {site.efficiency:.2f} coalesced"
    assert co.efficiency >= 0.8
