"""The CPU target's vectorisable forms (compiler/emit_cpu.py): arith.maximumf & co. as LLVM's
min/max intrinsics, f32 exp and tanh as MLIR's polynomial approximations, and the fastmath
flags; checked for accuracy over f32's range, for IEEE special values, and in reductions long
enough to run through LLVM's vectorised loops."""
from __future__ import annotations

import re

import numpy as np
import pytest

import fusec
from fusec.compiler.emit.module import CPU_FASTMATH


def _sweep() -> np.ndarray:
    rng = np.random.default_rng(1)
    parts = [np.linspace(-110, 95, 20001, dtype=np.float32),
             np.linspace(-12, 12, 20001, dtype=np.float32),
             (rng.standard_normal(20000) * 3).astype(np.float32),
             np.logspace(-40, -3, 2000, dtype=np.float32),
             -np.logspace(-40, -3, 2000, dtype=np.float32),
             np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 88.72, 88.73, -87.34, -103.9, -104.1,
                       9.0, -9.0, 8.9, 0.0004, -0.00039], np.float32)]
    x = np.concatenate(parts)
    return x[: x.size // 64 * 64].reshape(64, -1)


X = _sweep()


def _ulps(got: np.ndarray, want64: np.ndarray) -> float:
    with np.errstate(over="ignore"):
        want = want64.astype(np.float32)
    finite = np.isfinite(want)
    spacing = np.spacing(np.maximum(np.abs(want[finite]), np.float32(1.2e-38)))
    return float(np.max(np.abs(got[finite].astype(np.float64) - want64[finite]) / spacing))


@pytest.fixture(scope="module")
def unary():
    src = ("chain e(x: f32[M, N]) -> f32[M, N] { return exp(x) }\n"
           "chain t(x: f32[M, N]) -> f32[M, N] { return tanh(x) }\n")
    return fusec.compile(src, target="cpu", options={"baseline": False})


def test_exp_f32_within_3_ulp_and_keeps_special_values(unary):
    got = unary.e(X)
    with np.errstate(over="ignore"):
        want = np.exp(X.astype(np.float64))
    assert _ulps(got, want) <= 3
    with np.errstate(over="ignore"):
        want32 = want.astype(np.float32)
    special = ~np.isfinite(want32) | (want32 == 0) | np.isnan(X)
    np.testing.assert_array_equal(got[special], want32[special])       # nan, inf, 0 exactly
    tiny = (want32 > 0) & (want32 < np.float32(1.2e-38))              # gradual underflow
    assert np.all(np.abs(got[tiny] - want32[tiny]) <= np.float32(1.5e-45))


def test_tanh_f32_within_5_ulp_keeps_signs_and_limits(unary):
    got = unary.t(X)
    want = np.tanh(X.astype(np.float64))
    assert _ulps(got, want) <= 5
    big = np.abs(X) >= 9
    np.testing.assert_array_equal(got[big], np.sign(X[big]))           # +-1 exactly, inf too
    assert np.isnan(got[np.isnan(X)]).all()
    small = np.abs(X) < np.float32(0.0004)
    np.testing.assert_array_equal(got[small], X[small])                # incl. the sign of -0
    assert np.array_equal(np.signbit(got[small]), np.signbit(X[small]))


def test_cpu_source_uses_the_vector_forms_and_safe_fastmath_flags(unary):
    src = unary.e.stages({"M": 64, "N": 64})["kernels"]
    assert "_exp_f32(" in src and "math.exp(" not in src
    flags = set(re.findall(r'"(\w+)"', CPU_FASTMATH))
    assert flags == {"contract", "reassoc"}      # never nnan/ninf/nsz/arcp/afn: IEEE specials hold
    assert f"fastmath={CPU_FASTMATH}" in src
    relu = fusec.compile("chain r(x: f32[M, N]) -> f32[M, N] { return relu(x) }", target="cpu")
    assert "_llvm_maximum(" in relu.r.stages({"M": 8, "N": 8})["kernels"]


def test_f64_and_cuda_keep_libm():
    src = "chain e(x: f64[M, N]) -> f64[M, N] { return exp(tanh(x)) }"
    cpu = fusec.compile(src, target="cpu", options={"baseline": False}).e.stages({"M": 4, "N": 4})
    assert "math.exp(" in cpu["kernels"] and "_exp_f32" not in cpu["kernels"]
    src32 = "chain e(x: f32[M, N]) -> f32[M, N] { return exp(x) }"
    cuda = fusec.compile(src32, target="cuda-sim", options={"baseline": False}).e.stages({"M": 4, "N": 4})
    assert "math.exp(" in cuda["kernels"] and "intrinsic" not in cuda["kernels"]


def test_vectorised_reductions_keep_nan_inf_and_signed_zero():
    src = ("chain mx(x: f32[M, N]) -> f32[M] { return max(x, axis=-1) }\n"
           "chain mn(x: f32[M, N]) -> f32[M] { return min(x, axis=-1) }\n"
           "chain sm(x: f32[M, N]) -> f32[M] { return sum(x, axis=-1) }\n")
    prog = fusec.compile(src, target="cpu", options={"baseline": False})
    x = np.random.default_rng(2).standard_normal((16, 1000)).astype(np.float32)
    x[1, 517] = np.nan
    x[2, 3] = np.inf
    x[3, 999] = -np.inf
    x[4] = -0.0
    x[5] = 0.0
    x[5, 100] = -0.0
    x[6, ::2] = np.inf
    x[6, 1::2] = -np.inf
    with np.errstate(invalid="ignore"):
        for name, ref in (("mx", np.max), ("mn", np.min), ("sm", np.sum)):
            got = getattr(prog, name)(x)
            want = ref(x.astype(np.float64), axis=-1).astype(np.float32)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4, equal_nan=True, err_msg=name)
    assert np.signbit(prog.mx(x)[4]) and not np.signbit(prog.mx(x)[5])    # max(-0, -0) = -0
    assert np.signbit(prog.mn(x)[5])                                       # min(+0, -0) = -0


