"""Attention as online softmax (plan/attention.py, emit/attention.py): which chains are one
kernel, why the others are not, that no S_q x S_k buffer is allocated, and the numbers against
the reference on the cpu and the simulator (tiny sizes, tiles forced small so several key steps,
partial tiles and several query blocks run)."""
import os
import re

import numpy as np
import pytest

import fusec
from fusec.compiler.plan.attention import Attention, find_attention
from fusec.compiler.plan.templates import AttentionConfig
from helpers import stages

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = open(os.path.join(ROOT, "examples", "attention.fdsl")).read()

TYPICAL = {  # chain of examples/attention.fdsl -> a typical binding
    "attention": dict(B=8, S=1024), "causal": dict(B=8, S=1024), "masked": dict(B=2, H=4, S=1024),
    "cross": dict(B=8, S=1024, T=512), "by_hand": dict(B=8, S=1024),
}


def _host_allocations(st) -> list[str]:
    entry = st.emitted.entries[st.plan.chain]
    src = st.emitted.source
    host = src[src.index(f"def {entry.host}("):]
    host = host[:host.find("\n\n\n")] if "\n\n\n" in host else host
    return re.findall(r"(?:device_array|np\.empty|np\.zeros)\(\(([^)]*)\)", host)


@pytest.mark.parametrize("target", ["gpu", "cpu"])
@pytest.mark.parametrize("chain", sorted(TYPICAL))
def test_attention_variants_are_one_kernel_without_a_scores_buffer(chain, target):
    b = TYPICAL[chain]
    st = stages(EXAMPLE, b, target=target, chain=chain)
    plan = st.plan
    assert plan.kernel_count == 1, plan.format()
    (g,) = plan.kernels
    assert g.template == "attention", plan.format()
    assert any(d.startswith("attention: ") and "online-softmax" in d for d in plan.decisions)
    sq, sk = b["S"], b.get("T", b["S"])
    for shape in _host_allocations(st):
        dims = [int(x) for x in shape.replace(" ", "").split(",") if x]
        assert not (sq in dims and sk in dims and dims.count(sq) + (sk != sq) * dims.count(sk) >= 2), shape
    marks = st.texts["gpu"]
    assert "fusec.block_attention" in marks
    if target == "gpu":
        assert "cuda.shared.array" in st.emitted.source


def test_the_pattern_is_found_from_the_algebra_not_the_name():
    st = stages(EXAMPLE, TYPICAL["by_hand"], chain="by_hand")
    info = st.plan.info
    found = [find_attention(info, o.id) for o in info.ops if o.kind == "contraction"]
    (a,) = [x for x in found if isinstance(x, Attention)]
    assert (a.sq, a.sk, a.d, a.dv, a.batch) == (1024, 1024, 64, 64, 8)
    mh = stages(EXAMPLE, TYPICAL["masked"], chain="masked").plan.info
    (a,) = [x for x in (find_attention(mh, o.id) for o in mh.ops if o.kind == "contraction")
            if isinstance(x, Attention)]
    assert a.batch == 8 and len(a.batch_loops) == 2 and a.norm is None     # 4-D; P = E / L folded into P · V
    assert len(a.score_ops) >= 1


@pytest.mark.parametrize("src,why", [
    ("""chain f(q: f32[B, S, 32], k: f32[B, S, 32], v: f32[B, S, 32]) -> (f32[B, S, 32], f32[B, S, S]) {
        p = softmax(q @ transpose(k) / 4.0)
        return p @ v, p
    }""", "the normalised scores are also used by the output"),
    ("""chain f(q: f32[B, S, 32], k: f32[B, S, 32], v: f32[B, S, 32]) -> f32[B, S, 32] {
        return softmax(q @ transpose(k), axis=1) @ v
    }""", "the softmax is not over the keys' axis"),
])
def test_when_online_softmax_would_change_the_result_the_plan_says_why(src, why):
    plan = stages(src, dict(B=4, S=64)).plan
    assert not any(g.template == "attention" for g in plan.kernels)
    assert any(d.startswith("not attention") and why in d for d in plan.decisions), plan.decisions


