"""Indexing ops: slices, concat and split, gather and embedding. A slice is built by the checker
from a subscript, with typed attributes per input axis (`start`: an int, or (SYMBOL, OFFSET) for
SYMBOL + OFFSET; `step`: a non-zero int; `drop`: axes an integer index removes). Bounds never
clamp: a bound outside the axis is an error at compile time, or at run time for a symbolic
extent (bind_slice_errors, through dsl/binding.py). split is desugared by the checker into one
slice per part (DESUGARED). See docs/FDSL.md (slices).
"""
from __future__ import annotations

import numpy as np

from ..shapes import OpError, Symbols, broadcast_shapes, normalize_axis
from ..types import TensorType
from .registry import Arg, OpDef, register_op

Bound = int | str | None          # a slice bound as written: an integer, a symbol, or omitted


class IndexRangeError(Exception):
    """A gather index outside its axis, found while running the reference (a user error at the op)."""


def _pos(value, extent) -> tuple:
    """A position as (SYMBOL or None, OFFSET): an absolute int is (None, n); SYMBOL + n, (SYMBOL, n)."""
    if isinstance(value, str):
        return (value, 0)
    if value < 0:
        return (None, extent + value) if isinstance(extent, int) else (extent, value)
    return (None, value)


def _pos_attr(p: tuple):
    return p[1] if p[0] is None else p


def position(p, binding: dict[str, int]) -> int:
    """A slice's `start` (an int or (SYMBOL, OFFSET)) under a binding."""
    if isinstance(p, tuple):
        return binding[p[0]] + p[1]
    return p


def _diff(a: tuple, b: tuple) -> tuple[dict, int]:
    """a - b for positions: (symbol coefficients, constant)."""
    coef: dict[str, int] = {}
    for sym, sign in ((a[0], 1), (b[0], -1)):
        if sym is not None:
            coef[sym] = coef.get(sym, 0) + sign
    return {s: c for s, c in coef.items() if c}, a[1] - b[1]


def _show_lin(coef: dict, const: int) -> str:
    parts = [("" if c == 1 else "-" if c == -1 else f"{c}*") + s for s, c in coef.items()]
    text = " + ".join(parts).replace("+ -", "- ")
    if const or not parts:
        text = f"{text} {'+' if const >= 0 else '-'} {abs(const)}" if parts else str(const)
    return text


