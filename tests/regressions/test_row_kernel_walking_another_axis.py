"""Regression (found by the property tests of issue 17's ops on cuda-sim): a kernel whose only
reduction sums a concat's two columns, while its root walks x's N columns, was planned as a row
kernel with the concat's axis as the row; the root's own axis was then neither the row nor an
axis that numbers the rows, split_rows left it whole at block level, and the numbers were wrong.
plan/rows.py now refuses such a kernel as a row kernel (it runs a thread per row)."""
import fusec
from fusec.compiler.pipeline import compile_typed
from fusec.compiler.plan.rows import row_kernel
import os, sys  # noqa: E401
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fusion"))
from helpers import options  # noqa: E402

SRC = """chain r(x: f32[M, N]) -> (f32[M, N], f32[M, N]) {
    t0 = x * x[-1:]
    t1 = (t0 + sum(concat([t0[:, :1], t0[:, -1:] * 2.0], axis=1), axis=1, keepdims=true)) + x
    t2 = (t1[:, ::-1] * 0.5 + t1) + t0
    return t2, t1
}
"""


def test_a_root_walking_another_axis_is_no_row_kernel():
    st = compile_typed(fusec.check(SRC).chain("r"), {"M": 2, "N": 3}, options=options("gpu"), until="plan")
    for g in st.plan.kernels:
        assert g.template != "row" or not any(st.plan.info.op(m).kind == "reduction" for m in g.ops), st.plan.format()
    g = next(g for g in st.plan.kernels if any(st.plan.info.op(m).kind == "reduction" for m in g.ops))
    why = row_kernel(st.plan.info, g.ops, g.root)
    assert isinstance(why, str) and "neither the row nor one that numbers the rows" in why, why


def test_its_numbers_on_cuda_sim():
    prog = fusec.compile(SRC, target="cuda-sim", options={"baseline": False}, cache=False)
    assert all(c.ok for c in prog.r.check(binding={"M": 2, "N": 3}))