# ----------------------------------------------------------------------------- library calls

@pytest.mark.slow
def test_contractions_become_blas_calls_with_their_zero_fill_dropped():
    src = ("chain mlp(x: f32[M, K], w: f32[K, N], b: f32[N]) -> f32[M, N] { return gelu(x @ w + b) }\n"
           "chain att(q: f32[B, S, 8], k: f32[B, S, 8], v: f32[B, S, 8]) -> f32[B, S, 8] {\n"
           "    return softmax(q @ transpose(k) / 8.0, axis=-1) @ v\n}\n")
    row_tiles = {"mlp": {"groups": [{"ops": [1, 2], "block_tiles": [16, 0]}]},
                 "att": {"groups": [{"ops": [0, 2], "block_tiles": [1, 0, 0, 0]},
                                    {"ops": [3, 5, 6, 8, 9, 11], "block_tiles": [1, 0, 0, 0]}]}}
    prog = fusec.compile(src, target="cpu", options={"baseline": False, "plans": row_tiles})
    rng = np.random.default_rng(3)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((64, 32), (32, 48), (48,)))
    text = prog.mlp.stages({"M": 64, "K": 32, "N": 48})["kernels"]
    assert "objmode" not in text          # CBLAS from compiled code (emit/cpu.py: BLAS_PRELUDE)
    # one call per 16-row chunk, inside the loop, C = A B (no fill, no +=) into the chunk's rows
    call = re.search(r"_sgemm\(101, 111, 111, 16, 48, 32, _f32_1, arg0\[(\w+):\1 \+ 16, 0:32\], 32, arg1, 48, _f32_0, "
                     r"(\w+)\[\1:\1 \+ 16, 0:48\], 48\)  # cblas: linalg.matmul", text)
    assert call and text.index(call.group(0)) > text.index("numba.prange(")
    one = {"mlp": {"groups": [{"ops": [1, 2], "block_tiles": [64, 0]}]}}      # one chunk: the whole product
    whole = fusec.compile(src, target="cpu", options={"baseline": False, "plans": one}).mlp
    # the whole product, split among the workers by rows (C is taller than wide: emit/cpu.py
    # _gemm_chunks), each slice one call
    assert re.search(r"_sgemm\(101, 111, 111, (_hi\d+) - (_lo\d+), 48, 32, _f32_1, arg0\[\2:\1, :\], 32, arg1, 48, "
                     r"_f32_0, alloc\[\2:\1, :\], 48\)  # cblas: linalg.matmul",
                     whole.stages({"M": 64, "K": 32, "N": 48})["kernels"])
    assert whole.check(binding={"M": 64, "K": 32, "N": 48})[0].ok
    assert prog.mlp.check(binding={"M": 64, "K": 32, "N": 48})[0].ok
    assert prog.att.check(binding={"B": 3, "S": 16})[0].ok
    att = prog.att.stages({"B": 3, "S": 16})["kernels"]
    assert att.index("numba.prange(") < att.index("# cblas: linalg.batch_matmul")   # per tile
    got = prog.mlp(x, w, b)
    h = x.astype(np.float64) @ w + b
    np.testing.assert_allclose(got, 0.5 * h * (1 + np.tanh(0.7978845608 * (h + 0.044715 * h ** 3))),
                               rtol=1e-4, atol=1e-5)


