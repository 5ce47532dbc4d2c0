"""Attention as Llama writes it (and the torch frontend imports it): a rotary embedding of Q (a
concat of its halves that inline-indexed-reads folds into the scores contraction, so the product
is of two factors, Q's rotated and scaled and K's scaled, not of two operands: plan/attention.py,
_side_loops; emit/attention.py, AttentionKernel._factors), with the fully-masked-row guard. One
online-softmax kernel on the gpu and the cpu, numbers against the reference on the cpu and the
simulator at tiny sizes (several key steps, partial tiles). A scale folded into the scores
contraction ((q * c) @ (k * c)) is kept on the cpu, whose tile products are BLAS calls on the
factors as the tiles hold them. Grouped-query K and V (2 heads for 4 query heads, written
reshape(broadcast_to(reshape(x))) as the torch frontend writes Llama's `repeat_kv`) are lowered
to one generic reading x at head h // 2 (lowering/shape.py: _repeated_heads), which the kernel
reads through: no broadcast written, no reshape between the contractions."""
import numpy as np
import pytest

import fusec
from fusec.compiler.plan.attention import Attention, find_attention
from helpers import stages

ROPE = """chain rope(q: f32[2, 4, S, 16], k: f32[2, KH, S, 16], v: f32[2, KH, S, 16], cos: f32[S, 16],
           sin: f32[S, 16], mask: f32[2, 1, S, S]) -> f32[2, 4, S, 16] {
    qr = q * cos + concat([neg(q[:, :, :, 8:16]), q[:, :, :, 0:8]], axis=-1) * sin
    kb = KB
    vb = VB
    s = (qr * 0.5) @ (permute(kb, [0, 1, 3, 2]) * 0.5) + mask
    p = where(max(s, axis=-1, keepdims=true) == -inf, 0.0, softmax(s, axis=-1))
    return p @ vb
}
"""


def _src(s: int, grouped: bool = False) -> str:
    src = ROPE
    if grouped:     # 2 K/V heads for 4 query heads, as the torch frontend writes Llama's
        src = src.replace("KB", "reshape(broadcast_to(reshape(k, [2, 2, 1, S, 16]), [2, 2, 2, S, 16]), [2, 4, S, 16])")
        src = src.replace("VB", "reshape(broadcast_to(reshape(v, [2, 2, 1, S, 16]), [2, 2, 2, S, 16]), [2, 4, S, 16])")
        src = src.replace("KH", "2")
    else:
        src = src.replace("KB", "k").replace("VB", "v").replace("KH", "4")
    return src.replace("S", str(s))


def _attention(plan) -> Attention:
    found = [a for a in (find_attention(plan.info, o.id) for o in plan.info.ops if o.kind == "contraction")
             if isinstance(a, Attention)]
    assert len(found) == 1, plan.format()
    return found[0]


@pytest.mark.parametrize("grouped", [False, True], ids=["heads", "grouped"])
@pytest.mark.parametrize("target,s", [("gpu", 256), ("cpu", 1024)])
def test_attention_with_a_rotary_q_is_one_kernel(target, s, grouped):
    st = stages(_src(s, grouped), target=target)
    plan = st.plan
    assert [g.template for g in plan.kernels] == ["attention"], plan.format()
    a = _attention(plan)
    # 2 x 4 heads of S queries against S keys over 16 head dims; the guard SDPA's
    assert (a.batch, a.sq, a.sk, a.d, a.dv) == (8, s, s, 16, 16)
    assert a.guard == (float("-inf"), 0.0)
    if grouped:     # K and V read at the K/V head h // 2 (lowering/shape.py: _repeated_heads), not broadcast
        assert "d1 floordiv 2" in st.texts["graph"] and "2x2x2x" not in st.texts["graph"]
        assert "collapse_shape" not in st.texts["graph"]


def _inputs(s: int, grouped: bool, seed=1):
    rng = np.random.default_rng(seed)
    kh = 2 if grouped else 4
    q = rng.standard_normal((2, 4, s, 16)).astype(np.float32)
    k = rng.standard_normal((2, kh, s, 16)).astype(np.float32)
    v = rng.standard_normal((2, kh, s, 16)).astype(np.float32)
    ang = rng.random((s, 16)).astype(np.float32) * 3
    keep = np.tril(np.ones((s, s), bool))[None, None].repeat(2, axis=0)
    keep[1, 0, 3, :] = False                  # a fully masked row: the guard's 0
    mask = np.where(keep, np.float32(0), np.float32(-np.inf)).astype(np.float32)
    return [q, k, v, np.cos(ang), np.sin(ang), mask]


@pytest.mark.slow
@pytest.mark.parametrize("grouped", [False, True], ids=["heads", "grouped"])
@pytest.mark.parametrize("target", ["cpu", "cuda-sim"])
def test_attention_with_a_rotary_q_matches_the_reference(target, grouped):
    s = 13                                    # keys in steps of 8: a partial one; a partial query block
    src = _src(s, grouped)
    planned = stages(src, target="cpu" if target == "cpu" else "gpu").plan
    ops = [o.id for o in planned.info.ops if o.is_compute]
    plan = {"groups": [{"ops": ops, "attention": [16, 8]}]}
    prog = fusec.compile(src, target=target, options={"baseline": False, "plans": {"rope": plan}})
    compiled = prog.rope.compiled({})
    assert compiled.plan["groups"][0]["template"] == "attention", compiled.plan
    inputs = _inputs(s, grouped)
    (c,) = prog.rope.check(inputs=inputs, binding={})
    assert c.ok, c.describe()
    assert np.all(compiled.fused(*inputs)[0][1, 0, 3] == 0)


@pytest.mark.slow
def test_a_scale_folded_into_the_scores_is_kept_on_the_cpu():
    """(q * c) @ (k * c) over 4-D heads: the scale is folded into the scores contraction's body;
    the cpu kernel's BLAS tile product takes the scaled factors, not the operands as they lie."""
    src = ("chain a(q: f32[B, H, S, 16], k: f32[B, H, T, 16], v: f32[B, H, T, 16]) -> f32[B, H, S, 16] {\n"
           "    return softmax((q * 0.42) @ (permute(k, [0, 1, 3, 2]) * 0.42)) @ v\n}\n")
    binding = dict(B=2, H=2, S=16, T=16)
    planned = stages(src, binding, target="cpu").plan
    ops = [o.id for o in planned.info.ops if o.is_compute]
    plan = {"groups": [{"ops": ops, "attention": [16, 8]}]}
    prog = fusec.compile(src, target="cpu", options={"baseline": False, "plans": {"a": plan}})
    assert prog.a.compiled(binding).plan["groups"][0]["template"] == "attention"
    (c,) = prog.a.check(binding=binding)
    assert c.ok, c.describe()
