"""CPU-target scalar rules that let LLVM vectorise the loops Numba compiles: min/max as LLVM
intrinsics, f32 exp and tanh as branch-free polynomials, truncf to f16 and bf16 rounded on the
bits in f32. Each helper is a plain `@numba.njit` function or an `@intrinsic`, so the module stays
readable Python. See docs/ARCHITECTURE.md, "Stages and what each hands on" (the cpu target).
"""
from __future__ import annotations

import re

from .. import mathfns
from ..mlir import ir
from ..marks import CPU_CALL
from ..plan.analysis import conv_window
from .conv import NO_TRANS, TRANS, conv_call, strides     # CBLAS flags: conv.py (imported here) has them
from .values import expr_add, expr_mul

IMPORTS = ("from llvmlite import ir as llvmir", "from numba.core import types as nbtypes",
           "from numba.extending import intrinsic")
# A line of a cpu function that calls BLAS ends in this comment (module.py: _blas_only_in_prange).
BLAS_MARK = "# cblas:"

# BLAS from compiled code, with no object mode (which Numba cannot cache, and which costs a trip
# through the interpreter per call): CBLAS ?gemm of NumPy's own OpenBLAS, found by its symbol
# and registered with LLVM under a name of ours, called through a Numba ExternalFunction. The
# machine code refers to the name, not the address, so Numba's on-disk cache holds it and a
# later process binds it to that process's library. Where no such library is found (a NumPy
# not built with scipy-openblas64), the name is bound to a C callback doing the same by NumPy.
# Emitted code calls _sgemm/_dgemm with the arrays themselves, not their addresses: Numba frees
# an array after its last use, and when that use was `.ctypes.data` in the caller, a buffer
# made in the loop (a tile of gelu(x @ w1 + b1) before its `@ w2`) was freed before BLAS read
# it; on a machine whose allocator then handed the block to the other thread, rows came out wrong.
BLAS_PRELUDE = (
    "import ctypes",
    "import glob",
    "import os",
    "",
    "from llvmlite import binding as _llvm",
    "from numba.core import types as nbtypes",
    "",
    "try:  # BLAS inside a prange runs one thread per worker (module.py: _blas_only_in_prange)",
    "    from threadpoolctl import ThreadpoolController",
    "    _BLAS_THREADS = ThreadpoolController()",
    "except ImportError:",
    "    _BLAS_THREADS = None",
    "",
    "",
    "def _cblas_gemm(kind):",
    '    """The address of CBLAS {kind}gemm with 64-bit integers in the OpenBLAS a NumPy wheel',
    '    carries (scipy-openblas64), or None."""',
    "    top = os.path.dirname(np.__file__)",
    '    found = glob.glob(os.path.join(os.path.dirname(top), "numpy.libs", "*openblas*"))',
    '    found += glob.glob(os.path.join(top, ".dylibs", "*openblas*"))',
    "    for path in sorted(found):",
    "        try:",
    "            lib = ctypes.CDLL(path)",
    "        except OSError:",
    "            continue",
    '        for name in (f"scipy_cblas_{kind}gemm64_", f"cblas_{kind}gemm64_"):',
    "            fn = getattr(lib, name, None)",
    "            if fn is not None:",
    "                return ctypes.cast(fn, ctypes.c_void_p).value",
    "    return None",
    "",
    "",
    "def _numpy_gemm(kind):",
    '    """CBLAS {kind}gemm (row-major, 64-bit integers) by NumPy\'s matmul, as a C callback that',
    '    lives as long as the process (compiled code holds its address)."""',
    '    dt, ct = (np.float32, ctypes.c_float) if kind == "s" else (np.float64, ctypes.c_double)',
    "    i32, i64, ptr = ctypes.c_int, ctypes.c_int64, ctypes.c_void_p",
    "",
    "    def view(p, rows, cols, ld, trans):          # op(X), rows x cols, X stored row-major",
    "        r, c = (cols, rows) if trans == 112 else (rows, cols)",
    "        buf = (ct * (ld * (r - 1) + c)).from_address(p)",
    "        x = np.ndarray((r, c), dt, buf, strides=(ld * dt().itemsize, dt().itemsize))",
    "        return x.T if trans == 112 else x",
    "",
    "    def gemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):",
    "        if m == 0 or n == 0:",
    "            return",
    "        out = view(c, m, n, ldc, 111)",
    "        prod = view(a, m, k, lda, ta) @ view(b, k, n, ldb, tb) if k else np.zeros((m, n), dt)",
    "        out[...] = dt(alpha) * prod + (dt(beta) * out if beta else dt(0))",
    "",
    "    cb = ctypes.CFUNCTYPE(None, i32, i32, i32, i64, i64, i64, ct, ptr, i64, ptr, i64, ct, ptr, i64)(gemm)",
    "    ctypes.pythonapi.Py_IncRef(ctypes.py_object(cb))",
    "    return ctypes.cast(cb, ctypes.c_void_p).value",
    "",
    "",
    'for _kind in "sd":',
    '    if not _llvm.address_of_symbol(f"fusec_cblas_{_kind}gemm64"):',
    '        _llvm.add_symbol(f"fusec_cblas_{_kind}gemm64", _cblas_gemm(_kind) or _numpy_gemm(_kind))',
    "_GEMM_INTS = (nbtypes.int32,) * 3 + (nbtypes.int64,) * 3",
    "_sgemm_at = nbtypes.ExternalFunction('fusec_cblas_sgemm64', nbtypes.void(*_GEMM_INTS, nbtypes.float32, nbtypes.uintp,",
    "                                     nbtypes.int64, nbtypes.uintp, nbtypes.int64, nbtypes.float32, nbtypes.uintp, nbtypes.int64))",
    "_dgemm_at = nbtypes.ExternalFunction('fusec_cblas_dgemm64', nbtypes.void(*_GEMM_INTS, nbtypes.float64, nbtypes.uintp,",
    "                                     nbtypes.int64, nbtypes.uintp, nbtypes.int64, nbtypes.float64, nbtypes.uintp, nbtypes.int64))",
    "",
    "",
    "@numba.njit(nogil=True)",
    "def _sgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):",
    '    """CBLAS sgemm on arrays, each held until BLAS returns. (A pointer taken in the calling',
    "    function would let Numba free a buffer there whose last use that was, before BLAS reads it.)\"\"\"",
    "    _sgemm_at(order, ta, tb, m, n, k, alpha, a.ctypes.data, lda, b.ctypes.data, ldb, beta, c.ctypes.data, ldc)",
    "",
    "",
    "@numba.njit(nogil=True)",
    "def _dgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):",
    '    """CBLAS dgemm on arrays, as _sgemm."""',
    "    _dgemm_at(order, ta, tb, m, n, k, alpha, a.ctypes.data, lda, b.ctypes.data, ldb, beta, c.ctypes.data, ldc)")

