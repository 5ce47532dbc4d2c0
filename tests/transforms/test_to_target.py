"""to-target (compiler/transforms/to_target.py, stage `gpu`): on the gpu each kernel becomes its own
gpu.launch, its block and thread loops mapped to the launch's ids (threads x along the contiguous
axis), with run-time extents a grid computed on the host and guarded thread loops; on the cpu each
kernel is one scf.parallel. Afterwards only the emitter's closed op set is left: func, gpu, scf,
memref, arith, math, and the linalg ops an emitter template writes or absorbs (block-wide combines,
scans, contraction and attention kernels, BLAS calls)."""
import json
import re

import pytest

from fusec.compiler.marks import BLOCK_REDUCE, CPU_CALL, CPU_TEMPLATE_MARKS, GPU_TEMPLATE_MARKS, SCAN

from .stages import compile_, run_matches

CLOSED = {"func", "gpu", "scf", "memref", "arith", "math"}
TEMPLATE_MARKS = (BLOCK_REDUCE, SCAN, CPU_CALL) + GPU_TEMPLATE_MARKS + CPU_TEMPLATE_MARKS
OP_BY_OP = dict(fuse=False, disabled_passes=frozenset({"linalg-fuse-elementwise-ops"}))
CHAINS = {
    "op by op": ("chain f(x: f32[M, N]) -> f32[M, N] { return tanh(exp(x) * 2.0) }", dict(M=8, N=64), OP_BY_OP),
    "row kernel": ("chain f(x: f32[M, N]) -> f32[M, N] { return softmax(x) }", dict(M=4, N=64), {}),
    "scan": ("chain f(x: f32[M, N]) -> f32[M, N] { return cumsum(exp(x), axis=1) }", dict(M=4, N=16), {}),
    "matmul": ("chain f(x: f32[M, K], w: f32[K, N]) -> f32[M, N] { return relu(x @ w) }", dict(M=8, K=4, N=16), {}),
}


def _ops(text: str) -> list[tuple[str, str]]:
    """(op name, its line) for every op of a printed module."""
    out = []
    for line in text.splitlines():
        s = line.strip()
        s = s.split(" = ", 1)[1] if re.match(r"%[\w#:]+(, %[\w#:]+)* = ", s) else s
        m = re.match(r"([a-z_]+)\.([a-z_.]+)\b", s)
        if m:
            out.append((m.group(1) + "." + m.group(2), line))
    return out


def _outside_the_closed_set(text: str) -> list[str]:
    bad = []
    for name, line in _ops(text):
        dialect = name.split(".")[0]
        if dialect in CLOSED or name in ("linalg.yield", "linalg.index"):
            continue
        if name.startswith("linalg.") and any(m in line for m in TEMPLATE_MARKS):
            continue
        bad.append(line.strip())
    return bad


@pytest.mark.parametrize("target", ["gpu", "cpu"])
@pytest.mark.parametrize("name", sorted(CHAINS))
def test_only_the_emitters_op_set_is_left_one_loop_nest_per_kernel(name, target):
    src, binding, kw = CHAINS[name]
    st = compile_(src, binding, target, until="gpu", **kw)
    gpu = st.texts["gpu"]
    assert not _outside_the_closed_set(gpu), _outside_the_closed_set(gpu)
    if target == "gpu":
        assert gpu.count("gpu.launch ") == st.plan.kernel_count, gpu
        assert "scf.forall" not in gpu and "scf.parallel" not in gpu
    else:
        assert "gpu." not in gpu and "scf.forall" not in gpu
        # a kernel is a parallel loop, or a template's op that writes its own (a scan's prange)
        top = [l for l in gpu.splitlines() if l.startswith("    scf.parallel") or
               (l.startswith("    linalg.generic") and SCAN in l)]
        assert len(top) == st.plan.kernel_count, gpu


def test_blocks_and_threads_are_the_plans_tiles():
    src = "chain g(x: f32[M, N]) -> f32[M, N] { return exp(x) * 2.0 }"
    plan = {"groups": [{"ops": [0], "block_tiles": [4, 32], "thread_tiles": [1, 1]}]}
    gpu = compile_(src, dict(M=8, N=64), "gpu", until="gpu", plans=(("g", json.dumps(plan)),)).texts["gpu"]
    # 2 x 2 blocks (x along N), 32 x 4 threads: x along the contiguous axis
    assert re.search(r"blocks\([^)]*\) in \(%\w+ = %c2, %\w+ = %c2, %\w+ = %c1\) "
                     r"threads\([^)]*\) in \(%\w+ = %c32, %\w+ = %c4, %\w+ = %c1\)", gpu), gpu
    assert "gpu.block_id x" in gpu and "gpu.thread_id x" in gpu and "gpu.thread_id y" in gpu


def test_a_kernel_with_nothing_to_split_runs_on_one_thread():
    src = "chain g(x: f32[N]) -> f32 { return sum(exp(x)) }"
    plan = {"groups": [{"ops": [0, 1]}]}                          # no tiles: serial
    gpu = compile_(src, dict(N=64), "gpu", until="gpu", plans=(("g", json.dumps(plan)),)).texts["gpu"]
    assert re.search(r"blocks\([^)]*\) in \(%\w+ = %c1, %\w+ = %c1, %\w+ = %c1\) "
                     r"threads\([^)]*\) in \(%\w+ = %c1, %\w+ = %c1, %\w+ = %c1\)", gpu), gpu


DYNAMIC = "chain g(x: f32[M, N]) -> f32[M, N] { return exp(x) * 2.0 }"


def test_with_a_run_time_extent_the_grid_is_computed_and_threads_are_guarded():
    st = compile_(DYNAMIC, dict(M=8, N=64), "gpu", until="gpu", dynamic=("M",))
    gpu = st.texts["gpu"]
    assert "memref<?x64xf32>" in gpu
    launch = re.search(r"blocks\([^)]*\) in \(%\w+ = (%\w+), %\w+ = (%\w+), %\w+ = %c1\)", gpu)
    assert launch and not launch.group(2).startswith("%c"), gpu       # the row blocks: a value, not a constant
    assert re.search(rf"{re.escape(launch.group(2))} = arith\.select", gpu)    # ceil(dim / tile), on the host
    assert gpu.index(f"{launch.group(2)} = ") < gpu.index("gpu.launch")
    assert re.search(r"arith\.cmpi ult, %thread_id_y, %\w+ : index\n\s*scf\.if", gpu), gpu


def test_the_dynamic_build_gives_the_reference_numbers_at_two_sizes():
    for m in (5, 8):
        run_matches(DYNAMIC, dict(M=m, N=64), "cuda-sim", dynamic=("M",))
