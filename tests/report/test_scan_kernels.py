"""The scan template (compiler/emit/scan.py) and the argmax row kernel as a GPU runs them,
compiled to PTX by NVVM and measured by ptxas -v (sm_90) without a GPU: the simulator runs the
shared-memory Hillis-Steele form, a GPU the warp-shuffle form, which only this test compiles.
Each kernel keeps its values in registers (no local memory, no spills); the block scan along
the last axis shuffles (shfl_up_sync: 5 steps per warp, then as many as the warps' totals need,
which it keeps in shared memory); a scan along another axis is a thread per row, with neither.
An f16 scan runs in f32, and a second kernel rounds it. One chain holds every case, so its
PTX is compiled once (in a child process: the tests run the simulator)."""
from __future__ import annotations

import math

import pytest

import fusec
from fusec.compiler.options import CompileOptions
from fusec.compiler.pipeline import compile_typed
from fusec.compiler.plan.hardware import GPUS
from fusec.compiler.report import report_kernels

H200 = GPUS["h200"]
CASES = {  # name -> (its line in SRC, rows)
    "cumsum f32": (3, 64), "cumsum i32": (4, 64), "cumprod f16": (5, 8), "cumsum f32 axis 0": (6, 256),
    "argmax f32": (7, 1024), "argmin i32": (8, 64),
}
SRC = """\
chain c(a: f32[64, 4096], b: i32[64, 1100], h: f16[8, 300], d: f32[512, 256], e: f32[1024, 256], f: i32[64, 1024])
        -> (f32[64, 4096], i32[64, 1100], f16[8, 300], f32[512, 256], i64[1024], i64[64, 1]) {
    s1 = cumsum(a * 2.0, axis=-1)
    s2 = cumsum(b, axis=-1)
    s3 = cumprod(h)
    s4 = cumsum(d, axis=0)
    s5 = argmax(e, axis=-1)
    s6 = argmin(f, keepdims=true)
    return s1, s2, s3, s4, s5, s6
}
"""


@pytest.fixture(scope="module")
def reports():
    """name -> (its scan or row kernel's plan group, that kernel's report), and every report."""
    st = compile_typed(fusec.check(SRC).chain("c"), {}, options=CompileOptions(target="gpu", hardware=H200))
    reps = report_kernels(st.emitted.source, st.emitted.entries["c"], H200, trace=False)
    assert len(reps) == st.plan.kernel_count
    lines = {g["id"] if "id" in g and g["id"] is not None else i: {int(op["loc"].split(":")[1]) for op in g["ops"]}
             for i, g in enumerate(st.plan.summary()["groups"])}
    out = {}
    for name, (line, _) in CASES.items():
        mine = [r for r in reps if line in lines[r.group]
                and (st.plan.kernels[r.group].template in ("scan", "row"))]
        assert len(mine) == 1, (name, [(r.kernel, lines[r.group]) for r in reps])
        out[name] = st.plan.kernels[mine[0].group], mine[0]
    return out, reps


@pytest.mark.slow
def test_every_kernel_compiles_to_ptx_without_local_memory_or_spills(reports):
    _, reps = reports
    for r in reps:
        assert r.registers is not None, (r.kernel, r.unmeasured)
        assert r.stack_frame_bytes == 0 and r.local_bytes == 0, f"{r.kernel}: local memory"
        assert r.spill_store_bytes == 0 and r.spill_load_bytes == 0, f"{r.kernel}: spills"


@pytest.mark.parametrize("name", [n for n in CASES if n.startswith("cum") and "axis 0" not in n])
def test_the_block_scan_shuffles_within_warps(reports, name):
    g, r = reports[0][name]
    assert g.config.threads >= 64 and g.config.threads % 32 == 0 and r.threads_per_block == g.config.threads
    assert r.blocks == CASES[name][1], "a block per row"
    steps = 5 + math.ceil(math.log2(g.config.threads // 32))        # a warp's scan, then the scan of the warps' totals
    assert r.shuffles >= steps, f"{name}: {r.shuffles} shuffles, not the {steps} steps of the warp-shuffle scan"
    assert r.smem_bytes > 0 and r.barriers >= 1


def test_a_scan_along_another_axis_is_a_thread_per_row(reports):
    g, r = reports[0]["cumsum f32 axis 0"]
    assert g.template == "scan" and r.shuffles == 0 and r.smem_bytes == 0
    assert r.blocks * r.threads_per_block >= CASES["cumsum f32 axis 0"][1]


@pytest.mark.parametrize("name", ["argmax f32", "argmin i32"])
def test_the_argmax_row_kernel_combines_across_the_block(reports, name):
    g, r = reports[0][name]
    assert g.config.threads >= 32 and g.config.threads % 32 == 0
    assert r.shuffles >= 5 and r.smem_bytes > 0, f"{name}: no shared-memory and shuffle combine"