_LLVM_MINMAX = {"maximumf": "llvm.maximum", "minimumf": "llvm.minimum",
                "maxnumf": "llvm.maxnum", "minnumf": "llvm.minnum"}
MINMAX = tuple(_LLVM_MINMAX)

_INTRINSIC_MINMAX = '''
@intrinsic
def {key}(typingctx, a, b):
    """arith.{op} as MLIR lowers it to LLVM: {llvm}."""
    def codegen(context, builder, sig, args):
        t = args[0].type
        fn = builder.module.declare_intrinsic("{llvm}", [t], llvmir.FunctionType(t, [t, t]))
        return builder.call(fn, args)
    return a(a, b), codegen'''

_BITCAST_I32_F32 = '''
@intrinsic
def {key}(typingctx, x):
    """The bits of an i32 as an f32 (arith.bitcast)."""
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], llvmir.FloatType())
    return nbtypes.float32(nbtypes.int32), codegen'''

# The width LLVM's vectorizer uses for the loops of the function this is called in (X86 reads
# the function attribute per function; with none it takes the CPU's tuning, which for AVX-512
# parts is 256 bits). Called first in a host function and in each prange body (the body Numba
# outlines into its own function). The calibration measures which width is faster here
# (compiler/calibrate.py: _vector_bits); the profile's vector_bits says which one the plan uses.
_PREFER_VECTORS = '''
@intrinsic
def {key}(typingctx):
    """Vectorize the enclosing function's loops {bits} bits wide (LLVM's prefer-vector-width)."""
    def codegen(context, builder, sig, args):
        set.add(builder.function.attributes, '"prefer-vector-width"="{bits}"')   # a string attribute:
        return context.get_dummy_value()        # llvmlite's add() knows only the keyword ones
    return nbtypes.none(), codegen'''

_BITCAST_F32_I32 = '''
@intrinsic
def {key}(typingctx, x):
    """The bits of an f32 as an i32 (arith.bitcast)."""
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], llvmir.IntType(32))
    return nbtypes.int32(nbtypes.float32), codegen'''

