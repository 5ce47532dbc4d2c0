"""Regression (found by the property tests of issue 17's ops on cuda-sim): `t1 = cumsum(x *
x[-1:]) * 0.1; t2 = t1 * t1[-1:] + x; t2 + argmax(t2)` was an internal error in stage emit on the
gpu ("cannot tell whether this block-level buffer is per thread or per block"). Two causes:
- the scan of a product of two inputs that vary along its j loop was classified a contraction
  (plan/analysis.py) and planned as one; a scan is a scan;
- the row kernel read `t1[-1:]`, the last row of a value it computes: each block computed that
  row whole in buffers the emitter could not place. plan/rows.py refuses such a row kernel."""
import os
import sys

import fusec
from fusec.compiler.pipeline import compile_typed

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fusion"))
from helpers import options  # noqa: E402

SRC = """chain r(x: f32[M, N]) -> f32[M, N] {
    t0 = x * x[-1:]
    t1 = cumsum(t0, axis=1) * 0.1
    t2 = (t1 * t1[-1:]) + x
    return t2 + cast(argmax(t2, axis=1, keepdims=true), f32)
}
"""


def test_the_scan_is_a_scan_and_no_row_kernel_reads_another_row():
    st = compile_typed(fusec.check(SRC).chain("r"), {"M": 5, "N": 2}, options=options("gpu"), until="plan")
    scan = next(o for o in st.plan.info.ops if o.scan)
    assert scan.kind == "reduction" and st.plan.group_of(scan.id).template == "scan", st.plan.format()
    assert not any(g.template == "row" for g in st.plan.kernels), st.plan.format()


def test_its_numbers_on_cuda_sim():
    prog = fusec.compile(SRC, target="cuda-sim", options={"baseline": False}, cache=False)
    assert all(c.ok for c in prog.r.check(binding={"M": 5, "N": 2}))
