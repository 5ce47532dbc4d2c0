"""Shape-polymorphic builds on the GPU targets (--dynamic on cuda / cuda-sim): a kernel's grid is
the run-time trip count of its block loop, computed by the host before the launch; a block's
tile at the edge of a run-time extent is clamped, and its threads past the clamp do nothing.
Run here under the simulator, at a few rows (the simulator runs about 12k threads/s)."""
import os

import numpy as np
import pytest

import fusec
from fusec.cli import main
from test_dynamic import checked, write     # the same helpers as the cpu target's dynamic tests

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")

EW = """\
chain ew(x: f32[M, N], b: f32[N]) -> f32[M, N] {
    return tanh(x + b) * x
}
"""
ROWS = """\
chain rows(x: f32[M, N], g: f32[N]) -> f32[M, N] {
    return softmax(x * g, axis=-1) + x
}
"""
MEAN = """\
chain loss(x: f32[B, C]) -> f32 {
    return mean(log_softmax(x, axis=-1))
}
"""


@pytest.mark.slow
@pytest.mark.parametrize("source, name, fixed", [(EW, "ew", {"N": 64}), (ROWS, "rows", {"N": 32})],
                         ids=["elementwise", "row-kernel"])
def test_three_extents_run_from_one_gpu_build(tmp_path, source, name, fixed):
    prog = fusec.compile(write(tmp_path, "c.fdsl", source), target="cuda-sim", options={"dynamic": ["M"]},
                         cache=False)
    chain = prog.chains[name]
    for m in (5, 6, 8):                          # one size class: 5..8, two of them with a clamped tile
        checked(chain, dict(fixed, M=m))
    assert len(chain._builds) == 1
    (build,) = chain._builds.values()
    assert build.plan["dynamic"] == {"M": 8}


def test_the_grid_is_the_run_time_trip_count_and_edge_threads_are_guarded(tmp_path, capsys):
    f = write(tmp_path, "c.fdsl", EW)
    assert main([f, "--target", "cuda-sim", "--dynamic", "M", "--bind", "M=37,N=64", "--emit", "plan"]) == 0
    plan = capsys.readouterr().out
    assert "block tile [8, 32], thread tile [1, 1]" in plan       # 8 rows a block: 37 leaves a tail of 5
    assert main([f, "--target", "cuda-sim", "--dynamic", "M", "--bind", "M=37,N=64", "--emit", "kernels"]) == 0
    src = capsys.readouterr().out
    launch = next(line for line in src.splitlines() if line.strip().startswith("k0["))
    grid = launch.strip()[len("k0[("):].split("), (")[0].split(", ")
    assert grid[0] == "2" and grid[1].isidentifier()              # N/32 blocks; ceil(M/8), computed by the host
    assert "= arg0.shape[0]" in src                                # the host reads M once, names it
    assert "thread_id_y < " in src                                 # rows past the edge do nothing
    assert main([f, "--target", "cuda-sim", "--dynamic", "M", "--bind", "M=37,N=64"]) == 0
    out = capsys.readouterr().out
    assert "out 0 f32[37, 64]" in out and "-> ok" in out


def test_a_row_kernel_over_run_time_rows_takes_one_row_per_block(tmp_path, capsys):
    f = write(tmp_path, "c.fdsl", ROWS)
    assert main([f, "--target", "cuda-sim", "--bind", "M=5,N=32", "--emit", "plan"]) == 0
    static = capsys.readouterr().out
    assert "row kernel" in static and "block tile [1, 0]" not in static     # several rows a block
    assert main([f, "--target", "cuda-sim", "--dynamic", "M", "--bind", "M=5,N=32", "--emit", "plan"]) == 0
    dynamic = capsys.readouterr().out
    assert "block tile [1, 0]; row kernel: 32 threads per row, 1x32 threads" in dynamic


def test_a_reduction_along_a_run_time_axis_is_not_split_over_threads(tmp_path, capsys):
    """A row kernel splits its row over threads by a count fixed at compile time, and
    split-reductions its chunks: over a run-time axis neither runs, the plan says so, and the
    mean divides by the extent read at run time."""
    f = write(tmp_path, "c.fdsl", MEAN)
    assert main([f, "--target", "cuda-sim", "--dynamic", "B", "--bind", "B=3,C=16", "--emit", "plan"]) == 0
    plan = capsys.readouterr().out
    assert "split-reductions not run: B is taken at run time" in plan
    prog = fusec.compile(f, target="cuda-sim", options={"dynamic": ["B"]}, cache=False)
    for b in (3, 4):
        checked(prog.chains["loss"], {"B": b, "C": 16})


@pytest.mark.slow
def test_attention_over_a_run_time_batch_launches_one_block_row_per_batch(capsys):
    f = os.path.join(EXAMPLES, "attention.fdsl")
    assert main([f, "--chain", "attention", "--target", "cuda-sim", "--dynamic", "B", "--bind", "B=3,S=16",
                 "--emit", "kernels"]) == 0
    src = capsys.readouterr().out
    launch = next(line for line in src.splitlines() if line.strip().startswith("k0["))
    assert launch.strip().startswith("k0[(1, dim")                 # (query blocks, batch read at run time)
    assert main([f, "--chain", "attention", "--target", "cuda-sim", "--dynamic", "B", "--bind", "B=3,S=16"]) == 0
    out = capsys.readouterr().out
    assert "attention (online softmax)" in out and "out 0 f32[3, 16, 64]" in out and "-> ok" in out


def test_the_kernel_report_of_a_dynamic_build_is_measured_at_its_class(tmp_path, capsys):
    f = write(tmp_path, "c.fdsl", EW)
    assert main([f, "--target", "cuda-sim", "--dynamic", "M", "--bind", "M=37,N=64", "--kernel-report"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.strip().startswith("k0 "))
    assert "(8, 8, 1)" in row or "(2, 8, 1)" in row                # the grid at M = 64, traced
    assert "not all constants" not in out and "static shape is needed" not in out


def test_an_artifact_compiled_dynamic_for_the_gpu_runs_other_extents(tmp_path, capsys):
    f = write(tmp_path, "c.fdsl", EW)
    out = str(tmp_path / "art")
    assert main(["compile", f, "--target", "cuda-sim", "--dynamic", "M", "--bind", "M=40,N=64", "-o", out]) == 0
    assert "M taken at run time (planned for the size class M in 33..64)" in capsys.readouterr().out
    inputs = tmp_path / "in.npz"
    rng = np.random.default_rng(1)
    np.savez(inputs, **{"ew/in/x": rng.standard_normal((11, 64), dtype=np.float32),
                        "ew/in/b": rng.standard_normal(64, dtype=np.float32)})
    assert main(["run", out, "--inputs", str(inputs)]) == 0           # another class, the same build
    text = capsys.readouterr().out
    assert "out 0 f32[11, 64]" in text and "-> ok" in text
