"""Fusion of chains as people write them (issue 13): keepdims reductions written by hand, values
used twice inside a kernel, reshapes and transposes between elementwise ops. Plans at typical
sizes on both targets; the graph passes that make them possible (fold-unit-reshapes,
hoist-reshapes); the reason the plan gives for a reshape that stays. Numerics of every chain of
examples/by_hand.fdsl run against its golden file on cpu and cuda-sim (tests/test_cli.py)."""
import os

import pytest

import fusec
from fusec.compiler.pipeline import compile_typed
from helpers import compile_chain, example, options

_example, _compile = example, compile_chain


ONE_KERNEL = [  # (example file, chain, typical binding)
    ("by_hand.fdsl", "log_softmax_by_hand", dict(M=4096, N=1024)),
    ("by_hand.fdsl", "layernorm_residual", dict(M=4096, N=1024)),
    ("by_hand.fdsl", "rmsnorm_gate", dict(M=4096, N=4096)),
    ("by_hand.fdsl", "diamond", dict(M=4096, N=1024)),
    ("by_hand.fdsl", "softmax_and_logsumexp", dict(M=4096, N=1024)),
    ("by_hand.fdsl", "reshape_between", dict(M=4096, N=1024)),
    ("by_hand.fdsl", "transpose_between", dict(M=4096, N=1024)),
    ("softmax.fdsl", "softmax_temperature", dict(M=4096, N=1024)),
    ("layernorm.fdsl", "layernorm_by_hand", dict(T=8192)),
]


@pytest.mark.parametrize("target", ["gpu", "cpu"])
@pytest.mark.parametrize("example,chain,binding", ONE_KERNEL, ids=[c for _, c, _ in ONE_KERNEL])
def test_chains_written_by_hand_are_one_kernel(example, chain, binding, target):
    plan = _compile(_example(example), chain, binding, target).plan
    assert plan.kernel_count == 1, plan.format()
    ops = sum(1 for o in plan.info.ops if o.is_compute and o.kind not in ("fill", "pad"))
    assert ops >= 1
    if chain not in ("reshape_between", "transpose_between"):
        assert ops >= 2 and not any(d.startswith("not fused") for d in plan.decisions), plan.format()
    if target == "gpu" and chain not in ("reshape_between", "transpose_between"):
        assert plan.kernels[0].template == "row", plan.format()          # rows split over threads


def test_keepdims_reductions_leave_no_reshape_between_the_ops():
    st = _compile(_example("by_hand.fdsl"), "diamond", dict(M=64, N=32), "gpu", until="graph")
    graph = st.texts["graph"]
    empties = {line.split("=")[0].strip() for line in graph.splitlines() if "tensor.empty" in line}
    for line in graph.splitlines():                  # only the sum's init (an empty tensor) is reshaped
        if "expand_shape" in line or "collapse_shape" in line:
            assert line.split("_shape ")[1].split()[0] in empties, graph
    assert graph.count("linalg.generic") == 3, graph   # exp, the row sum (reading exp directly), the result
    assert "ins(%1 : tensor<64x32xf32>)" in graph, graph


def test_a_reshape_moves_onto_the_chains_inputs():
    st = _compile(_example("by_hand.fdsl"), "reshape_between", dict(M=64, N=32), "gpu", until="graph")
    graph = st.texts["graph"]
    assert graph.count("linalg.generic") == 1, graph   # exp and * 2 merged on the far side of the reshape
    shape_ops = [line for line in graph.splitlines() if "_shape" in line]
    assert shape_ops and all("%arg0" in line or "%collapsed" in line for line in shape_ops), graph


def test_disabling_hoist_reshapes_keeps_the_reshape_between_the_ops():
    c = fusec.check(_example("by_hand.fdsl")).chain("reshape_between")
    opts = options("gpu", disabled_passes=frozenset({"hoist-reshapes"}))
    plan = compile_typed(c, dict(M=4096, N=1024), options=opts, until="plan").plan
    assert plan.kernel_count == 2
    assert any("the reshape" in d and "stops fusion" in d for d in plan.decisions), plan.decisions