_ROUND_F16 = '''
@numba.njit
def {key}(x):
    """arith.truncf to f16, in f32: x rounded to the nearest f16, ties to even, branch-free on
    the bits. From 2**-14 (f16's smallest normal) to 65520: 10 mantissa bits; from 65520 on:
    inf; below 2**-14: a multiple of 2**-24 (f16's denormals), which adding and subtracting 0.75
    rounds to; NaN and the sign (of -0 too) kept."""
    b = {f2i}(x)
    sign = b & np.int32(-0x80000000)
    a = b & np.int32(0x7FFFFFFF)
    n = np.int32((a + np.int32(0xFFF) + ((a >> np.int32(13)) & np.int32(1))) & np.int32(-0x2000))
    n = np.int32(0x7F800000) if a >= np.int32(0x477FF000) else n
    n = a if a > np.int32(0x7F800000) else n
    d = {f2i}(abs(x) + np.float32(0.75) - np.float32(0.75))
    m = d if a < np.int32(0x38800000) else n
    return {i2f}(m | sign)'''

_ROUND_BF16 = '''
@numba.njit
def {key}(x):
    """arith.truncf to bf16, in f32: x rounded to the nearest bf16, ties to even, branch-free on
    the bits: add 0x7FFF and the lowest kept bit, clear the low 16 bits (the largest finite
    values round up to inf, as IEEE's rounding does); a NaN stays a NaN (quieted), the sign
    (of -0 too) is kept."""
    b = {f2i}(x)
    sign = b & np.int32(-0x80000000)
    a = b & np.int32(0x7FFFFFFF)
    n = np.int32((a + np.int32(0x7FFF) + ((a >> np.int32(16)) & np.int32(1))) & np.int32(-0x10000))
    n = np.int32((a | np.int32(0x400000)) & np.int32(-0x10000)) if a > np.int32(0x7F800000) else n
    return {i2f}(n | sign)'''

_EXP_F32 = '''
@numba.njit
def {key}(x):
    """math.exp on f32, branch-free (MLIR's ExpApproximation): exp(x) = 2**k * p(r) with
    k = round(x / ln 2), r = x - k ln 2 in two parts, p of degree 6; 2**k as two factors
    2**(k >> 1) * 2**(k - (k >> 1)) so gradual underflow and overflow to inf come out exact."""
    y = np.float32(88.8) if x > np.float32(88.8) else x
    y = np.float32(-104.0) if y < np.float32(-104.0) else y
    k = np.floor(y * np.float32(1.44269504088896341) + np.float32(0.5))
    r = y - k * np.float32(0.693359375)
    r = r - k * np.float32(-2.12194440e-4)
    p = np.float32(1.9875691500e-4)
    p = p * r + np.float32(1.3981999507e-3)
    p = p * r + np.float32(8.3334519073e-3)
    p = p * r + np.float32(4.1665795894e-2)
    p = p * r + np.float32(1.6666665459e-1)
    p = p * r + np.float32(5.0000001201e-1)
    p = p * r * r + r + np.float32(1.0)
    n = np.int32(k)
    h = n >> np.int32(1)
    s1 = {bits}((h + np.int32(127)) << np.int32(23))
    s2 = {bits}((n - h + np.int32(127)) << np.int32(23))
    e = p * s1 * s2
    return e if x == x else x'''

_TANH_F32 = '''
@numba.njit
def {key}(x):
    """math.tanh on f32, branch-free (MLIR's TanhApproximation, Eigen's rational form):
    x itself below 0.0004, +-1 beyond 9 (where tanh rounds to it), p(x)/q(x) between."""
    c = np.float32(7.99881172180175781)
    y = c if x > c else x
    y = -c if y < -c else y
    x2 = y * y
    p = x2 * np.float32(-2.76076847742355e-16) + np.float32(2.00018790482477e-13)
    p = x2 * p + np.float32(-8.60467152213735e-11)
    p = x2 * p + np.float32(5.12229709037114e-08)
    p = x2 * p + np.float32(1.48572235717979e-05)
    p = x2 * p + np.float32(6.37261928875436e-04)
    p = x2 * p + np.float32(4.89352455891786e-03)
    p = y * p
    q = x2 * np.float32(1.19825839466702e-06) + np.float32(1.18534705686654e-04)
    q = x2 * q + np.float32(2.26843463243900e-03)
    q = x2 * q + np.float32(4.89352518554385e-03)
    t = p / q
    a = abs(x)
    t = np.float32(math.copysign(np.float32(1.0), x)) if a > np.float32(9.0) else t
    return x if a < np.float32(0.0004) else t'''

