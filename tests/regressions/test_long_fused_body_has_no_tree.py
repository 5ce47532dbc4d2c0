"""The planner's body trees (plan/analysis.py: body_tree) were built recursively, so the one
generic a 1000-op elementwise chain fuses into (`python -m bench scaling`) overflowed Python's
stack in the plan stage (RecursionError, exit 2). Trees are built in program order now, and a
body longer than BODY_TREE_OPS has none."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fusion"))

from helpers import stages  # noqa: E402

from fusec.compiler.plan.analysis import BODY_TREE_OPS  # noqa: E402


def test_a_very_long_fused_body_plans_and_short_ones_keep_their_tree():
    lines = ["chain long(x: f32[8, 8]) -> f32[8, 8] {", "    v0 = x"]
    lines += [f"    v{i} = tanh(v{i - 1}) * 0.5 + x" for i in range(1, 300)]
    lines += ["    return v299", "}"]
    st = stages("\n".join(lines) + "\n", {}, target="gpu")
    (g,) = st.plan.kernels
    ops = [o for o in st.plan.info.ops if o.is_compute]
    assert any(len(o.body_ops) > BODY_TREE_OPS and o.body_expr == () for o in ops)
    short = stages("chain s(x: f32[4]) -> f32[4] { return exp(x) * 2.0 }", {}).plan.info
    assert any(o.body_expr and o.body_expr[0][0] == "mulf" for o in short.ops)
