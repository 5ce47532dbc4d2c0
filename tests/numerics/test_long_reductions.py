"""Long reductions and large values (issue 42, item 5), per target, against the float64 truth and
against NumPy's own f32 error (pairwise summation), within the bounds docs/FDSL.md states
("Long reductions"):

- sums, means and variances (`mean(square(x - mean(x)))`, and layernorm's) of f32 over whole
  tensors and long rows, of uniform [0, 1) values and of mixed-sign values about a large offset
  (1000 + uniform [-1, 1): the variance's cancellation);
- softmax, log_softmax and layernorm rows with |x| up to 1e4 in f16 and bf16;
- the emitted code that gives the bounds: a long f32 sum on the cpu in f32 blocks of
  SUM_BLOCK added in f64, a GPU thread's long serial partial in f64, short ones left as they were.

The error of a sum or a mean is taken over the sum (mean) of |x|, the scale its rounding error
grows with whatever the cancellation; a variance's over the true variance. Each target must
stay within `BOUND[target]` times the larger of NumPy's error and u = 2**-24. The quick tier runs
~10^6 elements on reference, cpu and mlir-jit and a few thousand on cuda-sim; the `slow` tier
the issue's sizes (10^7 elements, rows of 10^6) and cuda-sim at 10^5."""
from __future__ import annotations

import numpy as np
import pytest

import fusec
from fusec.compiler.emit.control import SUM_BLOCK

U = 2.0 ** -24
# the factor over max(NumPy's error, u) each target is held to (docs/FDSL.md, "Long reductions"):
# reference is NumPy; cpu adds f32 blocks of SUM_BLOCK in f64; cuda-sim's kernels add a thread's
# f32 partial of at most SUM_BLOCK terms (more in f64), then a tree; mlir-jit adds every f32 sum
# in f64 (jit.py: _wide_sums)
BOUND = {"reference": 1.0, "cpu": 2.0, "cuda-sim": 4.0, "mlir-jit": 2.0}

SRC = """
chain total(x: f32[N]) -> f32 { return sum(x) }
chain avg(x: f32[N]) -> f32 { return mean(x) }
chain var(x: f32[N]) -> f32 { return mean(square(x - mean(x))) }
chain rsum(x: f32[R, N]) -> f32[R] { return sum(x, axis=1) }
chain rmean(x: f32[R, N]) -> f32[R] { return mean(x, axis=-1) }
chain rvar(x: f32[R, N]) -> f32[R] { return mean(square(x - mean(x, axis=1, keepdims=true)), axis=1) }
chain ln(x: f32[R, N], g: f32[N], b: f32[N]) -> f32[R, N] { return layernorm(x, g, b) }
"""
WHOLE, ROWS = ("total", "avg", "var"), ("rsum", "rmean", "rvar", "ln")