_BITCAST_I64_F64 = '''
@intrinsic
def {key}(typingctx, x):
    """The bits of an i64 as an f64 (arith.bitcast)."""
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], llvmir.DoubleType())
    return nbtypes.float64(nbtypes.int64), codegen'''

# options.math == "accurate": f32 exp and tanh computed in f64 by branch-free forms whose relative
# error (< 3e-10) is far below f32's half ulp (6e-8), so the one rounding to f32 gives the result
# within 1 ulp (0.5 ulp + 0.004 at most; 0.502 and 0.504 measured, bench/accuracy.py). They
# vectorise like the fast forms, at half the lanes and with an f64 division in tanh
# (docs/PERFORMANCE.md, "Transcendental accuracy").
_EXP_F64 = '''
@numba.njit
def {key}(y):
    """exp of an f64 y in [-210, 180]: 2**k * p(r) with k = round(y / ln 2), r = y - k ln 2
    (|r| <= 0.347, its error below 4e-15), p Taylor's of degree 8 (truncation below 2.1e-10
    relative: 0.004 of an f32 ulp), 2**k built from its bits (a normal f64 over that range)."""
    k = np.floor(y * np.float64(1.4426950408889634) + np.float64(0.5))
    r = y - k * np.float64(0.6931471805599453)
    p = np.float64(2.48015873015873e-05)
    p = p * r + np.float64(0.0001984126984126984)
    p = p * r + np.float64(0.001388888888888889)
    p = p * r + np.float64(0.008333333333333333)
    p = p * r + np.float64(0.041666666666666664)
    p = p * r + np.float64(0.16666666666666666)
    p = p * r + np.float64(0.5)
    p = p * r + np.float64(1.0)
    p = p * r + np.float64(1.0)
    n = np.int64(k)
    return p * {bits}((n + np.int64(1023)) << np.int64(52))'''

_EXP_F32_ACCURATE = '''
@numba.njit
def {key}(x):
    """math.exp on f32 within 1 ulp: exp in f64 (_exp_f64), rounded once to f32, so gradual
    underflow and overflow to inf are IEEE's; the argument clamped to [-104, 88.8] (0 and inf
    there)."""
    y = np.float32(88.8) if x > np.float32(88.8) else x
    y = np.float32(-104.0) if y < np.float32(-104.0) else y
    e = np.float32({exp64}(np.float64(y)))
    return e if x == x else x'''

_TANH_F32_ACCURATE = '''
@numba.njit
def {key}(x):
    """math.tanh on f32 within 1 ulp: 1 - 2 / (exp(2|x|) + 1) in f64 (_exp_f64; |x| clamped to 20,
    where it is 1 in f64), its sign x's, rounded once to f32; x itself below 2**-13 (there
    tanh(x) = x (1 - x**2/3), within 0.09 ulp of x), which keeps -0 and the denormals."""
    a = abs(x)
    b = np.float32(20.0) if a > np.float32(20.0) else a
    e = {exp64}(np.float64(b) * np.float64(2.0))
    t = np.float64(1.0) - np.float64(2.0) / (e + np.float64(1.0))
    t = np.float32(math.copysign(t, np.float64(x)))
    return x if a < np.float32(0.0001220703125) else t'''

VECTOR_MATH = {f.op: f.cpu_f32 for f in mathfns.FUNCTIONS.values() if f.cpu_f32}   # f32 ops with a CPU form
ACCURATE_MATH = {f.op: f.cpu_f32_accurate for f in mathfns.FUNCTIONS.values() if f.cpu_f32_accurate}


def minmax_key(kind: str) -> str:
    return f"_{_LLVM_MINMAX[kind].replace('.', '_')}"


def helper(name: str, key: str, use, const) -> tuple[list[str], bool]:
    """(source lines, is_intrinsic) of CPU helper `name`; `use(name)` registers a dependency
    and returns its key, `const(value, "f32" or "f64")` names a module-level constant (no float
    literal reaches the generated code's arithmetic)."""
    lines, intrinsic = _helper_text(name, key, use)
    return [_FLOAT_LITERAL.sub(lambda m: const(float(m.group(2)), _CONST_TYPE[m.group(1)]), line)
            for line in lines], intrinsic


_CONST_TYPE = {"float32": "f32", "float64": "f64"}
_FLOAT_LITERAL = re.compile(r"np\.(float32|float64)\(([-+]?[0-9.]+(?:e[-+]?[0-9]+)?)\)")


