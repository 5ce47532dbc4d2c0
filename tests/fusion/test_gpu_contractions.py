"""GPU contraction kernels (compiler/plan/gemm.py, transforms/gemm_kernels.py, emit/gemm.py):
the model picks them at bench sizes and says why, their IR and source at the stages where they
happen, plans that ask for impossible ones are refused, and their numbers on the simulator
against the NumPy reference (edges, K = 1, prime sizes, batches and broadcast batches, strided
and dilated convs, f16, producers evaluated in the tile loader)."""
import re

import numpy as np
import pytest

import fusec
from fusec.compiler.plan.kernels import PlanError
from helpers import stages

MLP = "chain m(x: f32[M, K], w: f32[K, N], b: f32[N]) -> f32[M, N] { return gelu(x @ w + b) }"
CONV = """chain c(x: f32[B, C, 56, 56], w: f32[F, C, 3, 3], mean: f32[F], var: f32[F], g: f32[F], b: f32[F])
              -> f32[B, F, 56, 56] {
    return relu(batchnorm(conv2d(x, w, padding=1), mean, var, g, b, eps=1e-5))
}"""
BMM = "chain b(a: f32[B, M, K], w: f32[B, K, N], c: f32[N]) -> f32[B, M, N] { return relu(a @ w + c) }"


@pytest.mark.parametrize("src,binding,word", [
    (MLP, {"M": 512, "K": 1024, "N": 4096}, "tiled contraction"),
    (CONV, {"B": 8, "C": 64, "F": 64}, "implicit GEMM"),
    (BMM, {"B": 8, "M": 512, "K": 64, "N": 512}, "tiled contraction"),
])
def test_bench_contractions_are_tiled_kernels_with_their_epilogue(src, binding, word):
    st = stages(src, binding=binding, plan=None)
    (g,) = st.plan.kernels                          # the epilogue is in the contraction's kernel
    c = g.config
    bk, tm, tn, tx, ty = c.bk, c.tm, c.tn, c.threads_n, c.threads_m
    assert tm * tn >= 16 and tx * ty >= 64
    (note,) = [d for d in st.plan.decisions if word in d]
    assert f"in steps of {bk} through shared memory" in note and "predicted" in note
    assert ("direct convolution" if word == "implicit GEMM" else "a dot product per output") in note
    gpu = st.texts["gpu"]
    assert gpu.count("fusec.block_gemm") == 1 and gpu.count("fusec.gemm_contraction") == 1
    src_k = st.emitted.source
    kernel = src_k[src_k.index("def k0"):src_k.index("def run_")]
    assert kernel.count("cuda.shared.array(") == 2 and kernel.count("cuda.syncthreads()") == 2
    assert "cuda.local.array" not in kernel          # no padded window, no accumulator array
    assert kernel.count(f"acc{tm - 1}_{tn - 1}") >= 3    # the register tile, unrolled


def test_conv_gathers_its_padded_window_in_the_tile_loader():
    st = stages(CONV, binding={"B": 2, "C": 8, "F": 16},
                plan={"groups": [{"ops": [2, 3, 4], "block_tiles": [1, 16, 2, 0], "gemm": [16, 4, 7]}]})
    src = st.emitted.source
    loop = src[src.index("for k0 in range"):src.index("cuda.syncthreads()")]
    # the pad's bounds test, per element loaded: 0 <= i < 56 as one 32-bit unsigned comparison
    assert "& 0xffffffff) < 56" in loop
    assert "58" not in src                             # no padded tensor anywhere


