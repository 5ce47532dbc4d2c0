"""split-rows (compiler/transforms/split_rows.py): inside a GPU row kernel's block each row of N
is split cyclically over T threads (element j*T + t, the row as [N/T, T]); each reduction becomes
a per-thread partial into workgroup memory and a block-wide combine marked fusec.block_reduce;
each elementwise op along the row is recomputed in every phase that needs it; each phase is a
thread loop of its own. Seen in the tiled stage of a softmax planned by hand with T = 32 and
two rows per block (cyclic, forced by row_runs 1), and blocked-cyclic (row_runs 4: the row as
[N/(4T), T, 4], thread t's runs 4t + {0..3} + 4T*q)."""
import json
import re

from fusec.compiler.marks import BLOCK_REDUCE, PART, THREADS_OF

from .stages import count, filecheck, run_matches, texts

SOFTMAX = "chain f(x: f32[M, N]) -> f32[M, N] { return softmax(x) }"
B = dict(M=4, N=256)
ROWS = {"groups": [{"ops": [0, 1, 2, 3, 4, 5], "block_tiles": [2, 0], "thread_tiles": [1, 0], "row_threads": 32,
                    "row_runs": 1}]}                         # cyclic (the planner would take runs of 4 here)
RUNS = {"groups": [dict(ROWS["groups"][0], row_runs=4)]}
THREAD_PER_ROW = {"groups": [{"ops": [0, 1, 2, 3, 4, 5], "block_tiles": [2, 0], "thread_tiles": [1, 0]}]}
WG = "#gpu.address_space<workgroup>"


def _tiled(plan: dict) -> str:
    return texts(SOFTMAX, B, "gpu", until="tiled", plans=(("f", json.dumps(plan)),))["tiled"]


def test_each_row_is_viewed_as_chunks_of_t_threads_and_collapsed_back():
    tiled = _tiled(ROWS)
    # the input's and the output's block tiles [2, 256] as [2, N/T = 8, T = 32]
    assert count(r"memref\.expand_shape %subview(_\d+)? \[\[0\], \[1, 2\]\] output_shape \[2, 8, 32\]", tiled) == 2
    assert re.search(r"memref\.collapse_shape %expand_shape_\d+ \[\[0\], \[1, 2\]\] .* into memref<2x256xf32", tiled)


def test_runs_of_4_view_the_row_as_runs_per_thread_and_walk_each_run_inside():
    tiled = _tiled(RUNS)
    # [2, 256] as [2, N/(4T) = 2, T = 32, 4]: element q*128 + t*4 + v
    assert count(r"memref\.expand_shape %subview(_\d+)? \[\[0\], \[1, 2, 3\]\] output_shape \[2, 2, 32, 4\]", tiled) == 2
    assert re.search(r"memref\.collapse_shape %expand_shape_\d+ \[\[0\], \[1, 2, 3\]\] .* into memref<2x256xf32", tiled)
    # each partial reduces q and v, keeps t: loops (row, q, t, v)
    assert count(r'iterator_types = \["parallel", "reduction", "parallel", "reduction"\].*' + PART + ' = "partial"',
                 tiled) == 2
    assert tiled.count(f"{THREADS_OF} = 0 : i64") == 3
    run_matches(SOFTMAX, B, "cuda-sim", plans=(("f", json.dumps(RUNS)),))


def test_each_reduction_is_a_partial_per_thread_and_a_block_wide_combine():
    tiled = _tiled(ROWS)
    filecheck(tiled, f"""
CHECK: %[[P:.+]] = memref.alloc() {{{{.*}}}} : memref<2x32xf32, {WG}>
CHECK: scf.forall (%{{{{.*}}}}, %{{{{.*}}}}) in (2, 32)
CHECK: linalg.fill {{{PART} = "init"
CHECK: linalg.generic {{{{.*}}}}iterator_types = ["parallel", "reduction", "parallel"]{{{{.*}}}}{PART} = "partial"
CHECK: arith.maximumf
CHECK: }} {{{THREADS_OF} = 0 : i64, mapping = [#gpu.thread<y>, #gpu.thread<x>]}}
CHECK: %[[M:.+]] = memref.alloc() {{{{.*}}}} : memref<2xf32, {WG}>
CHECK: linalg.generic {{{{.*}}}} ins(%[[P]] : memref<2x32xf32, {WG}>) outs(%[[M]] : memref<2xf32, {WG}>) attrs = {{{BLOCK_REDUCE} = "maximumf", {PART} = "combine"
CHECK: {PART} = "partial"
CHECK: arith.addf
CHECK: {BLOCK_REDUCE} = "addf", {PART} = "combine"
CHECK: arith.divf
CHECK: {THREADS_OF} = 0 : i64, mapping = [#gpu.thread<y>, #gpu.thread<x>]
CHECK: fusec.group = 0 : i64, mapping = [#gpu.block<x>]
""")
    # three phases (max, sum, divide), a thread loop each
    assert tiled.count(f"{THREADS_OF} = 0 : i64") == 3


def test_exp_is_recomputed_in_each_phase_that_reads_it():
    tiled = _tiled(ROWS)
    parts = re.findall(r'fusec\.id = 2 : i64, ' + PART + r' = "(\w+)"', tiled)
    assert sorted(parts) == ["x1", "x2"], parts           # once for the sum, once for the divide


def test_without_row_threads_a_row_is_one_threads_and_nothing_is_split():
    tiled = _tiled(THREAD_PER_ROW)
    assert BLOCK_REDUCE not in tiled and PART not in tiled and THREADS_OF not in tiled
    assert WG not in tiled and "output_shape [2, 8, 32]" not in tiled


def test_split_rows_give_the_reference_numbers():
    run_matches(SOFTMAX, B, "cuda-sim", plans=(("f", json.dumps(ROWS)),))
    # a per-row scalar (rsqrt(var + eps)) between two reductions and the output, as the model plans it
    layernorm = "chain l(x: f32[M, N], g: f32[N], b: f32[N]) -> f32[M, N] { return layernorm(x, g, b) }"
    assert "row kernel: 96 threads per row" in texts(layernorm, dict(M=3, N=96), "gpu", until="plan")["plan"]
    run_matches(layernorm, dict(M=3, N=96), "cuda-sim")
