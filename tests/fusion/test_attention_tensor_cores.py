"""Attention on tensor cores (issue 37 items 3, 4; plan/attention_mma.py, emit/attention_mma.py):
the planner's choice of the fused FlashAttention-2 form for f16 and bf16, why it stays on FMAs
otherwise, its numbers with mma.sync and ldmatrix replaced by the warp-level emulations of
tests/fusion/test_tensor_cores.py (written from the PTX ISA's tables, so a fragment read from
the wrong row or column fails), and the causal mask's skipped key tiles."""
from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

import fusec
from fusec.compiler.options import CompileOptions
from fusec.compiler.pipeline import compile_typed
from fusec.compiler.plan.handplan import to_spec
from fusec.compiler.plan.hardware import GPUS

from test_tensor_cores import _emulated_f16, _emulated_ldsm

H200 = GPUS["h200"]
ATT = """chain att(q: f16[B, S, D], k: f16[B, S, D], v: f16[B, S, D]) -> f16[B, S, D] {
    return softmax(q @ transpose(k) * 0.125, axis=-1) @ v
}"""
CAUSAL = """chain att(q: f16[B, S, D], k: f16[B, S, D], v: f16[B, S, D]) -> f16[B, S, D] {
    z = where(reshape(arange(S), [S, 1]) >= arange(S), q @ transpose(k) * 0.125, -inf)
    return softmax(z, axis=-1) @ v
}"""
MASKED = """chain att(q: f16[B, S, D], k: f16[B, S, D], v: f16[B, S, D], keep: bool[S, S]) -> f16[B, S, D] {
    z = where(keep, q @ transpose(k) * 0.125, -inf)
    return softmax(z, axis=-1) @ v
}"""


def _src(src, kind):
    return src.replace("f16", kind)


def _stages(src, binding, plans=None, target="gpu"):
    c = fusec.check(src).chain("att")
    return compile_typed(c, binding, options=CompileOptions.make(target=target, hardware=H200, plans=plans or {}))


def _forced(src, binding, bkv=64):
    """The chain's plan with its attention kernel at 64 queries per block on tensor cores."""
    spec = to_spec(_stages(src, binding).plan)
    (g,) = [g for g in spec["groups"] if g.get("attention")]
    g["attention"] = [64, bkv]
    g.pop("tensor_cores", None)
    return _stages(src, binding, {"att": spec})


@pytest.mark.parametrize("kind", ["f16", "bf16"])
@pytest.mark.parametrize("d", [64, 128])
def test_f16_and_bf16_attention_is_one_kernel_on_tensor_cores(kind, d):
    """No more 4-kernel plan: the fused kernel priced at mma.sync's rate is the fastest."""
    st = _stages(_src(ATT, kind), dict(B=16, S=2048, D=d))
    assert st.plan.kernel_count == 1, st.plan.format()
    (g,) = st.plan.kernels
    assert g.template == "attention" and g.config.mma == kind and g.config.block_q == 64
    (note,) = [x for x in st.plan.decisions if x.startswith("attention: ")]
    assert f"on {kind} tensor cores (mma.sync m16n8k16" in note
    assert f"{kind} tensor cores (mma.sync m16n8k16: 4 warps of 16 query rows, P in registers)" in st.plan.format()
    src = st.emitted.source.split("def k0")[1]
    assert f"_att_mma_{kind}(" in src and "_att_ldsm_x4_t(" in src and f"_att_pack_{kind}x2(" in src
    assert "cuda.shfl_xor_sync(0xFFFFFFFF" in src and "Ps" not in src      # P never goes through shared memory
    (cost,) = st.plan.costs
    assert cost.time_s >= 4 * 16 * 2048 * 2048 * d / H200.mma_sync_flops()     # never under mma.sync's ceiling