def test_a_hand_plan_can_ask_for_attention_and_is_checked():
    st = stages(EXAMPLE, dict(B=2, S=40), chain="attention")
    ops = [o.id for o in st.plan.info.ops if o.is_compute]
    st = stages(EXAMPLE, dict(B=2, S=40), chain="attention", plan={"groups": [{"ops": ops, "attention": [32, 16]}]})
    assert st.plan.kernels[0].config == AttentionConfig(block_q=32, block_kv=16)
    with pytest.raises(Exception, match="multiple of 16"):
        stages(EXAMPLE, dict(B=2, S=40), chain="attention", plan={"groups": [{"ops": ops, "attention": [20, 16]}]})
    with pytest.raises(Exception, match="not an attention kernel"):
        stages(EXAMPLE, dict(B=2, S=40), chain="attention", plan={"groups": [{"ops": ops[:-1], "attention": [16, 8]},
                                                                              {"ops": ops[-1:]}]})


LARGE = """chain big(q: f32[B, S, 64], k: f32[B, S, 64], v: f32[B, S, 16]) -> f32[B, S, 16] {
    return softmax(q @ transpose(k) * 10.0) @ v
}"""

HALF = """chain half(q: f16[B, S, 32], k: f16[B, S, 32], v: f16[B, S, 32]) -> f16[B, S, 32] {
    return softmax(q @ transpose(k) * 0.125) @ v
}"""

# (source, chain, binding, forced tiles): odd sizes, so the last key step and query block are partial
CASES = [
    (EXAMPLE, "causal", dict(B=1, S=21), [16, 8]),
    (EXAMPLE, "masked", dict(B=1, H=2, S=13), [16, 8]),
    (EXAMPLE, "cross", dict(B=2, S=17, T=11), [16, 8]),
    (EXAMPLE, "by_hand", dict(B=1, S=19), [16, 16]),
    (LARGE, "big", dict(B=1, S=18), [16, 8]),            # |z| ~ 80: the running max keeps exp finite
    (HALF, "half", dict(B=2, S=11), [16, 8]),            # f16 operands (extf/truncf in the algebra), f32 inside
]


def _inputs(f, binding):
    """Seeded inputs; a causal mask that leaves the first query a single key, a padding mask
    that keeps at least the first key."""
    rng = np.random.default_rng(7)
    out = []
    for p in f.typed.param_nodes:
        shape = tuple(binding[d] if isinstance(d, str) else d for d in p.type.shape)
        if p.type.dtype.kind == "bool":
            if p.name == "mask":
                out.append(np.tril(np.ones(shape, dtype=bool)))
            else:
                keep = rng.random(shape) < 0.7
                keep[..., 0] = True
                out.append(keep)
        elif not shape:
            out.append(np.float32(0.2))
        else:
            out.append(rng.standard_normal(shape).astype(p.type.dtype.np_name))
    return out


# every case on the simulator; on the cpu (a Numba compile of some seconds each) the masks and
# the large scores
RUNS = [(c, "cuda-sim") for c in CASES] + [(c, "cpu") for c in CASES if c[1] in ("causal", "masked", "big")]


@pytest.mark.slow
@pytest.mark.parametrize("case,target", RUNS, ids=[f"{c[1]}-{t}" for c, t in RUNS])
def test_online_softmax_matches_the_reference(case, target):
    src, chain, binding, tiles = case
    planned = stages(src, binding, chain=chain).plan
    ops = [o.id for o in planned.info.ops if o.is_compute]
    plan = {"groups": [{"ops": ops, "attention": tiles}]}
    prog = fusec.compile(src, target=target, options={"baseline": False, "plans": {chain: plan}})
    f = getattr(prog, chain)
    (c,) = f.check(inputs=_inputs(f, binding), binding=binding)
    assert c.ok, c.describe()
    assert f.compiled(binding).plan["groups"][0]["attention"] == tiles


