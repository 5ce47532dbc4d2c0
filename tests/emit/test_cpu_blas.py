"""BLAS from compiled cpu code (emit/cpu.py: BLAS_PRELUDE, library_call): CBLAS ?gemm of
NumPy's OpenBLAS called through a Numba ExternalFunction, each operand passed as its memref
layout lies (transposed where its columns are contiguous) or copied where neither axis has unit
stride, the result through a buffer where it must; conv as im2col by row blocks plus ?gemm; and
the NumPy callback that stands in where no such library is found."""
import ctypes
import importlib.util
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import fusec
from fusec.compiler.emit import emit
from fusec.compiler.emit.cpu import BLAS_PRELUDE
from fusec.compiler.mlir import ir
from fusec.compiler.transforms.to_target import to_cpu


def _module(tmp_path, mlir: str, name: str, cores: int = 1):
    """The emitted cpu module of a memref-level function (for a machine of `cores` cores),
    imported from a file."""
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(mlir)
        to_cpu(module)
        src = emit(module, "cpu", cores=cores).source
    path = tmp_path / f"{name}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(f"fusec_blas_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod, src


def _calls(src: str) -> list[str]:
    """The BLAS call lines, a split call's slice extent (emit/cpu.py: _gemm_chunks) written W."""
    return [re.sub(r"_hi\d+ - _lo\d+", "W", line.strip()) for line in src.splitlines() if "# cblas:" in line]


MATMUL = """
func.func @mm(%a: memref<6x5xf32, LA>, %b: memref<5x7xf32, LB>, %c: memref<6x7xf32, LC>) {
  linalg.matmul ins(%a, %b : memref<6x5xf32, LA>, memref<5x7xf32, LB>) outs(%c : memref<6x7xf32, LC>)
  return
}
"""
ROW, COL = "strided<[S, 1]>", "strided<[1, S]>"


def _array(rng, shape, layout):
    x = rng.standard_normal(shape).astype(np.float32)
    return np.asfortranarray(x) if layout.startswith("strided<[1,") else x


@pytest.mark.parametrize("la, lb, lc, flags", [
    (ROW, ROW, ROW, "111, 111, 6, W, 5"),      # W: the worker's slice of C's 7 columns
    (COL, COL, ROW, "112, 112, 6, W, 5"),      # column-major operands: passed transposed, no copy
    (ROW, COL, COL, "111, 112, W, 6, 5"),      # a column-major result: C^T = B^T A^T
], ids=["row-major", "operands-by-columns", "result-by-columns"])
def test_matmul_operands_are_passed_as_they_lie(tmp_path, la, lb, lc, flags):
    strides = {"LA": (la, 5, 6), "LB": (lb, 7, 5), "LC": (lc, 7, 6)}
    text = MATMUL
    for name, (layout, row_ld, col_ld) in strides.items():
        text = text.replace(name, layout.replace("S", str(row_ld if layout == ROW else col_ld)))
    mod, src = _module(tmp_path, text, "mm_" + flags.replace(", ", "_"))
    (call,) = _calls(src)
    assert call.startswith(f"_sgemm(101, {flags},") and "ascontiguousarray" not in src and "objmode" not in src
    rng = np.random.default_rng(1)
    a, b, c = _array(rng, (6, 5), la), _array(rng, (5, 7), lb), _array(rng, (6, 7), lc)
    want = c + a.astype(np.float64) @ b                    # "acc": no zero fill before it
    mod.run_mm(a, b, c)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)


STRIDED = """
func.func @mm(%a: memref<6x10xf32>, %b: memref<5x7xf32>, %c: memref<6x14xf32>) {
  %z = arith.constant 0.0 : f32
  %as = memref.subview %a[0, 0] [6, 5] [1, 2] : memref<6x10xf32> to memref<6x5xf32, strided<[10, 2]>>
  %cs = memref.subview %c[0, 1] [6, 7] [1, 2] : memref<6x14xf32> to memref<6x7xf32, strided<[14, 2], offset: 1>>
  linalg.fill ins(%z : f32) outs(%cs : memref<6x7xf32, strided<[14, 2], offset: 1>>)
  linalg.matmul ins(%as, %b : memref<6x5xf32, strided<[10, 2]>>, memref<5x7xf32>) outs(%cs : memref<6x7xf32, strided<[14, 2], offset: 1>>)
  return
}
"""


