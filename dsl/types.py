"""FDSL types: dtypes, dims (an int or a symbol name) and tensor types (a scalar is rank 0)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class DType:
    name: str          # FDSL spelling: f32
    np_name: str       # NumPy dtype name
    mlir: str          # MLIR element type: f32, i1
    kind: str          # 'float' | 'int' | 'bool'
    bits: int

    @property
    def np(self) -> np.dtype:
        return np.dtype(ml_dtypes.bfloat16) if self.name == "bf16" else np.dtype(self.np_name)

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind == "int"

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    def __str__(self) -> str:
        return self.name


DTYPES: dict[str, DType] = {d.name: d for d in [
    DType("f16", "float16", "f16", "float", 16),
    DType("bf16", "bfloat16", "bf16", "float", 16),
    DType("f32", "float32", "f32", "float", 32),
    DType("f64", "float64", "f64", "float", 64),
    DType("i32", "int32", "i32", "int", 32),
    DType("i64", "int64", "i64", "int", 64),
    DType("bool", "bool", "i1", "bool", 1),
]}

F32, F64, BOOL = DTYPES["f32"], DTYPES["f64"], DTYPES["bool"]


def dtype_of_numpy(dt: np.dtype) -> DType | None:
    """The FDSL dtype of a NumPy dtype, or None when FDSL has none."""
    for d in DTYPES.values():
        if d.np == np.dtype(dt):
            return d
    return None


Dim = int | str  # a concrete extent, or a symbol such as "M"


@dataclass(frozen=True)
class TensorType:
    dtype: DType
    shape: tuple[Dim, ...]

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def symbols(self) -> tuple[str, ...]:
        return tuple(d for d in self.shape if isinstance(d, str))

    def with_shape(self, shape) -> "TensorType":
        return TensorType(self.dtype, tuple(shape))

    def with_dtype(self, dtype: DType) -> "TensorType":
        return TensorType(dtype, self.shape)

    def concrete(self, binding: dict[str, int]) -> tuple[int, ...]:
        """The shape with every symbol replaced by its bound extent."""
        return tuple(binding[d] if isinstance(d, str) else d for d in self.shape)

    def __str__(self) -> str:
        if not self.shape:
            return self.dtype.name
        return f"{self.dtype.name}[{', '.join(str(d) for d in self.shape)}]"


F64_MAX_INT = int(np.finfo(np.float64).max)          # the largest finite f64, as an integer


def fit_error(value: int | float, dtype: DType) -> str | None:
    """Why a weak scalar cannot be a constant of `dtype` (None: it can). An integer must be in
    the integer dtype's range; a finite number must stay finite in a float dtype (an infinity
    folded from arithmetic such as 1.0 / 0.0 stays one)."""
    if dtype.is_int:
        info = np.iinfo(dtype.np)
        if not info.min <= value <= info.max:
            return f"the integer {value} does not fit in {dtype} ({info.min} to {info.max})"
        return None
    if not dtype.is_float:
        return None
    if isinstance(value, int) and abs(value) > F64_MAX_INT:
        return f"the integer {value} is out of the range of {dtype}"
    v = float(value)
    if math.isfinite(v):
        with np.errstate(all="ignore"):
            stored = float(np.asarray(v).astype(dtype.np))
        if not math.isfinite(stored):
            return (f"the number {v:g} is out of the range of {dtype} (its largest finite value is "
                    f"{float(ml_dtypes.finfo(dtype.np).max):.6g})")
    return None
