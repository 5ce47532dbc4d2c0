"""The special-values matrix (specialvalues.py): every elementwise op, reduction and scan of the
op table on IEEE special values (+-0, denormals, +-1, each op's overflow and underflow thresholds,
+-large, +-inf, NaN) in f32, f16 and f64, on mlir-jit, cpu and cuda-sim, compared with the
reference position by position: a NaN or an infinity where the reference has a finite value (or
the reverse) fails by name, zeros keep their sign, finite values agree within a few ulps.

One compile per (target, dtype): the ops of one iteration space are packed into one output.
Compiling for the cpu is the cost (Numba compiles each kernel as a parallel loop), so there f64
runs the elementwise groups only, whose code depends on the dtype (libm, not f32's polynomial exp
and tanh), and f16 the unary group (f32 arithmetic and libm, rounded to f16 after every op: its
binary ops are f32's, rounded the same way); the reductions' loops are the same in every dtype
and run in f32. The other targets run every group in every dtype."""
from __future__ import annotations

import numpy as np
import pytest

import fusec
from fusec.dsl.ops import OPS

import specialvalues as sv

TARGETS = ("mlir-jit", "cpu", "cuda-sim")
ELEMENTWISE = ("unary", "binary")
GROUPS = {("cpu", "f16"): ("unary",), ("cpu", "f64"): ELEMENTWISE}     # else every group

# Known deviations, checked for their NaN and infinities only: (target, dtype) -> ops
SPECIALS_ONLY = {
    # MLIR's convert-math-to-llvm (compiler/jit.py) lowers math.log1p to log(1 + x): log1p(x)
    # is 0 for |x| below the dtype's epsilon (+0 for -0 too) and ~5e-5 off relative at 1e-3 in f32
    ("mlir-jit", "f32"): {"log1p"}, ("mlir-jit", "f16"): {"log1p"}, ("mlir-jit", "f64"): {"log1p"},
}

_REFERENCE: dict = {}


def reference(dtype: str, only: tuple[str, ...] | None):
    """The matrix program for `dtype` (its groups `only`) and the reference's outputs, once."""
    key = (dtype, only)
    if key not in _REFERENCE:
        src, groups, inputs = sv.program(dtype, only)
        want = fusec.compile(src, target="reference").chains[f"special_{dtype}"](*inputs)
        _REFERENCE[key] = src, groups, inputs, want
    return _REFERENCE[key]


def test_the_matrix_covers_every_elementwise_op_reduction_and_scan():
    for dtype in sv.DTYPES:
        covered = sv.covered_ops(dtype)
        assert set(OPS) <= covered | set(sv.NOT_COVERED), sorted(set(OPS) - covered - set(sv.NOT_COVERED))
        wanted = {n for n, op in OPS.items() if op.category in ("elementwise", "reduction", "scan")}
        assert wanted <= covered, sorted(wanted - covered)
        elementwise = {n for g in sv.groups(dtype) if g.name in ELEMENTWISE for n in sv.covered_ops_of(g)}
        assert {n for n, op in OPS.items() if op.category == "elementwise"} <= elementwise


def test_the_values_hit_the_thresholds():
    with np.errstate(over="ignore"):
        for dtype, t in sv.NP.items():
            x = sv.unary_values(dtype)
            work = np.float64 if dtype == "f64" else np.float32      # as the reference: f16 in f32, rounded
            e = np.exp(x.astype(work)).astype(t)
            near = (x > np.log(np.finfo(t).max) - 1) & (x < np.log(np.finfo(t).max) + 1)
            assert np.isinf(e[near]).sum() == 1 and np.isfinite(e[near]).sum() == 1, dtype
            assert ((e > 0) & (e < np.finfo(t).tiny)).any() and (e[x < np.log(np.finfo(t).smallest_subnormal)] == 0).all()
            sq = (x.astype(work) ** 2).astype(t)
            assert np.isinf(sq[np.isfinite(x)]).any() and (x == np.finfo(t).smallest_subnormal).any()


@pytest.mark.slow
@pytest.mark.parametrize("dtype", sv.DTYPES)
@pytest.mark.parametrize("target", TARGETS)
def test_special_values_match_the_reference(target, dtype, fast_simulator):
    src, groups, inputs, want = reference(dtype, GROUPS.get((target, dtype)))
    prog = fusec.compile(src, target=target, options={"baseline": False} if target != "mlir-jit" else None)
    got = prog.chains[f"special_{dtype}"](*inputs)
    bad = sv.check(dtype, groups, got, want, inputs, frozenset(SPECIALS_ONLY.get((target, dtype), ())))
    assert not bad, f"{target} {dtype}: {len(bad)} mismatches:\n" + "\n".join(bad)
