"""16-bit convs on tensor cores (issue 37 item 2): an f16 or bf16 conv whose channels make
16-byte runs runs channels-last inside (lowering/contraction.py: the input padded and copied
[N, H, W, C], the weights [F, KH, KW, C], K = (kh, kw, c)), so its window gather copies 8
channels with one 16-byte cp.async; and its numbers on the simulator, through the FMA path the
simulator takes and through the mma and ldmatrix path under the emulated warp of
test_tensor_cores.py (fragments read by the PTX ISA's tables)."""
from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

import fusec
from fusec.compiler.options import CompileOptions
from fusec.compiler.pipeline import compile_typed
from fusec.compiler.plan.hardware import GPUS

from test_tensor_cores import _emulated_f16, _emulated_ldsm

H200 = GPUS["h200"]


def _src(t: str, h: int = 7, pad: int = 1) -> str:
    return (f"chain t(x: {t}[B, C, {h}, {h}], w: {t}[F, C, 3, 3]) -> {t}[B, F, {h + 2 * pad - 2}, {h + 2 * pad - 2}] "
            f"{{ return relu(conv2d(x, w, padding={pad})) }}")


def _stages(src, binding, plan=None):
    c = fusec.check(src).chain("t")
    return compile_typed(c, binding, options=CompileOptions.make(target="gpu", hardware=H200,
                                                                  plans={"t": plan} if plan else {}))


def _plan(block, gemm, stages=0, double_buffered=False, first=1):
    """The conv's contraction (ops 3 fill, 4 contract, 5 map) as one tensor-core group; the
    pad (0) and the two layout copies (1, 2) kernels of their own (`first` 0: no pad, each op
    one less)."""
    g = {"ops": [first + 3, first + 4], "block_tiles": block, "gemm": gemm, "double_buffered": double_buffered}
    return {"groups": [{"ops": list(range(first + 1)), "block_tiles": [0, 1, 1, 0], "thread_tiles": [0, 0, 0, 0]},
                       {"ops": [first + 1], "block_tiles": [0, 1, 1, 0], "thread_tiles": [0, 0, 0, 0]},
                       dict(g, stages=stages) if stages else g]}


def test_16_bit_convs_run_channels_last_and_f32_ones_do_not():
    b = {"B": 16, "C": 128, "F": 128}
    st = _stages(_src("f16", 56), b)
    notes = [o for o in st.texts["linalg"].splitlines() if "channels-last" in o]
    assert len(notes) == 2 and st.texts["linalg"].count("linalg.transpose") == 2
    assert "conv_2d_nchw_fchw" not in st.texts["linalg"]
    k = [k for k in st.plan.kernels if getattr(k.config, "mma", "")]
    assert len(st.plan.kernels) == 3 and len(k) == 1 and k[0].config.mma == "f16" and k[0].config.stages >= 2
    conv = st.emitted.source.split(f"def k{k[0].id}(")[1].split("\ndef ")[0]
    loop = conv.split("    for k0 in ")[1].split("\n    S[")[0]
    copies = [line for line in loop.splitlines() if "_cp_async16" in line]
    # both operands copied 16 bytes at a time, each through its 1-D view at the thread's offset
    # plus the operand's running one, to a 32-bit shared address a constant apart per stage
    found = [re.search(r"_cp_async16hs\(H, \(.*?,\), (\w+)(?: \+ (\d+))?, (\w+), \((\w+) \+ (\w+),\)\)", line)
             for line in copies]
    assert len(copies) == 8 and all(found), copies
    assert {m.group(3) for m in found} == {"alloc_f", "alloc_1_f"}
    # the K loop unrolled by its 2 stages (no ring index), its steps stepped (no split of k0)
    assert loop.startswith("range(0, 1152, 64):") and " rd" not in loop and " wr" not in loop
    assert "//" not in loop and ">>" not in "".join(l for l in loop.splitlines() if "k0" in l and "H[" not in l)
    f32 = _stages(_src("f32", 56), b)
    assert "conv_2d_nchw_fchw" in f32.texts["linalg"] and "channels-last" not in f32.texts["linalg"]
    # channels that make no 16-byte run (3: an image's first layer) stay NCHW
    assert "channels-last" not in _stages(_src("f16", 56), {"B": 2, "C": 3, "F": 16}).texts["linalg"]