def test_conv_loader_reads_its_operands_through_flat_views():
    """Both conv operands read through 1-D views of constant strides (FlatViews): the weights
    [F, C, 3, 3] at a per-thread base plus k (no K coordinates for them), the image at one
    offset per element; no 4-D index, so no 64-bit multiply by a run-time stride."""
    st = stages(CONV, binding={"B": 2, "C": 8, "F": 16},
                plan={"groups": [{"ops": [2, 3, 4], "block_tiles": [1, 16, 2, 0], "gemm": [16, 4, 8]}]})
    src = st.emitted.source
    kernel = src[src.index("def k0"):src.index("def run_")]
    before, loop = kernel[:kernel.index("for k0 in range")], kernel[kernel.index("for k0 in range"):]
    loop = loop[:loop.index("cuda.syncthreads()")]
    views = re.findall(r"(\w+_f) = _flat\((\w+), (\d+)\)", before)
    assert sorted(int(n) for _, _, n in views) == [16 * 8 * 9, 2 * 8 * 56 * 56]
    (w,) = [v for v, _, n in views if int(n) == 16 * 8 * 9]
    (x,) = [v for v, _, n in views if int(n) != 16 * 8 * 9]
    assert re.search(rf"= {w}\[mb\d+_ \+ k\w*\]", loop)          # weights: base + k
    assert re.search(r"mb0_ = m[lr] \* 72\n", before)
    assert f"{x}[(" in loop and "* 3136" in loop and "* 56" in loop
    assert not re.search(r"arg\d\[[^\]]*,", loop)                    # no multi-dim global read

    # 224 threads (the bench conv's 64x112, 4x8): 32 lanes would leave the 112-wide image tile's
    # last position guarded; 56 lanes divide it, 4 rows the K step
    st = stages(CONV, binding={"B": 2, "C": 8, "F": 64},
                plan={"groups": [{"ops": [2, 3, 4], "block_tiles": [1, 0, 2, 0], "gemm": [32, 4, 8]}]})
    kernel = st.emitted.source[st.emitted.source.index("def k0"):]
    before, loop = kernel[:kernel.index("for k0 in range")], kernel[kernel.index("for k0 in range"):]
    assert "nl = tid % 56" in before and "nr = tid // 56" in before
    assert "ml = tid & 31" in before                  # the weights' lanes: a power of two along K
    assert "if nl + " not in loop


def test_a_k_step_of_whole_windows_divides_nothing_per_element():
    """BK 18 over K = (c, 3, 3): each thread's k positions are split into (c offset, r, s)
    before the K loop; inside it an element only adds the step's channel, k0 // 9."""
    st = stages(CONV, binding={"B": 2, "C": 8, "F": 16},
                plan={"groups": [{"ops": [2, 3, 4], "block_tiles": [1, 16, 2, 0], "gemm": [18, 4, 7]}]})
    src = st.emitted.source
    before, loop = src[:src.index("for k0 in range")], src[src.index("for k0 in range"):src.index("cuda.syncthreads()")]
    assert "k0 // 9" in loop and "% 3" not in loop and "// 3" not in loop
    assert "% 9" in before and "% 3" in before


@pytest.mark.parametrize("spec,why", [
    ({"block_tiles": [64, 64], "gemm": [16, 3, 4]}, "does not divide"),
    ({"block_tiles": [64, 64], "gemm": [16, 1, 1]}, "threads per block"),
    ({"block_tiles": [64, 64], "thread_tiles": [4, 4], "gemm": [16, 4, 4]}, "without thread tiles"),
    ({"block_tiles": [64, 64], "gemm": [16, 4]}, "each at least 1"),
    ({"block_tiles": [64, 64], "gemm": [16, 4, 4, 1]}, "double_buffered"),
    ({"block_tiles": [64, 64], "gemm": [16, 4, 4], "double_buffered": 1}, "must be true or false"),
    ({"block_tiles": [64, 64], "double_buffered": True}, "for a contraction kernel"),
])
def test_impossible_contraction_kernels_are_refused(spec, why):
    with pytest.raises(PlanError, match=why):
        stages(MLP, binding={"M": 64, "K": 64, "N": 64}, plan={"groups": [dict(ops=[1, 2], **spec)]})


def test_a_reduction_epilogue_is_no_contraction_kernel():
    src = "chain s(x: f32[M, K], w: f32[K, N]) -> f32[M, N] { return softmax(x @ w) }"
    with pytest.raises(PlanError, match="not elementwise"):
        stages(src, binding={"M": 64, "K": 64, "N": 64},
               plan={"groups": [{"ops": [1, 2, 3, 4, 5], "block_tiles": [64, 0], "gemm": [16, 4, 4]}]})


