"""Reductions over a list of axes: sum, mean, max, min, prod, and any, all on bools (keepdims optional).

max and min sign a zero result as the elementwise IEEE maximum and minimum do (elementwise.py).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..shapes import OpError, normalize_axes
from .registry import Arg, OpDef, register_op, require_float, require_numeric


def _reduce_extreme(f, largest: bool):
    """np.max / np.min over axes (NaN if the slice holds one), a zero result signed as the
    elementwise maximum / minimum (elementwise.py): max is +0 if the slice holds a +0, min -0 if a -0."""
    def reduce(x, axis, keepdims):
        r = f(x, axis=axis, keepdims=keepdims)
        if x.dtype.kind != "f":
            return r
        sign = ~np.signbit(x) if largest else np.signbit(x)
        has = np.any((x == 0) & sign, axis=axis, keepdims=keepdims)
        zero = np.where(has == largest, r.dtype.type(0.0), r.dtype.type(-0.0))
        return np.where(r == 0, zero, r)
    return reduce


def _reduce_infer(name: str):
    def infer(syms, types, attrs):
        (t,) = types
        if name == "mean":
            require_float(t, name)
        elif name not in ("any", "all"):
            require_numeric(t, name)
        axes = normalize_axes(attrs["axis"], t.rank)
        shape = [1 if i in axes else d for i, d in enumerate(syms.resolve(t.shape))]
        if not attrs["keepdims"]:
            shape = [d for i, d in enumerate(shape) if i not in axes]
        return t.with_shape(shape), {"axis": axes, "keepdims": bool(attrs["keepdims"])}
    return infer


REDUCTIONS: dict[str, tuple[Callable, str]] = {
    "sum": (np.sum, "sum over axes"), "mean": (np.mean, "arithmetic mean over axes"),
    "max": (_reduce_extreme(np.max, True), "maximum over axes"),
    "min": (_reduce_extreme(np.min, False), "minimum over axes"),
    "prod": (np.prod, "product over axes"),
}
for _name, (_fn, _doc) in REDUCTIONS.items():
    register_op(OpDef(_name, "reduction",
                      (Arg("x", "tensor"), Arg("axis", "axes", None), Arg("keepdims", "bool", False)),
                      _reduce_infer(_name),
                      (lambda f: lambda xs, a, out: np.asarray(
                          f(xs[0], axis=a["axis"], keepdims=a["keepdims"]), dtype=xs[0].dtype))(_fn), _doc))


def _bool_reduce_infer(name: str):
    def infer(syms, types, attrs):
        (t,) = types
        if not t.dtype.is_bool:
            raise OpError(f"{name} expects a bool tensor, got {t}; compare first (x > 0) or cast(x, bool)", arg=0)
        return _reduce_infer(name)(syms, types, attrs)
    return infer


# any / all: bool -> bool, lowered as the max / min of the bools read as 0 / 1 (compiler/lowering/reduction.py)
BOOL_REDUCTIONS: dict[str, tuple[Callable, str]] = {
    "any": (np.any, "whether any element over axes is true (bool)"),
    "all": (np.all, "whether every element over axes is true (bool)"),
}
for _name, (_fn, _doc) in BOOL_REDUCTIONS.items():
    register_op(OpDef(_name, "reduction",
                      (Arg("x", "tensor"), Arg("axis", "axes", None), Arg("keepdims", "bool", False)),
                      _bool_reduce_infer(_name),
                      (lambda f: lambda xs, a, out: np.asarray(
                          f(xs[0], axis=a["axis"], keepdims=a["keepdims"]), dtype=np.bool_))(_fn), _doc))
