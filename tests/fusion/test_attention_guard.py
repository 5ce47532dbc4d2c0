"""The fully-masked-row guard that SDPA's decomposition leaves around the softmax,
p = where(max(s, axis=-1, keepdims=true) == C, K, softmax(s, axis=-1)), keeps attention one
online-softmax kernel (plan/attention.py: _unguard; emit/attention.py: AttentionKernel.result)
on the gpu and the cpu, and a guarded softmax alone one row kernel. Numbers against the
reference on the cpu and the simulator at tiny sizes (tiles forced small: several key steps,
partial tiles), with fully masked rows, NaN queries and NaN values."""
import re

import numpy as np
import pytest

import fusec
from fusec.compiler.marks import ATTENTION_GUARD
from fusec.compiler.plan.attention import Attention, find_attention
from fusec.runtime import reference
from fusec.runtime.compare import compare
from helpers import stages

HEAD = ("chain g(q: f32[B, H, S, D], k: f32[B, H, T, D], v: f32[B, H, T, E], mask: f32[S, T], "
        "keep: bool[S, T]) -> f32[B, H, S, E] {\n")
SCORES = "q @ permute(k, [0, 1, 3, 2]) * 0.25"
FORMS = {   # name: (body, (C, K) the matcher reads)
    # an additive mask (SDPA's attn_mask), the guard as the frontend writes it
    "additive": (f"    s = {SCORES} + mask\n"
                 "    p = where(max(s, axis=-1, keepdims=true) == -1e30, 0.0, softmax(s, axis=-1))\n"
                 "    return p @ v\n", (-1e30, 0.0)),
    # a boolean mask, another replacement, the compare's operands swapped
    "boolean": (f"    s = where(keep, {SCORES}, -1e30)\n"
                "    p = where(-1e30 == max(s, axis=-1, keepdims=true), 0.5, softmax(s, axis=-1))\n"
                "    return p @ v\n", (-1e30, 0.5)),
    # the guard written with != and the branches the other way round
    "not_equal": (f"    s = {SCORES} + mask\n"
                  "    p = where(max(s, axis=-1, keepdims=true) != -1e30, softmax(s, axis=-1), 0.0)\n"
                  "    return p @ v\n", (-1e30, 0.0)),
    # SDPA's own form: -inf in the additive mask and in the guard, 0 for the masked rows
    "sdpa": (f"    s = {SCORES} + mask\n"
             "    p = where(max(s, axis=-1, keepdims=true) == -inf, 0.0, softmax(s, axis=-1))\n"
             "    return p @ v\n", (float("-inf"), 0.0)),
    "sdpa_boolean": (f"    s = where(keep, {SCORES}, -inf)\n"
                     "    p = where(max(s, axis=-1, keepdims=true) == -inf, 0.0, softmax(s, axis=-1))\n"
                     "    return p @ v\n", (float("-inf"), 0.0)),
    # -inf with another replacement: the template sums V for it
    "sdpa_other_value": (f"    s = {SCORES} + mask\n"
                         "    p = where(max(s, axis=-1, keepdims=true) == -inf, -2.0, softmax(s, axis=-1))\n"
                         "    return p @ v\n", (float("-inf"), -2.0)),
    # the softmax by hand, the guard on its own max, an epilogue after the attention
    "by_hand": (f"    s = {SCORES} + mask\n"
                "    m = max(s, axis=-1, keepdims=true)\n"
                "    e = exp(s - m)\n"
                "    p = where(m == -1e30, 0.0, e / sum(e, axis=-1, keepdims=true))\n"
                "    return tanh(p @ v) * 2.0\n", (-1e30, 0.0)),
}


def _src(name: str) -> str:
    return HEAD + FORMS[name][0] + "}\n"


@pytest.mark.parametrize("target,binding", [("gpu", dict(B=2, H=4, S=256, T=256, D=32, E=32)),
                                            ("cpu", dict(B=2, H=4, S=1024, T=1024, D=32, E=32))])
@pytest.mark.parametrize("name", sorted(FORMS))
def test_the_guarded_attention_is_one_online_softmax_kernel(name, target, binding):
    st = stages(_src(name), binding, target=target)
    plan = st.plan
    assert plan.kernel_count == 1, plan.format()
    assert plan.kernels[0].template == "attention", plan.format()
    assert any(d.startswith("attention: ") for d in plan.decisions), plan.decisions
    info = plan.info
    (a,) = [x for x in (find_attention(info, o.id) for o in info.ops if o.kind == "contraction")
            if isinstance(x, Attention)]
    assert a.guard == pytest.approx(FORMS[name][1])
    assert ATTENTION_GUARD in st.texts["gpu"]
    # SDPA's C = -inf, K = 0 reads the accumulators as they are; other guards sum V too
    sums_v = re.search(r"\b(vs0_0|vsum)\b", st.emitted.source) is not None
    assert sums_v == (FORMS[name][1] != (float("-inf"), 0.0))


