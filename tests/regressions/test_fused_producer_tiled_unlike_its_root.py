"""Regression: `a = exp(x); return a + transpose(a)` fused into one kernel gave wrong numbers on
cpu and cuda-sim (the main job fell back to the unfused build, exit 4). Every op had one shared
`tensor.empty` destination, and fuse_into_containing_op rewires a producer whose destination is
the loop's shared output onto the loop's block argument: the copy of exp read through the
transpose wrote its column tile straight into the output, over rows other iterations had
written. A fused producer that does not tile like its root now gets a destination of its own
(tile_and_fuse.own_destinations); one that does (a matmul under its epilogue) keeps writing into
the output tile, and no buffer is added."""
import pytest

from fusec.cli import main

SRC = """chain f(x: f32[N, N]) -> f32[N, N] {
    a = exp(x)
    return a + transpose(a)
}
"""


@pytest.mark.slow
@pytest.mark.parametrize("target", ["cpu", "cuda-sim"])
def test_a_producer_read_through_a_transpose_fuses_and_checks(tmp_path, capsys, target):
    path = tmp_path / "t.fdsl"
    path.write_text(SRC)
    assert main([str(path), "--target", target, "--bind", "N=12", "--no-cache", "--no-fallback"]) == 0
    out = capsys.readouterr().out
    assert "1 kernel" in out and "-> ok" in out and "fallback" not in out, out