CASES = [
    # (source, binding, block tiles, [bk, tm, tn]): every edge guarded somewhere
    (MLP, {"M": 100, "K": 37, "N": 130}, [64, 64], [16, 4, 4]),
    ("chain t(a: f32[M, K], b: f32[K, N]) -> f32[M, N] { return a @ b }", {"M": 31, "K": 1, "N": 37},
     [16, 32, 0], [8, 4, 4]),
    ("chain t(a: f32[M, K], b: f32[K, N]) -> f32[M, N] { return a @ b }", {"M": 29, "K": 23, "N": 7},
     [32, 8, 0], [8, 4, 2]),
    (BMM, {"B": 3, "M": 17, "K": 8, "N": 20}, [1, 16, 16], [8, 2, 2]),
    ("chain t(a: f32[1, M, K], b: f32[3, K, N]) -> f32[3, M, N] { return a @ b }", {"M": 13, "K": 5, "N": 29},
     [1, 8, 16, 0], [4, 2, 4]),
    ("chain t(x: f32[B, C, 11, 10], w: f32[F, C, 3, 3]) -> f32[B, F, 6, 4] "
     "{ return tanh(conv2d(x, w, stride=[2, 3], padding=[2, 1], dilation=[2, 1])) }",
     {"B": 2, "C": 3, "F": 5}, [1, 4, 2, 0], [8, 2, 2]),
    ("chain t(x: f32[M, K], w: f32[K, N]) -> f32[M, N] { return silu(x) @ w * 2.0 }",
     {"M": 24, "K": 40, "N": 33}, [16, 16], [16, 2, 4]),
    ("chain t(a: f16[M, K], b: f16[K, N]) -> f16[M, N] { return a @ b }", {"M": 37, "K": 19, "N": 41},
     [32, 32], [8, 2, 2]),
    # a linear layer on [B, S, D] activations: B and S both on the Q side, a Q tile across batches
    ("chain t(x: f32[B, S, D], w: f32[D, N], b: f32[N]) -> f32[B, S, N] { return relu(x @ w + b) }",
     {"B": 3, "S": 9, "D": 13, "N": 20}, [2, 8, 16], [8, 2, 4]),
    ("chain t(a: f32[B, H, M, K], b: f32[K, N]) -> f32[B, H, M, N] { return a @ b }",
     {"B": 2, "H": 2, "M": 5, "K": 7, "N": 9}, [1, 2, 4, 0, 0], [8, 2, 3]),
    # K steps a multiple of the window (9): K coordinates split once per thread (emit/gemm.py
    # _k_split), K = 27 not a multiple of 18; runs of 4 rows (TM 4, 8) past F's edge
    ("chain t(x: f32[B, C, 7, 6], w: f32[F, C, 3, 3]) -> f32[B, F, 7, 6] { return relu(conv2d(x, w, padding=1)) }",
     {"B": 2, "C": 3, "F": 5}, [1, 4, 2, 0], [9, 4, 3]),
    ("chain t(x: f32[B, C, 7, 6], w: f32[F, C, 3, 3]) -> f32[B, F, 7, 6] { return relu(conv2d(x, w, padding=1)) }",
     {"B": 2, "C": 3, "F": 11}, [1, 8, 2, 0], [18, 8, 4]),
    # BK 16 over K = (c, 3, 3): the K coordinates counted per step (`_k_counted`); TN 4 over
    # (oh, ow) with ow's tile 8: the epilogue's runs of 4 stored 16 bytes at a time, oh's edge
    ("chain t(x: f32[B, C, 5, 8], w: f32[F, C, 3, 3], g: f32[F]) -> f32[B, F, 5, 8] "
     "{ return relu(batchnorm(conv2d(x, w, padding=1), g, g, g, g, eps=1e-5)) }",
     {"B": 2, "C": 3, "F": 11}, [1, 8, 2, 0], [16, 4, 4]),
    # 24 threads over (oh, ow) tiles of 2 x 6: the image's 12 lanes (`tid % 12`, not a power of
    # two) divide the tile; both operands read through 1-D views (FlatViews)
    ("chain t(x: f32[B, C, 7, 6], w: f32[F, C, 3, 3]) -> f32[B, F, 7, 6] { return relu(conv2d(x, w, padding=1)) }",
     {"B": 2, "C": 3, "F": 16}, [1, 0, 2, 0], [16, 2, 4]),
]