def test_views_with_no_unit_stride_go_through_contiguous_copies(tmp_path):
    mod, src = _module(tmp_path, STRIDED, "mm_strided")
    assert "np.ascontiguousarray(arg0[0:6, 0:10:2])" in src     # a: every other column
    (call,) = _calls(src)
    assert ", _f32_0, " in call                                   # the fill became beta = 0
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((6, 10)).astype(np.float32), rng.standard_normal((5, 7)).astype(np.float32)
    c = np.full((6, 14), np.nan, np.float32)
    mod.run_mm(a, b, c)
    np.testing.assert_allclose(c[:, 1::2], a[:, ::2] @ b, rtol=1e-5, atol=1e-5)
    assert np.isnan(c[:, ::2]).all()                             # nothing between the result's columns


BATCH = """
func.func @bmm(%a: memref<3x4x6xf32>, %b: memref<3x6x5xf32, strided<[30, 1, 6]>>, %c: memref<3x4x5xf32>) {
  linalg.batch_matmul ins(%a, %b : memref<3x4x6xf32>, memref<3x6x5xf32, strided<[30, 1, 6]>>) outs(%c : memref<3x4x5xf32>)
  return
}
"""


def test_batch_matmul_is_one_call_per_matrix(tmp_path):
    mod, src = _module(tmp_path, BATCH, "bmm")
    (call,) = _calls(src)
    assert call.startswith("_sgemm(101, 111, 112, 4, W, 6,") and "[_b" in call
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 4, 6)).astype(np.float32)
    b = rng.standard_normal((3, 5, 6)).astype(np.float32).transpose(0, 2, 1)     # strides (30, 1, 6)
    c = rng.standard_normal((3, 4, 5)).astype(np.float32)
    want = c + a @ b
    mod.run_bmm(a, b, c)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)



SPLIT = """
func.func @mm(%a: memref<BxMxKxf32>, %b: memref<BxKxNxf32>, %c: memref<BxMxNxf32>) {
  %z = arith.constant 0.0 : f32
  linalg.fill ins(%z : f32) outs(%c : memref<BxMxNxf32>)
  linalg.OP ins(%a, %b : memref<BxMxKxf32>, memref<BxKxNxf32>) outs(%c : memref<BxMxNxf32>)
  return
}
"""


