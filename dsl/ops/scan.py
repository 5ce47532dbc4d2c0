"""Ops along one axis: the scans cumsum and cumprod (a running value, same shape) and the
arg-reductions argmax and argmin (the first position of the extreme, i64; the first NaN if any)."""
from __future__ import annotations

import numpy as np

from ..shapes import OpError, normalize_axis
from ..types import DTYPES, TensorType
from .registry import Arg, OpDef, register_op, require_numeric


def _scan_infer(name: str):
    def infer(syms, types, attrs):
        (t,) = types
        require_numeric(t, name)
        if t.rank == 0:
            raise OpError(f"{name} runs along an axis and needs rank 1 or more, got {t}", arg=0)
        return t.with_shape(syms.resolve(t.shape)), {"axis": normalize_axis(attrs["axis"], t.rank)}
    return infer


for _name, (_fn, _doc) in {"cumsum": (np.cumsum, "running sum along an axis"),
                           "cumprod": (np.cumprod, "running product along an axis")}.items():
    register_op(OpDef(_name, "scan", (Arg("x", "tensor"), Arg("axis", "int", -1)), _scan_infer(_name),
                      (lambda f: lambda xs, a, out: f(xs[0], axis=a["axis"], dtype=xs[0].dtype))(_fn), _doc))


def _arg_infer(name: str):
    def infer(syms, types, attrs):
        (t,) = types
        require_numeric(t, name)
        if t.rank == 0:
            raise OpError(f"{name} picks a position along an axis and needs rank 1 or more, got {t}", arg=0)
        axis = normalize_axis(attrs["axis"], t.rank)
        shape = list(syms.resolve(t.shape))
        if attrs["keepdims"]:
            shape[axis] = 1
        else:
            del shape[axis]
        return TensorType(DTYPES["i64"], tuple(shape)), {"axis": axis, "keepdims": bool(attrs["keepdims"])}
    return infer


for _name, (_fn, _doc) in {"argmax": (np.argmax, "position of the largest element along an axis (the first "
                                                 "of equals; the first NaN if any)"),
                           "argmin": (np.argmin, "position of the smallest element along an axis (the first "
                                                 "of equals; the first NaN if any)")}.items():
    register_op(OpDef(_name, "reduction", (Arg("x", "tensor"), Arg("axis", "int", -1), Arg("keepdims", "bool", False)),
                      _arg_infer(_name),
                      (lambda f: lambda xs, a, out: np.asarray(f(xs[0], axis=a["axis"], keepdims=a["keepdims"]),
                                                               dtype=np.int64))(_fn), _doc))
