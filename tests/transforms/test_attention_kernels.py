"""attention-kernels (compiler/transforms/attention_kernels.py): an attention kernel's ops, bufferized
whole, go to the emitter's online-softmax template: generalized, the pattern's ops marked with their
role (Z and V operands on exp and out), the root fusec.block_attention with the scores' loops and
batch, every other op of the kernel and every buffer only it uses (the S x S scores among them)
fusec.absorbed; on the gpu in one launch of (query blocks, batch) blocks. Forced by hand plans."""
import json
import re

import pytest

from fusec.compiler.marks import (ABSORBED, ATTENTION_BATCH, ATTENTION_LOOPS, ATTENTION_ROLE, ATTENTION_V, ATTENTION_Z,
                                  BLOCK_ATTENTION, OP_ID)

from .stages import compile_, run_matches, texts

SRC = """chain a(q: f32[B, S, 16], k: f32[B, S, 16], v: f32[B, S, 16]) -> f32[B, S, 16] {
    return softmax(q @ transpose(k) * 0.25) @ v
}"""
# the same with an epilogue: the root is relu, after the output contraction
EPILOGUE = SRC.replace("return softmax(q @ transpose(k) * 0.25) @ v", "return relu(softmax(q @ transpose(k) * 0.25) @ v)")
B = dict(B=3, S=20)
ROLES = {2: "scores", 5: "max", 6: "exp", 8: "sum", 9: "norm", 11: "out"}


def _hand(src=SRC):
    return {"groups": [{"ops": [0, 2, 3, 5, 6, 8, 9, 11] + ([12] if src is EPILOGUE else []), "attention": [16, 8]}]}


def _gpu(target="gpu", src=SRC, plan=True) -> str:
    return texts(src, B, target, until="gpu", **({"plans": (("a", json.dumps(_hand(src))),)} if plan else {}))["gpu"]


def _attrs(gpu: str) -> dict[int, str]:
    """op id -> its attribute dict's text."""
    out = {}
    for line in gpu.splitlines():
        m = re.search(rf"{OP_ID} = (\d+) : i64", line)
        if m and "linalg." in line:
            out[int(m.group(1))] = line[line.rindex("{", 0, m.start()):]
    return out


@pytest.mark.parametrize("target", ["gpu", "cpu"])
def test_the_pattern_is_marked_by_role_and_the_root_carries_the_tiles(target):
    gpu = _gpu(target)
    attrs = _attrs(gpu)
    assert "linalg.batch_matmul" not in gpu and "linalg.transpose" not in gpu     # generalized
    for op, role in ROLES.items():
        assert f'{ATTENTION_ROLE} = "{role}"' in attrs[op], (op, attrs[op])
    assert f"{ATTENTION_Z} = 0 : i64" in attrs[6] and f"{ATTENTION_V} = 1 : i64" in attrs[11]
    root = attrs[11]
    assert f"{BLOCK_ATTENTION} = array<i64: 16, 8>" in root
    assert f"{ATTENTION_LOOPS} = array<i64: 1, 2, 3>" in root and f"{ATTENTION_BATCH} = array<i64: 0>" in root
    for op in (0, 3):                             # the transpose copy of k, the scale: absorbed
        assert ABSORBED in attrs[op], attrs[op]
    # the scores (3 x 20 x 20) and the row statistics are never allocated; the output is
    for shape in ("3x20x20xf32", "3x20xf32", "3x16x20xf32"):
        (alloc,) = [l for l in gpu.splitlines() if "memref.alloc" in l and f"memref<{shape}>" in l]
        assert ABSORBED in alloc, alloc
    (out,) = [l for l in gpu.splitlines() if "memref.alloc" in l and "memref<3x20x16xf32>" in l]
    assert ABSORBED not in out


def test_on_the_gpu_one_launch_of_query_blocks_by_batch():
    gpu = _gpu("gpu")
    assert gpu.count("gpu.launch ") == 1
    # 20 queries in blocks of 16: 2 query blocks; a batch of 3; 16 x 8 threads
    assert re.search(r"blocks\(.*\) in \(%\w+ = %c2, %\w+ = %c3, %\w+ = %c1\) threads\(.*\) in \(%\w+ = %c8, %\w+ = %c16,", gpu), gpu


def test_without_an_attention_plan_nothing_is_marked():
    st = compile_(SRC, B, "cpu", until="gpu")      # the model's cpu plan here: two kernels, BLAS calls
    assert "not attention" in st.texts["plan"]
    for mark in (ATTENTION_ROLE, BLOCK_ATTENTION, ABSORBED):
        assert mark not in st.texts["gpu"]


@pytest.mark.parametrize("src", [SRC, EPILOGUE], ids=["plain", "epilogue"])
def test_the_patterns_own_ops_are_not_absorbed(src):
    attrs = _attrs(_gpu("gpu", src))
    for op in ROLES:
        assert ABSORBED not in attrs[op], (op, attrs[op])


def test_the_template_gives_the_reference_numbers():
    run_matches(SRC, dict(B=2, S=11), "cuda-sim", plans=(("a", json.dumps(_hand())),))