CASES = [  # (type, binding, image side, block tiles [n, f, oh, ow], [bk, tm, tn], stages): partial
    # tiles along f and the image, K steps by cp.async (C a multiple of BK), and a K tail
    # through the register loader (C = 24, BK 16: 216 = 13 x 16 + 8)
    # (the quick tier keeps the 3-stage ring and the register loader; the rest are slow)
    pytest.param("f16", {"B": 2, "C": 32, "F": 40}, 8, [1, 32, 3, 0], [32, 4, 2], 2, marks=pytest.mark.slow),
    ("f16", {"B": 2, "C": 16, "F": 24}, 8, [1, 16, 1, 0], [16, 2, 2], 3),
    ("f16", {"B": 1, "C": 24, "F": 16}, 6, [0, 16, 4, 0], [16, 2, 2], 0),
    pytest.param("bf16", {"B": 2, "C": 16, "F": 24}, 8, [1, 16, 1, 0], [16, 2, 2], 0, marks=pytest.mark.slow),
    pytest.param("bf16", {"B": 2, "C": 32, "F": 40}, 8, [1, 32, 3, 0], [32, 4, 2], 2,    # bf16's bits by cp.async
                 marks=pytest.mark.slow),
]


def _reference(x, w, dt, pad=1, stride=1):
    """relu(conv2d(x, w, stride, padding)) in f32, rounded to `dt` where the chain rounds."""
    xf, wf = x.astype(np.float32), w.astype(np.float32)
    n, c, h, wd = x.shape
    xp = np.zeros((n, c, h + 2 * pad, wd + 2 * pad), np.float32)
    xp[:, :, pad:pad + h, pad:pad + wd] = xf
    oh, ow = (h + 2 * pad - 3) // stride + 1, (wd + 2 * pad - 3) // stride + 1
    y = np.zeros((n, w.shape[0], oh, ow), np.float32)
    for i in range(3):
        for j in range(3):
            win = xp[:, :, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride]
            y += np.einsum("nchw,fc->nfhw", win, wf[:, :, i, j])
    return np.maximum(y.astype(dt).astype(np.float32), 0)


def _emulated_run(st, kind, binding, h, pad=1, stride=1):
    """The chain's emitted module with the mma and ldmatrix intrinsics replaced by the emulated
    warp's, and each 16-byte copy's 32-bit shared address (`_cp_async16hs`, which the simulator
    does not read) checked against the element it names; its output against the reference."""
    from numba import cuda
    sim_branch = f"    _FMA_ONLY = True\n    _pack_{kind}x2 = _mma_{kind} = None\n"
    ldsm_branch = "    _ldsm_x4 = _ldsm_x4_t = _ldsm_x2 = _ldsm_x2_t = _smem_base = None\n"
    assert sim_branch in st.emitted.source and ldsm_branch in st.emitted.source
    source = st.emitted.source.replace(sim_branch, f"    _FMA_ONLY = False\n    _pack_{kind}x2, _mma_{kind} = _EMULATED\n")
    source = source.replace(ldsm_branch, "    _smem_base, _ldsm_x4, _ldsm_x4_t, _ldsm_x2, _ldsm_x2_t = _EMULATED_LDSM\n")
    ns = {"_EMULATED": _emulated_f16(kind), "_EMULATED_LDSM": _emulated_ldsm()}
    exec(compile(source, "<tensor-core conv>", "exec"), ns)
    if "_cp_async16hs" in ns:
        copy, copies = ns["_cp_async16hs"], []

        def checked(d, di, sa, s, si):
            assert sa == d.__array_interface__["data"][0] + 2 * di[0], ("cp.async shared address", sa, di)
            copies.append(1)
            copy(d, di, sa, s, si)
        ns["_cp_async16hs"] = checked
    rng = np.random.default_rng(3)
    dt = ml_dtypes.bfloat16 if kind == "bf16" else np.float16
    hh, ww = h if isinstance(h, tuple) else (h, h)
    x = rng.uniform(-2, 2, (binding["B"], binding["C"], hh, ww)).astype(dt)
    w = rng.uniform(-1, 1, (binding["F"], binding["C"], 3, 3)).astype(dt)
    (out,) = ns["run_t"](cuda.to_device(x), cuda.to_device(w))
    got = np.asarray(out.copy_to_host()).astype(np.float32)
    tol = 2e-2 if kind == "bf16" else 2e-3
    np.testing.assert_allclose(got, _reference(x, w, dt, pad, stride), rtol=tol, atol=tol * 10)


@pytest.mark.parametrize("kind,binding,h,block,gemm,stages", CASES)
def test_the_conv_mma_path_under_an_emulated_warp(kind, binding, h, block, gemm, stages):
    st = _stages(_src(kind, h), binding, _plan(block, gemm, stages))
    k = st.plan.kernels[-1]
    assert k.config.mma == kind and k.config.stages == stages
    assert ("_cp_async16h" in st.emitted.source) == bool(stages)
    _emulated_run(st, kind, binding, h)