@pytest.mark.slow
@pytest.mark.parametrize("src,binding,block,gemm", CASES)
def test_contraction_kernels_match_the_reference_on_the_simulator(src, binding, block, gemm):
    planned = stages(src, binding=binding, plan=None).plan
    ops = sorted({m for g in planned.kernels for m in g.ops if planned.info.op(m).kind not in ("fill", "pad")})
    plan = {"groups": [{"ops": ops, "block_tiles": block, "gemm": gemm}]}
    st = stages(src, binding=binding, plan=plan)
    assert st.plan.kernels[0].config.steps == tuple(gemm) and "fusec.block_gemm" in st.texts["gpu"]
    name = st.plan.chain
    prog = fusec.compile(src, target="cuda-sim", options={"baseline": False, "plans": {name: plan}})
    (c,) = getattr(prog, name).check(binding=binding, seed=5)
    assert c.ok, c.describe()
    assert getattr(prog, name).compiled(binding).plan["groups"][0]["gemm"] == gemm


def test_every_contraction_kernel_says_how_and_why():
    for binding in ({"M": 8, "K": 16, "N": 32}, {"M": 512, "K": 1024, "N": 4096}):
        st = stages(MLP, binding=binding)
        (g,) = st.plan.kernels
        (note,) = [d for d in st.plan.decisions if d.startswith("kernel 0: %1 matmul as ")]
        assert "tiled contraction" in note and "dot product per output" in note    # both predictions
        assert ("as tiled contraction" in note) == (g.template == "contraction")


@pytest.mark.parametrize("src,binding,block,gemm", [CASES[i] for i in (0, 1, 5, 8)])
def test_double_buffered_kernels_match_the_reference_on_the_simulator(src, binding, block, gemm):
    """The K loop with the next step prefetched into registers: edges, K = 1 (no second step),
    a conv's gathered window, a Q side across batches."""
    planned = stages(src, binding=binding, plan=None).plan
    ops = sorted({m for g in planned.kernels for m in g.ops if planned.info.op(m).kind not in ("fill", "pad")})
    plan = {"groups": [{"ops": ops, "block_tiles": block, "gemm": gemm, "double_buffered": True}]}
    st = stages(src, binding=binding, plan=plan)
    assert st.plan.kernels[0].config.prefetch and "fusec.gemm_prefetch" in st.texts["gpu"]
    kernel = st.emitted.source[st.emitted.source.index("def k0"):st.emitted.source.index("def run_")]
    loop = kernel[kernel.index("for k0 in range"):]
    assert "pf = " in kernel[:kernel.index("for k0 in range")]      # the first step before the loop
    assert loop.index("cuda.syncthreads()") < loop.index(f"if k0 + {gemm[0]} < ")   # stored, then the next loaded
    name = st.plan.chain
    prog = fusec.compile(src, target="cuda-sim", options={"baseline": False, "plans": {name: plan}})
    (c,) = getattr(prog, name).check(binding=binding, seed=5)
    assert c.ok, c.describe()
    assert getattr(prog, name).compiled(binding).plan["groups"][0]["double_buffered"] is True


def test_the_model_double_buffers_where_it_pays():
    from dataclasses import replace
    from fusec.compiler.plan.cost import Tiling
    for binding in ({"M": 512, "K": 1024, "N": 4096}, {"M": 4096, "K": 1024, "N": 4096}, {"M": 64, "K": 64, "N": 64}):
        st = stages(MLP, binding=binding)
        (g,) = st.plan.kernels
        buffered = g.template == "contraction" and g.config.prefetch
        chosen = {t: s for t, s in st.plan.candidates[0]}
        assert g.tiling in chosen
        if g.template == "contraction":
            other = Tiling(g.block_tiles, g.thread_tiles, g.mapped, replace(g.tiling.config, prefetch=not buffered))
            assert other not in chosen or chosen[g.tiling] <= chosen[other]      # the faster of the two
        assert ("double-buffered" in st.plan.format()) == buffered
    # 128x256 tiles, one block an SM: the next K step in flight, in registers or (sm_90) a cp.async ring
    big = stages(MLP, binding={"M": 4096, "K": 1024, "N": 4096}).plan.kernels[0].config
    assert big.prefetch or big.stages >= 2