def test_the_example_chain_with_the_guard_plans_as_the_one_without():
    """attention.fdsl's masked attention, once plain and once guarded: one kernel each."""
    src = ("chain a(q: f32[2, 4, 16, 32], k: f32[2, 4, 16, 32], v: f32[2, 4, 16, 32], mask: f32[16, 16]) "
           "-> f32[2, 4, 16, 32] {\n"
           "    s = (q * 0.42) @ (permute(k, [0, 1, 3, 2]) * 0.42) + mask\n"
           "    p = where(max(s, axis=-1, keepdims=true) == -1e38, 0.0, softmax(s, axis=-1))\n"
           "    return p @ v\n}\n")
    plain = src.replace("where(max(s, axis=-1, keepdims=true) == -1e38, 0.0, softmax(s, axis=-1))",
                        "softmax(s, axis=-1)")
    for text in (plain, src):
        plan = stages(text, target="gpu").plan
        assert [g.template for g in plan.kernels] == ["attention"], plan.format()


def test_a_guard_on_another_max_is_not_the_softmax_guard():
    """where(max(mask) == C, ...) is not the softmax's row max: not one attention kernel, and
    the plan says why."""
    body = (f"    s = {SCORES} + mask\n"
            "    p = where(max(mask, axis=-1, keepdims=true) == -1e30, 0.0, softmax(s, axis=-1))\n"
            "    return p @ v\n")
    plan = stages(HEAD + body + "}\n", dict(B=2, H=4, S=256, T=256, D=32, E=32)).plan
    assert not any(g.template == "attention" for g in plan.kernels), plan.format()
    assert any("compares another value than the softmax's row max" in d for d in plan.decisions), plan.decisions


def _inputs(binding, masked: float, seed=3):
    """q, k, v, mask (`masked` where masked, else 0), keep with fully masked rows (1 and 4),
    partly masked ones, NaN in one query row of the second head and in one value column."""
    b = binding
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((b["B"], b["H"], b["S"], b["D"])).astype(np.float32)
    k = rng.standard_normal((b["B"], b["H"], b["T"], b["D"])).astype(np.float32)
    v = rng.standard_normal((b["B"], b["H"], b["T"], b["E"])).astype(np.float32)
    keep = rng.random((b["S"], b["T"])) < 0.6
    keep[:, 0] = True
    keep[1, :] = False
    keep[4, :] = False
    mask = np.where(keep, np.float32(0), np.float32(masked)).astype(np.float32)
    q[0, 1, 6, 2] = np.nan
    v[-1, 0, 5, 3] = np.nan
    return [q, k, v, mask, keep]


RUNS = [(n, t) for n in sorted(FORMS) for t in ("cuda-sim", "cpu")
        if t == "cuda-sim" or n in ("additive", "boolean", "sdpa", "sdpa_other_value")]


@pytest.mark.slow
@pytest.mark.parametrize("name,target", RUNS, ids=[f"{n}-{t}" for n, t in RUNS])
def test_the_guarded_attention_matches_the_reference(name, target):
    binding = dict(B=2, H=2, S=11, T=13, D=8, E=16)
    src = _src(name)
    planned = stages(src, binding).plan
    ops = [o.id for o in planned.info.ops if o.is_compute]
    plan = {"groups": [{"ops": ops, "attention": [16, 8]}]}
    prog = fusec.compile(src, target=target, options={"plans": {"g": plan}})
    compiled = prog.g.compiled(binding)
    assert compiled.plan["groups"][0]["template"] == "attention"
    inputs = _inputs(binding, FORMS[name][1][0])
    want = reference.run_chain(prog.g.typed, inputs, binding)[0]
    got = compiled.fused(*inputs)[0]
    c = compare(got, want, "f32")
    assert c.ok, c.describe()
    # the masked rows are the guard's value (NaN only in the NaN value column), a NaN query's
    # row NaN, as the reference
    kv = FORMS[name][1][1]
    for row in (1, 4):
        assert np.isnan(want[:, :, row]).sum() == np.isnan(got[:, :, row]).sum() > 0
        if name != "by_hand":            # (H, E) of the first batch: K · Σ_j V_j, no NaN there
            assert np.allclose(got[0, :, row], kv * inputs[2][0].sum(axis=1), rtol=1e-5, atol=1e-5)
    assert np.isnan(got[0, 1, 6]).all()


# ---- a guarded softmax alone: one row kernel ----------------------------------------------------
ROWS = """chain r(s: f32[B, S, T], mask: f32[S, T]) -> f32[B, S, T] {
    z = s * 0.5 + mask
    return where(max(z, axis=-1, keepdims=true) == C, 0.0, softmax(z, axis=-1))
}
"""
MASKED = {"-1e30": -1e30, "-inf": float("-inf")}


