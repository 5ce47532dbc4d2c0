"""The GPU reduction kernels at benchmark sizes and others, judged by the kernel report (ptxas -v
for sm_90, occupancy on the H200, coalescing traced on the simulator), not by their source:
no local memory, no spills, a block's partials combined through shared memory and warp
shuffles, at least one full wave (the issue's measure: at least 132 blocks of at least 64
threads on the H200, for a kernel with enough work), and coalesced global accesses (issue 10)."""
from __future__ import annotations

import os
import textwrap

import pytest

import fusec
from fusec.compiler.options import CompileOptions
from fusec.compiler.pipeline import compile_typed
from fusec.compiler.plan.hardware import GPUS
from fusec.compiler.report import report_kernels

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
H200 = GPUS["h200"]
OWN = {
    "row_sum": "chain row_sum(x: f32[M, N]) -> f32[M] { return sum(x, axis=1) }",
    "row_max_exp": "chain row_max_exp(x: f32[M, N]) -> f32[M] { return max(exp(x) * 0.5, axis=-1) }",
    "total": "chain total(x: f32[N]) -> f32 { return sum(x * x) }",
    "mean_all": "chain mean_all(x: f32[M, N]) -> f32 { return mean(x) }",
    "col_sum": "chain col_sum(x: f32[M, N]) -> f32[N] { return sum(x, axis=0) }",
    # a vocabulary-wide row: 125 elements per thread, past the loop unroller (rows.ROW_UNROLL_LIMIT)
    "vocab_argmax": "chain vocab_argmax(x: f32[M, N]) -> i64[M] { return argmax(x, axis=-1) }",
}
CASES = [  # (file or source, chain, binding): the bench sizes of bench/workloads.py, then others
    ("bench/fdsl/softmax.fdsl", "softmax", {"M": 8192, "N": 1024}),
    ("bench/fdsl/layernorm.fdsl", "layernorm", {"M": 8192, "N": 1024}),
    ("bench/fdsl/attention.fdsl", "attention", {"B": 8, "S": 1024, "D": 64}),
    ("examples/log_softmax.fdsl", "log_softmax_rows", {"B": 4096, "C": 512}),
    ("examples/rmsnorm.fdsl", "rmsnorm_residual", {"T": 8192}),
    ("examples/reductions.fdsl", "logsumexp", {"R": 16384}),
    ("examples/softmax.fdsl", "softmax_rows", {"M": 2048, "N": 4096}),
    (OWN["row_sum"], "row_sum", {"M": 4096, "N": 2048}),
    (OWN["row_max_exp"], "row_max_exp", {"M": 1024, "N": 1024}),
    (OWN["total"], "total", {"N": 1 << 22}),
    (OWN["mean_all"], "mean_all", {"M": 2048, "N": 2048}),
    (OWN["col_sum"], "col_sum", {"M": 8192, "N": 256}),
    (OWN["vocab_argmax"], "vocab_argmax", {"M": 2048, "N": 32000}),
]


def _compile(src, chain, binding):
    path = os.path.join(ROOT, src) if src.endswith(".fdsl") else textwrap.dedent(src)
    c = fusec.check(path).chain(chain)
    return compile_typed(c, binding, options=CompileOptions(target="gpu", hardware=H200))


def _enough_work(plan, group: int) -> bool:
    """A kernel with at least 8 elements per thread of a full wave of 64-thread blocks."""
    cost = plan.costs[group]
    return (cost.bytes_read / 4) >= H200.units * 64 * 8


@pytest.mark.slow
@pytest.mark.parametrize("src,chain,binding", CASES, ids=[c[1] for c in CASES])
def test_reduction_kernels_at_size(src, chain, binding):
    st = _compile(src, chain, binding)
    entry = st.emitted.entries[chain]
    reports = report_kernels(st.emitted.source, entry, H200, blocks=("middle",))
    reducing = {g.id for g in st.plan.kernels if any(st.plan.info.op(m).kind == "reduction" for m in g.ops)}
    assert reducing, "the chain has a reduction kernel"
    for r in reports:
        if r.group not in reducing:
            continue
        g = st.plan.kernels[r.group]
        what = f"{chain} {r.kernel} (kernel {g.id}, {g.config})"
        assert r.registers is not None, (what, r.unmeasured)
        assert r.stack_frame_bytes == 0 and r.local_bytes == 0, f"{what}: local memory"
        assert r.spill_store_bytes == 0 and r.spill_load_bytes == 0, f"{what}: spills"
        if g.template == "row" and g.config.threads % 32 == 0:      # a block combines its threads' partials
            assert r.smem_bytes > 0 and r.shuffles >= 5, f"{what}: no shared-memory and shuffle combine"
        if _enough_work(st.plan, r.group):
            assert r.blocks >= H200.units and r.threads_per_block >= 64, \
                f"{what}: {r.blocks} blocks of {r.threads_per_block} threads ({r.waves:.2f} waves)"
        assert r.coalescing is not None and r.coalescing.efficiency >= 0.9, \
            f"{what}: {r.coalescing.efficiency if r.coalescing else None} coalesced"


@pytest.mark.parametrize("src,chain,binding", [CASES[i] for i in (0, 1, 3, 4)], ids=[CASES[i][1] for i in (0, 1, 3, 4)])
def test_normalisations_are_one_row_kernel(src, chain, binding):
    st = _compile(src, chain, binding)
    (g,) = st.plan.kernels
    assert g.config.threads >= 32 and g.config.threads % 32 == 0


def test_a_whole_tensor_reduction_is_two_stage_and_fills_the_device():
    st = _compile(OWN["total"], "total", {"N": 1 << 22})
    assert st.plan.kernel_count == 2
    partial, final = st.plan.kernels
    assert any("split-reductions" in d for d in st.plan.decisions)
    assert st.plan.costs[0].blocks >= H200.units and final.template == "row"


def test_a_vocabulary_wide_softmax_keeps_no_row_in_local_memory():
    # 125 elements per thread: LLVM no longer unrolls the phases' loops, and a thread's whole
    # chunk of exp(x - m) was a local array (1000 bytes of stack); each phase now walks its
    # chunks one element at a time with the copies it reads fused in (tile_and_fuse.row_script)
    st = _compile("chain s(x: f32[M, N]) -> f32[M, N] { return softmax(x, axis=-1) }", "s", {"M": 2048, "N": 32000})
    (g,) = st.plan.kernels
    assert g.config.threads == 256, st.plan.format()
    (r,) = report_kernels(st.emitted.source, st.emitted.entries["s"], H200, trace=False)
    assert r.stack_frame_bytes == 0 and r.local_bytes == 0 and r.registers <= 40, r