def _helper_text(name: str, key: str, use) -> tuple[list[str], bool]:
    if name in _LLVM_MINMAX:
        text = _INTRINSIC_MINMAX.format(key=key, op=name, llvm=_LLVM_MINMAX[name])
        return text.strip("\n").splitlines(), True
    if name == "bitcast_i32_f32":
        return _BITCAST_I32_F32.format(key=key).strip("\n").splitlines(), True
    if name.startswith("prefer_vectors_"):
        bits = int(name.rsplit("_", 1)[1])
        return _PREFER_VECTORS.format(key=key, bits=bits).strip("\n").splitlines(), True
    if name == "bitcast_f32_i32":
        return _BITCAST_F32_I32.format(key=key).strip("\n").splitlines(), True
    if name == "round_f16":
        text = _ROUND_F16.format(key=key, f2i=use("bitcast_f32_i32"), i2f=use("bitcast_i32_f32"))
        return text.strip("\n").splitlines(), False
    if name == "round_bf16":
        text = _ROUND_BF16.format(key=key, f2i=use("bitcast_f32_i32"), i2f=use("bitcast_i32_f32"))
        return text.strip("\n").splitlines(), False
    if name == "exp_f32":
        return _EXP_F32.format(key=key, bits=use("bitcast_i32_f32")).strip("\n").splitlines(), False
    if name == "tanh_f32":
        return _TANH_F32.format(key=key).strip("\n").splitlines(), False
    if name == "bitcast_i64_f64":
        return _BITCAST_I64_F64.format(key=key).strip("\n").splitlines(), True
    if name == "exp_f64":
        return _EXP_F64.format(key=key, bits=use("bitcast_i64_f64")).strip("\n").splitlines(), False
    if name == "exp_f32_accurate":
        return _EXP_F32_ACCURATE.format(key=key, exp64=use("exp_f64")).strip("\n").splitlines(), False
    if name == "tanh_f32_accurate":
        return _TANH_F32_ACCURATE.format(key=key, exp64=use("exp_f64")).strip("\n").splitlines(), False
    raise KeyError(name)


def is_cpu_helper(name: str) -> bool:
    return name in _LLVM_MINMAX or name in _CPU_HELPERS or name in PREFER_VECTORS


_CPU_HELPERS = ("bitcast_i32_f32", "bitcast_f32_i32", "exp_f32", "tanh_f32", "round_f16", "round_bf16",
                "bitcast_i64_f64", "exp_f64", "exp_f32_accurate", "tanh_f32_accurate")


PREFER_VECTORS = ("prefer_vectors_256", "prefer_vectors_512")


def split_loops(lines: list[str], params: list[str], name: str) -> tuple[list[str], list[tuple[str, list[str], list[str]]]]:
    """A cpu function's body with each top-level prange loop moved into a function of its own,
    called in its place: (the body, [(loop function, its parameters, its body)]). Numba's
    parallel passes (array analysis, parfor fusion, the outlining of each prange, which deep-copies
    the whole function's IR) grow faster than linearly with the function's size, and a whole model
    is one function: ResNet-18's 22 loops took ~280 s to compile as one function. A loop function's
    parameters are the names it reads that the body binds before it (arguments, arenas, views,
    sizes); names it binds are its own. A loop binding a name that the body reads after it stays
    where it is (Numba would treat it as a reduction)."""
    import ast
    blocks, i = [], 0            # (first line, end) of each top-level prange loop
    while i < len(lines):
        line = lines[i]
        if prange_header(line) and line.startswith("    for "):        # a top-level one
            j = i + 1
            while j < len(lines) and (lines[j].startswith("     ") or not lines[j].strip()):
                j += 1
            blocks.append((i, j))
            i = j
        else:
            i += 1
    if not blocks:
        return lines, []

    def names(text: str) -> tuple[list[str], set[str]]:
        """(names read, in order of first read; names bound) in Python statements."""
        tree = ast.parse(text)
        read: dict[str, None] = {}
        bound: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                if isinstance(node.ctx, ast.Load):
                    read.setdefault(node.id, None)
                else:
                    bound.add(node.id)
        return list(read), bound

    def dedent(ls: list[str]) -> str:
        return "\n".join(x[4:] if x.startswith("    ") else x for x in ls)

    out: list[str] = []
    loops: list[tuple[str, list[str], list[str]]] = []
    known = set(params)         # names the body has bound so far
    prev = 0
    for start, end in blocks:
        before = lines[prev:start]
        out += before
        if before and dedent(before).strip():
            known |= names(dedent(before))[1]
        block = lines[start:end]
        read, bound = names(dedent(block))
        later = names(dedent(lines[end:]))[0] if end < len(lines) else []
        if bound & set(later):
            out += block
            known |= bound
        else:
            args = [n for n in read if n in known]
            fn = f"_loop{len(loops)}{name}"
            loops.append((fn, args, block))
            out.append(f"    {fn}({', '.join(args)})")
        prev = end
    out += lines[prev:]
    return out, loops