# ---- property tests: random attention variants, forced into one online-softmax kernel -------
from hypothesis import HealthCheck, given, settings          # noqa: E402
from hypothesis import strategies as hs                       # noqa: E402
from fusec.runtime import reference                           # noqa: E402
from fusec.runtime.compare import compare                     # noqa: E402
from test_properties import DERANDOMIZE                        # noqa: E402

SCORES = ["{s} * 0.25", "{s} / t", "tanh({s} * 0.1) * 10.0", "{s} * 0.25 + bias",
          "where(mask, {s} * 0.25, -1e9)", "where(mask, {s}, -1e9) + bias", "{s} * 3.0"]
EPILOGUES = ["{o}", "{o} * 2.0 + 1.0", "tanh({o})"]


@hs.composite
def attention_chains(draw):
    d, dv = draw(hs.sampled_from([8, 16, 24])), draw(hs.sampled_from([8, 12, 16]))
    score = draw(hs.sampled_from(SCORES)).format(s="q @ transpose(k)")
    params = [f"q: f32[B, S, {d}]", f"k: f32[B, T, {d}]", f"v: f32[B, T, {dv}]"]
    params += [p for name, p in (("bias", "bias: f32[S, T]"), ("mask", "mask: bool[S, T]"), ("t", "t: f32"))
               if name in score.replace("transpose", "")]
    if draw(hs.booleans()):
        body = f"    p = softmax({score})\n"
    else:
        body = (f"    z = {score}\n    e = exp(z - max(z, axis=-1, keepdims=true))\n"
                "    p = e / sum(e, axis=-1, keepdims=true)\n")
    body += f"    return {draw(hs.sampled_from(EPILOGUES)).format(o='p @ v')}\n"
    src = f"chain r({', '.join(params)}) -> f32[B, S, {dv}] {{\n{body}}}\n"
    binding = {"B": draw(hs.integers(1, 2)), "S": draw(hs.integers(2, 20)), "T": draw(hs.integers(2, 20))}
    tiles = [draw(hs.sampled_from([16, 32])), draw(hs.sampled_from([8, 16]))]
    return src, binding, tiles


def _check_attention(src, binding, tiles, target):
    planned = stages(src, binding).plan
    ops = [o.id for o in planned.info.ops if o.is_compute]
    plan = {"groups": [{"ops": ops, "attention": tiles}]}
    prog = fusec.compile(src, target=target, options={"plans": {"r": plan}})
    chain = prog.r
    inputs = reference.random_inputs(chain.typed, binding, seed=2)
    compiled = chain.compiled(binding)
    assert compiled.plan["groups"][0]["attention"] == tiles
    want = reference.run_chain(chain.typed, inputs, binding)
    fused, unfused = compiled.fused(*inputs), compiled.unfused(*inputs)
    for got, what in ((fused[0], "fused"), (unfused[0], "unfused")):
        c = compare(got, want[0], "f32")
        assert c.ok, f"{what} vs reference: {c.describe()}\n{src}{binding}"
    assert compare(fused[0], unfused[0], "f32").ok


@pytest.mark.slow
@settings(max_examples=5, deadline=None, derandomize=DERANDOMIZE, suppress_health_check=[HealthCheck.too_slow])
@given(attention_chains())
def test_random_attention_variants_on_cuda_sim(case):
    _check_attention(*case, "cuda-sim")


@pytest.mark.slow
@settings(max_examples=1, deadline=None, derandomize=DERANDOMIZE, suppress_health_check=[HealthCheck.too_slow])
@given(attention_chains())
def test_random_attention_variants_on_cpu(case):
    _check_attention(*case, "cpu")


@pytest.mark.slow
def test_the_gpu_kernel_report_at_16_heads_of_2048():
    """The issue's measure at B·H = 16, S = 2048, D = 64 (ptxas -v for sm_90, occupancy on the
    H200): shared memory, no local memory or spills, a block for every SM and the resident
    slots of one wave (nearly) all taken (512 blocks in 4 x 132 slots at (64, 32))."""
    from fusec.compiler.plan.hardware import GPUS
    from fusec.compiler.report import report_kernels
    st = stages(EXAMPLE, dict(B=16, S=2048), chain="attention")
    (g,) = st.plan.kernels
    assert g.template == "attention"
    (r,) = report_kernels(st.emitted.source, st.emitted.entries["attention"], GPUS["h200"], trace=False)
    assert r.registers is not None, r.unmeasured
    assert r.smem_bytes > 0 and r.stack_frame_bytes == 0 and r.local_bytes == 0
    assert r.spill_store_bytes == 0 and r.spill_load_bytes == 0
    assert r.blocks >= GPUS["h200"].units and r.waves >= 0.9


