"""The one op registry (`OPS`), what an entry holds, and the argument checks the families share.
An `OpDef` is an op's whole definition: its signature (`args`); its shape and dtype rule
(`infer(syms, types, attrs)`: tensor argument types in signature order, None for an omitted
optional tensor; returns the result type and normalised attributes, or raises OpError naming
the argument); its NumPy semantics (`ref(xs, attrs, out_shape)`: arrays in the compute dtype,
attrs["binding"] the symbols' extents). Each family module registers its ops here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..shapes import OpError, Symbols
from ..types import TensorType

REQUIRED = object()          # the default of an argument every call must give


@dataclass(frozen=True)
class Arg:
    """One argument of a signature: a tensor (`is_tensor`), or a static argument the checker
    evaluates at compile time into an attribute (`kind` says what it must be)."""
    name: str
    kind: str                  # tensor | tensor? | tensors (a list of them) | subscript | int | axes | pair
                               # | float | bool | str | dtype | dims | perm
                               # | scalar (a compile-time number or bool, or a symbol's name)
    default: Any = REQUIRED
    choices: tuple = ()
    positive: bool = False     # random inputs feeding this argument are drawn positive

    @property
    def is_tensor(self) -> bool:
        return self.kind in ("tensor", "tensor?", "tensors")


@dataclass(frozen=True)
class OpDef:
    """One op: its signature, shape and dtype rule and NumPy semantics (the module docstring)."""
    name: str
    category: str              # elementwise | reduction | scan | norm | linalg | shape | index | pooling | creation
    args: tuple[Arg, ...]
    infer: Callable[[Symbols, list, dict], tuple[TensorType, dict]]
    ref: Callable[[list, dict, tuple], np.ndarray]
    doc: str = ""
    verb: str = ""             # for messages: "cannot add A and B"
    dtype_args: tuple[int, ...] | None = None   # elementwise: tensor args that share one dtype (None: all)

    @property
    def tensor_args(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.args if a.is_tensor)


OPS: dict[str, OpDef] = {}


def register_op(op: OpDef) -> OpDef:
    """Add `op` to OPS under its name."""
    OPS[op.name] = op
    return op


def require_numeric(t: TensorType, op: str, i: int = 0) -> None:
    """Refuse a bool tensor as argument i of `op`."""
    if t.dtype.is_bool:
        raise OpError(f"{op} expects a numeric tensor, got {t}", arg=i)


def require_float(t: TensorType, op: str, i: int = 0) -> None:
    """Refuse a non-float tensor as argument i of `op`."""
    if not t.dtype.is_float:
        raise OpError(f"{op} expects a floating-point tensor, got {t}; convert with cast(x, f32)", arg=i)

