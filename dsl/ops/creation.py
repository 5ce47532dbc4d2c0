"""Creation ops: `full(shape, value, dtype)`, `full_like(x, value, dtype)` and `arange(start,
stop, step, dtype)`, tensors made from static arguments (full_like reads only x's shape and
dtype). Extents may be the chain's symbols. The lowering folds them into their consumers
(compiler/lowering/creation.py): a `full` is a constant in the consuming kernel's body, an
`arange` the loop index there.
"""
from __future__ import annotations

import math

import numpy as np

from ..shapes import OpError
from ..types import DTYPES, TensorType, fit_error
from .registry import Arg, OpDef, register_op




def _kind(v) -> str:
    if isinstance(v, (bool, np.bool_)):
        return "bool"
    return "int" if isinstance(v, (int, np.integer)) else "float"


def _value_dtype(op: str, value, dtype: str | None):
    """The result dtype (the override, else the value's weak default) and the value in it."""
    kind = _kind(value)
    dt = DTYPES[dtype] if dtype is not None else DTYPES[{"bool": "bool", "int": "i64", "float": "f32"}[kind]]
    if kind == "float" and not dt.is_float:
        raise OpError(f"{op}: the float value {value} cannot fill a {dt} tensor; give an integer, or a float dtype",
                      arg="value")
    if kind == "bool" and not dt.is_bool:
        raise OpError(f"{op}: the value {str(value).lower()} fills only a bool tensor, not {dt}", arg="value")
    if kind != "bool" and dt.is_bool:
        raise OpError(f"{op}: a bool tensor is filled with true or false, not {value}", arg="value")
    why = fit_error(value, dt)
    if why is not None:
        raise OpError(f"{op}: {why}", arg="value")
    v = bool(value) if dt.is_bool else (float(value) if dt.is_float else int(value))
    return dt, v


def _full_infer(syms, types, attrs):
    if any(isinstance(v, str) for v in [attrs["value"]]):
        raise OpError("full: the value must be a number, true or false, not a symbol", arg="value")
    dims = tuple(syms.find(d) for d in attrs["shape"])
    if not dims:
        raise OpError("full: the shape needs at least one dimension (a scalar is a literal)", arg="shape")
    if any(isinstance(d, int) and d < 1 for d in dims):
        raise OpError(f"full: dimensions must be positive, got {list(attrs['shape'])}", arg="shape")
    dt, v = _value_dtype("full", attrs["value"], attrs["dtype"])
    return TensorType(dt, syms.resolve(dims)), {"shape": syms.resolve(dims), "value": v, "dtype": dt.name}


register_op(OpDef("full", "creation", (Arg("shape", "dims"), Arg("value", "scalar"), Arg("dtype", "dtype", None)),
                  _full_infer, lambda xs, a, out: np.full(out, a["value"]),
                  "a tensor of `shape` filled with `value`"))


def _full_like_infer(syms, types, attrs):
    (t,) = types
    if isinstance(attrs["value"], str):
        raise OpError("full_like: the value must be a number, true or false, not a symbol", arg="value")
    dt, v = _value_dtype("full_like", attrs["value"], attrs["dtype"] or t.dtype.name)
    return TensorType(dt, syms.resolve(t.shape)), {"value": v, "dtype": dt.name}


register_op(OpDef("full_like", "creation", (Arg("x", "tensor"), Arg("value", "scalar"), Arg("dtype", "dtype", None)),
                  _full_like_infer, lambda xs, a, out: np.full(out, a["value"]),
                  "a tensor of x's shape (and dtype, unless given) filled with `value`"))


def _arange_infer(syms, types, attrs):
    start, stop, step = attrs["start"], attrs["stop"], attrs["step"]
    if stop is None:
        start, stop = 0, start
    for name, v in (("start", start), ("stop", stop), ("step", step)):
        if not isinstance(v, str) and _kind(v) != "int":
            raise OpError(f"arange: '{name}' must be an integer or a symbol, got {v} (for floats, arange(n) "
                          "and arithmetic: cast(arange(n), f32) * 0.5)", arg=name)
    for name, v in (("start", start), ("step", step)):
        if isinstance(v, str):
            raise OpError(f"arange: '{name}' must be an integer (only the stop may be a symbol)", arg=name)
    if step == 0:
        raise OpError("arange: 'step' must not be 0", arg="step")
    if isinstance(stop, str):
        if start != 0 or step != 1:
            raise OpError(f"arange: a symbolic stop ({stop}) needs start 0 and step 1 (the extent must be the "
                          "symbol itself): write arange(N) and add or multiply after", arg="stop")
        n = syms.find(stop)
    else:
        n = max(0, math.ceil((stop - start) / step)) if abs(stop - start) < 2 ** 52 else (stop - start) // step
        if n < 1:
            raise OpError(f"arange({start}, {stop}, {step}) is empty; FDSL has no empty tensors", arg="stop")
    dt = DTYPES[attrs["dtype"]]
    if dt.is_bool:
        raise OpError("arange makes numbers, not bool", arg="dtype")
    if isinstance(n, int):
        for end in (start, start + (n - 1) * step):
            why = fit_error(end, dt)
            if why is not None:
                raise OpError(f"arange: {why}", arg="stop")
    # the extent is the type's (a symbol is unified later): the attributes are the first value and the step
    return TensorType(dt, (n,)), {"begin": start, "step": step, "dtype": dt.name}


register_op(OpDef("arange", "creation", (Arg("start", "scalar"), Arg("stop", "scalar", None), Arg("step", "scalar", 1),
                                         Arg("dtype", "dtype", "i64")),
                  _arange_infer,
                  lambda xs, a, out: np.asarray(a["begin"] + a["step"] * np.arange(out[0], dtype=np.int64)),
                  "start, start + step, ... below stop (NumPy's arange; one argument: the stop, from 0)"))