# ---- the gpu schedule's layout and its key step, read from the emitted source ---------------
from fusec.compiler.plan.attention import THREADS_X, THREADS_Y, gpu_layout    # noqa: E402


@pytest.mark.parametrize("d,dv", [(64, 64), (32, 32), (128, 128), (24, 12), (5, 3), (36, 40)])
def test_the_shared_tiles_are_read_and_written_without_bank_conflicts(d, dv):
    """Warp 0 is threads (ty 0..3, tx 0..7). Its P stores (row ty + 16 a, key tx + 8 c) fall in
    32 different banks; a 128-bit read of K (8 keys tx + 8 c of one quarter-warp, 4 adjacent d)
    starts each lane in its own group of 4 banks; every tile a thread reads 4-wide has a row
    stride that keeps 16-byte alignment."""
    for bkv in (8, 16, 32, 64):
        lay = gpu_layout(d, dv, 64, bkv)
        for c in range(bkv // THREADS_X):
            banks = {((ty + 16) * lay.p_stride + tx + 8 * c) % 32 for ty in range(4) for tx in range(THREADS_X)}
            assert len(banks) == 32, (bkv, lay)
            starts = {((tx + 8 * c) * lay.k_stride) % 32 for tx in range(THREADS_X)}
            assert len(starts) == 8 and all(b % 4 == 0 for b in starts), (bkv, lay)
        assert lay.dp % 4 == 0 and lay.dp >= d and lay.k_stride % 4 == 0 and lay.p_stride % 4 == 0
        assert lay.v_stride == lay.groups * THREADS_X * lay.cw >= dv and lay.v_stride % 4 == 0
    assert THREADS_X * THREADS_Y == 128


def test_the_bench_key_step_is_written_out_with_two_barriers_and_shuffles():
    """At the bench size (B=8, S=1024, D=64; tiles 32 x 32) the key step holds no loop, no `//`
    or `%`, two block barriers, a warp fence for P, and the row max by shuffles; every shared
    read of the scores and of P · V is at a constant offset from a per-thread base, 4 adjacent
    columns at a time."""
    src = open(os.path.join(ROOT, "bench", "fdsl", "attention.fdsl")).read()
    st = stages(src, dict(B=8, S=1024, D=64))
    (g,) = st.plan.kernels
    assert g.config == AttentionConfig(block_q=32, block_kv=32)
    text = st.emitted.source
    kernel = text[text.index("def k0("):]
    step = kernel[kernel.index("    for j0 in range("):]
    step = step[:step.index("\n    if _CUDASIM:", step.index("cuda.syncwarp()"))]    # to the row sums
    body = step.split("\n", 1)[1]
    assert " for " not in body and "//" not in body and " % " not in body
    # the step's own barriers (the simulator's stand-ins for shuffles and syncwarp are deeper)
    assert [l for l in body.splitlines() if l.strip() == "cuda.syncthreads()" and len(l) - len(l.lstrip()) == 8] \
        == ["        cuda.syncthreads()"] * 2
    assert "cuda.syncwarp()" in body and body.count("cuda.shfl_xor_sync") == 3 * 2
    reads = re.findall(r"= (Qs|Ks|Ps|Vs)\[([^,\]]+), ([^\]]+)\]", body)
    assert len(reads) == 16 * (2 + 4) * 4 + 8 * (2 * 4 + 4 * 2 * 4)
    for tile, row, col in reads:
        assert re.fullmatch(r"(ty|tx)( \+ \d+)?|\d+", row) and re.fullmatch(r"(tx \* 4)?( \+ )?\d*", col), (tile, row, col)


# ---- projections the split-reductions pass splits (a [32, 128] x [128, 128] matmul: too few
# outputs to fill the device, so 2 partials of 64 and their combine) --------------------------
PROJECTED = """chain p(x: f32[2, 16, 128], wq: f32[128, 128], wk: f32[128, 128], wv: f32[128, 128], bq: f32[128], bk: f32[128], bv: f32[128]) -> f32[2, 4, 16, 32] {
    q = permute(reshape(x @ wq + bq, [2, 16, 4, 32]), [0, 2, 1, 3])
    k = permute(reshape(x @ wk + bk, [2, 16, 4, 32]), [0, 2, 3, 1])
    v = permute(reshape(x @ wv + bv, [2, 16, 4, 32]), [0, 2, 1, 3])
    return softmax(q @ k * 0.17, axis=-1) @ v
}
"""


def test_a_split_projection_combine_in_the_scores_kernel_becomes_its_own_kernel():
    """The greedy planner fuses K's combine into the scores' kernel; the attention merge gives
    it a kernel of its own again (plan/attention_merge.py: _combines) and says so."""
    plan = stages(PROJECTED, target="gpu").plan
    templates = [g.template for g in plan.kernels]
    assert templates.count("attention") == 1, plan.format()
    att = plan.kernels[templates.index("attention")]
    a = find_attention(plan.info, att.root)
    assert isinstance(a, Attention)
    assert not [m for m in att.ops if plan.info.op(m).kind == "reduction" and m not in a.ops], plan.format()
    partials = [o.id for o in plan.info.ops if o.note.startswith("split-reductions")]
    combines = [g for g in plan.kernels if plan.info.op(g.root).kind == "reduction"]
    assert len(partials) == len(combines) == 3, plan.format()          # Q's, K's and V's, each a kernel
    assert all(set(plan.info.op(g.root).producers) & set(partials) for g in combines)
    (said,) = [d for d in plan.decisions if d.startswith("attention: ")]
    assert re.search(r", %\d+ reduce\(addf\) as a kernel of its own before it", said), said


@pytest.mark.slow
def test_a_split_projection_attention_matches_the_reference_on_cuda_sim():
    """Q's and K's combines start from one (CSE'd) zero fill: each writes its own buffer, and
    the attention reads Q's bias add of Q's (tile_and_fuse.py: _gather_before_root)."""
    from fusec.runtime import reference
    from fusec.runtime.compare import compare
    prog = fusec.compile(PROJECTED, target="cuda-sim")
    compiled = prog.p.compiled({})
    assert [g["template"] for g in compiled.plan["groups"]].count("attention") == 1
    rng = np.random.default_rng(4)
    shapes = [(2, 16, 128), (128, 128), (128, 128), (128, 128), (128,), (128,), (128,)]
    inputs = [(rng.standard_normal(s) * 0.3).astype(np.float32) for s in shapes]
    want = reference.run_chain(prog.p.typed, inputs, {})[0]
    c = compare(compiled.fused(*inputs)[0], want, "f32")
    assert c.ok, c.describe()


@pytest.mark.slow
def test_multihead_with_its_output_permute_in_the_kernel_matches_the_reference_on_cuda_sim():
    """examples/attention.fdsl's multihead: the output's permute([1, 0, 2]) is the attention
    kernel's epilogue, reading the output at a permutation of its loops (emit/attention.py:
    _epilogue_dims)."""
    from fusec.runtime import reference
    from fusec.runtime.compare import compare
    prog = fusec.compile(EXAMPLE, target="cuda-sim")
    binding = dict(S=32)
    compiled = prog.multihead.compiled(binding)
    assert [g["template"] for g in compiled.plan["groups"]][-1] == "attention", compiled.plan
    rng = np.random.default_rng(6)
    inputs = [(rng.standard_normal(s) * 0.3).astype(np.float32) for s in [(32, 128)] + [(128, 128)] * 3]
    want = reference.run_chain(prog.multihead.typed, inputs, binding)[0]
    c = compare(compiled.fused(*inputs)[0], want, "f32")
    assert c.ok, c.describe()