@pytest.mark.parametrize("src,binding,why", [
    (ATT, dict(B=2, S=256, D=40), "head dims 40 and 40 are not multiples of 16"),
    (ATT.replace("f16", "f32"), dict(B=2, S=256, D=64), "Q, K and V are not all f16 or all bf16"),
])
def test_what_stays_on_fmas_says_why(src, binding, why):
    st = _stages(src, binding)
    (g,) = [g for g in st.plan.kernels if g.template == "attention"]
    assert g.config.mma == "" and "_att_mma" not in st.emitted.source
    notes = [x for x in st.plan.decisions if "attention" in x]
    assert any(why in x for x in notes) == (why.startswith("head")), notes   # --explain says why (f16 only)


@pytest.mark.slow
def test_a_plan_can_ask_for_fmas_and_is_refused_tensor_cores_where_they_do_not_apply():
    b = dict(B=2, S=256, D=64)
    spec = to_spec(_forced(ATT, b).plan)
    (g,) = [g for g in spec["groups"] if g.get("attention")]
    assert g["tensor_cores"] == "f16"
    g["tensor_cores"] = ""
    assert _stages(ATT, b, {"att": spec}).plan.kernels[0].config.mma == ""
    g["tensor_cores"], g["attention"] = "f16", [32, 64]
    with pytest.raises(Exception, match="32 queries per block"):
        _stages(ATT, b, {"att": spec})


@pytest.mark.slow
def test_the_causal_mask_bounds_the_key_loop_and_a_data_mask_does_not():
    b = dict(B=2, S=512, D=64)
    causal = _forced(CAUSAL, b).emitted.source
    line = [x for x in causal.splitlines() if "nsteps = " in x]
    assert line and "min(8, (i0 + 127) // 64)" in line[0], line
    plain = _forced(ATT, b).emitted.source
    assert "nsteps = 8" in plain and "causal" not in plain.split("def k0")[1]
    masked = _forced(MASKED, b).emitted.source
    assert "nsteps = 8" in masked
    # the FMA kernel skips them too: its key loop ends at the block's last query
    fma = _stages(CAUSAL.replace("f16", "f32"), b).emitted.source
    assert re.search(r"for j0 in range\(0, min\(512, i0 \+ \d+\), \d+\):", fma), fma[:200]


def _emulate(st, kind, mutate=None):
    """The module with the tensor-core attention's warp operations replaced by the emulations of
    test_tensor_cores.py (its own pack for bf16: cvt.rn.bf16x2.f32's two bf16s as uint16 bits)."""
    source = st.emitted.source if mutate is None else mutate(st.emitted.source)
    ns = {}
    exec(compile(source, "<tensor-core attention>", "exec"), ns)
    pack, mma = _emulated_f16(kind)
    if kind == "bf16":
        def pack(lo, hi):
            return tuple(np.float32(x).astype(ml_dtypes.bfloat16).view(np.uint16) for x in (lo, hi))
    smem_base, x4, x4t, _, _ = _emulated_ldsm()
    ns.update({f"_att_mma_{kind}": mma, f"_att_pack_{kind}x2": pack, "_att_smem_base": smem_base,
               "_att_ldsm_x4": x4, "_att_ldsm_x4_t": x4t})
    return ns