def prange_header(line: str) -> bool:
    """A line of emitted cpu code that opens a prange loop (`for i in numba.prange(...):`), at any
    depth: what split_loops, prefer_vectors and module.py's BLAS and parallel checks look for."""
    s = line.strip()
    return s.startswith("for ") and " in numba.prange(" in s and s.endswith(":")


def prefer_vectors(lines: list[str], call: str) -> list[str]:
    """A cpu function's body lines with `call` first in it and first in each prange body."""
    out = [f"    {call}"]
    for line in lines:
        out.append(line)
        if prange_header(line):
            out.append(" " * (len(line) - len(line.lstrip()) + 4) + call)
    return out


# ---- contractions: linalg ops the CPU lowering left for a library call -------------------------

def library_call(body, op) -> None:
    """A contraction marked by transforms/cpu_library_calls.py: CBLAS ?gemm calls from the
    compiled function itself (BLAS_PRELUDE), each operand passed as it lies where its memref
    layout allows (a unit stride along one axis), else as a contiguous copy; a conv by the
    algorithm the plan chose (emit/conv.py). Loops where a view has no array expression or an
    extent is 0."""
    zero = str(op.attributes[CPU_CALL]).strip('"') == "zero"
    views = [body.view(v) for v in op.operands]
    if op.name == "linalg.conv_2d_ngchw_gfchw":
        _grouped_conv_loops(body, *views, conv_window(op), zero)
        return
    conv = op.name == "linalg.conv_2d_nchw_fchw"
    shapes = [ir.MemRefType(v.type).shape for v in op.operands]
    if all(v.host is not None for v in views) and 0 not in [n for sh in shapes for n in sh]:
        body.ctx.helpers.blas = True
        if conv:
            conv_call(body, op, views, zero, blas_fn(views[2].array.elem), BLAS_MARK)
        else:
            _gemm_call(body, op, views, zero)
        return
    if conv:
        _conv_loops(body, *views, conv_window(op), zero)
    else:
        _matmul_loops(body, *views, zero)


def blas_layout(value) -> tuple[int, int] | None:
    """(CBLAS transpose flag, leading dimension) of a memref's last two axes as a ?gemm operand:
    NO_TRANS and its row stride when a row's elements are adjacent, TRANS and its column stride
    when a column's are, None when neither (or a stride is dynamic). An extent known only at run
    time (options.dynamic) is not compared: the layout then rests on the strides alone, which a
    view of a row-major array keeps at least as long as its rows."""
    rows, cols = (None if n == ir.ShapedType.get_dynamic_size() else n for n in ir.MemRefType(value.type).shape[-2:])
    rs, cs = strides(value)[-2:]
    if cs == 1 or cols == 1:
        ld = cols if rows == 1 else rs
        if ld is not None and (cols is None or ld >= cols):
            return NO_TRANS, ld
    if rs == 1 or rows == 1:
        ld = rows if cols == 1 else cs
        if ld is not None and (rows is None or ld >= rows):
            return TRANS, ld
    return None


def blas_fn(elem) -> str:
    """The CBLAS function (BLAS_PRELUDE) for values computed in `elem`'s compute type."""
    return "_dgemm" if elem.compute == "float64" else "_sgemm"