def _data(kind: str, shape, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    u = rng.random(shape, dtype=np.float32)
    return u if kind == "u01" else (u * np.float32(2) - np.float32(1) + np.float32(1000))


def _truth(name: str, x: np.ndarray):
    x = x.astype(np.float64)
    ax = None if x.ndim == 1 else 1
    if name in ("total", "rsum"):
        return x.sum(ax), np.abs(x).sum(ax)
    if name in ("avg", "rmean"):
        return x.mean(ax), np.abs(x).mean(ax)
    keep = ax is not None
    v = np.square(x - x.mean(ax, keepdims=keep)).mean(ax)
    if name == "ln":
        y = (x - x.mean(1, keepdims=True)) / np.sqrt(v[:, None] + 1e-5)
        return y, np.maximum(np.abs(y), 1.0)          # layernorm's output: |y| ~ 1
    return v, v


def _numpy(name: str, x: np.ndarray):
    """NumPy's f32 (pairwise) result, the same formula."""
    if name in ("total", "rsum"):
        return x.sum(None if x.ndim == 1 else 1)
    if name in ("avg", "rmean"):
        return x.mean(None if x.ndim == 1 else 1)
    if name == "var":
        return np.square(x - x.mean()).mean()
    v = np.square(x - x.mean(1, keepdims=True)).mean(1)
    if name == "ln":
        return (x - x.mean(1, keepdims=True)) * (np.float32(1) / np.sqrt(v[:, None] + np.float32(1e-5)))
    return v


def _err(y, truth, scale) -> float:
    return float(np.max(np.abs(np.asarray(y, np.float64) - truth) / scale))


def _check(target: str, names, whole: int, rows: tuple[int, int], kinds=("u01", "off")) -> list[str]:
    prog = fusec.compile(SRC, target=target, options={"baseline": False})
    bad = []
    for kind in kinds:
        for seed, name in enumerate(names):
            x = _data(kind, (whole,) if name in WHOLE else rows, seed)
            args = [x] + ([np.ones(x.shape[1], np.float32), np.zeros(x.shape[1], np.float32)] if name == "ln" else [])
            truth, scale = _truth(name, x)
            ours = _err(getattr(prog, name)(*args), truth, scale)
            theirs = _err(_numpy(name, x), truth, scale)
            bound = BOUND[target] * max(theirs, U)
            if not ours <= bound:
                bad.append(f"{target} {name} {kind} {x.shape}: error {ours:.3g} over the bound {bound:.3g} "
                           f"(NumPy's {theirs:.3g})")
    return bad


@pytest.mark.parametrize("target", ["reference", pytest.param("cpu", marks=pytest.mark.slow), "mlir-jit"])
def test_long_f32_reductions_within_the_bound(target):
    """~10^6 elements, sizes split-reductions cannot split: a serial f32 sum (the cpu's and
    mlir-jit's before) is 10x-10^4x NumPy's error here, and the variance about 1000 is off by
    its whole size."""
    bad = _check(target, WHOLE + ROWS, (1 << 20) + 7, (4, (1 << 18) + 3))
    assert not bad, "\n".join(bad)


@pytest.mark.slow
def test_gpu_kernels_within_the_bound(fast_simulator):
    bad = _check("cuda-sim", ("total", "var", "rvar"), 20000, (2, 6007), kinds=("off",))
    assert not bad, "\n".join(bad)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["reference", "cpu", "mlir-jit"])
def test_the_issues_sizes_within_the_bound(target):
    """10^7 elements whole, rows of 10^6."""
    bad = _check(target, WHOLE + ROWS, 10 ** 7, (10, 10 ** 6))
    assert not bad, "\n".join(bad)


@pytest.mark.slow
def test_gpu_kernels_at_1e5_within_the_bound(fast_simulator):
    """Uniform data only, a whole-tensor sum and one row's variance (the three chains with two
    rows took 314 s of the slow tier's 65 min on 2 cores): the offset kind and the whole
    variance run at 2e4 above."""
    bad = _check("cuda-sim", ("total", "rvar"), 10 ** 5, (1, 10 ** 5), kinds=("u01",))
    assert not bad, "\n".join(bad)


# --- the emitted code the bounds rest on ----------------------------------------------------------

def _kernels(target: str, chain: str, binding: dict) -> str:
    prog = fusec.compile(SRC, target=target, options={"baseline": False}, max_memory=1 << 40)
    return getattr(prog, chain).stages(binding)["kernels"]


def test_cpu_long_sums_add_f32_blocks_in_f64():
    text = _kernels("cpu", "rvar", {"R": 4, "N": 10 ** 6})
    assert text.count(f"f32 partial sums of {SUM_BLOCK}, added in f64") == 2      # the mean's sum, the variance's
    assert "np.float64(" in text and "np.float32(0)" in text
    short = _kernels("cpu", "rvar", {"R": 4, "N": SUM_BLOCK})
    assert "np.float64(" not in short and "_acc" in short    # short: an f32 local, as before


def test_gpu_long_thread_partials_are_f64():
    """300 rows of 2^19 (too many rows for split-reductions): one block of 256 threads per row,
    each adding 2048 elements serially; a split whole tensor adds a few per thread, then trees."""
    long = _kernels("cuda-sim", "rsum", {"R": 300, "N": 1 << 19})
    assert "np.float64(" in long and "np.float32(_acc" in long
    short = _kernels("cuda-sim", "total", {"N": 1 << 22})
    assert "np.float64(" not in short