@pytest.mark.parametrize("src,why", [
    ("""chain f(x: f32[M, K], w: f32[K, N]) -> f32[N, M] {
        return reshape(x @ w, [N, M]) + 1.0
    }""", "a reshape of a contraction's result is not a view of its inputs"),
    ("""chain f(x: f32[M, N], b: f32[N]) -> f32[N, M] {
        return reshape(exp(x + b), [N, M]) * 2.0
    }""", "broadcasts or transposes an input"),
    ("""chain f(x: f32[M, N]) -> (f32[N, M], f32[M, N]) {
        e = exp(x)
        return reshape(e, [N, M]) * 2.0, e
    }""", "has other users"),
])
def test_a_reshape_that_stays_says_why(src, why):
    plan = _compile(src, "f", dict(M=64, N=32, K=16), "gpu").plan
    assert plan.kernel_count >= 2
    assert any("the reshape" in d and why in d for d in plan.decisions), plan.decisions


def test_the_row_kernel_is_kept_when_a_thread_per_row_is_not_clearly_faster():
    # two reductions of a 64-wide row (logsumexp): the model predicts a thread per row within 2%
    # of the split rows, so the coalesced row kernel stays
    plan = _compile(_example("reductions.fdsl"), "logsumexp", dict(R=16384), "gpu").plan
    assert plan.kernel_count == 1 and plan.kernels[0].config.threads >= 32, plan.format()


TRI = """chain tri(x: f32[M, N]) -> (f32[M, N], f32[M, N], f32[M]) {
    e = exp(x)
    return e + 1.0, e * e, max(e, axis=1)
}"""


def test_a_cheap_value_used_by_three_kernels_is_computed_in_each_and_never_written():
    plan = _compile(TRI, "tri", dict(M=4096, N=1024), "gpu").plan
    e = [o.id for o in plan.info.ops if o.label == "map(exp)"][0]
    assert plan.kernel_count == 3, plan.format()
    for g in plan.kernels:
        assert e in g.ops and dict(g.roles)[e] == "recomputed" and g.root != e
    assert any(d.startswith(f"recomputed: %{e} map(exp) in kernels 0, 1, 2, never written") for d in plan.decisions), \
        plan.decisions
    roles = [op["role"] for g in plan.summary()["groups"] for op in g["ops"] if op["id"] == e]
    assert roles == ["recomputed"] * 3
    assert "recomputed" in plan.format()


def test_recomputing_is_weighed_against_the_kernel_it_saves():
    # on the H200 two tiled matmuls would each apply gelu in their loaders, once per column block
    src = """chain gelu2(x: f32[M, K], w1: f32[K, N], w2: f32[K, N]) -> (f32[M, N], f32[M, N]) {
        g = gelu(x)
        return g @ w1, g @ w2
    }"""
    plan = _compile(src, "gelu2", dict(M=4096, N=1024, K=1024), "gpu").plan
    assert plan.kernel_count == 3
    assert any(d.startswith("not recomputed: %0") and "its own kernel" in d for d in plan.decisions), plan.decisions


@pytest.mark.parametrize("target", ["cuda-sim", "cpu"])
def test_recomputed_values_give_the_reference_numbers(target):
    from fusec.runtime import reference
    from fusec.runtime.compare import compare
    prog = fusec.compile(TRI, target=target)
    binding = dict(M=5, N=12)
    plan = {"groups": [{"ops": [0, k], "recomputed": [0]} for k in (1, 2, 4)]}   # each computes exp itself
    compiled = prog.tri.compiled(binding)
    inputs = reference.random_inputs(prog.tri.typed, binding, seed=3)
    want = reference.run_chain(prog.tri.typed, inputs, binding)
    for got, w, t in zip(compiled.fused(*inputs), want, prog.tri.typed.output_types):
        assert compare(got, w, t.dtype.name).ok
    hand = fusec.compile(TRI, target=target, options={"plans": {"tri": plan}})
    c = hand.tri.compiled(binding)
    assert c.plan["kernels"] == 3
    for got, w, t in zip(c.fused(*inputs), want, prog.tri.typed.output_types):
        assert compare(got, w, t.dtype.name).ok


