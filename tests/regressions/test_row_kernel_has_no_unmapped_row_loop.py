"""A row kernel whose tileable loops were more than two left the outermost one untiled: every
block held all its rows (48 x ... for examples/attention.fdsl::multihead at S=48, the second
stage of a split-K projection), and the emitter's block combine refused the launch (exit 2:
"a fusec.block_reduce over 2 partials x 48 rows in a block of (2, 1, 1)"). Up to three loops
are mapped now (one block each along the outer two), and a fourth tileable loop rules a row
kernel out."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fusion"))

from helpers import stages  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_multihead_at_48_compiles_and_its_row_kernels_map_every_tileable_loop():
    src = open(os.path.join(ROOT, "examples", "attention.fdsl")).read()
    st = stages(src, {"S": 48}, chain="multihead")
    assert "def run_multihead(" in st.emitted.source
    for g in st.plan.kernels:
        if g.template == "row":
            assert all(g.block_tiles[l] for l in g.mapped)