@pytest.mark.parametrize("batch, m, k, n, cut, loop", [
    (0, 8, 5, 70, "[:, _lo", "numba.prange(0, 2)"),       # wider than tall: slices of C's columns, 48 + 22
    (0, 70, 5, 8, "[_lo", "numba.prange(0, 2)"),          # taller than wide: slices of its rows
    (3, 6, 4, 40, "[:, _lo", "numba.prange(0, 3 * 2)"),   # batched: a prange over (matrix, slice)
], ids=["columns", "rows", "batch"])
def test_a_call_outside_every_prange_is_split_among_the_workers(tmp_path, batch, m, k, n, cut, loop):
    """A product called on its own (no prange around it) runs as one call per worker (2 cores),
    each on one BLAS thread, on a slice of C a multiple of 16 elements wide: BLAS never starts
    its own thread pool beside Numba's (emit/cpu.py: _gemm_chunks). The slices are constants of
    the code (no numba.get_num_threads(): Numba cannot cache a function that calls it)."""
    dims = lambda *xs: "x".join(str(x) for x in ((batch,) if batch else ()) + xs)
    text = (SPLIT.replace("BxMxK", dims(m, k)).replace("BxKxN", dims(k, n)).replace("BxMxN", dims(m, n))
            .replace("OP", "batch_matmul" if batch else "matmul"))
    mod, src = _module(tmp_path, text, f"split_{batch}_{m}_{n}", cores=2)
    (call,) = _calls(src)
    body = src[src.index("def _loop0_run_mm_par("):]
    assert body.index(loop) < body.index("_sgemm(") and "get_num_threads" not in body
    assert cut in call and "_sgemm(101, 111, 111, " in call
    assert '_BLAS_THREADS.limit(limits=1, user_api="blas")' in src
    rng = np.random.default_rng(9)
    shape = lambda *xs: ((batch,) if batch else ()) + xs
    a, b = rng.standard_normal(shape(m, k)).astype(np.float32), rng.standard_normal(shape(k, n)).astype(np.float32)
    c = np.full(shape(m, n), np.nan, np.float32)
    _on_two_workers(mod.run_mm, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def _on_two_workers(fn, *args):
    """fn(*args) with Numba's pool at two workers (the slices split between them)."""
    import numba
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        fn(*args)
    finally:
        numba.set_num_threads(threads)


CONV_OUT_VIEW = """
func.func @cv(%x: memref<2x3x9x10xf32>, %w: memref<4x3x3x2xf32>, %y: memref<2x4x4x8xf32>) {
  %ys = memref.subview %y[0, 0, 0, 0] [2, 4, 4, 4] [1, 1, 1, 2] : memref<2x4x4x8xf32> to memref<2x4x4x4xf32, strided<[128, 32, 8, 2]>>
  linalg.conv_2d_nchw_fchw {dilations = dense<[1, 2]> : tensor<2xi64>, strides = dense<[2, 2]> : tensor<2xi64>}
    ins(%x, %w : memref<2x3x9x10xf32>, memref<4x3x3x2xf32>) outs(%ys : memref<2x4x4x4xf32, strided<[128, 32, 8, 2]>>)
  return
}
"""


def _conv_ref(x, w, stride, dilation, oh, ow):
    (sh, sw), (dh, dw) = stride, dilation
    out = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for p in range(w.shape[2]):
        for q in range(w.shape[3]):
            win = x[:, :, p * dh:p * dh + (oh - 1) * sh + 1:sh, q * dw:q * dw + (ow - 1) * sw + 1:sw]
            out += np.einsum("nchw,fc->nfhw", win, w[:, :, p, q])
    return out


def test_conv_into_a_strided_output_goes_through_a_block_buffer(tmp_path):
    mod, src = _module(tmp_path, CONV_OUT_VIEW, "cv")
    (call,) = _calls(src)
    assert call.startswith("_sgemm(101, 111, 111, 4, ")
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 9, 10)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 2)).astype(np.float32)
    y = rng.standard_normal((2, 4, 4, 8)).astype(np.float32)
    want = y.copy()
    want[..., ::2] += _conv_ref(x, w, (2, 2), (1, 2), 4, 4)
    mod.run_cv(x, w, y)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


CONV_ACC = """
func.func @cv(%x: memref<2x5x8x11xf32>, %w: memref<4x5x3x3xf32>, %y: memref<2x4x6x18xf32>) {
  %ys = memref.subview %y[0, 0, 0, 0] [2, 4, 6, 9] [1, 1, 1, 2] : memref<2x4x6x18xf32> to memref<2x4x6x9xf32, strided<[432, 108, 18, 2]>>
  linalg.conv_2d_nchw_fchw {fusec.conv_algorithm = "ALGO", dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
    ins(%x, %w : memref<2x5x8x11xf32>, memref<4x5x3x3xf32>) outs(%ys : memref<2x4x6x9xf32, strided<[432, 108, 18, 2]>>)
  return
}
"""