def test_the_search_prices_16_byte_shared_loads():
    """A register-tile side that is a multiple of 4 reads its runs of 4 with one LDS.128 each
    (emit/gemm.py: WideGrid), another side one LDS.32 per element: the model counts them so,
    and the bench conv, whose 8x7 tile read 112 scalar shared loads per K step, takes a tile
    that is 4-wide on both sides."""
    from fusec.compiler.plan.gemm import shared_loads
    assert [shared_loads(t) for t in (2, 4, 7, 8)] == [2, 1, 7, 2]
    st = stages(CONV, binding={"B": 8, "C": 64, "F": 64}, plan=None)
    (g,) = st.plan.kernels
    assert g.template == "contraction" and g.config.tm % 4 == 0 and g.config.tn % 4 == 0, g.config


# cp.async rings (emit/gemm.py `_staged_loader`, emit/cp_async.py) and 16-byte loaders: on the
# simulator the copies land at once, so these check the ring's stages, the runs' indices, the
# edges (zero outside) and the scalar fallback at misaligned addresses
STAGED = [
    (CASES[0], 2),            # edges on M, N and K; N = 130: odd rows of w are not 16-byte aligned
    (CASES[0], 3),
    (CASES[1], 3),            # K = 1: one step, the prologue's second group empty
    (CASES[3], 2),            # batched, K = 8 (one step of 8)
    (CASES[4], 3),            # a broadcast batch
    (CASES[8], 2),            # a Q side across batches (B and S on M)
]


@pytest.mark.parametrize("case,ring", STAGED)
def test_cp_async_staged_kernels_match_the_reference_on_the_simulator(case, ring):
    src, binding, block, gemm = case
    planned = stages(src, binding=binding, plan=None).plan
    ops = sorted({m for g in planned.kernels for m in g.ops if planned.info.op(m).kind not in ("fill", "pad")})
    plan = {"groups": [{"ops": ops, "block_tiles": block, "gemm": gemm, "stages": ring}]}
    st = stages(src, binding=binding, plan=plan)
    assert st.plan.kernels[0].config.stages == ring and "fusec.gemm_stages" in st.texts["gpu"]
    kernel = st.emitted.source[st.emitted.source.index("def k0"):st.emitted.source.index("def run_")]
    loop = kernel[kernel.index("for k0 in range"):]
    assert kernel[:kernel.index("for k0 in range")].count("_cp_commit()") == ring - 1     # the prologue's groups
    assert loop.index(f"_cp_wait{ring - 2}()") < loop.index("cuda.syncthreads()") < loop.index("_cp_async16(")
    assert f", {gemm[0]}, " in kernel.split("cuda.shared.array((")[2] or f"({ring}, " in kernel
    name = st.plan.chain
    prog = fusec.compile(src, target="cuda-sim", options={"baseline": False, "plans": {name: plan}})
    (c,) = getattr(prog, name).check(binding=binding, seed=5)
    assert c.ok, c.describe()
    assert getattr(prog, name).compiled(binding).plan["groups"][0]["stages"] == ring


def test_a_misaligned_operand_takes_the_scalar_fallback_of_the_16_byte_loads():
    """Operands whose base is 4 bytes past a 16-byte boundary (a view into a larger array): on a
    GPU every run's address is misaligned, so `_ld4_f32` and `_cp_async16` take their scalar
    branch (both branches are in the PTX: tests/report/test_contraction_kernels.py); here the
    simulator's copies read such views at the right elements."""
    src, binding = "chain t(a: f32[M, K], b: f32[K, N]) -> f32[M, N] { return a @ b }", {"M": 20, "K": 24, "N": 36}
    planned = stages(src, binding=binding, plan=None).plan
    ops = sorted({m for g in planned.kernels for m in g.ops if planned.info.op(m).kind not in ("fill", "pad")})
    plan = {"groups": [{"ops": ops, "block_tiles": [16, 32, 0], "gemm": [8, 4, 4], "stages": 2}]}
    st = stages(src, binding=binding, plan=plan)
    kernel = st.emitted.source[st.emitted.source.index("def k0"):st.emitted.source.index("def run_")]
    assert "_ld4_f32(arg0" in kernel and "_cp_async16(" in kernel     # A in runs along K, B copied as it lies
    prog = fusec.compile(src, target="cuda-sim", options={"baseline": False, "plans": {"t": plan}})
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((20, 24), np.float32), rng.standard_normal((24, 36), np.float32)
    pa, pb = np.zeros(20 * 24 + 1, np.float32), np.zeros(24 * 36 + 1, np.float32)
    va, vb = pa[1:].reshape(20, 24), pb[1:].reshape(24, 36)
    va[...], vb[...] = a, b
    assert va.ctypes.data % 16 and vb.ctypes.data % 16
    out = prog.t(va, vb)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)


