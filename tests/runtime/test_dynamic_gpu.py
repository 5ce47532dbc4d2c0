"""Shape-polymorphic builds on the GPU targets (--dynamic on cuda / cuda-sim): a kernel's grid is
the run-time trip count of its block loop, computed by the host before the launch; a block's
tile at the edge of a run-time extent is clamped, and its threads past the clamp do nothing.
Run here under the simulator, at a few rows (the simulator runs about 12k threads/s)."""
import os
import re

import numpy as np
import pytest

import fusec
from fusec.cli import main
from fusec.runtime import reference
from fusec.runtime.compare import compare
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
    # N/32 blocks; ceil(M/8), computed by the host, launched at most 65535 and walked by a grid-stride loop
    assert grid[0] == "2" and re.fullmatch(r"min\((\w+)", grid[1]) and grid[2] == "65535)"
    count = grid[1][len("min("):]
    assert f"for block_y in range((cuda.blockIdx.y & 0xffff), {count}, (cuda.gridDim.y & 0xffff)):" in src
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
    # (query blocks, batch read at run time: at most 65535 launched, grid-strided beyond)
    assert launch.strip().startswith("k0[(1, min(dim, 65535), 1)")
    assert "for block_y in range((cuda.blockIdx.y & 0xffff), dim, (cuda.gridDim.y & 0xffff)):" in src
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


def test_a_run_time_row_count_beyond_grid_y_runs_through_a_grid_stride_loop(tmp_path):
    """R rows a block on grid.y: at M = 1,048,563 (the 1M size class; R = 16 there) that is
    65,536 blocks, which grid.y (at most 65,535) cannot take; the launch takes 65,535 and block
    0 also does the last, clamped, block of rows. Every launch is checked against CUDA's limits
    (tests/tools/launches.py); only blocks y = 0, 1 and 65,534 run (the simulator runs ~12k
    threads/s), and every row they write is checked against the reference."""
    import sys
    launches = sys.modules["fusec_tests_launches"]
    prog = fusec.compile(write(tmp_path, "c.fdsl", EW), target="cuda-sim", options={"dynamic": ["M"]},
                         cache=False)
    chain = prog.chains["ew"]
    m, n = 1048563, 4
    rows = int(re.search(r"block tile \[(\d+), 4\]", chain.stages({"M": m, "N": n})["plan"]).group(1))
    count = -(-m // rows)
    assert count > 65535                                 # the old mapping's grid.y: out of limits
    inputs = reference.random_inputs(chain.typed, {"M": m, "N": n}, 0)
    launched = []

    def pick(grid):
        launched.append(grid)
        return [(x, y, 0) for x in range(grid[0]) for y in (0, 1, grid[1] - 1)]

    with launches.only_blocks(pick):
        got = np.asarray(chain(*inputs))
    assert launched == [(1, 65535, 1)]
    want = reference.run_chain(chain.typed, inputs, {"M": m, "N": n})[0]
    done = [b for y in (0, 1, 65534) for b in range(y, count, 65535)]
    assert count - 1 in done                             # the clamped tail, by block 0's second step
    for b in done:
        part = slice(b * rows, min(m, (b + 1) * rows))
        assert compare(got[part], want[part], "f32").ok
    with pytest.raises(launches.LaunchOutOfLimits):
        launches.check_launch((1, count, 1), (4, rows, 1))     # the old mapping's launch