@pytest.mark.parametrize("m", [2, 4])
def test_winograd_matrices_compute_the_correlation_exactly(m):
    """One dimension of F(m, 3): y = A^T ((G g) * (B^T d)) is sum_k d[i + k] g[k], in fractions."""
    from fractions import Fraction
    from fusec.compiler.emit.conv import MATRICES
    mats = {k: [[Fraction(c) for c in row] for row in v] for k, v in MATRICES[m].items()}
    assert (len(mats["AT"]), len(mats["G"]), len(mats["BT"])) == (m, m + 2, m + 2)
    rng = np.random.default_rng(m)
    for _ in range(5):
        d = [Fraction(int(v)) for v in rng.integers(-9, 10, m + 2)]
        g = [Fraction(int(v)) for v in rng.integers(-9, 10, 3)]
        u = [sum(a * b for a, b in zip(row, g)) for row in mats["G"]]
        v = [sum(a * b for a, b in zip(row, d)) for row in mats["BT"]]
        y = [sum(a * p * q for a, p, q in zip(row, u, v)) for row in mats["AT"]]
        assert y == [sum(d[i + k] * g[k] for k in range(3)) for i in range(m)]


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["im2col", "winograd", "winograd4", "direct"])
def test_an_accumulating_conv_into_a_strided_output(tmp_path, algo):
    """No zero fill before the conv: y += conv(x, w), into every other column of y."""
    mod, _ = _module(tmp_path, CONV_ACC.replace("ALGO", algo), f"cv_{algo}")
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 5, 8, 11)).astype(np.float32)
    w = rng.standard_normal((4, 5, 3, 3)).astype(np.float32)
    y = rng.standard_normal((2, 4, 6, 18)).astype(np.float32)
    want = y.astype(np.float64)
    want[..., ::2] += _conv_ref(x, w, (1, 1), (1, 1), 6, 9)
    mod.run_cv(x, w, y)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("hw, stride, padding, dilation", [
    ((9, 11), 1, 1, 1), ((9, 11), 2, [1, 0], [1, 2]), ((40, 33), 1, 1, 1)])   # the last: several row blocks
def test_conv_chains_match_the_reference(hw, stride, padding, dilation):
    h, w_ = hw
    src = (f"chain c(x: f32[B, 24, {h}, {w_}], w: f32[4, 24, 3, 3]) -> f32[B, 4, OH, OW] {{\n"
           f"    return conv2d(x, w, stride={stride}, padding={padding}, dilation={dilation})\n}}\n")
    pad = padding if isinstance(padding, list) else [padding] * 2
    dil = dilation if isinstance(dilation, list) else [dilation] * 2
    oh = (h + 2 * pad[0] - dil[0] * 2 - 1) // stride + 1
    ow = (w_ + 2 * pad[1] - dil[1] * 2 - 1) // stride + 1
    prog = fusec.compile(src.replace("OH", str(oh)).replace("OW", str(ow)), target="cpu",
                         options={"baseline": False})
    (algo,) = [g["conv"] for g in prog.c.plan({"B": 2})["groups"] if g["conv"]]   # the model's (plan/conv.py)
    kernels = prog.c.stages({"B": 2})["kernels"]
    assert ("# cblas: linalg.conv_2d_nchw_fchw" in kernels) == (algo != "direct")
    assert prog.c.check(binding={"B": 2})[0].ok


@pytest.mark.slow
def test_f64_contractions_call_dgemm():
    src = ("chain f(x: f64[M, K], w: f64[N, K]) -> f64[M, N] {\n    return tanh(x @ transpose(w))\n}\n")
    prog = fusec.compile(src, target="cpu", options={"baseline": False})
    text = prog.f.stages({"M": 33, "K": 17, "N": 9})["kernels"]
    assert re.search(r"_dgemm\(101, 111, 112, \w+, 9, 17,", text) and "_sgemm(101" not in text   # w read transposed as it lies
    assert prog.f.check(binding={"M": 33, "K": 17, "N": 9})[0].ok


@pytest.fixture(scope="module")
def prelude():
    ns = {}
    exec("import numba\nimport numpy as np\n" + "\n".join(BLAS_PRELUDE), ns)
    return ns


def test_the_prelude_binds_numpys_own_cblas(prelude):
    from llvmlite import binding
    found = prelude["_cblas_gemm"]("s")
    assert found is not None                       # NumPy's wheels carry scipy-openblas64
    assert binding.address_of_symbol("fusec_cblas_sgemm64") == found


