"""The GPU pooling kernels at ResNet-like sizes, judged by the kernel report (ptxas -v for sm_90,
coalescing traced on the simulator), not by their source: no local memory and no spills (a
thread keeps its window's running max or sum in a register), and consecutive threads on
consecutive output columns: every store a warp writing consecutive elements (as few sectors as
the bytes need, one more where a warp's request crosses a row of fewer than 32 columns), every
load of the input within the stride's factor of that where rows are 16 columns or more (a
stride-2 window reads every other column; the columns between are the next kw's, in L1;
narrower rows put 3 or 4 input rows in one request, whatever the kernel)."""
from __future__ import annotations

import pytest

import fusec
from fusec.compiler.options import CompileOptions
from fusec.compiler.pipeline import compile_typed
from fusec.compiler.plan.hardware import GPUS
from fusec.compiler.report import report_kernels

H200 = GPUS["h200"]
CASES = {  # chain -> (source, stride along W)
    # ResNet's stem pool, with the relu of the block after it as its epilogue
    "resnet_max_pool": ("chain resnet_max_pool(x: f32[2, 64, 32, 32]) -> f32[2, 64, 16, 16] {\n"
                        "    return relu(max_pool2d(x, 3, stride=2, padding=1))\n}\n", 2),
    "max_pool_nan": ("chain max_pool_nan(x: f32[4, 32, 28, 28]) -> f32[4, 32, 14, 14] {\n"
                     "    return max_pool2d(x * 2.0, 2)\n}\n", 2),
    # divisors from the position: stride 1, count_include_pad=false
    "avg_pool_exclude": ("chain avg_pool_exclude(x: f32[2, 64, 32, 32]) -> f32[2, 64, 32, 32] {\n"
                         "    return avg_pool2d(x, 3, stride=1, padding=1, count_include_pad=false)\n}\n", 1),
    "adaptive_pool": ("chain adaptive_pool(x: f32[2, 64, 14, 14]) -> f32[2, 64, 7, 7] {\n"
                      "    return adaptive_avg_pool2d(x, 7)\n}\n", 2),
}


def _reports(name):
    src, _ = CASES[name]
    st = compile_typed(fusec.check(src).chain(name), {}, options=CompileOptions(target="gpu", hardware=H200))
    return st, report_kernels(st.emitted.source, st.emitted.entries[name], H200, blocks=("first", "middle"))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_pooling_kernels_keep_no_local_memory_and_coalesce(name):
    st, reports = _reports(name)
    assert st.plan.kernel_count == 1, st.plan.format()          # pad, pool and epilogue in one kernel
    (r,) = [r for r in reports if r.kind == "launch"]
    assert r.registers is not None, r.unmeasured
    assert r.stack_frame_bytes == 0 and r.local_bytes == 0, f"{name}: local memory {r}"
    assert r.spill_store_bytes == 0 and r.spill_load_bytes == 0, f"{name}: spills {r}"
    c = r.coalescing
    assert c is not None and c.sites, r.unmeasured
    stride = CASES[name][1]
    stores = [s for s in c.sites if s.kind == "store"]
    loads = [s for s in c.sites if s.kind == "load"]
    assert stores and loads
    for s in stores:    # consecutive threads on consecutive output columns
        assert s.expr.endswith("thread_id_x]"), f"{name}: store {s}"
        # a warp's request: as many sectors as its bytes need, one more where it crosses a row
        assert s.sectors_per_request <= s.ideal_sectors_per_request + 1, f"{name}: store {s}"
    if r.grid is not None and r.block[0] >= 16:     # rows of 16 columns or more: a warp reads one or two rows
        for s in loads:
            assert s.sectors_per_request <= stride * s.ideal_sectors_per_request + 1, f"{name}: load {s}"


def test_the_resnet_pool_stores_whole_warps_of_consecutive_columns():
    """Rows of 16 outputs: a warp stores two whole rows, 4 sectors of 32 bytes, every lane on."""
    st, reports = _reports("resnet_max_pool")
    (r,) = [r for r in reports if r.kind == "launch"]
    assert r.local_bytes == 0 and r.stack_frame_bytes == 0
    (store,) = [s for s in r.coalescing.sites if s.kind == "store"]
    assert store.efficiency == 1.0 and store.lanes_per_request == 32, store