def test_a_running_sum_is_not_widened():
    """cumsum stores every running value: it keeps the reference's f32 order."""
    prog = fusec.compile("chain c(x: f32[R, N]) -> f32[R, N] { return cumsum(x, axis=-1) }", target="cpu",
                         options={"baseline": False})
    assert "np.float64(" not in prog.c.stages({"R": 2, "N": 10 ** 5})["kernels"]


# --- softmax and layernorm rows with |x| up to 1e4 in f16 and bf16 -----------------------------------

HALF = {"f16": 2.0 ** -11, "bf16": 2.0 ** -8}         # each dtype's unit roundoff


def _half_src(dt: str) -> str:
    return f"""
chain sm(x: {dt}[R, N]) -> {dt}[R, N] {{ return softmax(x, axis=-1) }}
chain lsm(x: {dt}[R, N]) -> {dt}[R, N] {{ return log_softmax(x, axis=-1) }}
chain ln(x: {dt}[R, N], g: {dt}[N], b: {dt}[N]) -> {dt}[R, N] {{ return layernorm(x, g, b) }}
"""


def _half_rows(dt: str, n: int) -> np.ndarray:
    import ml_dtypes
    t = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}[dt]
    rng = np.random.default_rng(42)
    x = rng.uniform(-1e4, 1e4, (5, n))
    x[1] = 1e4 + rng.uniform(-8, 8, n)            # a large offset, a small spread
    x[2] = -1e4 + rng.uniform(-100, 100, n)
    x[3] = 1e4
    x[3, 5] = -1e4                                 # one far below: softmax 0 there, layernorm ~ -sqrt(n)
    x[4] = rng.uniform(-1e4, 1e4, n).round()      # integers: exact in f16, many ties in bf16
    return x.astype(t)


@pytest.mark.parametrize("target, dt, n", [("reference", "f16", 4096), pytest.param("cpu", "f16", 4096, marks=pytest.mark.slow),
                                           ("mlir-jit", "f16", 4096), ("reference", "bf16", 4096),
                                           ("mlir-jit", "bf16", 4096), pytest.param("cuda-sim", "f16", 256, marks=pytest.mark.slow)])
def test_half_rows_with_large_values(target, dt, n, fast_simulator):
    """Finite, and within 2u |t| + u max(1, max |t| of the row) of the float64 truth t of the
    rounded inputs (u the output dtype's unit roundoff): one rounding of the output, and the
    absolute error of the row's largest value where |t| is small (log_softmax's -2e4)."""
    x = _half_rows(dt, n)
    g = np.ones(n, x.dtype)
    b = np.zeros(n, x.dtype)
    prog = fusec.compile(_half_src(dt), target=target, options={"baseline": False})
    x64 = x.astype(np.float64)
    m = x64.max(1, keepdims=True)
    e = np.exp(x64 - m)
    s = e.sum(1, keepdims=True)
    mu = x64.mean(1, keepdims=True)
    truth = {"sm": e / s, "lsm": x64 - m - np.log(s),
             "ln": (x64 - mu) / np.sqrt(np.square(x64 - mu).mean(1, keepdims=True) + 1e-5)}
    u = HALF[dt]
    bad = []
    for name, t in truth.items():
        y = np.asarray(getattr(prog, name)(*([x, g, b] if name == "ln" else [x]))).astype(np.float64)
        if not np.isfinite(y).all():
            bad.append(f"{name}: {int((~np.isfinite(y)).sum())} values not finite")
            continue
        tol = 2 * u * np.abs(t) + u * np.maximum(1.0, np.abs(t).max(1, keepdims=True))
        over = np.abs(y - t) - tol
        if over.max() > 0:
            i = np.unravel_index(int(np.argmax(over)), y.shape)
            bad.append(f"{name}: {y[i]} at {i}, truth {t[i]}, tolerance {tol[i]:.3g}")
    assert not bad, f"{target} {dt}:\n" + "\n".join(bad)