@pytest.mark.parametrize("kind,dtype,ctype", [("s", np.float32, ctypes.c_float), ("d", np.float64, ctypes.c_double)])
def test_the_numpy_callback_is_cblas_gemm(prelude, kind, dtype, ctype):
    """The stand-in for a NumPy without scipy-openblas64, called as C calls it."""
    fn = ctypes.CFUNCTYPE(None, *(ctypes.c_int,) * 3, *(ctypes.c_int64,) * 3, ctype, ctypes.c_void_p,
                          ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctype, ctypes.c_void_p,
                          ctypes.c_int64)(prelude["_numpy_gemm"](kind))
    rng = np.random.default_rng(2)
    a = rng.standard_normal((5, 4)).astype(dtype)          # used transposed: op(A) = a.T, 4 x 5
    b = rng.standard_normal((5, 3)).astype(dtype)
    c = np.pad(rng.standard_normal((4, 3)).astype(dtype), ((0, 0), (0, 2)))   # ldc 5
    want = 2 * (a.T @ b) + c[:, :3]
    fn(101, 112, 111, 4, 3, 5, 2.0, a.ctypes.data, 4, b.ctypes.data, 3, 1.0, c.ctypes.data, 5)
    np.testing.assert_allclose(c[:, :3], want, rtol=1e-5)
    assert not c[:, 3:].any()                               # nothing past each row's n
    c[:, :3] = np.nan
    fn(101, 111, 111, 4, 3, 0, 1.0, a.ctypes.data, 1, b.ctypes.data, 3, 0.0, c.ctypes.data, 5)
    assert not c.any()                                      # k = 0, beta = 0: C = 0, never read



@pytest.mark.parametrize("src, binding, flags", [
    ("chain f(x: f32[M, K], w: f32[N, K]) -> f32[M, N] {\n    return gelu(x @ transpose(w))\n}\n",
     {"M": 64, "K": 32, "N": 48}, "_sgemm(101, 111, 112, "),
    ("chain f(q: f32[B, S, D], k: f32[B, S, D]) -> f32[B, S, S] {\n    return exp(q @ transpose(k))\n}\n",
     {"B": 3, "S": 16, "D": 8}, "_sgemm(101, 111, 112, "),
], ids=["linear", "batched"])
def test_a_transposed_operand_is_read_as_it_lies(src, binding, flags):
    """transforms/cpu_library_calls.py: fold_transposed_operands. The transpose copy (per tile,
    inside the prange) becomes a view the call reads with its transpose flag."""
    prog = fusec.compile(src, target="cpu", options={"baseline": False})
    text = prog.f.stages(binding)["kernels"]
    assert flags in text
    body = text[text.index("numba.njit(parallel"):]
    assert "np.empty((" not in body.split("# cblas:")[0]            # no buffer for the transpose
    assert prog.f.check(binding=binding)[0].ok


KEPT_COPY = """
func.func @mm(%a: memref<4x3xf32>, %w: memref<5x3xf32>, %c: memref<4x5xf32>) {
  %z = arith.constant 7.0 : f32
  %c0 = arith.constant 0 : index
  %t = memref.alloc() : memref<3x5xf32>
  linalg.transpose ins(%w : memref<5x3xf32>) outs(%t : memref<3x5xf32>) permutation = [1, 0]
  memref.store %z, %w[%c0, %c0] : memref<5x3xf32>
  linalg.matmul ins(%a, %t : memref<4x3xf32>, memref<3x5xf32>) outs(%c : memref<4x5xf32>)
  return
}
"""


def test_a_transpose_copy_stays_when_its_source_is_written_before_the_read(tmp_path):
    mod, src = _module(tmp_path, KEPT_COPY, "kept_copy")
    (call,) = _calls(src)
    assert call.startswith("_sgemm(101, 111, 111,")                # the copy, not a view of w
    rng = np.random.default_rng(8)
    a, w = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)
    c = np.zeros((4, 5), np.float32)
    want = a @ w.T                                                # the copy was taken before the store
    mod.run_mm(a, w, c)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-6)
    assert w[0, 0] == 7.0


