"""gemm-kernels (compiler/transforms/gemm_kernels.py, stage `gpu`): a contraction kernel's block-level
ops go to the emitter's GEMM template: every op but the fills generalized, the contraction marked
fusec.gemm_contraction, the root fusec.block_gemm with its tiles, sides and root loops, everything
else of the kernel and every buffer only those ops use fusec.absorbed. Forced with hand plans at
tiny sizes (the model prefers a dot product per output there)."""
import json
import re

from fusec.compiler.marks import (ABSORBED, BLOCK_GEMM, CONTRACTION, GEMM_PREFETCH, GEMM_ROOT_LOOPS, GEMM_SIDES,
                                  GEMM_TILES, OP_ID)

from .stages import compile_, filecheck, run_matches, texts

# x @ transpose(w): a copy that transposes w feeds the contraction
MLP_T = "chain m(x: f32[M, K], w: f32[N, K], b: f32[N]) -> f32[M, N] { return relu(x @ transpose(w) + b) }"
B = dict(M=64, K=8, N=32)
PLAN = {"groups": [{"ops": [0, 1, 2, 3], "block_tiles": [32, 32], "gemm": [8, 4, 4]}]}


def _gpu(plan=None, src=MLP_T, binding=B) -> str:
    return texts(src, binding, "gpu", until="gpu",
                 **({"plans": (("m", json.dumps(plan)),)} if plan else {}))["gpu"]


def _op(gpu: str, op_id: int) -> str:
    (line,) = [l for l in gpu.splitlines() if f"{OP_ID} = {op_id} : i64" in l]
    return line


def test_the_kernel_is_marked_for_the_template():
    gpu = _gpu(PLAN)
    assert gpu.count("gpu.launch ") == 1 and "threads(%arg6, %arg7, %arg8) in (%arg12 = %c8, %arg13 = %c8" in gpu
    assert "linalg.matmul" not in gpu and "linalg.transpose" not in gpu      # generalized
    assert re.search(rf"linalg\.generic .*\{{{CONTRACTION}, {OP_ID} = 2 ", _op(gpu, 2))
    root = _op(gpu, 3)
    for mark in (f"{BLOCK_GEMM} = array<i64: 8, 4, 4>", f"{GEMM_ROOT_LOOPS} = array<i64: 0, 1>",
                 f'{GEMM_SIDES} = ["m", "n", "k"]', f"{GEMM_TILES} = array<i64: 32, 32, 0>"):
        assert mark in root, root
    assert GEMM_PREFETCH not in root
    for absorbed in (0, 1):                       # the transpose copy and the fill
        assert f"{{{ABSORBED}, {OP_ID} = {absorbed} :" in _op(gpu, absorbed)
    assert ABSORBED not in _op(gpu, 2) and ABSORBED not in root


def test_a_buffer_only_the_kernel_uses_is_absorbed_and_the_output_is_not():
    filecheck(_gpu(PLAN), f"""
CHECK: %[[OUT:.+]] = memref.alloc() {{alignment = 64 : i64}} : memref<64x32xf32>
CHECK: gpu.launch
CHECK: %[[WT:.+]] = memref.alloc() {{alignment = 64 : i64, {ABSORBED}}} : memref<8x32xf32>
CHECK: outs(%[[WT]] : memref<8x32xf32>) attrs = {{{ABSORBED}
CHECK: return %[[OUT]]
""")


def test_double_buffered_the_root_says_so():
    plan = {"groups": [dict(PLAN["groups"][0], double_buffered=True)]}
    assert f"{GEMM_PREFETCH}," in _op(_gpu(plan), 3)


def test_without_a_gemm_tiling_nothing_is_marked():
    plain = _gpu()                                # the model's choice here: a dot product per output
    for mark in (BLOCK_GEMM, CONTRACTION, ABSORBED):
        assert mark not in plain


def test_the_template_gives_the_reference_numbers():
    run_matches(MLP_T, dict(M=24, K=5, N=20), "cuda-sim", plans=(("m", json.dumps(PLAN)),))


def test_a_one_block_contraction_kernel_is_not_described_as_serial():
    src = "chain m(x: f32[M, K], w: f32[K, N]) -> f32[M, N] { return relu(x @ w) }"
    st = compile_(src, dict(M=8, K=4, N=16), "gpu", until="gpu")
    assert BLOCK_GEMM in st.texts["gpu"]                           # the model's choice: a contraction kernel
    assert re.search(r"threads\([^)]*\) in \(%\w+ = %c8, %\w+ = %c4, %\w+ = %c1\)", st.texts["gpu"])
    assert "serial (one thread)" not in st.texts["plan"], st.texts["plan"]
