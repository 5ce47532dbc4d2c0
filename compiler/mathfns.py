"""The scalar functions of a kernel body, one entry each (by short name: `exp` for math.exp,
`divf` for arith.divf): how the emitter writes it on each target and under the CUDA simulator,
whether it is a call, its GPU cost weight in FLOP-equivalents (estimates), and how the cpu
profile prices it (`cpu_chain`, timed by compiler/calibrate.py, or `cpu_like` times
`cpu_factor`). The lowering builds these ops; the emitter, the cost model and the hardware
profiles read this table. A new math function is one entry here. See docs/ARCHITECTURE.md,
"What the code taught us" (One op, one place).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MathFn:
    op: str                           # the MLIR op: math.exp, arith.divf
    py: str | None = None             # Python `math` function the emitter calls (None: a rule in emit/scalar.py)
    cpu_f32: str | None = None        # cpu target, f32: the vectorisable form emit/cpu.py writes instead
    cpu_f32_accurate: str | None = None   # the same under options.math == "accurate" (within 1 ulp)
    sim: str | None = None            # CUDA simulator: the NumPy function computed instead of `py`, which
                                      # raises there (OverflowError, ValueError: the simulator runs kernels
                                      # as Python) where a GPU returns inf or NaN; None: `py` never raises.
                                      # "**": the operator on NumPy scalars (C's pow; np.power of a scalar
                                      # takes a square root for the exponent 0.5: pow(-inf, 0.5) NaN)
    arity: int = 1
    call: bool = False                # a function call in the emitted loop (not one instruction)
    gpu_weight: float = 1.0           # FLOP-equivalents of one evaluation on a GPU (estimate)
    cpu_chain: str | None = None      # FDSL body `x`, `y` timed for the cpu profile: `exp(x) + y`
    cpu_offset: float = 1.0           # FLOPs added to the measured difference (the chain's own add)
    cpu_like: tuple[str, ...] = ()    # else: priced as the sum of these entries' cpu weights...
    cpu_factor: float = 1.0           # ... times this


def _fn(op: str, **kw) -> tuple[str, MathFn]:
    return op.split(".", 1)[1], MathFn(op, **kw)


FUNCTIONS: dict[str, MathFn] = dict([
    _fn("math.exp", py="exp", sim="exp", cpu_f32="exp_f32", cpu_f32_accurate="exp_f32_accurate", call=True, gpu_weight=8.0, cpu_chain="exp(x) + y"),
    _fn("math.exp2", py="exp2", sim="exp2", call=True, gpu_weight=6.0, cpu_like=("exp",)),
    _fn("math.expm1", py="expm1", sim="expm1", call=True, gpu_weight=12.0, cpu_like=("exp",)),
    _fn("math.log", py="log", sim="log", call=True, gpu_weight=8.0, cpu_chain="log(x + 1.0) + y"),
    _fn("math.log2", py="log2", sim="log2", call=True, gpu_weight=6.0, cpu_like=("log",)),
    _fn("math.log10", py="log10", sim="log10", call=True, gpu_weight=8.0, cpu_like=("log",)),
    _fn("math.log1p", py="log1p", sim="log1p", call=True, gpu_weight=12.0, cpu_like=("log",)),
    _fn("math.tanh", py="tanh", cpu_f32="tanh_f32", cpu_f32_accurate="tanh_f32_accurate", call=True, gpu_weight=16.0, cpu_chain="tanh(x) + y"),
    _fn("math.erf", py="erf", call=True, gpu_weight=16.0, cpu_chain="erf(x) + y"),
    _fn("math.erfc", py="erfc", call=True, gpu_weight=16.0, cpu_like=("erf",)),
    _fn("math.sin", py="sin", sim="sin", call=True, gpu_weight=16.0, cpu_like=("tanh",)),
    _fn("math.cos", py="cos", sim="cos", call=True, gpu_weight=16.0, cpu_like=("tanh",)),
    _fn("math.tan", py="tan", sim="tan", call=True, gpu_weight=20.0, cpu_like=("tanh",)),
    _fn("math.asin", py="asin", sim="arcsin", call=True, gpu_weight=20.0, cpu_like=("tanh",)),
    _fn("math.acos", py="acos", sim="arccos", call=True, gpu_weight=20.0, cpu_like=("tanh",)),
    _fn("math.atan", py="atan", call=True, gpu_weight=20.0, cpu_like=("tanh",)),
    _fn("math.sinh", py="sinh", sim="sinh", call=True, gpu_weight=16.0, cpu_like=("exp",), cpu_factor=2.0),
    _fn("math.cosh", py="cosh", sim="cosh", call=True, gpu_weight=16.0, cpu_like=("exp",), cpu_factor=2.0),
    _fn("math.asinh", py="asinh", call=True, gpu_weight=20.0, cpu_like=("log",), cpu_factor=2.0),
    _fn("math.acosh", py="acosh", sim="arccosh", call=True, gpu_weight=20.0, cpu_like=("log",), cpu_factor=2.0),
    _fn("math.atanh", py="atanh", sim="arctanh", call=True, gpu_weight=20.0, cpu_like=("log",), cpu_factor=2.0),
    _fn("math.powf", py="pow", sim="**", arity=2, call=True, gpu_weight=24.0, cpu_like=("log",), cpu_factor=2.0),
    _fn("math.atan2", py="atan2", arity=2, call=True, gpu_weight=24.0, cpu_like=("tanh",), cpu_factor=2.0),
    _fn("arith.remf", py="fmod", sim="fmod", arity=2, call=True, gpu_weight=8.0, cpu_like=("divf",), cpu_factor=2.0),
    _fn("math.sqrt", py="sqrt", sim="sqrt", gpu_weight=8.0, cpu_chain="sqrt(x) + y"),
    _fn("math.rsqrt", gpu_weight=4.0, cpu_like=("sqrt", "divf")),
    _fn("arith.divf", gpu_weight=8.0, cpu_chain="x / (y + 2.0)", cpu_offset=0.0),
    _fn("arith.maximumf", gpu_weight=1.0, cpu_chain="maximum(x, y)"),
    _fn("arith.minimumf", gpu_weight=1.0, cpu_like=("maximumf",)),
    # one instruction (or a short branch-free sequence) each: one FLOP on every target
    _fn("math.absf"), _fn("math.absi"), _fn("math.floor", sim="floor"), _fn("math.ceil", sim="ceil"),
    _fn("math.trunc", sim="trunc"),
    _fn("math.round"), _fn("math.roundeven"), _fn("math.fma", arity=3), _fn("math.copysign", py="copysign", arity=2),
    _fn("math.isnan"), _fn("math.isinf"), _fn("math.isfinite"),
    # integer and integer-exponent powers: a square-and-multiply loop (emit/scalar.py's helper)
    _fn("math.ipowi", arity=2, gpu_weight=8.0, cpu_like=("maximumf",), cpu_factor=8.0), _fn("math.fpowi", sim="**", arity=2, call=True, gpu_weight=24.0, cpu_like=("powf",)),
])

CALLS: frozenset[str] = frozenset(n for n, f in FUNCTIONS.items() if f.call)
# the MLIR op (math.exp, arith.divf) -> its entry (FUNCTIONS is keyed by the short name)
BY_MLIR_OP: dict[str, MathFn] = {f.op: f for f in FUNCTIONS.values()}


def python_calls(arity: int) -> dict[str, str]:
    """MLIR op -> the Python `math` function the emitter writes, for functions of `arity`."""
    return {f.op: f.py for f in FUNCTIONS.values() if f.py and f.arity == arity}


def simulator_calls() -> dict[str, str]:
    """MLIR op -> the NumPy function (or "**") the CUDA simulator computes it with (IEEE results)."""
    return {f.op: f.sim for f in FUNCTIONS.values() if f.sim}


def gpu_weights() -> dict[str, float]:
    return {n: f.gpu_weight for n, f in FUNCTIONS.items()}


def derived_cpu_weights(measured: dict[str, float]) -> dict[str, float]:
    """cpu weights of the entries priced like others, from the measured ones (in table order,
    so an entry may be priced like one derived before it)."""
    out = dict(measured)
    for name, f in FUNCTIONS.items():
        if name not in out and f.cpu_like and all(k in out for k in f.cpu_like):
            out[name] = round(f.cpu_factor * sum(out[k] for k in f.cpu_like), 2)
    return out
