"""Numba loops that measure this CPU for its hardware profile (compiler/hardware.py).

Each is shaped like the code compiler/emit writes for the cpu target: a prange over row tiles,
plain loops inside, 2-D indexing, the emitter's fastmath flags, numpy error model. Compute costs are measured
on one core (parallel=False): a busy second core then does not disturb them. Bandwidth and the
fork/join of a parallel region are measured with every core.
"""
import math

import numba
import numpy as np

ROWS = 32
_1 = np.float32(1.0)
_0 = np.float32(0.0)
_A = np.float32(1.0001)
_B = np.float32(0.5)

def emitted_fastmath():
    """The fastmath flags compiler/emit puts on cpu kernels (the loops here must match them)."""
    try:
        from .emit import CPU_FASTMATH
    except ImportError:
        return False
    text = str(CPU_FASTMATH).strip()
    if text in ("True", "False"):
        return text == "True"
    return set(t.strip().strip("'\"") for t in text.strip("{}").split(",") if t.strip())


FASTMATH = emitted_fastmath()
JIT = dict(parallel=True, fastmath=FASTMATH, error_model="numpy")
SERIAL = dict(parallel=False, fastmath=FASTMATH, error_model="numpy")   # per-core costs: one core suffices


@numba.njit
def _maximumf_f32(a, b):
    if a != a or b != b:
        return a + b
    if a == b:
        return b if math.copysign(_1, a) < _0 else a
    return a if a > b else b


@numba.njit(**SERIAL)
def copy_serial(a, out, reps=1):
    for t in numba.prange(a.shape[0] // ROWS):
        for _rep in range(reps):
            for r in range(ROWS):
                for j in range(a.shape[1]):
                    out[t * ROWS + r, j] = a[t * ROWS + r, j]


@numba.njit(**JIT)
def copy_into(a, out, reps=1):
    for t in numba.prange(a.shape[0] // ROWS):
        for _rep in range(reps):
            for r in range(ROWS):
                for j in range(a.shape[1]):
                    out[t * ROWS + r, j] = a[t * ROWS + r, j]


@numba.njit(**JIT)
def copy_fresh(a):
    out = np.empty(a.shape, np.float32)
    for t in numba.prange(a.shape[0] // ROWS):
        for r in range(ROWS):
            for j in range(a.shape[1]):
                out[t * ROWS + r, j] = a[t * ROWS + r, j]
    return out


@numba.njit(**SERIAL)
def fma64(a, out, reps=1):
    for t in numba.prange(a.shape[0] // ROWS):
        for _rep in range(reps):
            for r in range(ROWS):
                for j in range(a.shape[1]):
                    v = a[t * ROWS + r, j]
                    for _ in range(32):
                        v = v * _A + _B
                    out[t * ROWS + r, j] = v


@numba.njit(**SERIAL)
def row_sum(a, out, reps=1):
    for t in numba.prange(a.shape[0] // ROWS):
        for _rep in range(reps):
            for r in range(ROWS):
                acc = _0
                for j in range(a.shape[1]):
                    acc = acc + a[t * ROWS + r, j]
                out[t * ROWS + r] = acc


def _unary(body):
    @numba.njit(**SERIAL)
    def kernel(a, out, reps=1):
        for t in numba.prange(a.shape[0] // ROWS):
            for _rep in range(reps):
                for r in range(ROWS):
                    for j in range(a.shape[1]):
                        out[t * ROWS + r, j] = body(a[t * ROWS + r, j])
    return kernel


call_exp = _unary(numba.njit(lambda v: np.float32(math.exp(v))))
call_tanh = _unary(numba.njit(lambda v: np.float32(math.tanh(v))))
call_erf = _unary(numba.njit(lambda v: np.float32(math.erf(v))))
call_log = _unary(numba.njit(lambda v: np.float32(math.log(v + _1))))
call_sqrt = _unary(numba.njit(lambda v: np.float32(math.sqrt(v))))
call_divf = _unary(numba.njit(lambda v: _1 / (v + _1)))
call_maximumf = _unary(numba.njit(lambda v: _maximumf_f32(v, _B)))


@numba.njit(**SERIAL)
def matmul(a, b, c):
    """c = a @ b accumulated in the output, as the emitted contraction loop does."""
    for t in numba.prange(a.shape[0] // ROWS):
        for r in range(ROWS):
            for j in range(b.shape[1]):
                c[t * ROWS + r, j] = _0
        for r in range(ROWS):
            for j in range(b.shape[1]):
                for k in range(a.shape[1]):
                    c[t * ROWS + r, j] = c[t * ROWS + r, j] + a[t * ROWS + r, k] * b[k, j]


@numba.njit(**JIT)
def empty_region(x):
    for i in numba.prange(x.shape[0]):
        tmp = np.empty((1,), np.float32)
        tmp[0] = x[i, 0]
        x[i, 0] = tmp[0]