def _slice_axis(syms: Symbols, axis: int, extent, item) -> tuple:
    """One subscript item on one axis -> (start, step, result extent or None if dropped)."""
    if item[0] == "at":
        i = item[1]
        if isinstance(extent, int) and not -extent <= i < extent:
            raise OpError(f"index {i} is out of range for axis {axis} of extent {extent}", arg=axis)
        return _pos_attr(_pos(i, extent)), 1, None
    _, start, stop, step = item
    step = 1 if step is None else step
    if step == 0:
        raise OpError(f"the step of axis {axis} is 0; a step must be a non-zero integer", arg=axis)
    for b in (start, stop):
        if isinstance(b, int) and isinstance(extent, int) and not -extent <= b <= extent:
            raise OpError(f"the bound {b} is outside axis {axis} of extent {extent} (slices do not clamp: "
                          f"bounds go from {-extent} to {extent})", arg=axis)
        if isinstance(b, str) and isinstance(extent, int):
            raise OpError(f"the bound {b} is a symbol but axis {axis} has the fixed extent {extent}", arg=axis)
    end = (extent, 0) if isinstance(extent, str) else (None, extent)
    first = _pos(start, extent) if start is not None else ((None, 0) if step > 0 else (end[0], end[1] - 1))
    last = _pos(stop, extent) if stop is not None else (end if step > 0 else (None, -1))
    coef, const = _diff(last, first)
    if not coef:
        n = max(0, -(-const // step))                # ceil(const / step): len(range(first, last, step))
        if n == 0:
            raise OpError(f"axis {axis} would be empty (the slice takes no element of it); "
                          "a dimension must be positive", arg=axis)
        return _pos_attr(first), step, n
    sign = 1 if step > 0 else -1
    count = {sym: c * sign for sym, c in coef.items()}
    if list(count.values()) != [1] or abs(step) != 1 or const != 0:
        shown = _show_lin(count, const * sign)
        shown = shown if abs(step) == 1 else f"({shown}) / {abs(step)}, rounded up,"
        raise OpError(f"the slice of axis {axis} keeps {shown} elements; a dimension must be a number or a "
                      "single symbol", arg=axis)
    return _pos_attr(first), step, syms.find(next(iter(count)))


def slice_type(syms: Symbols, t: TensorType, items: list) -> tuple[TensorType, dict]:
    """The result of subscripting `t` with `items`, one per axis (an ellipsis already expanded):
    ("at", i) an integer index, ("range", start, stop, step) a slice with Bound parts."""
    shape = syms.resolve(t.shape)
    if len(items) != len(shape):
        raise AssertionError("slice_type needs one item per axis")
    starts, steps, drop, out = [], [], [], []
    for axis, (extent, item) in enumerate(zip(shape, items)):
        start, step, n = _slice_axis(syms, axis, extent, item)
        starts.append(start)
        steps.append(step)
        if n is None:
            drop.append(axis)
        else:
            out.append(n)
    return t.with_shape(out), {"start": tuple(starts), "step": tuple(steps), "drop": tuple(drop)}


def _slice_ref(xs, a, out_shape):
    x = xs[0]
    index = []
    for axis, (start, step) in enumerate(zip(a["start"], a["step"])):
        start = position(start, a.get("binding", {}))
        if axis in a["drop"]:
            index.append(start)
            continue
        n = out_shape[len(index) - sum(1 for d in a["drop"] if d < axis)]
        stop = start + step * n
        index.append(slice(start, stop if stop >= 0 else None, step))
    return x[tuple(index)]


def bind_slice_errors(start: tuple, step: tuple, drop: tuple, in_shape, out_shape, binding) -> list[str]:
    """Why a slice does not fit its input under a binding (empty: it fits). Only a symbolic
    extent or bound can fail here; the checker refused every static misfit."""
    errors, k = [], 0
    for axis, (p, s) in enumerate(zip(start, step)):
        extent = in_shape[axis]
        first = position(p, binding)
        n = 1 if axis in drop else out_shape[k]
        k += axis not in drop
        last = first + s * (n - 1)
        if not (0 <= first < extent and 0 <= last < extent):
            what = "index" if axis in drop else "slice"
            lo, hi = min(first, last), max(first, last)
            errors.append(f"the {what} of axis {axis} reads elements {lo} to {hi} but the axis has {extent} "
                          f"under this binding")
    return errors


def _slice_infer(syms, types, attrs):
    return slice_type(syms, types[0], list(attrs["items"]))


register_op(OpDef("slice", "shape", (Arg("x", "tensor"), Arg("items", "subscript")), _slice_infer, _slice_ref,
                  "x[a:b:s, ..., i]: a strided window of x; an integer index removes its axis"))


def _concat_infer(syms, types, attrs):
    if not types:
        raise OpError("concat needs at least one tensor", arg=0)
    first = types[0]
    if first.rank == 0:
        raise OpError(f"concat joins tensors along an axis and needs rank 1 or more, got {first}", arg=0)
    axis = normalize_axis(attrs["axis"], first.rank)
    for i, t in enumerate(types[1:], start=1):
        if t.dtype != first.dtype:
            raise OpError(f"concat: {t} has dtype {t.dtype} but the first tensor is {first.dtype}; "
                          f"convert with cast(x, {first.dtype})", arg=i)
        if t.rank != first.rank:
            raise OpError(f"concat: {t} has rank {t.rank} but the first tensor {first} has rank {first.rank}", arg=i)
        for d, (a, b) in enumerate(zip(syms.resolve(first.shape), syms.resolve(t.shape))):
            if d != axis and not syms.unify(a, b):
                raise OpError(f"concat: {t.with_shape(syms.resolve(t.shape))} does not fit "
                              f"{first.with_shape(syms.resolve(first.shape))} at axis {d} ({b} vs {a}); "
                              f"only axis {axis} may differ", arg=i)
    extents = [syms.find(t.shape[axis]) for t in types]
    if len(extents) == 1:
        total = extents[0]
    elif all(isinstance(e, int) for e in extents):
        total = sum(extents)
    else:
        coef: dict = {}
        for e in extents:
            if isinstance(e, str):
                coef[e] = coef.get(e, 0) + 1
        raise OpError(f"concat: axis {axis} would have {_show_lin(coef, sum(e for e in extents if isinstance(e, int)))}"
                      " elements; a dimension must be a number or a single symbol", arg=0)
    shape = list(syms.resolve(first.shape))
    shape[axis] = total
    return first.with_shape(shape), {"axis": axis}


register_op(OpDef("concat", "shape", (Arg("xs", "tensors"), Arg("axis", "int", 0)), _concat_infer,
                  lambda xs, a, out: np.concatenate(xs, axis=a["axis"]),
                  "join tensors along an axis (the others must agree)"))


def split_types(syms: Symbols, t: TensorType, sizes: tuple, axis: int) -> list[tuple[TensorType, dict]]:
    """split(x, sizes, axis) as slices: each part's type and slice attributes."""
    if t.rank == 0:
        raise OpError(f"split cuts a tensor along an axis and needs rank 1 or more, got {t}", arg=0)
    axis = normalize_axis(axis, t.rank)
    extent = syms.find(t.shape[axis])
    if not sizes:
        raise OpError("split needs at least one size", arg="sizes")
    if any(s == 0 or (s < 0 and s != -1) for s in sizes if isinstance(s, int)):
        raise OpError(f"split: sizes must be positive (or one -1), got {list(sizes)}", arg="sizes")
    if sum(1 for s in sizes if s == -1) > 1:
        raise OpError("split: only one size may be -1", arg="sizes")
    known = [s for s in sizes if s != -1]
    if isinstance(extent, int):
        if any(isinstance(s, str) for s in known):
            raise OpError(f"split: a size is a symbol but axis {axis} has the fixed extent {extent}", arg="sizes")
        rest = extent - sum(known)
        if (-1 in sizes and rest < 1) or (-1 not in sizes and rest != 0):
            raise OpError(f"split: the sizes {list(sizes)} do not add up to the extent {extent} of axis {axis}",
                          arg="sizes")
        sizes = tuple(rest if s == -1 else s for s in sizes)
    elif sizes != (extent,) and sizes != (-1,):
        raise OpError(f"split: axis {axis} has the symbolic extent {extent}; the parts' extents would not be "
                      "numbers or single symbols (split a dimension of fixed extent)", arg="sizes")
    else:
        sizes = (extent,)
    parts, at = [], 0
    for s in sizes:
        items = [("range", None, None, None)] * t.rank
        items[axis] = ("range", at, None if isinstance(s, str) else at + s, 1)
        if isinstance(s, int) and isinstance(extent, int) and at + s == extent:
            items[axis] = ("range", at, None, 1)
        parts.append(slice_type(syms, t, items))
        at += s if isinstance(s, int) else 0
    return parts


# ops the checker rewrites into others: no node of theirs reaches a typed chain
DESUGARED = {"split": "the checker binds each part as a slice"}


def _split_infer(syms, types, attrs):
    parts = split_types(syms, types[0], tuple(attrs["sizes"]), attrs["axis"])
    return tuple(t for t, _ in parts), {"parts": tuple(a for _, a in parts)}


register_op(OpDef("split", "shape", (Arg("x", "tensor"), Arg("sizes", "dims"), Arg("axis", "int", 0)), _split_infer,
                  lambda xs, a, out: None,
                  "cut x along an axis into parts of the given sizes (one -1 allowed); bind the parts with "
                  "`a, b = split(...)`"))


def _index_dtype(t: TensorType, op: str, i: int) -> None:
    if t.dtype.name not in ("i32", "i64"):
        raise OpError(f"{op} expects integer indices (i32 or i64), got {t}", arg=i)


def _gather_infer(syms, types, attrs):
    table, idx = types
    if table.rank == 0:
        raise OpError(f"gather reads rows of a tensor and needs rank 1 or more, got {table}", arg=0)
    _index_dtype(idx, "gather", 1)
    axis = normalize_axis(attrs["axis"], table.rank)
    s = syms.resolve(table.shape)
    return table.with_shape(s[:axis] + syms.resolve(idx.shape) + s[axis + 1:]), {"axis": axis}


def _gather_ref(xs, a, out=None):
    table, idx = xs
    axis = a["axis"]
    n = table.shape[axis]
    bad = (idx < 0) | (idx >= n)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise IndexRangeError(f"index {int(idx[where] if idx.ndim else idx)} at {list(where)} is outside axis "
                              f"{axis} of extent {n} (indices go from 0 to {n - 1})")
    return np.take(table, idx, axis=axis)


register_op(OpDef("gather", "index", (Arg("table", "tensor"), Arg("idx", "tensor"), Arg("axis", "int", 0)),
                  _gather_infer, _gather_ref,
                  "the slices of table at integer indices along an axis (np.take); indices from 0 to n-1"))


def _embedding_infer(syms, types, attrs):
    table, ids = types
    if table.rank != 2:
        raise OpError(f"embedding expects a table of rank 2 [rows, features], got {table}", arg=0)
    _index_dtype(ids, "embedding", 1)
    s = syms.resolve(table.shape)
    return table.with_shape(syms.resolve(ids.shape) + s[1:]), {"axis": 0}


register_op(OpDef("embedding", "index", (Arg("table", "tensor"), Arg("ids", "tensor")), _embedding_infer,
                  _gather_ref, "rows of a [rows, features] table at integer ids: gather(table, ids, axis=0)"))


# ---- take_along_axis and gather_nd (issue 38: torch.gather / GatherElements, index.Tensor / GatherND)

def wrap_indices(idx: np.ndarray, n: int, axis: int, at=None) -> np.ndarray:
    """idx with a negative index counted once from the end (NumPy's rule), or IndexRangeError
    naming the first index outside [-n, n); `at` names the index's place in messages
    (default: its position in idx)."""
    idx = np.asarray(idx)
    bad = (idx < -n) | (idx >= n)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        place = at(where) if at else list(where)
        raise IndexRangeError(f"index {int(idx[where] if idx.ndim else idx)} at {place} is outside axis {axis} of "
                              f"extent {n} (indices go from {-n} to {n - 1})")
    return np.where(idx < 0, idx + n, idx)


def _take_along_axis_infer(syms, types, attrs):
    x, idx = types
    if x.rank == 0:
        raise OpError(f"take_along_axis reads along an axis and needs rank 1 or more, got {x}", arg=0)
    _index_dtype(idx, "take_along_axis", 1)
    if idx.rank != x.rank:
        raise OpError(f"take_along_axis expects indices of x's rank {x.rank}, got {idx} (rank {idx.rank}); "
                      "add unit axes with reshape", arg=1)
    axis = normalize_axis(attrs["axis"], x.rank)
    xs, js = list(syms.resolve(x.shape)), list(syms.resolve(idx.shape))
    others = [tuple(1 if d == axis else e for d, e in enumerate(s)) for s in (xs, js)]
    try:
        out = list(broadcast_shapes(syms, others))
    except OpError as e:
        raise OpError(f"take_along_axis: x {x} and the indices {idx} differ on an axis other than {axis}: "
                      f"{e.message}; the other axes broadcast as NumPy's", arg=e.arg) from None
    out[axis] = syms.find(idx.shape[axis])
    return x.with_shape(out), {"axis": axis}


def _take_along_axis_ref(xs, a, out=None):
    x, idx = xs
    axis = a["axis"]
    return np.take_along_axis(x, wrap_indices(idx, x.shape[axis], axis), axis=axis)


register_op(OpDef("take_along_axis", "index", (Arg("x", "tensor"), Arg("idx", "tensor"), Arg("axis", "int")),
                  _take_along_axis_infer, _take_along_axis_ref,
                  "x at integer indices along an axis, one per result element (np.take_along_axis, torch.gather, "
                  "ONNX GatherElements); the other axes broadcast; indices from -n to n-1"))


def _gather_nd_infer(syms, types, attrs):
    x, idx = types
    _index_dtype(idx, "gather_nd", 1)
    b = attrs["batch_dims"]
    if idx.rank == 0:
        raise OpError(f"gather_nd expects indices of rank 1 or more (the last axis holds one position), got {idx}",
                      arg=1)
    if not isinstance(b, int) or b < 0 or b >= min(x.rank, idx.rank):
        raise OpError(f"gather_nd: batch_dims={b} must be from 0 to {min(x.rank, idx.rank) - 1} (less than the "
                      f"ranks of x, {x.rank}, and of the indices, {idx.rank})", arg="batch_dims")
    xs, js = list(syms.resolve(x.shape)), list(syms.resolve(idx.shape))
    k = js[-1]
    if not isinstance(k, int):
        raise OpError(f"gather_nd: the last axis of the indices {idx} says how many axes of x each index reads; it "
                      f"must be a number, got the symbol {k}", arg=1)
    if not 1 <= k <= x.rank - b:
        raise OpError(f"gather_nd: each index has {k} positions (the last axis of {idx}) but x {x} with "
                      f"batch_dims={b} has {x.rank - b} to index; it must be from 1 to {x.rank - b}", arg=1)
    for d in range(b):
        if not syms.unify(xs[d], js[d]):
            raise OpError(f"gather_nd: batch axis {d} of the indices {idx} ({js[d]}) differs from x's {x} "
                          f"({xs[d]}); the batch axes must agree", arg=1)
    return x.with_shape(syms.resolve(idx.shape)[:-1] + syms.resolve(x.shape)[b + k:]), {"batch_dims": b}


def gather_nd_positions(x_shape, idx: np.ndarray, b: int) -> tuple:
    """The advanced-indexing tuple of gather_nd: the batch axes as broadcast aranges, then each
    position of the last axis of idx, wrapped (IndexRangeError for one outside its axis)."""
    lead = idx.shape[:-1]
    pos = []
    for d in range(b):
        shape = [1] * len(lead)
        shape[d] = lead[d]
        pos.append(np.arange(lead[d]).reshape(shape))
    for j in range(idx.shape[-1]):
        pos.append(wrap_indices(idx[..., j], x_shape[b + j], b + j, at=lambda w, j=j: list(w) + [j]))
    return tuple(pos)


def _gather_nd_ref(xs, a, out=None):
    x, idx = xs
    return x[gather_nd_positions(x.shape, np.asarray(idx), a["batch_dims"])]


register_op(OpDef("gather_nd", "index", (Arg("x", "tensor"), Arg("idx", "tensor"), Arg("batch_dims", "int", 0)),
                  _gather_nd_infer, _gather_nd_ref,
                  "x at positions along its leading axes: the last axis of idx holds one position per indexed "
                  "axis (ONNX GatherND, x[idx[..., 0], idx[..., 1], ...]); indices from -n to n-1"))


def index_layout(x_rank: int, axes: tuple, s: int) -> tuple[int, list[int]]:
    """Where NumPy's advanced indexing puts the result's axes: (the first of the s broadcast
    index axes, the result axis of each axis of x that no index takes, in order). The index
    axes replace the indexed ones where those are consecutive, and lead otherwise."""
    together = list(axes) == list(range(axes[0], axes[0] + len(axes)))
    first = axes[0] if together else 0
    kept = [d for d in range(x_rank) if d not in axes]
    return first, [(d if d < first else d - len(axes) + s) if together else s + k for k, d in enumerate(kept)]


def _index_infer(syms, types, attrs):
    x, idxs = types[0], types[1:]
    if x.rank == 0:
        raise OpError(f"index reads positions of a tensor and needs rank 1 or more, got {x}", arg=0)
    for j, t in enumerate(idxs, start=1):
        _index_dtype(t, "index", j)
    axes = attrs["axes"]
    axes = tuple(range(len(idxs))) if axes is None else ((axes,) if isinstance(axes, int) else tuple(axes))
    if len(axes) != len(idxs):
        raise OpError(f"index has {len(idxs)} index tensors but {len(axes)} axes; give one axis per index "
                      "tensor", arg="axes")
    if len(idxs) > x.rank:
        raise OpError(f"index has {len(idxs)} index tensors for x {x} of rank {x.rank}", arg=len(idxs))
    axes = tuple(normalize_axis(a, x.rank, "axes") for a in axes)
    if any(b <= a for a, b in zip(axes, axes[1:])):
        raise OpError(f"index: the axes {list(axes)} must be increasing, one per index tensor in x's order",
                      arg="axes")
    try:
        s = list(broadcast_shapes(syms, [syms.resolve(t.shape) for t in idxs]))
    except OpError as e:
        raise OpError(f"index: the index tensors do not broadcast together: {e.message}",
                      arg=1 + e.arg if isinstance(e.arg, int) else None) from None
    xs = list(syms.resolve(x.shape))
    first, kept_at = index_layout(x.rank, axes, len(s))
    out = [None] * (x.rank - len(axes) + len(s))
    out[first:first + len(s)] = s
    for d, at in zip([d for d in range(x.rank) if d not in axes], kept_at):
        out[at] = xs[d]
    return x.with_shape(out), {"axes": axes}


def _index_ref(xs, a, out=None):
    x, idxs = xs[0], xs[1:]
    items = [slice(None)] * x.ndim
    for t, d in zip(idxs, a["axes"]):
        items[d] = wrap_indices(t, x.shape[d], d)
    return x[tuple(items)]


register_op(OpDef("index", "index", (Arg("x", "tensor"), Arg("idxs", "tensors"), Arg("axes", "axes", None)),
                  _index_infer, _index_ref,
                  "x[i0, :, i2]: NumPy's advanced indexing (torch's index.Tensor) of the axes `axes` of x by "
                  "the index tensors, broadcast together; indices from -n to n-1"))