def test_a_hand_plan_writes_what_another_group_reads_once():
    from helpers import stages
    with pytest.raises(Exception, match=r"ops \[0\] are read outside the groups that compute them"):
        stages(TRI, dict(M=5, N=12), plan={"groups": [{"ops": [0, 1], "recomputed": [0]}, {"ops": [2]},
                                                       {"ops": [0, 4], "recomputed": [0]}]})
    with pytest.raises(Exception, match=r"op 0 is written by groups \[0, 1\]"):
        stages(TRI, dict(M=5, N=12), plan={"groups": [{"ops": [0, 1]}, {"ops": [0, 2]}, {"ops": [4]}]})
    with pytest.raises(Exception, match=r"only the group's compute ops other than its root"):
        stages(TRI, dict(M=5, N=12), plan={"groups": [{"ops": [0, 1], "recomputed": [1]}, {"ops": [2]}, {"ops": [4]}]})
    st = stages(TRI, dict(M=5, N=12), plan={"groups": [{"ops": [0]}, {"ops": [0, 1], "recomputed": [0]},
                                                        {"ops": [2]}, {"ops": [4]}]})
    assert [g.root for g in st.plan.kernels] == [0, 1, 2, 4]     # %0 written by its own group, recomputed in one
    assert st.plan.kernels[1].recomputed == (0,)


SECOND = {  # chains whose kernels write a producer too: (source, binding, {target: kernels})
    "normalised_and_sums": ("""chain f(x: f32[M, N]) -> (f32[M, N], f32[M, 1]) {
        e = exp(x)
        s = sum(e, axis=1, keepdims=true)
        return e / s, s
    }""", dict(M=4096, N=1024), {"gpu": 1, "cpu": 1}),
    # on the gpu an elementwise second output needs a row kernel (its writer is a phase of its own)
    "activation_and_statistics": ("""chain f(x: f32[M, N]) -> (f32[M, N], f32[M]) {
        y = gelu(x)
        return y, mean(y, axis=1)
    }""", dict(M=4096, N=1024), {"gpu": 1, "cpu": 1}),
    "residual_and_layernorm": ("""chain f(x: f32[M, N], r: f32[M, N]) -> (f32[M, N], f32[M, N]) {
        h = x + r
        d = h - mean(h, axis=-1, keepdims=true)
        return h, d * rsqrt(mean(d * d, axis=-1, keepdims=true) + 1e-5)
    }""", dict(M=4096, N=1024), {"gpu": 1, "cpu": 2}),     # this machine's model keeps h apart
}
# its max and sum are second outputs of the softmax kernel unless log(s) + m joins it (horizontal
# fusion, tests/fusion/test_horizontal.py)
LOGSUMEXP = """chain f(x: f32[M, N]) -> (f32[M, N], f32[M, 1]) {
        m = max(x, axis=-1, keepdims=true)
        e = exp(x - m)
        s = sum(e, axis=-1, keepdims=true)
        return e / s, log(s) + m
    }"""


@pytest.mark.parametrize("target", ["gpu", "cpu"])
@pytest.mark.parametrize("name", sorted(SECOND))
def test_a_kernel_writes_a_producer_its_other_users_need(name, target):
    src, binding, kernels = SECOND[name]
    plan = _compile(src, "f", binding, target).plan
    assert plan.kernel_count == kernels[target], plan.format()
    written = [(g, m) for g in plan.kernels for m, role in g.roles if role == "written"]
    assert written or kernels[target] > 1, plan.format()
    for g, m in written:                              # each goes out for users outside its kernel
        assert any(u == -1 or u not in g.ops for u in plan.info.op(m).users)
        assert plan.info.op(m).kind == "reduction" or target == "cpu" or g.template == "row"
    assert any("which also writes it for" in d for d in plan.decisions) or not written, plan.decisions


