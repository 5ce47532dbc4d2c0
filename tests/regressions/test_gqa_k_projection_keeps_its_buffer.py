"""Regression: Llama through torch.compile on cpu was wrong (max rel err 0.38 against eager)
since matmul-rows made the grouped K and V projections linalg.matmul on one CSE-shared fill. The
attention kernel's K permute, read by the rotary's gather (a tensor.extract inside the rotary
generic's body), was left where the chain had it, before V's projection: one-shot bufferization
saw K's buffer dead after the permute and let V's matmul write its result there, and the
attention template, which reads K through the permute at the root, read V. The permute now
moves to the attention root with the kernel's other ops (transforms/tile_and_fuse.py:
_gather_before_root counts a read inside a member's body as the member's)."""
import pytest

import fusec

SRC = """chain gqa(x: f32[2, 16, 64], wq: f32[64, 64], wk: f32[32, 64], wv: f32[32, 64], cs: f32[16, 16],
          sn: f32[16, 16]) -> f32[2, 4, 16, 16] {
    q1 = permute(reshape(x @ permute(wq, [1, 0]), [2, 16, 4, 16]), [0, 2, 1, 3])
    k1 = permute(reshape(x @ permute(wk, [1, 0]), [2, 16, 2, 16]), [0, 2, 1, 3])
    v1 = permute(reshape(x @ permute(wv, [1, 0]), [2, 16, 2, 16]), [0, 2, 1, 3])
    c = reshape(cs, [1, 1, 16, 16])
    n = reshape(sn, [1, 1, 16, 16])
    qr = q1 * c + concat([neg(q1[:, :, :, 8:16]), q1[:, :, :, 0:8]], axis=-1) * n
    kr = k1 * c + concat([neg(k1[:, :, :, 8:16]), k1[:, :, :, 0:8]], axis=-1) * n
    ke = reshape(broadcast_to(reshape(kr, [2, 2, 1, 16, 16]), [2, 2, 2, 16, 16]), [2, 4, 16, 16])
    ve = reshape(broadcast_to(reshape(v1, [2, 2, 1, 16, 16]), [2, 2, 2, 16, 16]), [2, 4, 16, 16])
    return softmax((qr * 0.5) @ (permute(ke, [0, 1, 3, 2]) * 0.5), axis=-1) @ ve
}
"""


@pytest.mark.slow
def test_the_attention_reads_k_not_v_after_grouped_projections():
    prog = fusec.compile(SRC, target="cpu", options={"baseline": False})
    groups = prog.gqa.compiled({}).plan["groups"]
    assert [g["template"] for g in groups].count("attention") == 1, groups
    # the case: K's and V's projections are matmuls (matmul-rows) on one shared fill
    inits = [tuple(o["id"] for o in g["ops"] if o["role"] == "init") for g in groups
             if any(o["label"] == "matmul" for o in g["ops"])]
    assert len(inits) == 3 and inits[1] == inits[2], inits
    (c,) = prog.gqa.check(binding={})
    assert c.ok, c.describe()