def test_conv_becomes_im2col_and_one_gemm_per_tile():
    src = ("chain c(x: f32[B, 3, 9, 11], w: f32[4, 3, 3, 2]) -> f32[B, 4, 5, 5] {\n"
           "    return conv2d(x, w, stride=2, padding=[1, 0], dilation=[1, 2])\n}\n")
    prog = fusec.compile(src, target="cpu", options={"baseline": False})
    text = prog.c.stages({"B": 2})["kernels"]
    assert "# cblas: linalg.conv_2d_nchw_fchw" in text and "np.empty((18, 25), np.float32)" in text   # im2col
    assert prog.c.check(binding={"B": 2})[0].ok


MEMREF_MATMUL = """
func.func @mm(%a: memref<2x4x8xf32>, %b: memref<4x6xf32>, %c: memref<8x6xf32>) -> memref<8x6xf32> {
  %sa = memref.subview %a[0, 0, 2] [2, 4, 4] [1, 1, 1] : memref<2x4x8xf32> to memref<2x4x4xf32, strided<[32, 8, 1], offset: 2>>
  %ca = memref.collapse_shape %sa [[0, 1], [2]] : memref<2x4x4xf32, strided<[32, 8, 1], offset: 2>> into memref<8x4xf32, strided<[8, 1], offset: 2>>
  %out = memref.alloc() : memref<8x6xf32>
  memref.copy %c, %out : memref<8x6xf32> to memref<8x6xf32>
  linalg.matmul ins(%ca, %b : memref<8x4xf32, strided<[8, 1], offset: 2>>, memref<4x6xf32>) outs(%out : memref<8x6xf32>)
  return %out : memref<8x6xf32>
}
"""


def test_a_view_without_an_array_expression_falls_back_to_ikj_loops(tmp_path):
    """C += A B where A is a collapsed subview (no NumPy expression for it): loops, i-k-j order."""
    import importlib.util

    from fusec.compiler.emit import emit
    from fusec.compiler.mlir import ir
    from fusec.compiler.transforms.to_target import to_cpu
    with ir.Context():
        module = ir.Module.parse(MEMREF_MATMUL)
        to_cpu(module)
        assert 'fusec.cpu_call = "acc"' in str(module)
        src = emit(module, "cpu").source
    assert "objmode" not in src
    loops = [line.strip() for line in src.splitlines() if line.strip().startswith("for ")]
    assert len(loops) >= 3
    path = tmp_path / "mm.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("mm_fallback", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rng = np.random.default_rng(4)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((2, 4, 8), (4, 6), (8, 6)))
    (got,) = mod.run_mm(a, b, c)
    np.testing.assert_allclose(got, c + a[:, :, 2:6].reshape(8, 4) @ b, rtol=1e-5, atol=1e-5)


def test_the_profiles_vector_width_reaches_llvm_for_every_loop():
    """vector_bits (compiler/calibrate.py measures it) becomes a call first in the host function,
    first in each of its loops' functions (emit/cpu.py: split_loops) and first in each prange body, which sets LLVM's prefer-vector-width on the function it is
    compiled in (the prange body is its own function); the numbers do not change."""
    from dataclasses import replace

    from fusec.compiler.calibrate import cpu_profile
    from fusec.runtime.artifact import function_from_source
    src = "chain e(x: f32[M, N]) -> f32[M, N] { return tanh(x * 1.5) * exp(-abs(x)) }"
    binding = {"M": 64, "N": 1024}
    x = np.random.default_rng(4).standard_normal((64, 1024), dtype=np.float32)
    outs, texts = {}, {}
    for bits in (0, 512):
        hw = replace(cpu_profile(), vector_bits=bits)
        chain = fusec.compile(src, target="cpu", options={"baseline": False, "hardware": hw}, cache=False).e
        texts[bits] = text = chain.stages(binding)["kernels"]
        host = re.search(r"^def (_run_e\w*)\(", text, re.M).group(1)
        fn = function_from_source(text, host, f"width{bits}")
        outs[bits] = fn(x, np.empty_like(x))[0]
        llvm = "\n".join(fn.inspect_llvm().values())
        assert ('"prefer-vector-width"="512"' in llvm) == (bits == 512)
    assert "_prefer_vectors" not in texts[0]
    text = texts[512]
    for fn in re.findall(r"^def (_loop\d+_run_e\w*|_run_e\w*)\(", text, re.M):   # its loops' functions, then it
        body = text[text.index(f"def {fn}("):].splitlines()
        assert body[2].strip() == "_prefer_vectors_512()"                 # after the def and its docstring
    body = text[text.index("def _loop0_run_e"):].splitlines()
    loops = [i for i, line in enumerate(body) if "numba.prange(" in line]
    assert loops and all(body[i + 1].strip() == "_prefer_vectors_512()" for i in loops)
    np.testing.assert_array_equal(outs[0], outs[512])


def test_a_vector_width_the_emitter_does_not_know_is_refused():
    from fusec.compiler.emit import emit
    with pytest.raises(ValueError, match="vector_bits is 384"):
        emit(None, "cpu", vector_bits=384)