def test_the_planner_refuses_stages_where_no_tile_is_copied_as_it_lies():
    src = "chain t(a: f32[M, K], b: f32[N, K]) -> f32[M, N] { return a @ transpose(b) }"
    binding = {"M": 20, "K": 24, "N": 36}
    planned = stages(src, binding=binding, plan=None).plan
    ops = sorted({m for g in planned.kernels for m in g.ops if planned.info.op(m).kind not in ("fill", "pad")})
    plan = {"groups": [{"ops": ops, "block_tiles": [16, 32, 0], "gemm": [8, 4, 4], "stages": 2}]}
    with pytest.raises(PlanError, match="no operand tile cp.async can copy"):
        stages(src, binding=binding, plan=plan)


def test_tiles_past_48_kb_in_dynamic_shared_memory_match_the_reference_on_the_simulator():
    """A 3-stage ring of 64x128 tiles, BK 32 (59,392 B): both tiles carved from the dynamic
    shared array, its bytes given at launch; K = 70 ends in a partial step."""
    src, binding = "chain t(a: f32[M, K], b: f32[K, N]) -> f32[M, N] { return a @ b }", {"M": 20, "K": 70, "N": 40}
    planned = stages(src, binding=binding, plan=None).plan
    ops = sorted({m for g in planned.kernels for m in g.ops if planned.info.op(m).kind not in ("fill", "pad")})
    plan = {"groups": [{"ops": ops, "block_tiles": [64, 128, 0], "gemm": [32, 4, 8], "stages": 3}]}
    st = stages(src, binding=binding, plan=plan)
    assert "cuda.shared.array(0, numba.float32" in st.emitted.source and ", 0, 59392](" in st.emitted.source
    prog = fusec.compile(src, target="cuda-sim", options={"baseline": False, "plans": {"t": plan}})
    (c,) = prog.t.check(binding=binding, seed=5)
    assert c.ok, c.describe()


def test_the_tile_search_prices_cp_async_rings_and_needs_sm_80():
    """The search tries 0, 2 and 3 stages where a side can be copied as it lies: at the bench mlp
    the model takes a ring (--explain says so), and a ring's shared memory is counted; on a
    device without cp.async (cc 7.5) no candidate has stages."""
    from dataclasses import replace
    from fusec.compiler.options import CompileOptions
    from fusec.compiler.pipeline import compile_typed
    from fusec.compiler.plan.gemm import gemm_kernel, gemm_shape, staged_shared_bytes, staged_sides
    from fusec.compiler.plan.hardware import GPUS
    binding = {"M": 512, "K": 1024, "N": 4096}
    st = stages(MLP, binding=binding)
    (g,) = st.plan.kernels
    assert g.config.stages in (2, 3)
    assert any(f"{g.config.stages} cp.async stages" in d for d in st.plan.decisions)
    info = st.plan.info
    gk = gemm_kernel(info, g.ops, g.root)
    s = gemm_shape(info, gk, g.root, g.block_tiles, g.config.steps)
    sides = staged_sides(info, gk, g.ops, s, GPUS["h200"])
    assert sides == ("n",)                       # w[k, n] as it lies; x[m, k] is transposed into its tile
    assert staged_shared_bytes(s, sides, 3) - staged_shared_bytes(s, sides, 2) == 4 * s.bk * (s.bn + 4)
    old = replace(GPUS["h200"], cc=(7, 5))
    c = fusec.check(MLP).chains[0]
    st75 = compile_typed(c, binding, options=CompileOptions(target="gpu", hardware=old))
    assert all(getattr(t.config, "stages", 0) == 0 for t, _ in st75.plan.candidates[0])
    assert any(hasattr(t.config, "stages") for t, _ in st75.plan.candidates[0])   # contraction shapes among them
    assert st75.plan.kernels[0].config.stages == 0