_FREED = '''
import sys
import numpy as np
import fusec
from fusec.runtime import reference
from fusec.runtime.compare import compare
source, binding, options = sys.argv[1], eval(sys.argv[2]), eval(sys.argv[3])
chain = next(iter(fusec.compile(source, target="cpu", options=options, cache=False).chains.values()))
inputs = reference.random_inputs(chain.typed, binding, 0)
got = chain(*inputs)
want = reference.run_chain(chain.typed, inputs, binding)[0]
print(compare(got, want, "f32").ok, float(np.abs(got - want).max()))
'''


# gelu(x @ w1 + b1) per row tile into a buffer allocated in the tile, read then only by sgemm
_TILE_MLP = ("chain mlp(x: f32[M, D], w1: f32[D, H], b1: f32[H], w2: f32[H, D]) -> f32[M, D] {\n"
             "    return gelu(x @ w1 + b1) @ w2 + x\n}\n")


def test_a_buffer_passed_to_blas_lives_until_blas_returns():
    """glibc writes over freed memory here (MALLOC_PERTURB_), so a buffer whose last use was
    taking its address, freed by Numba before BLAS read it, gives wrong results at once (it
    did on one machine with two threads, without the perturbation: issue 15's notes)."""
    env = dict(os.environ, MALLOC_PERTURB_="165", NUMBA_NUM_THREADS="1")
    binding, options = {"M": 40, "D": 24, "H": 40}, {"dynamic": ["M"]}
    out = subprocess.run([sys.executable, "-c", _FREED, _TILE_MLP, repr(binding), repr(options)], env=env,
                         capture_output=True, text=True, timeout=600, cwd=os.path.dirname(os.path.abspath(__file__)))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "True", out.stdout


def _basic_block(c: int, f: int, h: int) -> str:
    """ResNet's basic block with a projection shortcut: 3x3 stride 2, 3x3, 1x1 stride 2, each
    conv's batchnorm, the residual add and relu."""
    bn = lambda i: ", ".join(f"{k}{i}: f32[{f}]" for k in "gbmv")
    return (f"chain blk(x: f32[B, {c}, {h}, {h}], w1: f32[{f}, {c}, 3, 3], w2: f32[{f}, {f}, 3, 3], "
            f"wd: f32[{f}, {c}, 1, 1], {bn(1)}, {bn(2)}, {bn(3)}) -> f32[B, {f}, {h // 2}, {h // 2}] {{\n"
            "    a = relu(batchnorm(conv2d(x, w1, stride=[2, 2], padding=[1, 1], dilation=[1, 1]), g1, b1, m1, v1, eps=1e-05))\n"
            "    c = batchnorm(conv2d(a, w2, stride=[1, 1], padding=[1, 1], dilation=[1, 1]), g2, b2, m2, v2, eps=1e-05)\n"
            "    d = batchnorm(conv2d(x, wd, stride=[2, 2], padding=[0, 0], dilation=[1, 1]), g3, b3, m3, v3, eps=1e-05)\n"
            "    return relu(c + d)\n}\n")


@pytest.mark.slow
def test_a_basic_block_over_short_rows_calls_blas_for_every_conv():
    """ResNet-18's last stage at a small image: 2x2 outputs. Every conv is a ?gemm (the 3x3
    stride 1 one too: direct loops over rows of 2 fill no vector, plan/conv.py's DIRECT_ROW),
    the batchnorms, the residual add and relu run in the convs' kernels, and the block matches
    the reference."""
    prog = fusec.compile(_basic_block(16, 32, 4), target="cpu", options={"baseline": False})
    groups = prog.blk.plan({"B": 2})["groups"]
    assert [g["conv"] for g in groups] == ["im2col", "im2col", "im2col"]      # 3x3 s2, 3x3, 1x1 s2
    kernels = prog.blk.stages({"B": 2})["kernels"]
    assert kernels.count("# cblas: linalg.conv_2d_nchw_fchw") == 3
    assert "_conv_direct" not in kernels
    assert prog.blk.check(binding={"B": 2})[0].ok