@pytest.mark.parametrize("target", ["cuda-sim", "cpu"])
@pytest.mark.parametrize("name", sorted(set(SECOND) - {"residual_and_layernorm"}))   # its own test below
def test_second_outputs_give_the_reference_numbers(name, target):
    from fusec.runtime import reference
    from fusec.runtime.compare import compare
    src, _, _ = SECOND[name]
    binding = dict(M=5, N=24)
    prog = fusec.compile(src, target=target)
    c = prog.f.compiled(binding)
    inputs = reference.random_inputs(prog.f.typed, binding, seed=5)
    want = reference.run_chain(prog.f.typed, inputs, binding)
    for build in (c.fused, c.unfused):
        for got, w, t in zip(build(*inputs), want, prog.f.typed.output_types):
            assert compare(got, w, t.dtype.name).ok


def test_a_hand_plan_writes_second_outputs_only_where_they_are_carried_through():
    from helpers import stages
    src, _, _ = SECOND["activation_and_statistics"]
    ops = [o.id for o in stages(src, dict(M=5, N=24)).plan.info.ops if o.is_compute and o.kind != "fill"]
    with pytest.raises(Exception, match="cannot write op .* a second elementwise output only when it is a row kernel"):
        stages(src, dict(M=5, N=24), plan={"groups": [{"ops": ops, "block_tiles": [1], "thread_tiles": [1]}]})
    row = {"groups": [{"ops": ops, "block_tiles": [1], "row_threads": 8, "thread_tiles": [1]}]}
    assert dict(stages(src, dict(M=5, N=24), plan=row).plan.kernels[0].roles)[ops[0]] == "written"
    assert stages(src, dict(M=5, N=24), target="cpu", plan={"groups": [{"ops": ops}]}).plan.kernel_count == 1
    src = LOGSUMEXP
    ops = [o.id for o in stages(src, dict(M=5, N=24)).plan.info.ops if o.is_compute and o.kind != "fill"]
    st = stages(src, dict(M=5, N=24), plan={"groups": [{"ops": ops[:4]}, {"ops": ops[4:]}]})   # max, exp, sum, div
    assert [r for m, r in st.plan.kernels[0].roles if m in (ops[0], ops[2])] == ["written", "written"]


def test_an_elementwise_second_output_of_a_gpu_row_kernel_is_a_phase_of_its_own():
    # h = x + r goes out and feeds the layernorm: its writer stores it in place (no copy of the
    # output buffer), two rows per block, and the phases that read h recompute it
    from fusec.runtime import reference
    from fusec.runtime.compare import compare
    from helpers import stages
    src, _, _ = SECOND["residual_and_layernorm"]
    plan = {"groups": [{"ops": [0, 3, 4, 5, 6], "block_tiles": [2, 0], "row_threads": 8, "thread_tiles": [1, 0]}]}
    st = stages(src, dict(M=4, N=24), plan=plan)
    assert dict(st.plan.kernels[0].roles)[0] == "written"
    tiled = st.texts["tiled"]
    assert '"written"' in tiled and "memref.copy %expand_shape" not in tiled, tiled   # no copy of the output
    prog = fusec.compile(src, target="cuda-sim", options={"plans": {"f": plan}})
    binding = dict(M=4, N=24)
    inputs = reference.random_inputs(prog.f.typed, binding, seed=2)
    want = reference.run_chain(prog.f.typed, inputs, binding)
    for got, w in zip(prog.f.compiled(binding).fused(*inputs), want):
        assert compare(got, w, "f32").ok