def _reference(q, k, v, causal):
    s = np.einsum("bid,bjd->bij", q.astype(np.float64), k.astype(np.float64)) * 0.125
    if causal:
        s = np.where(np.tril(np.ones(s.shape[1:], bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bij,bjd->bid", p / p.sum(-1, keepdims=True), v.astype(np.float64))


def _run(ns, q, k, v):
    from numba import cuda
    (out,) = ns["run_att"](*(cuda.to_device(x) for x in (q, k, v)))
    return np.asarray(out.copy_to_host()).astype(np.float64)


SLOW = pytest.mark.slow   # the quick tier keeps the causal case
CASES = [  # kind, chain, binding (S not a multiple of the tiles: partial query and key tiles), keys per step, |scores|
    pytest.param("f16", ATT, dict(B=1, S=80, D=64), 64, 1.0, marks=SLOW),
    pytest.param("bf16", ATT, dict(B=1, S=80, D=64), 32, 1.0, marks=SLOW),
    pytest.param("f16", ATT, dict(B=1, S=72, D=128), 64, 1.0, marks=SLOW),
    pytest.param("f16", ATT, dict(B=2, S=70, D=32), 32, 80.0, marks=SLOW),
    pytest.param("bf16", ATT, dict(B=1, S=70, D=32), 64, 80.0, marks=SLOW),
    ("f16", CAUSAL, dict(B=1, S=150, D=32), 64, 1.0),
]


@pytest.mark.parametrize("kind,src,binding,bkv,scale", CASES)
def test_the_mma_path_under_an_emulated_warp(kind, src, binding, bkv, scale):
    st = _forced(_src(src, kind), binding, bkv)
    (g,) = st.plan.kernels
    assert g.config.mma == kind and g.config.block_kv == bkv
    ns = _emulate(st, kind)
    rng = np.random.default_rng(3)
    B, S, D = binding["B"], binding["S"], binding["D"]
    dt = ml_dtypes.bfloat16 if kind == "bf16" else np.float16
    # |scores| ~ scale: q . k / 8 over D terms of ~ sigma^2 each
    sigma = (scale * 8 / np.sqrt(D)) ** 0.5
    q, k = (rng.normal(0, sigma, (B, S, D)).astype(dt) for _ in range(2))
    v = rng.uniform(-2, 2, (B, S, D)).astype(dt)
    # the reference with the chain's own roundings (each f16/bf16 op rounds: at |s| ~ 80 a score
    # is rounded to 1/16 or 1/32, which no kernel may skip)
    (want,) = fusec.reference(fusec.check(_src(src, kind)).chain("att"), [q, k, v], binding)
    want = np.asarray(want).astype(np.float64)
    if scale > 10:
        s = np.einsum("bid,bjd->bij", q.astype(np.float32), k.astype(np.float32)) * 0.125
        assert np.abs(s).max() > 60
    got = _run(ns, q, k, v)
    tol = 6e-2 if kind == "bf16" else 1e-2
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("mutate", [
    lambda s: s.replace("_att_ldsm_x4_t(va", "_att_ldsm_x4(va"),             # V's fragments not transposed
    lambda s: re.sub(r"(_att_pack_f16x2\()(\w+), (\w+)\)", r"\1\3, \2)", s),  # P's two columns swapped
    lambda s: s.replace("qrow = warp * 16 + 8 * (lj & 1) + lr", "qrow = warp * 16 + 8 * (lj >> 1) + lr"),
], ids=["v-not-transposed", "p-columns-swapped", "q-rows-of-another-matrix"])
def test_a_wrong_fragment_fails_under_the_emulation(mutate):
    st = _forced(ATT, dict(B=1, S=64, D=32), 32)
    assert mutate(st.emitted.source) != st.emitted.source
    ns = _emulate(st, "f16", mutate)
    rng = np.random.default_rng(4)
    q, k, v = (rng.uniform(-2, 2, (1, 64, 32)).astype(np.float16) for _ in range(3))
    got = _run(ns, q, k, v)
    assert not np.allclose(got, _reference(q, k, v, False), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("target,kind", [
    ("cuda-sim", "f16"),
    pytest.param("cuda-sim", "bf16", marks=SLOW),
    pytest.param("cpu", "f16", marks=SLOW),
    pytest.param("cpu", "bf16", marks=SLOW),
])
def test_causal_attention_matches_the_reference(target, kind):
    """The compiled module as it is (under the simulator the warp operations are the module's own
    emulation) against the reference, with tiles skipped above the diagonal."""
    b = dict(B=1, S=100, D=32)
    spec = to_spec(_forced(_src(CAUSAL, kind), b).plan) if target == "cuda-sim" else None
    prog = fusec.compile(_src(CAUSAL, kind), target=target,
                         options={"baseline": False, **({"plans": {"att": spec}} if spec else {})})
    (c,) = prog.att.check(binding=b, seed=5)
    assert c.ok, c.describe()