STEPPED = [  # (binding, image rows x columns, padding, stride, block tiles, [bk, tm, tn], stages, K
    # steps): the K steps' coordinates stepped (emit/conv.py: KStepper), c0 wrapping into kw and
    # kh every C / BK steps; 2 stages unrolled by two K steps, an odd count ending after the loop
    # (the quick tier keeps the strided one; the rest are slow)
    pytest.param({"B": 1, "C": 64, "F": 40}, (3, 8), 1, 1, [0, 32, 1, 0], [32, 4, 2], 2, 18, marks=pytest.mark.slow),
    pytest.param({"B": 1, "C": 96, "F": 24}, (3, 8), 1, 1, [0, 16, 1, 0], [32, 2, 2], 2, 27, marks=pytest.mark.slow),
    pytest.param({"B": 1, "C": 48, "F": 24}, (3, 8), 1, 1, [0, 16, 1, 0], [16, 2, 2], 3, 27, marks=pytest.mark.slow),
    ({"B": 2, "C": 64, "F": 24}, (5, 9), 0, 2, [1, 16, 2, 0], [32, 2, 2], 2, 18),
]


@pytest.mark.parametrize("binding,hw,pad,stride,block,gemm,stages,steps", STEPPED)
def test_conv_k_steps_stepped_across_kw_and_kh(binding, hw, pad, stride, block, gemm, stages, steps):
    (h, wd), o = hw, [(n + 2 * pad - 3) // stride + 1 for n in hw]
    src = (f"chain t(x: f16[B, C, {h}, {wd}], w: f16[F, C, 3, 3]) -> f16[B, F, {o[0]}, {o[1]}] "
           f"{{ return relu(conv2d(x, w, stride={stride}, padding={pad})) }}")
    st = _stages(src, binding, _plan(block, gemm, stages, first=1 if pad else 0))
    k = st.plan.kernels[-1]
    assert k.config.mma == "f16" and k.config.stages == stages and k.config.bk == gemm[0]
    assert 9 * binding["C"] // gemm[0] == steps
    conv = st.emitted.source.split(f"def k{k.id}(")[1].split("\ndef ")[0]
    loop = conv.split("    for k0 in ")[1]
    assert "_cp_async16h(" not in loop and "kwrap" in loop
    if stages == 2:           # unrolled: two K steps an iteration, an odd one after the loop
        assert loop.startswith(f"range(0, {gemm[0] * (steps - steps % 2)}, {2 * gemm[0]}):")
        assert ("# the last K step" in conv) == bool(steps % 2)
    _emulated_run(st, "f16", binding, hw, pad, stride)


@pytest.mark.parametrize("target,kind", [  # the quick tier keeps the simulator's f16 build
    ("cuda-sim", "f16"), pytest.param("cuda-sim", "bf16", marks=pytest.mark.slow),
    pytest.param("cpu", "f16", marks=pytest.mark.slow), pytest.param("cpu", "bf16", marks=pytest.mark.slow)])
def test_16_bit_convs_fused_unfused_and_the_reference_agree(target, kind):
    binding = {"B": 2, "C": 16, "F": 24}
    options = {"plans": {"t": _plan([1, 16, 1, 0], [16, 2, 2], 2 if kind == "f16" else 0)}} if target == "cuda-sim" else {}
    prog = fusec.compile(_src(kind, 8), target=target, options=options)
    (c,) = prog.t.check(binding=binding, seed=5)
    assert c.ok, c.describe()


@pytest.mark.parametrize("kind", ["f16", "bf16"])
def test_strided_dilated_biased_16_bit_convs_run_channels_last(kind):
    """Strides, dilations, uneven padding and a bias through the channels-last lowering."""
    src = (f"chain t(x: {kind}[B, C, 9, 9], w: {kind}[F, C, 3, 3], b: {kind}[F]) -> {kind}[B, F, 5, 3] "
           "{ return conv2d(x, w, bias=b, stride=[2, 2], padding=[1, 0], dilation=[1, 2]) }")
    binding = {"B": 2, "C": 16, "F": 8}
    assert "channels-last" in _stages(src, binding).texts["linalg"]
    for target in ("cuda-sim", "cpu"):
        (c,) = fusec.compile(src, target=target).t.check(binding=binding, seed=3)
        assert c.ok, c.describe()
