"""take_along_axis, gather_nd and index as a GPU runs them, compiled to PTX by NVVM and measured by
ptxas -v (sm_90) without a GPU: each is one kernel with its elementwise producer and consumer
(the table's producer computed at the read, inline-indexed-reads), keeps its values in registers
(no local memory, no spills), and take_along_axis along the last axis writes its result
coalesced (the index is read at the output's own position)."""
from __future__ import annotations

import pytest

import fusec
from fusec.compiler.options import CompileOptions
from fusec.compiler.pipeline import compile_typed
from fusec.compiler.plan.hardware import GPUS
from fusec.compiler.report import report_kernels

H200 = GPUS["h200"]
SRC = """\
chain c(x: f32[8, 512, 1024], i: i64[8, 512, 64], t: f32[64, 64, 256], j: i32[4096, 2], u: f16[16, 128, 64],
        k: i64[16, 32, 1], r: i64[2048], q: i32[2048])
        -> (f32[8, 512, 64], f32[4096, 256], f16[16, 32, 64], f32[2048, 64]) {
    picked = index(t, [r, q], axes=[0, 2]) * 3.0
    return take_along_axis(x * 2.0, i, axis=-1) + 1.0, gather_nd(exp(t), j), gather_nd(-u, k, batch_dims=1), picked
}
"""


@pytest.fixture(scope="module")
def compiled():
    st = compile_typed(fusec.check(SRC).chain("c"), {}, options=CompileOptions(target="gpu", hardware=H200))
    return st, report_kernels(st.emitted.source, st.emitted.entries["c"], H200, trace=True)


@pytest.mark.slow
def test_each_lookup_is_one_kernel_with_its_producer_and_consumer(compiled):
    st, reps = compiled
    assert st.plan.kernel_count == 4 and len(reps) == 4, st.plan.format()
    assert sum(1 for o in st.plan.info.ops if o.is_compute) == 4, st.plan.format()


@pytest.mark.slow
def test_every_kernel_compiles_without_local_memory_or_spills(compiled):
    for r in compiled[1]:
        assert r.registers is not None, (r.kernel, r.unmeasured)
        assert r.stack_frame_bytes == 0 and r.local_bytes == 0, f"{r.kernel}: local memory"
        assert r.spill_store_bytes == 0 and r.spill_load_bytes == 0, f"{r.kernel}: spills"


@pytest.mark.slow
def test_take_along_the_last_axis_stores_coalesced(compiled):
    st, reps = compiled
    (r,) = [r for r in reps if any(s.array == "arg1" for s in r.coalescing.sites)]     # reads i
    stores = [s for s in r.coalescing.sites if s.kind == "store"]
    assert stores and all(s.efficiency >= 0.9 for s in stores), stores
