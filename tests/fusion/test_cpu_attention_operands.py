"""The cpu attention kernel passes Q, K and V to BLAS as they lie in their arrays where it can
(emit/attention_cpu.py: _as_it_lies): no producer in the kernel (a transpose of K is read through,
with BLAS's transpose flag), row-major, and a whole tile in every query block and key step.
Elsewhere a copy gathers the tile, as before. Each chain is checked against the reference, and
the emitted scores and P · V calls say which operands went in as they lie."""
import re

import pytest

import fusec
from fusec.compiler.plan.templates import AttentionConfig
from helpers import stages

ATT = "chain {name}({params}) -> f32[{out}] {{\n    return {body}\n}}\n"
CASES = {
    # name: (params, output, body, binding, (Q, K, V) passed as they lie: flag or None when gathered)
    "plain": ("q: f32[B, S, 16], k: f32[B, T, 16], v: f32[B, T, 8]", "B, S, 8",
              "softmax(q @ transpose(k) * 0.25) @ v", dict(B=2, S=32, T=16), (111, 112, 111)),
    "k_stored_transposed": ("q: f32[B, S, 16], kt: f32[B, 16, T], v: f32[B, T, 8]", "B, S, 8",
                            "softmax(q @ kt * 0.25) @ v", dict(B=2, S=32, T=16), (111, 111, 111)),
    "v_stored_transposed": ("q: f32[B, S, 16], k: f32[B, T, 16], vt: f32[B, 8, T]", "B, S, 8",
                            "softmax(q @ transpose(k) * 0.25) @ transpose(vt)", dict(B=2, S=32, T=16),
                            (111, 112, 112)),
    "heads_4d": ("q: f32[B, H, S, 16], k: f32[B, H, T, 16], v: f32[B, H, T, 16]", "B, H, S, 16",
                 "softmax(q @ permute(k, [0, 1, 3, 2]) * 0.25) @ v", dict(B=2, H=2, S=16, T=16), (111, 112, 111)),
    "q_made_in_the_kernel": ("q: f32[B, S, 16], k: f32[B, T, 16], v: f32[B, T, 8]", "B, S, 8",
                             "softmax(tanh(q) @ transpose(k)) @ v", dict(B=2, S=32, T=16), (None, 112, 111)),
    "partial_key_step": ("q: f32[B, S, 16], k: f32[B, T, 16], v: f32[B, T, 8]", "B, S, 8",
                         "softmax(q @ transpose(k) * 0.25) @ v", dict(B=2, S=32, T=13), (111, None, None)),
    "partial_query_block": ("q: f32[B, S, 16], k: f32[B, T, 16], v: f32[B, T, 8]", "B, S, 8",
                            "softmax(q @ transpose(k) * 0.25) @ v", dict(B=2, S=21, T=16), (None, 112, 111)),
}
TILES = [16, 8]


def _calls(source: str) -> dict[str, list[str]]:
    """The scores and P · V BLAS calls of the attention kernel, split into their arguments."""
    out = {}
    for line in source.splitlines():
        for what in ("the scores tile", "P · V"):
            if line.rstrip().endswith(what) and "_sgemm(" in line:
                args = line.strip()[len("_sgemm("):line.strip().rindex(")")]
                out[what] = [a.strip() for a in re.split(r",(?![^\[]*\])", args)]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_operands_as_they_lie_where_they_can(name):
    params, out, body, binding, want = CASES[name]
    src = ATT.format(name=name, params=params, out=out, body=body)
    planned = stages(src, binding, target="cpu").plan
    ops = [o.id for o in planned.info.ops if o.is_compute]
    plan = {"groups": [{"ops": ops, "attention": TILES}]}
    st = stages(src, binding, target="cpu", plan=plan)
    assert st.plan.kernels[0].config == AttentionConfig(block_q=TILES[0], block_kv=TILES[1]), st.plan.format()
    calls = _calls(st.emitted.source)
    scores, pv = calls["the scores tile"], calls["P · V"]
    # (order, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
    got = (int(scores[1]) if "[" in scores[7] else None,
           int(scores[2]) if "[" in scores[9] else None,
           int(pv[2]) if "[" in pv[9] else None)
    assert got == want, (scores, pv)
    for flag, call, arg, trans in ((want[0], scores, 7, 1), (want[1], scores, 9, 2), (want[2], pv, 9, 2)):
        if flag is None:        # gathered: a tile buffer of its own, read in order
            assert "[" not in call[arg] and int(call[trans]) == 111, call
    prog = fusec.compile(src, target="cpu", options={"baseline": False, "plans": {name: plan}})
    f = getattr(prog, name)
    (c,) = f.check(binding=binding)
    assert c.ok, c.describe()
