"""bf16 end to end on the Numba targets (issue 37 item 5): bfloat16 arrays in and out, every value
computed in f32 and rounded to bf16 after each op (docs/FDSL.md, "Numerics"), as the reference
does. Inside an emitted module a bf16 value is an f32 that is exactly a bf16 (emit/values.py):
the cpu rounds on the bits (emit/cpu.py round_bf16), the cuda target with PTX's cvt.rn and the
simulator on the bits again (emit/bf16.py).

Comparisons are exact (bit for bit, NaN where NaN) wherever the reference rounds the same
values the same way: elementwise chains, where each op is one correctly rounded f32 op and one
rounding. Reductions, contractions and exp/tanh on the cpu are compared within a bf16 ulp or
two, since their f32 values differ in the last f32 bits (summation order, BLAS, the cpu's
polynomial exp) and one f32 ulp can move a value across a bf16 rounding boundary: then the
two results are one bf16 ulp (2**-8 relative) apart, which is what `_close` allows. (On the
inputs below they all match bit for bit, but for cuda-sim's fused attention: see its test.)
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import fusec

BF16 = ml_dtypes.bfloat16
TARGETS = ["cpu", "cuda-sim"]


def _run(src, target, *args, **kw):
    return getattr(fusec.compile(src, target=target, options={"baseline": False}), kw.get("chain", "t"))(*args)


def _reference(src, *args, chain="t"):
    return getattr(fusec.compile(src, target="reference"), chain)(*args)


def _bits(x):
    return np.asarray(x).view(np.uint16)


def _same(got, want):
    """Bit for bit, any NaN matching any NaN."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == BF16 and want.dtype == BF16 and got.shape == want.shape
    g, w = got.astype(np.float32), want.astype(np.float32)
    nan = np.isnan(w)
    assert np.array_equal(np.isnan(g), nan), (got, want)
    assert np.array_equal(_bits(got)[~nan], _bits(want)[~nan]), (got[~nan], want[~nan])


