"""Column kernels: a reduction over a non-contiguous axis with its producers and consumers as one
block-cooperative kernel (plan/tilechoice.py: column_search, RowConfig.columns): the columns on
threads x (coalesced), the reduced axis split over threads y, the partials combined through
shared memory (emit/reduce.py: _on_y)."""
import re

import numpy as np
import pytest

import fusec
from fusec.runtime import reference
from fusec.runtime.compare import compare
from helpers import stages

LS_KEEPDIMS = """chain ls(x: f32[M, N]) -> f32[M, N] {
    m = max(x, axis=0, keepdims=true)
    e = exp(x - m)
    s = sum(e, axis=0, keepdims=true)
    return x - m - log(s)
}"""
LS_BROADCAST = """chain ls(x: f32[M, N]) -> f32[M, N] {
    m = max(x, axis=0)
    return x - m - log(sum(exp(x - m), axis=0))
}"""
RANGE = "chain ls(x: f32[M, N]) -> f32[N] { return max(x, axis=0) - min(x, axis=0) }"
NORM3 = "chain ls(x: f32[B, M, N]) -> f32[B, M, N] { return x - mean(x, axis=1, keepdims=true) }"


@pytest.mark.parametrize("src", [LS_KEEPDIMS, LS_BROADCAST])
def test_a_log_softmax_over_axis_0_is_one_column_kernel(src):
    st = stages(src, {"M": 1024, "N": 2048})
    (g,) = st.plan.kernels
    assert g.template == "row" and g.config.columns
    T, R = g.config.threads, g.block_tiles[-1]
    assert 1024 % T == 0 and 2048 % R == 0 and R * 4 >= 32          # a sector of columns per row
    assert not any("split-reductions" in d for d in st.plan.decisions)
    gpu = st.texts["gpu"]
    assert gpu.count("gpu.launch ") == 1
    source = st.emitted.source
    assert re.search(rf"k0\[\({2048 // R}, 1, 1\), \({R}, {T}, 1\)\]", source)   # columns on x, the reduced axis on y
    # the loads: rows along threads y, consecutive columns along threads x
    loads = re.findall(r"= arg0\[([^\]]*)\]", source)
    assert loads and all(i.split(",")[-1].strip().endswith("thread_id_x") and "thread_id_y" in i for i in loads)
    assert source.count("threads y along the partials") == 2       # max and sum, through shared memory


def _special(x):
    x = x.copy()
    x[3, 0] = np.nan                  # a NaN column
    x[:, 1] = -np.inf                 # a column of -inf
    x[5, 2] = np.inf
    x[:, 4] = 0.0
    x[1::2, 4] = -0.0                 # signed zeros
    x[7, 6] = -np.inf
    return x


@pytest.mark.parametrize("src,binding", [(LS_KEEPDIMS, dict(M=37, N=70)), (LS_BROADCAST, dict(M=96, N=40)),
                                         (RANGE, dict(M=37, N=70)), (NORM3, dict(B=3, M=12, N=16))])
def test_column_kernels_keep_the_numbers_on_the_simulator(src, binding):
    # small sizes would split the reductions (too few columns to fill the device): the pass is off
    options = {"baseline": False, "disabled_passes": ["split-reductions"]}
    prog = fusec.compile(src, target="cuda-sim", options=options)
    compiled = prog.ls.compiled(binding)
    (g,) = compiled.plan["groups"]
    assert g["row_columns"] and g["row_threads"] > 1, g
    inputs = reference.random_inputs(prog.ls.typed, binding, seed=7)
    if len(binding) == 2:
        inputs[0] = _special(inputs[0] * 4)
    want = reference.run_chain(prog.ls.typed, inputs, binding)
    for got, w in zip(compiled.fused(*inputs), want):
        c = compare(got, w, "f32")
        assert c.ok, c.describe()
        assert np.array_equal(np.isnan(got), np.isnan(w))


def test_a_column_kernel_survives_hand_plans_and_the_autotuning_cache():
    from fusec.compiler.plan.handplan import to_spec
    from fusec.compiler.plan.templates import candidate_fields, searched_config
    binding = {"M": 1024, "N": 2048}
    (g,) = stages(LS_BROADCAST, binding).plan.kernels
    spec = to_spec(stages(LS_BROADCAST, binding).plan)
    assert spec["groups"][0]["row_columns"] is True
    (again,) = stages(LS_BROADCAST, binding, plan=spec).plan.kernels
    assert again.config == g.config and again.block_tiles == g.block_tiles
    fields = candidate_fields(g.config)
    # the cache keeps what the search chose; the layout (RowConfig.runs) is derived again from it
    assert searched_config(fields["row_threads"], tuple(fields["gemm"]), fields.get("row_columns", False)) == \
        g.config.searched()
    assert g.config.runs == 1                  # a column kernel's threads walk the strided axis: cyclic


def test_a_batched_reduction_over_a_middle_axis_is_one_column_kernel():
    # [8, 512, 1024] minus its mean over axis 1: 1024 columns per image, 8 images on the grid's
    # other dim; split-reductions left it whole (8 x 1024 columns give blocks for every SM)
    st = stages(NORM3, {"B": 8, "M": 512, "N": 1024})
    (g,) = st.plan.kernels
    assert g.config.columns and g.block_tiles[0] == 1 and g.block_tiles[1] == 0
    assert not any("split-reductions" in d for d in st.plan.decisions)


@pytest.mark.slow
def test_a_column_kernel_reads_each_element_once_with_its_loads_in_flight():
    """log_softmax over axis 0 of [1024, 2048]: each thread's 1024/T elements of its column are
    loaded once (the later phases read registers) and all issued before their first use."""
    from helpers import loads_in_flight, sass_of
    st = stages(LS_BROADCAST, {"M": 1024, "N": 2048})
    (g,) = st.plan.kernels
    (ins,) = sass_of(st.emitted.source).values()
    per_thread = 1024 // g.config.threads
    assert sum(1 for t in ins if t.split()[0].startswith("LDG")) == per_thread
    assert loads_in_flight(ins) == [per_thread]
