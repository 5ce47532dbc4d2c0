"""Fusion of chains as people write them (issue 13): keepdims reductions written by hand, values
used twice inside a kernel, reshapes and transposes between elementwise ops. Plans at typical
sizes on both targets; the graph passes that make them possible (fold-unit-reshapes,
hoist-reshapes); the reason the plan gives for a reshape that stays. Numerics of every chain of
examples/by_hand.fdsl run against its golden file on cpu and cuda-sim (tests/test_cli.py)."""
import os

import pytest

import fusec
from fusec.compiler.pipeline import compile_typed
from helpers import options

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _example(name: str) -> str:
    return open(os.path.join(ROOT, "examples", name)).read()


def _compile(src: str, chain: str, binding: dict, target: str, until: str = "plan"):
    c = fusec.check(src).chain(chain)
    return compile_typed(c, binding, options=options(target), until=until)


ONE_KERNEL = [  # (example file, chain, typical binding)
    ("by_hand.fdsl", "log_softmax_by_hand", dict(M=4096, N=1024)),
    ("by_hand.fdsl", "layernorm_residual", dict(M=4096, N=1024)),
    ("by_hand.fdsl", "rmsnorm_gate", dict(M=4096, N=4096)),
    ("by_hand.fdsl", "diamond", dict(M=4096, N=1024)),
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
        assert plan.groups[0].row_threads, plan.format()          # rows split over threads


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
    assert plan.kernel_count == 1 and plan.groups[0].row_threads >= 32, plan.format()