def _gemm_call(body, op, views, zero: bool) -> None:
    """C (+)= A B, batched over a leading axis for linalg.batch_matmul: one ?gemm per matrix.
    Extents are the views' (Python expressions: numbers, or read at run time)."""
    w, names, consts = body.w, body.names, body.ctx.consts
    elem = views[2].array.elem
    a, b, c = op.operands
    m, k = views[0].shape[-2:]
    n = views[2].shape[-1]
    batch = list(views[2].shape[:-2])
    exprs, flags = [], []
    for value, view in ((a, views[0]), (b, views[1])):
        layout = blas_layout(value)
        if layout is None:                      # no unit stride: a contiguous copy
            tmp = names.temp("blas")
            w(f"{tmp} = np.ascontiguousarray({view.host})")
            layout = (NO_TRANS, view.shape[-1])
            exprs.append(tmp)
        else:
            exprs.append(view.host)
        flags.append(layout)
    out, c_layout = views[2].host, blas_layout(c)
    staged = c_layout is None                   # the result through a contiguous buffer
    full = ", ".join([":"] * len(views[2].shape))
    if staged:
        out = names.temp("blas")
        w(f"{out} = np.empty(({', '.join(batch + [m, n])}), np.{elem.compute})")
        if not zero:
            w(f"{out}[{full}] = {views[2].host}[{full}]")
        c_layout = (NO_TRANS, n)
    beta = consts.zero(elem) if zero else consts.float(1.0, elem)
    one = consts.float(1.0, elem)
    (ta, lda), (tb, ldb) = flags
    tc, ldc = c_layout
    depth = w.depth
    idx = ""
    whole_out = out
    if body.mode == "cpu" and body.parallel_depth == 0:
        # a call of its own: split among the prange's workers, BLAS on one thread in each
        m, n, exprs, out = _gemm_chunks(body, m, n, batch, exprs, out)
    elif batch:
        bi = names.temp("b")
        w(f"for {bi} in range({batch[0]}):")
        w.depth += 1
        idx = f"[{bi}]"
    mats = [f"{e}{idx}" for e in exprs + [out]]          # the arrays: the call takes their addresses
    if tc == NO_TRANS:
        args = (ta, tb, m, n, k, one, mats[0], lda, mats[1], ldb, beta, mats[2], ldc)
    else:                                       # C stored by columns: C^T = B^T A^T
        flip = {NO_TRANS: TRANS, TRANS: NO_TRANS}
        args = (flip[tb], flip[ta], n, m, k, one, mats[1], ldb, mats[0], lda, beta, mats[2], ldc)
    w(f"{blas_fn(elem)}(101, {', '.join(str(x) for x in args)})  {BLAS_MARK} {op.name}")
    w.depth = depth
    if staged:
        w(f"{views[2].host}[{full}] = {whole_out}[{full}]")


# A worker's share of a split product's columns (or rows) is a multiple of this many elements:
# 64 bytes of f32, so that no two workers write one cache line of C.
GEMM_CHUNK_ALIGN = 16


