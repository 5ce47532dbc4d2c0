"""GPU reductions: row kernels (each row split over a block's threads) and two-stage reductions
(split-reductions), their IR at the stages where they happen, and their numbers on the
simulator against the NumPy reference."""
import numpy as np
import pytest

import fusec
from helpers import stages

SOFTMAX = "chain s(x: f32[M, N]) -> f32[M, N] { return softmax(x) }"
LAYERNORM = "chain l(x: f32[M, N], g: f32[N], b: f32[N]) -> f32[M, N] { return layernorm(x, g, b) }"


def test_a_row_kernel_splits_each_row_over_the_threads_of_its_block():
    st = stages(SOFTMAX, binding={"M": 64, "N": 512})
    (g,) = st.plan.kernels
    assert g.template == "row" and 512 % g.config.threads == 0
    tiled = st.texts["tiled"]
    # two reductions: each a per-thread partial into workgroup memory and a block-wide combine
    assert tiled.count('fusec.block_reduce = "maximumf"') == 1 and tiled.count('fusec.block_reduce = "addf"') == 1
    assert tiled.count("#gpu.address_space<workgroup>>") >= 4
    assert tiled.count("mapping = [#gpu.thread<x>]") == 3            # max, sum, divide: a thread loop each
    gpu = st.texts["gpu"]
    assert gpu.count("gpu.launch ") == 1 and gpu.count("gpu.barrier") >= 3
    assert f"threads(%arg4, %arg5, %arg6) in (%arg10 = %c{g.config.threads}" in gpu or f"= %c{g.config.threads}," in gpu


def test_row_kernel_numbers_on_the_simulator():
    prog = fusec.compile(SOFTMAX, target="cuda-sim", options={"baseline": False})
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((3, 192)) * 8).astype(np.float32)      # 192 = 6 warps: a shuffle-free tree
    (c,) = prog.s.check([x])
    assert c.ok, c.describe()
    prog = fusec.compile(LAYERNORM, target="cuda-sim", options={"baseline": False})
    x = rng.standard_normal((4, 96)).astype(np.float32) + 3
    g, b = rng.random(96).astype(np.float32), rng.random(96).astype(np.float32)
    assert prog.l.compiled({"M": 4, "N": 96}).plan["groups"][0]["row_threads"]
    (c,) = prog.l.check([x, g, b])
    assert c.ok, c.describe()


@pytest.mark.parametrize("src,binding,kernels", [
    ("chain t(x: f32[N]) -> f32 { return sum(x * x) }", {"N": 4096}, 2),
    ("chain t(x: f32[M, N]) -> f32 { return mean(exp(x)) }", {"M": 64, "N": 64}, 2),
    ("chain t(x: f32[M, N]) -> f32[N] { return max(x, axis=0) }", {"M": 256, "N": 16}, 2),
    ("chain t(x: f32[M, N]) -> f32[M] { return min(x, axis=1) }", {"M": 2, "N": 4096}, 2),
])
def test_split_reductions_are_two_kernels_with_the_reference_numbers(src, binding, kernels):
    st = stages(src, binding=binding)
    assert st.plan.kernel_count == kernels
    (note,) = [d for d in st.plan.decisions if "split-reductions" in d]
    assert "partials of" in note
    prog = fusec.compile(src, target="cuda-sim", options={"baseline": False})
    (c,) = prog.t.check(binding=binding, seed=3)
    assert c.ok, c.describe()


def test_reductions_that_fill_the_device_are_not_split():
    st = stages("chain t(x: f32[M, N]) -> f32[M] { return sum(x, axis=1) }", binding={"M": 4096, "N": 4096})
    assert st.plan.kernel_count == 1 and not any("split-reductions" in d for d in st.plan.decisions)
    st = stages("chain t(x: f32[M, N]) -> f32[M] { return sum(x, axis=1) }", binding={"M": 4, "N": 4096},
                target="cpu")
    assert st.plan.kernel_count == 1                                   # the cpu never splits


def test_the_pass_can_be_switched_off():
    from fusec.compiler.options import CompileOptions
    from fusec.compiler.pipeline import compile_typed
    chain = fusec.check("chain t(x: f32[N]) -> f32 { return sum(x) }").chains[0]
    st = compile_typed(chain, {"N": 1 << 16}, options=CompileOptions(disabled_passes=frozenset({"split-reductions"})),
                       until="plan")
    assert st.plan.kernel_count == 1
