"""The cpu's f32 exp and tanh are branch-free polynomial forms (compiler/emit/cpu.py exp_f32,
tanh_f32, so that loops vectorise): within their ulp bounds (exp 3, tanh 5) against float64 over
the whole f32 range, sampled by bit pattern, and at every f32 near their thresholds; there the
NaN, infinities, zeros and signs are exactly IEEE's (the f64 result rounded to f32)."""
from __future__ import annotations

import numpy as np
import pytest

import fusec

F32 = np.float32


def _around(x: float, n: int = 2048) -> np.ndarray:
    """Every f32 within n ulps of x."""
    b = np.array([x], F32).view(np.int32)[0]
    return np.arange(b - n, b + n + 1, dtype=np.int64).astype(np.int32).view(F32)


def _whole_range(n: int = 1 << 20) -> np.ndarray:
    """f32 values by uniformly random bit patterns: every exponent, both signs, NaN, inf."""
    bits = np.random.default_rng(18).integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    return bits.view(F32)


EXP_THRESHOLDS = (
    float(np.log(np.float64(np.finfo(F32).max))),       # 88.72: the last finite result
    float(np.log(np.float64(np.finfo(F32).tiny))),      # -87.34: the last normal result
    float(np.log(np.float64(np.finfo(F32).smallest_subnormal))),   # -103.28: the last denormal
    float(np.log(np.float64(np.finfo(F32).smallest_subnormal) / 2)),   # -103.97: 0 from here
    88.8, -104.0,                                       # where the form clamps its argument
    0.0, 1e-30, -1e-30, 1e-7,                           # exp(x) = 1 + x
)
TANH_THRESHOLDS = (0.0004, -0.0004, 7.99881172180175781, -7.99881172180175781, 9.0, -9.0,
                   0.0, 1e-38, 0.5493, 1.0)


def _ulps(got: np.ndarray, want64: np.ndarray) -> np.ndarray:
    """|got - want| in units of the f32 spacing at want (denormal spacing below the normals)."""
    spacing = np.spacing(np.maximum(np.abs(want64.astype(F32)), np.finfo(F32).tiny)).astype(np.float64)
    return np.abs(got.astype(np.float64) - want64) / spacing


@pytest.fixture(scope="module")
def cpu_forms():
    x = np.concatenate([_whole_range()] + [_around(t) for t in EXP_THRESHOLDS + TANH_THRESHOLDS])
    x = np.concatenate([x, np.array([np.inf, -np.inf, np.nan, -0.0], F32)])
    src = f"chain f(x: f32[{x.size}]) -> (f32[{x.size}], f32[{x.size}]) {{ return exp(x), tanh(x) }}"
    prog = fusec.compile(src, target="cpu", options={"baseline": False})
    text = prog.f.stages({})["kernels"]
    assert "_exp_f32(" in text and "_tanh_f32(" in text          # the polynomial forms, not libm
    e, t = prog.f(x)
    return x, e, t


@pytest.mark.parametrize("fn, bound", [("exp", 3), ("tanh", 5)])
def test_within_the_ulp_bound_and_ieee_at_the_specials(cpu_forms, fn, bound):
    x, e, t = cpu_forms
    got = e if fn == "exp" else t
    with np.errstate(all="ignore"):
        want64 = getattr(np, fn)(x.astype(np.float64))
        want = want64.astype(F32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), x[np.isnan(got) != nan][:5]
    special = ~nan & (np.isinf(want) | (want == 0))
    bad = special & (got != want)
    assert not bad.any(), f"{fn}: {got[bad][:5]} where IEEE has {want[bad][:5]} for x = {x[bad][:5]}"
    finite = ~nan & ~special
    assert np.isfinite(got[finite]).all(), x[finite & ~np.isfinite(got)][:5]
    ulps = _ulps(got[finite], want64[finite])
    worst = int(np.argmax(ulps))
    assert ulps[worst] <= bound, f"{fn}({x[finite][worst]!r}) = {got[finite][worst]!r}: {ulps[worst]:.2f} ulp"
    zero = x == 0
    assert np.array_equal(np.signbit(got[zero]), np.signbit(x[zero]) if fn == "tanh" else np.zeros(zero.sum(), bool))