def _gemm_chunks(body, m: str, n: str, batch: list, exprs: list, out: str):
    """A ?gemm outside every prange, split into one call per worker: a prange over (matrix of the
    batch, slice), each slice of C's columns (of its rows when C has more rows than columns), as
    many as the profile's cores (FuncCtx.cores) and each a multiple of GEMM_CHUNK_ALIGN, every
    call on one BLAS thread (module.py: _blas_only_in_prange). So a function's BLAS calls all
    run on Numba's threads: OpenBLAS's own pool, called from inside another prange of the same
    function, would run a multi-threaded BLAS on each of Numba's threads at once ("Detect
    OpenMP Loop"), and its spinning workers would take the cores from the pranges between
    calls. (m, n, the A and B expressions, C's) for the call inside the loop, each indexed."""
    w, names = body.w, body.names
    cores, align = body.ctx.cores, GEMM_CHUNK_ALIGN
    by_rows = _gt(m, n)
    extent = m if by_rows else n
    p, lo, hi = (names.temp(s) for s in ("p", "lo", "hi"))
    try:                                        # a static extent: the slices are constants
        e = int(extent)
        width = str(max(align, -(-(-(-e // cores)) // align) * align))
        count = str(-(-e // int(width)))
    except ValueError:                          # read at run time (options.dynamic)
        width, count = names.temp("cw"), names.temp("nc")
        w(f"{width} = max((({extent} + {cores - 1}) // {cores} + {align - 1}) // {align} * {align}, {align})")
        w(f"{count} = ({extent} + {width} - 1) // {width}")
    total = count if not batch else f"{batch[0]} * {count}"
    w(f"for {p} in numba.prange(0, {total}):")
    w.depth += 1
    idx = ""
    if batch:
        bi = names.temp("b")
        w(f"{bi} = {p} // {count}")
        w(f"{lo} = ({p} % {count}) * {width}")
        idx = f"[{bi}]"
    else:
        w(f"{lo} = {p} * {width}")
    w(f"{hi} = min({lo} + {width}, {extent})")
    cut = f"[{lo}:{hi}, :]" if by_rows else f"[:, {lo}:{hi}]"
    a, b = exprs
    if by_rows:
        a = f"{a}{idx}{cut}"
        b = f"{b}{idx}"
    else:
        b = f"{b}{idx}{cut}"
        a = f"{a}{idx}"
    c = f"{out}{idx}{cut}"
    size = f"{hi} - {lo}"
    return (size, n, [a, b], c) if by_rows else (m, size, [a, b], c)


def _gt(a: str, b: str) -> bool:
    """a > b for two extents, each a number or an expression read at run time (then: no)."""
    try:
        return int(a) > int(b)
    except ValueError:
        return False


def _loops(body, sizes) -> list[str]:
    names = []
    for n in sizes:
        i = body.names.temp("i")
        body.w(f"for {i} in range({n}):")
        body.w.depth += 1
        names.append(i)
    return names


def _matmul_loops(body, a, b, c, zero: bool) -> None:
    """C (+)= A B in (batch, i, k, j) order: the innermost loop runs along rows of B and C."""
    depth = body.w.depth
    batch = c.shape[:-2]
    if zero:
        idx = _loops(body, c.shape)
        body.w(f"{c.at(idx)} = {body.ctx.consts.zero(c.array.elem)}")
        body.w.depth = depth
    bi = _loops(body, batch)
    i, k = _loops(body, (c.shape[-2], a.shape[-1]))
    s = body.names.temp("a")
    body.w(f"{s} = {a.at(bi + [i, k])}")
    (j,) = _loops(body, (c.shape[-1],))
    body.w(f"{c.at(bi + [i, j])} = {c.at(bi + [i, j])} + {s} * {b.at(bi + [k, j])}")
    body.w.depth = depth


def _conv_loops(body, x, w, y, window, zero: bool) -> None:
    """y (+)= conv(x, w) with the output row innermost; window: (sh, sw, dh, dw)."""
    sh, sw, dh, dw = (str(v) for v in window)
    depth = body.w.depth
    if zero:
        idx = _loops(body, y.shape)
        body.w(f"{y.at(idx)} = {body.ctx.consts.zero(y.array.elem)}")
        body.w.depth = depth
    n, f, c, p, q, oh = _loops(body, (y.shape[0], y.shape[1], x.shape[1], w.shape[2], w.shape[3], y.shape[2]))
    s = body.names.temp("w")
    body.w(f"{s} = {w.at([f, c, p, q])}")
    (ow,) = _loops(body, (y.shape[3],))
    src = x.at([n, c, expr_add(expr_mul(oh, sh), expr_mul(p, dh)), expr_add(expr_mul(ow, sw), expr_mul(q, dw))])
    body.w(f"{y.at([n, f, oh, ow])} = {y.at([n, f, oh, ow])} + {s} * {src}")
    body.w.depth = depth



def _grouped_conv_loops(body, x, w, y, window, zero: bool) -> None:
    """y (+)= conv(x, w) with groups: x [N, G, C/G, H, W], w [G, F/G, C/G, KH, KW], y [N, G,
    F/G, HO, WO]; each group's filters read only its own channels (no zeros multiplied). Per
    output row, the window's taps added along the whole row (the innermost loop, unit stride
    where the conv has stride 1: vectorised) into an accumulator row, stored once."""
    sh, sw, dh, dw = (str(v) for v in window)
    depth = body.w.depth
    elem = y.array.elem
    acc = body.names.temp("acc")
    body.w(f"{acc} = np.empty({y.shape[4]}, np.{elem.compute})")
    n, g, f, oh = _loops(body, y.shape[:4])
    (q,) = _loops(body, (y.shape[4],))
    body.w(f"{acc}[{q}] = {body.ctx.consts.zero(elem) if zero else y.at([n, g, f, oh, q])}")
    body.w.depth -= 1
    c, p, r = _loops(body, (x.shape[2], w.shape[3], w.shape[4]))
    s = body.names.temp("w")
    body.w(f"{s} = {w.at([g, f, c, p, r])}")
    (ow,) = _loops(body, (y.shape[4],))
    src = x.at([n, g, c, expr_add(expr_mul(oh, sh), expr_mul(p, dh)), expr_add(expr_mul(ow, sw), expr_mul(r, dw))])
    body.w(f"{acc}[{ow}] += {s} * {src}")
    body.w.depth -= 4
    (q,) = _loops(body, (y.shape[4],))
    body.w(f"{y.at([n, g, f, oh, q])} = {acc}[{q}]")
    body.w.depth = depth
