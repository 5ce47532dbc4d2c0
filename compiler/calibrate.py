"""What measures this CPU for its hardware profile (compiler/hardware.py).

Memory: Numba loops shaped like the code compiler/emit writes for the cpu target (a prange over
row tiles, plain loops inside, 2-D indexing, the emitter's fastmath flags), run on every core.
Compute: small FDSL chains compiled by fusec itself (`emitted_chain`), so each op is priced as
the emitter writes it today, timed on one thread (a busy second core then does not disturb it).
"""
import math

import numba
import numpy as np

ROWS = 32

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


@numba.njit(**JIT)
def empty_region(x):
    for i in numba.prange(x.shape[0]):
        tmp = np.empty((1,), np.float32)
        tmp[0] = x[i, 0]
        x[i, 0] = tmp[0]


def emitted_chain(src: str, binding: dict[str, int]):
    """(host function, inputs) of an FDSL chain compiled for the cpu target with its default plan."""
    import types

    from fusec.dsl.checker import check
    from fusec.dsl.parser import parse
    from fusec.runtime.reference import random_inputs

    from .pipeline import CompileOptions, compile_chain
    chain = check(parse(src, "<calibrate>")).chains[0]
    st = compile_chain(chain, binding, options=CompileOptions(target="cpu", hw="calibration"))
    mod = types.ModuleType(f"fusec_calibrate_{chain.name}")
    exec(compile(st.emitted.source, f"<calibrate {chain.name}>", "exec"), mod.__dict__)
    inputs = [np.ascontiguousarray(x) for x in random_inputs(chain, binding, 0)]
    return getattr(mod, st.emitted.entries[chain.name].host), inputs