SHARED_BUFFER = """
func.func @mm(%a: memref<4x3xf32>, %w1: memref<5x3xf32>, %w2: memref<5x3xf32>, %c1: memref<4x5xf32>, %c2: memref<4x5xf32>, %c3: memref<3x5xf32>) {
  %t = memref.alloc() : memref<3x5xf32>
  linalg.transpose ins(%w1 : memref<5x3xf32>) outs(%t : memref<3x5xf32>) permutation = [1, 0]
  linalg.matmul ins(%a, %t : memref<4x3xf32>, memref<3x5xf32>) outs(%c1 : memref<4x5xf32>)
  linalg.transpose ins(%w2 : memref<5x3xf32>) outs(%t : memref<3x5xf32>) permutation = [1, 0]
  linalg.matmul ins(%a, %t : memref<4x3xf32>, memref<3x5xf32>) outs(%c2 : memref<4x5xf32>)
  READ
  return
}
"""


@pytest.mark.parametrize("read, folded", [
    ("", 2),                                   # both weights read where they lie
    # a later read of the buffer sees the second copy: that one stays, the first still folds
    ("memref.copy %t, %c3 : memref<3x5xf32> to memref<3x5xf32>", 1),
], ids=["two-readers", "read-after"])
def test_weights_transposed_into_one_shared_buffer_are_read_where_they_lie(tmp_path, read, folded):
    """Two weights transposed into one buffer (one-shot bufferization shares the alloc of a
    CSE'd tensor.empty: Llama's Q and O projections), each read by one product: each product
    reads its weight as it lies (BLAS's transpose flag) unless something else reads the copy."""
    mod, src = _module(tmp_path, SHARED_BUFFER.replace("READ", read), f"shared_{folded}")
    calls = _calls(src)
    assert len(calls) == 2 and sum(".transpose((1, 0))" in c for c in calls) == folded
    rng = np.random.default_rng(11)
    a = rng.standard_normal((4, 3)).astype(np.float32)
    w1, w2 = (rng.standard_normal((5, 3)).astype(np.float32) for _ in range(2))
    c1, c2, c3 = (np.zeros(s, np.float32) for s in ((4, 5), (4, 5), (3, 5)))
    mod.run_mm(a, w1, w2, c1, c2, c3)
    np.testing.assert_allclose(c1, a @ w1.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c2, a @ w2.T, rtol=1e-5, atol=1e-6)
    if read:
        np.testing.assert_array_equal(c3, w2.T)


DYNAMIC_SPLIT = """
func.func @mm(%a: memref<?x5xf32>, %b: memref<5x?xf32>, %c: memref<?x?xf32>) {
  %z = arith.constant 0.0 : f32
  linalg.fill ins(%z : f32) outs(%c : memref<?x?xf32>)
  linalg.matmul ins(%a, %b : memref<?x5xf32>, memref<5x?xf32>) outs(%c : memref<?x?xf32>)
  return
}
"""


@pytest.mark.parametrize("m, n", [(3, 70), (2, 1), (9, 33)])
def test_a_split_call_with_extents_read_at_run_time(tmp_path, m, n):
    """Extents known only at run time (options.dynamic): the slices are computed in the code
    from the constant core count, at least 16 columns each."""
    mod, src = _module(tmp_path, DYNAMIC_SPLIT, f"dyn_split_{m}_{n}", cores=2)
    assert "// 2 + 15) // 16 * 16, 16)" in src and "get_num_threads" not in src
    rng = np.random.default_rng(12)
    a, b = rng.standard_normal((m, 5)).astype(np.float32), rng.standard_normal((5, n)).astype(np.float32)
    c = np.full((m, n), np.nan, np.float32)
    _on_two_workers(mod.run_mm, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)

