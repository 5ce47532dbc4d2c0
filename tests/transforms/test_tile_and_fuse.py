"""tile-and-fuse (compiler/transforms/tile_and_fuse.py, stage `tiled`): each kernel's root is tiled
to a forall marked with its kernel (blocks, then threads on a GPU; chunks on the cpu), its
producers fused into that loop, a sibling of horizontal fusion tiled into the same loop; an op
several kernels compute is tagged once per kernel, a copy for each but the one that writes it; a
scan keeps no init; then everything is bufferized."""
import json
import re

import pytest

from fusec.compiler.marks import GROUP, OP_ID, TAG
from fusec.compiler.mlir import ir, print_ir
from fusec.compiler.transforms.script import tag_of
from fusec.compiler.transforms.tile_and_fuse import tag_groups

from .stages import compile_, filecheck, run_matches, texts

# exp is computed by both kernels (the plan's `recomputed`) and never written
SHARED = """chain f(x: f32[M, N]) -> (f32[M], f32[M]) {
    a = exp(x)
    return sum(a, axis=1), max(a, axis=1)
}"""
SIBLINGS = """chain f(x: f32[M, N]) -> (f32[M], f32[M]) {
    return sum(x, axis=1), max(x, axis=1)
}"""
B = dict(M=8, N=64)


def test_an_op_two_kernels_compute_is_tagged_once_per_kernel():
    st = compile_(SHARED, B, "cpu", until="plan")
    assert st.plan.kernel_count == 2 and "recomputed" in st.texts["plan"]
    f = st.module.body.operations[0]
    with st.module.context, ir.Location.unknown():
        tag_groups(f, st.plan)
    text = print_ir(st.module)
    exps = [l for l in text.splitlines() if "linalg.generic" in l and f"{OP_ID} = 0 :" in l]
    assert sorted(int(re.search(rf"{TAG} = (\d+)", l).group(1)) for l in exps) == [tag_of(0, 0), tag_of(1, 0)]
    # kernel 1's max reads kernel 1's copy of exp
    copy = next(l for l in exps if f"{TAG} = {tag_of(1, 0)}" in l).split(" = linalg.generic")[0].strip()
    (reader,) = [l for l in text.splitlines() if f"{TAG} = {tag_of(1, 4)} " in l]
    assert f"ins({copy} :" in reader, text


def test_each_kernel_is_a_forall_with_its_producers_fused_in():
    tiled = texts(SHARED, B, "cpu", until="tiled")["tiled"]
    assert "tensor<" not in tiled                                 # bufferized
    loops = re.findall(r"scf\.forall \(%\w+\) in \(8\) \{(.*?)\n    \} \{" + GROUP + r" = (\d) : i64\}", tiled, re.S)
    assert [g for _, g in loops] == ["0", "1"], tiled
    for body, g in loops:                                         # exp computed in each kernel, per row
        assert body.count("math.exp") == 1 and "memref<1x64xf32>" in body
    assert "arith.addf" in loops[0][0] and "arith.maximumf" in loops[1][0]


def test_a_sibling_is_tiled_into_its_roots_loop():
    plan = {"groups": [{"ops": [0, 1, 2, 3], "block_tiles": [2, 0]}]}
    st = compile_(SIBLINGS, B, "cpu", until="tiled", plans=(("f", json.dumps(plan)),))
    assert "sibling" in st.texts["plan"]
    tiled = st.texts["tiled"]
    assert tiled.count("scf.forall") == 1, tiled
    filecheck(tiled, f"""
CHECK: scf.forall (%{{{{.*}}}}) in (4)
CHECK: linalg.generic {{{{.*}}}}{OP_ID} = 1 : i64
CHECK: arith.addf
CHECK: linalg.generic {{{{.*}}}}{OP_ID} = 3 : i64
CHECK: arith.maximumf
CHECK: }} {{{GROUP} = 0 : i64}}
""")


def test_on_a_gpu_blocks_then_threads():
    plan = {"groups": [{"ops": [0, 1, 2, 3], "block_tiles": [4, 0], "thread_tiles": [1, 0]}]}
    tiled = texts(SIBLINGS, B, "gpu", until="tiled", plans=(("f", json.dumps(plan)),))["tiled"]
    filecheck(tiled, f"""
CHECK: scf.forall (%{{{{.*}}}}) in (2)
CHECK: scf.forall (%{{{{.*}}}}) in (4)
CHECK: arith.addf
CHECK: arith.maximumf
CHECK: }} {{mapping = [#gpu.thread<x>]}}
CHECK: }} {{{GROUP} = 0 : i64, mapping = [#gpu.block<x>]}}
""")


def test_a_scan_keeps_no_init():
    src = "chain g(x: f32[M, N]) -> f32[M, N] { return cumsum(x, axis=1) }"
    st = compile_(src, dict(M=8, N=16), "cpu", until="tiled")
    assert "linalg.fill" in st.texts["graph"]
    assert "linalg.fill" not in st.texts["tiled"] and "fusec.scan" in st.texts["tiled"]


@pytest.mark.parametrize("src,plan", [
    (SHARED, None),
    (SIBLINGS, {"groups": [{"ops": [0, 1, 2, 3], "block_tiles": [2, 0], "thread_tiles": [1, 0]}]}),
], ids=["recomputed", "siblings"])
def test_tiled_and_fused_the_numbers_are_the_references(src, plan):
    run_matches(src, dict(M=4, N=32), "cuda-sim", **({"plans": (("f", json.dumps(plan)),)} if plan else {}))
