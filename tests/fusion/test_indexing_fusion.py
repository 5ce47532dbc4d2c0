"""Issue 17's ops in kernels: slices, concat and gathers fold into the kernels around them
(inline-indexed-reads), argmax fuses like a reduction, cumsum is a scan kernel of its own (a
block per row on the gpu, a prange of sequential rows on the cpu). Kernel counts of the
examples at typical sizes on both targets; the IR the passes leave; what the planner does with
a value read at computed indices. Numerics of the examples run against their golden files on
cpu and cuda-sim (tests/fusion/test_run.py)."""
import os

import pytest

import fusec
from fusec.compiler.pipeline import compile_typed
from helpers import compile_chain, example, options

_example, _compile = example, compile_chain


COUNTS = [  # (example, chain, typical binding, most kernels on the gpu, on the cpu)
    ("rope.fdsl", "rope", dict(B=8, H=32, S=2048), 1, 1),
    ("rope.fdsl", "rope_split", dict(B=8, S=4096), 1, 1),
    ("embedding.fdsl", "embed", dict(V=32000, B=8, S=1024), 1, 1),
    ("embedding.fdsl", "embed_positions", dict(V=32000, P=4096, T=4096), 1, 1),
    ("router.fdsl", "router", dict(T=8192), 2, 2),
]


@pytest.mark.parametrize("target", ["gpu", "cpu"])
@pytest.mark.parametrize("example,chain,binding,gpu,cpu", COUNTS, ids=[c[1] for c in COUNTS])
def test_examples_fuse_into_the_kernels_the_issue_asks_for(example, chain, binding, gpu, cpu, target):
    plan = _compile(_example(example), chain, binding, target).plan
    assert plan.kernel_count <= (gpu if target == "gpu" else cpu), plan.format()


def test_rope_is_one_op_reading_only_the_chains_inputs():
    st = _compile(_example("rope.fdsl"), "rope", dict(B=1, H=2, S=8), "gpu", until="graph")
    graph = st.texts["graph"]
    assert graph.count("linalg.generic") == 2, graph                 # q's and k's
    assert "tensor.extract %arg0" in graph and "tensor.extract %arg1" in graph, graph
    assert "tensor<1x2x8x32xf32>" not in graph, graph                 # no half of q or k is made
    plan = _compile(_example("rope.fdsl"), "rope", dict(B=1, H=2, S=8), "gpu").plan
    assert plan.kernel_count == 1 and plan.kernels[0].siblings, plan.format()   # q's and k's: one launch


def test_embedding_and_layernorm_are_one_row_kernel_on_the_gpu():
    plan = _compile(_example("embedding.fdsl"), "embed", dict(V=32000, B=8, S=1024), "gpu").plan
    (g,) = plan.kernels
    assert g.template == "row", plan.format()
    gather = [o for o in plan.info.ops if any(k == "arg0" for k, _, _ in o.indirect)]
    assert gather and gather[0].id in g.ops, plan.format()            # the table is read inside the kernel


def test_router_argmax_is_in_the_softmax_row_kernel():
    for binding in (dict(T=8192), dict(T=64)):
        plan = _compile(_example("router.fdsl"), "router", binding, "gpu").plan
        assert plan.kernel_count <= 2, plan.format()
        last = plan.kernels[-1]       # the argmax's: the softmax's max and sum, p's max, the first index
        assert len([m for m in last.ops if plan.info.op(m).kind == "reduction"]) == 4, plan.format()


@pytest.mark.parametrize("target", ["gpu", "cpu"])
def test_a_scan_is_a_kernel_of_its_own(target):
    plan = _compile(_example("router.fdsl"), "top_p", dict(T=64, V=32000), target).plan
    scan = plan.kernels[0]
    assert scan.template == "scan" and scan.ops == (scan.root,) or all(plan.info.op(m).kind == "fill" for m in scan.ops
                                                          if m != scan.root), plan.format()
    assert not any(plan.info.op(m).scan for g in plan.kernels[1:] for m in g.ops), plan.format()
    text = plan.format()
    assert ("a block of" in text) if target == "gpu" else ("prange over the rows" in text), text


def test_a_scan_along_another_axis_takes_a_thread_per_row():
    plan = _compile(_example("scans.fdsl"), "causal_mean", dict(B=8, S=2048), "gpu").plan
    assert "a thread per row" in plan.format() and plan.kernels[0].template == "scan", plan.format()


def test_a_scan_keeps_its_mark_when_a_producer_fuses_into_it():
    st = _compile(_example("scans.fdsl"), "decay", dict(B=4, S=64), "gpu", until="graph")
    assert "fusec.scan = \"cumprod\"" in st.texts["graph"] and "math.exp" in st.texts["graph"], st.texts["graph"]


def test_a_value_read_at_computed_indices_is_written_first():
    # the concat reads the row sum at computed indices: the sum's kernel runs first, whole, and
    # horizontal fusion (both read x) may not merge them
    src = """chain c(x: f32[M, 8]) -> f32[M, 8] {
        s = sum(x, axis=1, keepdims=true)
        return concat([x[:, :7], s], axis=1) * x
    }"""
    for target in ("gpu", "cpu"):
        plan = _compile(src, "c", dict(M=64), target).plan
        assert plan.kernel_count == 2, plan.format()
        reader = next(o for o in plan.info.ops if o.indirect_ops)
        (producer,) = reader.indirect_ops
        assert plan.group_of(producer).id < plan.group_of(reader.id).id, plan.format()
    prog = fusec.compile(src, target="cpu")
    assert all(c.ok for c in prog.c.check(binding={"M": 5}))


def test_indices_read_from_another_kernel_are_not_fused_with_it():
    src = """chain c(x: f32[8, 16], w: f32[16, 16], i: i32[4]) -> f32[4, 16] {
        return gather(x @ w, i, axis=0) + 1.0
    }"""
    plan = _compile(src, "c", {}, "cpu").plan
    assert plan.kernel_count == 2, plan.format()


@pytest.mark.parametrize("target", ["gpu", "cpu"])
def test_a_concat_of_elementwise_values_is_one_kernel(target):
    src = """chain c(a: f32[M, 16], b: f32[M, 24]) -> f32[M, 40] {
        return concat([a * 2.0, b + 1.0], axis=1)
    }"""
    st = _compile(src, "c", dict(M=4096), target, until="plan")
    assert st.plan.kernel_count == 1 and len([o for o in st.plan.info.ops if o.is_compute]) == 1, st.plan.format()


@pytest.mark.parametrize("target", ["gpu", "cpu"])
def test_take_along_axis_and_gather_nd_fuse_like_gather(target):
    # the producers of x are computed at the read, those of the indices and the consumer fuse as
    # elementwise ops do: one op per output, reading only the chain's inputs
    src = """chain c(x: f32[M, 64], i: i32[M, 8], t: f32[16, 32, 64], j: i64[M, 2]) -> (f32[M, 8], f32[M, 64]) {
        return take_along_axis(exp(x) * 2.0, i + 1, axis=1) - 1.0, gather_nd(sigmoid(t), j) * x
    }"""
    st = _compile(src, "c", dict(M=256), target, until="plan")
    assert st.plan.kernel_count == 2, st.plan.format()
    assert len([o for o in st.plan.info.ops if o.is_compute]) == 2, st.plan.format()
    graph = _compile(src, "c", dict(M=4), target, until="graph").texts["graph"]
    assert graph.count("linalg.generic") == 2 and "math.exp" in graph, graph
    assert "tensor.extract %arg0" in graph and "tensor.extract %arg2" in graph, graph     # x and t, at the read