@pytest.mark.parametrize("c", sorted(MASKED))
@pytest.mark.parametrize("target", ["gpu", "cpu"])
def test_a_guarded_softmax_alone_is_one_row_kernel(target, c):
    plan = stages(ROWS.replace("C,", f"{c},"), dict(B=4, S=64, T=256), target=target).plan
    assert plan.kernel_count == 1, plan.format()
    if target == "gpu":
        assert "row kernel" in plan.format(), plan.format()


@pytest.mark.slow
@pytest.mark.parametrize("c", sorted(MASKED))
@pytest.mark.parametrize("target", ["cuda-sim", "cpu"])
def test_a_guarded_softmax_alone_matches_the_reference(target, c):
    binding = dict(B=2, S=9, T=12)
    prog = fusec.compile(ROWS.replace("C,", f"{c},"), target=target)
    rng = np.random.default_rng(5)
    s = rng.standard_normal((2, 9, 12)).astype(np.float32)
    s[1, 2, 3] = np.nan
    keep = rng.random((9, 12)) < 0.5
    keep[:, 0] = True
    keep[6, :] = False
    mask = np.where(keep, np.float32(0), np.float32(MASKED[c])).astype(np.float32)
    (checked,) = prog.r.check(inputs=[s, mask], binding=binding)
    assert checked.ok, checked.describe()
    got = prog.r.compiled(binding).fused(s, mask)[0]
    assert np.all(got[:, 6] == 0) and np.isnan(got[1, 2]).all()


# ---- two layers in one chain: the zero fills CSE shares between their contractions ------------
TWO_LAYERS = """chain two(q: f32[1, 2, 64, 16], k: f32[1, 2, 64, 16], v: f32[1, 2, 64, 16], mask: f32[64, 64]) -> f32[1, 2, 64, 16] {
    s = q @ permute(k, [0, 1, 3, 2]) * 0.25 + mask
    o = where(max(s, axis=-1, keepdims=true) == -1e30, 0.0, softmax(s, axis=-1)) @ v
    s2 = o @ permute(k, [0, 1, 3, 2]) * 0.25 + mask
    return where(max(s2, axis=-1, keepdims=true) == -1e30, 0.0, softmax(s2, axis=-1)) @ v
}
"""


TWO_LAYERS_S = TWO_LAYERS.replace("64", "S")


@pytest.mark.parametrize("target,binding", [("gpu", {}), ("cpu", dict(S=1024))])
def test_two_attention_layers_sharing_their_fills_are_one_kernel_each(target, binding):
    """Both layers' contractions start from the same zero fill (CSE): the kernels a pattern
    spans are found by its compute ops, so the other layer's are not pulled in. On the cpu both
    kernels' ops share the function's block: each template takes its own (emit/attention.py)."""
    st = stages(TWO_LAYERS_S if binding else TWO_LAYERS, binding, target=target)
    assert [g.template for g in st.plan.kernels].count("attention") == 2, st.plan.format()
    assert st.emitted.source.count("fusec.block_attention") >= 2


@pytest.mark.slow
def test_two_attention_layers_match_the_reference_on_cpu():
    """The cpu plan's two attention kernels, tiles forced small (several key steps)."""
    from fusec.compiler.plan.handplan import to_spec
    binding = dict(S=96)
    planned = stages(TWO_LAYERS_S, dict(S=1024), target="cpu").plan
    spec = to_spec(planned.summary())
    assert [g.get("attention") is not None for g in spec["groups"]].count(True) == 2, planned.format()
    for g in spec["groups"]:
        g["block_tiles"] = [0] * len(g["block_tiles"])
        if g.get("attention"):
            g["attention"] = [32, 16]
    prog = fusec.compile(TWO_LAYERS_S, target="cpu", options={"plans": {"two": spec}})
    compiled = prog.two.compiled(binding)
    assert [g["template"] for g in compiled.plan["groups"]].count("attention") == 2
    _matches_the_reference(prog.two.typed, compiled, binding, seed=2)


@pytest.mark.slow
def test_two_attention_layers_match_the_reference_on_cuda_sim():
    prog = fusec.compile(TWO_LAYERS, target="cuda-sim")
    compiled = prog.two.compiled({})
    assert [g["template"] for g in compiled.plan["groups"]].count("attention") == 2
    _matches_the_reference(prog.two.typed, compiled, {}, seed=1)


def _matches_the_reference(typed, compiled, binding, seed):
    """Random q, k, v (S = the binding's, else 64) and a mask with a fully masked row (5)."""
    n = binding.get("S", 64)
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((1, 2, n, 16)).astype(np.float32) for _ in range(3))
    keep = rng.random((n, n)) < 0.6
    keep[:, 0] = True
    keep[5] = False
    mask = np.where(keep, np.float32(0), np.float32(-1e30)).astype(np.float32)
    inputs = [q, k, v, mask]
    want = reference.run_chain(typed, inputs, binding)[0]
    c = compare(compiled.fused(*inputs)[0], want, "f32")
    assert c.ok, c.describe()