def _close(got, want, ulps=2, scale=2.0 ** -8):
    """Within `ulps` bf16 ulps (relative 2**-8 each) of the reference's value, or of `scale`
    where that is larger; NaN where it has NaN, the same infinities."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == BF16 and got.shape == want.shape
    g, w = got.astype(np.float64), want.astype(np.float64)
    assert np.array_equal(np.isnan(g), np.isnan(w))
    assert np.array_equal(g[np.isinf(w)], w[np.isinf(w)])
    ok = np.isfinite(w)
    tol = ulps * 2.0 ** -8 * np.maximum(np.abs(w[ok]), scale)
    assert np.all(np.abs(g[ok] - w[ok]) <= tol), np.max(np.abs(g[ok] - w[ok]) / tol)


# ------------------------------------------------------------------ rounding

ROUND = """
chain t(x: f32[N]) -> (bf16[N], f32[N]) {
    return cast(x, bf16), cast(cast(x, bf16), f32)
}
"""

# f32 values and the bf16 each rounds to (ties to even, overflow to inf, NaN kept)
CASES = [
    (1.0 + 2.0 ** -8, 1.0),                      # a tie: to the even neighbour below
    (1.0 + 3 * 2.0 ** -8, 1.0 + 2.0 ** -6),      # a tie: to the even neighbour above
    (1.0 + 2.0 ** -8 + 2.0 ** -20, 1.0 + 2.0 ** -7),   # past the tie: up (truncation gives 1.0)
    (1.0 + 2.0 ** -7 - 2.0 ** -22, 1.0 + 2.0 ** -7),   # just under a bf16: up
    (-(1.0 + 2.0 ** -8 + 2.0 ** -20), -(1.0 + 2.0 ** -7)),
    (float(np.finfo(np.float32).max), np.inf),   # the largest finite f32: past bf16's max, to inf
    (float(ml_dtypes.finfo(BF16).max), float(ml_dtypes.finfo(BF16).max)),
    (np.inf, np.inf), (-np.inf, -np.inf), (-0.0, -0.0), (1e-40, 1e-40), (np.nan, np.nan),
]


@pytest.mark.parametrize("target", TARGETS)
def test_casts_round_to_nearest_even(target):
    x = np.array([c[0] for c in CASES], np.float32)
    want = np.array([c[1] for c in CASES], np.float32).astype(BF16)
    b, f = _run(ROUND, target, x)
    _same(b, want)
    _same(b, _reference(ROUND, x)[0])
    assert f.dtype == np.float32 and np.array_equal(f, want.astype(np.float32), equal_nan=True)
    assert np.signbit(f[CASES.index((-0.0, -0.0))])
    assert float(f[2]) == 1.0 + 2.0 ** -7          # truncating the bits instead would give 1.0


NAN = """
chain t(x: bf16[N], y: f32[N]) -> (bf16[N], bf16[N]) {
    return x * 2.0, cast(y * 2.0, bf16)
}
"""


@pytest.mark.parametrize("target", TARGETS)
def test_nan_stays_nan_and_overflow_gives_inf(target):
    # a signalling NaN f32 (quiet bit clear, payload only in the low 16 bits): a truncation of
    # its bits would give inf; the rounding keeps it a NaN
    y = np.array([2.0, 3.0e38, -3.0e38, 1.0], np.float32)
    y[3] = np.array(0x7F800001, np.uint32).view(np.float32)
    x = np.array([np.nan, np.inf, 1.7e38, -1.7e38], BF16)
    a, b = _run(NAN, target, x, y)
    assert np.isnan(float(a[0])) and float(a[1]) == np.inf and float(a[2]) == np.inf and float(a[3]) == -np.inf
    assert float(b[0]) == 4.0 and float(b[1]) == np.inf and float(b[2]) == -np.inf and np.isnan(float(b[3]))
    ref = _reference(NAN, x, y)
    _same(a, ref[0])
    _same(b, ref[1])


CONSTANTS = """
chain t(x: bf16[3]) -> (bf16[3], bf16, bf16[2], bf16[3]) {
    return x * 0.3, cast(0.3, bf16), full([2], -inf, dtype=bf16), full([3], 1000.7, dtype=bf16)
}
"""


@pytest.mark.parametrize("target", TARGETS)
def test_constants_are_bf16_values(target):
    # the literals rounded to bf16 where the code is written (emit/values.py), and a chain's
    # constant result held as a module-level array (a memref.global, read from MLIR's text)
    x = np.array([1.0, -3.0, 7.0], BF16)
    got, want = _run(CONSTANTS, target, x), _reference(CONSTANTS, x)
    for g, w in zip(got, want):
        _same(g, w)
    assert float(got[1]) == 0.30078125 and float(got[3][0]) == 1000.0 and float(got[2][1]) == -np.inf


# ------------------------------------------------------------------ chains

ELEMENTWISE = """
chain t(x: bf16[M, N], y: bf16[M, N], s: f32[N]) -> (bf16[M, N], f32[M, N], bf16[M, N]) {
    a = x * y + 1.5
    b = a / (y - 0.25) - sqrt(abs(x))
    return b, cast(b, f32) * s, maximum(b, cast(s, bf16))
}
"""


@pytest.mark.parametrize("target", TARGETS)
def test_elementwise_matches_the_reference_bit_for_bit(target):
    rng = np.random.default_rng(1)
    x = rng.uniform(-3, 3, (3, 33)).astype(BF16)
    y = rng.uniform(-3, 3, (3, 33)).astype(BF16)
    s = rng.uniform(-2, 2, 33).astype(np.float32)
    got, want = _run(ELEMENTWISE, target, x, y, s), _reference(ELEMENTWISE, x, y, s)
    _same(got[0], want[0])
    assert got[1].dtype == np.float32 and np.array_equal(got[1], want[1])
    _same(got[2], want[2])


TRANSCENDENTAL = """
chain t(x: bf16[N]) -> (bf16[N], bf16[N]) {
    return exp(x), tanh(x)
}
"""


@pytest.mark.parametrize("target", TARGETS)
def test_exp_and_tanh(target):
    x = np.concatenate([np.linspace(-12, 12, 97), [100.0, -100.0, 0.0, np.nan, np.inf, -np.inf]]).astype(BF16)
    got, want = _run(TRANSCENDENTAL, target, x), _reference(TRANSCENDENTAL, x)
    for g, w in zip(got, want):
        _close(g, w, ulps=1)       # one bf16 ulp: an f32 exp/tanh a few f32 ulps off may round across


SOFTMAX = """
chain t(x: bf16[M, N]) -> bf16[M, N] {
    return softmax(x, axis=-1)
}
"""

LAYERNORM = """
chain t(x: bf16[M, N], g: bf16[N], b: bf16[N]) -> bf16[M, N] {
    return layernorm(x, g, b, axis=-1)
}
"""


@pytest.mark.parametrize("target", TARGETS)
def test_softmax_and_layernorm(target):
    rng = np.random.default_rng(2)
    x = rng.normal(0, 3, (4, 40)).astype(BF16)
    _close(_run(SOFTMAX, target, x), _reference(SOFTMAX, x))
    g = rng.uniform(0.5, 1.5, 40).astype(BF16)
    b = rng.uniform(-1, 1, 40).astype(BF16)
    _close(_run(LAYERNORM, target, x, g, b), _reference(LAYERNORM, x, g, b))


MATMUL = """
chain t(a: bf16[M, K], b: bf16[K, N], c: bf16[N]) -> bf16[M, N] {
    return relu(a @ b + c)
}
"""


@pytest.mark.parametrize("target", TARGETS)
def test_matmul_bias_relu(target):
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, (9, 24)).astype(BF16)
    b = rng.uniform(-1, 1, (24, 11)).astype(BF16)
    c = rng.uniform(-1, 1, 11).astype(BF16)
    got = _run(MATMUL, target, a, b, c)
    _close(got, _reference(MATMUL, a, b, c))
    assert (got.astype(np.float32) >= 0).all() and (got.astype(np.float32) > 0).any()


ATTENTION = """
chain t(q: bf16[B, S, D], k: bf16[B, S, D], v: bf16[B, S, D]) -> bf16[B, S, D] {
    return softmax(q @ transpose(k) * 0.25, axis=-1) @ v
}
"""


@pytest.mark.parametrize("target", TARGETS)
def test_attention(target):
    rng = np.random.default_rng(4)
    q, k, v = (rng.normal(0, 1, (2, 12, 16)).astype(BF16) for _ in range(3))
    # the fused kernel keeps the scores and probabilities in f32 (an online softmax: plan/
    # attention.py drops the roundings inside the template), where the reference rounds each
    # to bf16: each output is a sum of p v whose terms are each off by up to a bf16 ulp of
    # |v|, so the bound is in units of max |v|, not of the (possibly cancelled) sum
    got, want = _run(ATTENTION, target, q, k, v), _reference(ATTENTION, q, k, v)
    _close(got, want, scale=float(np.abs(v.astype(np.float32)).max()))


# ------------------------------------------------------------------ the cuda target's code

def _ptx_and_sass(src, binding, kernel="k0"):
    from fusec.compiler.options import CompileOptions
    from fusec.compiler.pipeline import compile_typed
    from fusec.compiler.plan.hardware import GPUS
    from fusec.compiler.report.ptx import assemble, ptx_of
    from fusec.compiler.report.sass import disassemble
    st = compile_typed(fusec.check(src).chain("t"), binding,
                       options=CompileOptions.make(target="gpu", hardware=GPUS["h200"]))
    out = ptx_of(st.emitted.source, (9, 0))
    assert not out["errors"], out["errors"]
    ptx = out["ptx"][kernel]
    return st, ptx, disassemble(assemble(ptx, "sm_90")[1])


@pytest.mark.slow
def test_a_bf16_matmul_runs_on_bf16_tensor_cores():
    """bf16 operands reach mma.sync as bf16 bits: uint16 staging tiles, fragments by ldmatrix
    (the emulated-warp test of tests/fusion/test_tensor_cores.py checks the values)."""
    st, ptx, sass = _ptx_and_sass(MATMUL, {"M": 512, "K": 1024, "N": 4096})
    assert st.plan.kernels[0].config.mma == "bf16"
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx and "ldmatrix.sync.aligned" in ptx
    assert "HMMA.16816.F32.BF16" in sass and "LDSM" in sass
    assert ".view(np.uint16)" in st.emitted.source.split("def k0")[1]


def test_the_plan_prices_bf16_at_two_bytes_and_the_kernels_hold_its_bits():
    """bf16 tensors are uint16 arrays of their bits in the cuda kernels (emit/values.py), 2 bytes
    an element to the plan (plan/analysis.py): every load widens the bits (`_bf16_f32`), every
    store rounds to them (`_f32_bf16`), and the host function passes bfloat16 device arrays in as
    their uint16 views and hands results back as bfloat16 views: no conversion kernels, no copies."""
    from fusec.compiler.options import CompileOptions
    from fusec.compiler.pipeline import compile_typed
    from fusec.compiler.plan.hardware import GPUS
    src = "chain t(x: bf16[M, 256], y: bf16[M, 256]) -> bf16[M, 256] { return exp(x * y + 1.0) }"
    st = compile_typed(fusec.check(src).chain("t"), {"M": 4096},
                       options=CompileOptions.make(target="gpu", hardware=GPUS["h200"]))
    assert st.plan.info.op(st.plan.kernels[0].root).elem_bytes == 2
    text = st.emitted.source
    assert "uint16[:, ::1]" in text and "float32[:, ::1]" not in text
    assert "_bf16_f32(arg0[" in text and "_f32_bf16(" in text and "_round_bf16(" in text
    assert "_bf16_widen" not in text and "_bf16_narrow" not in text and "astype" not in text
    assert ".view(np.uint16)" in text and "_bf16_out(" in text
    assert [k for k in st.emitted.entries["t"].kernels] == ["k0"]       # one kernel: no conversions


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_the_cpu_plan_prices_16_bit_floats_as_the_float32_arrays_it_runs(dtype):
    """The cpu target computes f16 and bf16 chains on float32 arrays (the host function converts
    at the boundary: emit/module.py, _narrow), so its plan counts their traffic at 4 bytes an
    element, as the same chain in f32; the gpu plan counts the 2 bytes its kernels move."""
    from fusec.compiler.options import CompileOptions
    from fusec.compiler.pipeline import compile_typed
    from fusec.compiler.plan.hardware import GPUS
    from fusec.compiler.calibrate import cpu_profile

    def plan(dt, target):
        src = f"chain t(x: {dt}[M, 256], y: {dt}[M, 256]) -> {dt}[M, 256] {{ return exp(x * y + 1.0) }}"
        hw = cpu_profile() if target == "cpu" else GPUS["h200"]
        return compile_typed(fusec.check(src).chain("t"), {"M": 4096},
                             options=CompileOptions.make(target=target, hardware=hw), until="plan").plan
    narrow, wide = plan(dtype, "cpu"), plan("f32", "cpu")
    assert narrow.info.op(narrow.kernels[0].root).elem_bytes == 4
    assert narrow.costs[0].bytes == wide.costs[0].bytes == 3 * 4096 * 256 * 4
    assert narrow.predicted_s == pytest.approx(wide.predicted_s)
    gpu = plan(dtype, "gpu")
    assert gpu.costs[0].bytes == 3 * 4096 * 256 * 2


def test_cuda_sim_results_are_bfloat16_arrays_equal_to_the_reference():
    """A cuda-sim call: the results (views of the kernels' uint16 outputs) come back as bfloat16
    arrays equal to the reference, call after call (the output pool's buffers reused)."""
    src = "chain t(x: bf16[N], y: bf16[N]) -> bf16[N] { return x * y + 1.0 }"
    rng = np.random.default_rng(3)
    x, y = (rng.normal(size=1000).astype(BF16) for _ in range(2))
    exe = fusec.compile(src, target="cuda-sim", options={"baseline": False})
    want = _reference(src, x, y)
    for _ in range(2):
        got = exe.t(x, y)
        _same(got, want)


def test_cuda_rounds_with_one_conversion_instruction():
    """One F2FP a rounding: after the multiply (cvt.rn.bf16x2.f32, the f32 kept), and the add's
    rounding done by the store (cvt.rn.bf16.f32 to the 16 bits the uint16 array holds); the
    loads widen the bits with a shift (no conversion instruction)."""
    st, ptx, sass = _ptx_and_sass("chain t(x: bf16[N]) -> bf16[N] { return x * 3.0 + 1.0 }", {"N": 64})
    assert ptx.count("cvt.rn.bf16x2.f32") == 1 and ptx.count("cvt.rn.bf16.f32") == 1
    assert "ld.global.u16" in ptx and "st.global.u16" in ptx
    assert sass.count("F2FP.BF16.F32.PACK_AB") == 2


def test_the_simulator_accesses_round_to_nearest_even_and_keep_nan():
    """emit/bf16.py's access helpers as the simulator runs them, over f32 bit patterns (ties,
    carries into the exponent, the largest finite values, infinities, NaNs, subnormals): a store
    (`_f32_bf16`) gives ml_dtypes' rounding to nearest even, a NaN stays a NaN, and a load
    (`_bf16_f32`) gives back the bf16 exactly."""
    import numba
    from fusec.compiler.emit import bf16 as emit_bf16
    scope = {"np": np, "numba": numba, "_CUDASIM": True}
    exec(emit_bf16.ROUND, scope)
    rng = np.random.default_rng(7)
    bits = np.concatenate([rng.integers(0, 1 << 32, 4000, dtype=np.uint64).astype(np.uint32),
                           np.array([0x3F808000, 0x3F818000, 0x3F808001, 0x7F7FFFFF, 0x7F7F8000, 0x7F800000,
                                     0xFF800000, 0x7FC00000, 0x7F800001, 0xFFFFFFFF, 0x00000001, 0x80008000,
                                     0x3FFF8000], np.uint32)])
    xs = bits.view(np.float32)
    want = xs.astype(BF16)
    got = np.array([scope["_f32_bf16"](x) for x in xs], np.uint16).view(BF16)
    _same(got, want)
    back = np.array([scope["_bf16_f32"](h) for h in want.view(np.uint16)], np.float32)
    nan = np.isnan(back)
    assert np.array_equal(nan, np.isnan(want.astype(np.float32)))
    assert np.array_equal(back[~nan], want.astype(np.float32)[~nan])


def test_a_store_rounds_the_truncf_once():
    """The store of a truncf to bf16 rounds its f32 operand itself (one cvt on a GPU), and
    stores of values already bf16 (a load, a constant) round again, to themselves."""
    from fusec.compiler.options import CompileOptions
    from fusec.compiler.pipeline import compile_typed
    st = compile_typed(fusec.check(ROUND).chain("t"), {"N": 64}, options=CompileOptions.make(target="gpu"))
    k0 = st.emitted.source.split("def k0")[1].split("\ndef ")[0]
    assert "_f32_bf16(" in k0 and "float32[::1]" in st.emitted.source


def test_a_bf16_memref_global_is_its_bits_on_cuda_and_f32_on_the_cpu():
    """A folded bf16 constant array (an ONNX initializer) as the module-level array each target's
    kernels read: the uint16 bits on cuda, the exact f32 values on the cpu."""
    from fusec.compiler.emit.values import Globals
    from fusec.compiler.mlir import ir
    with ir.Context():
        m = ir.Module.parse('memref.global "private" constant @w : memref<3xbf16> = dense<[1.5, -2.0, 0x7FC0]>')
        op = m.body.operations[0].operation
        cuda, cpu = Globals("cuda"), Globals("cpu")
        cuda.add(op)
        cpu.add(op)
    assert cuda.lines() == ["_g_w = np.array([16320, 49152, 32704], np.uint16).reshape((3,))"]
    assert cpu.lines() == ["_g_w = np.array([1.5, -2, np.nan], np.float32).reshape((3,))"]
