"""Shape ops: transpose (the last two axes), permute, reshape (one -1 allowed; a symbolic extent
moves as a whole) and broadcast_to."""
from __future__ import annotations

import numpy as np

from ..shapes import OpError, normalize_axis
from .registry import Arg, OpDef, register_op


def _transpose_infer(syms, types, attrs):
    (t,) = types
    if t.rank < 2:
        raise OpError(f"transpose swaps the last two axes and needs rank 2 or more, got {t}", arg=0)
    s = syms.resolve(t.shape)
    return t.with_shape(s[:-2] + (s[-1], s[-2])), attrs


register_op(OpDef("transpose", "shape", (Arg("x", "tensor"),), _transpose_infer,
                  lambda xs, a, out: np.swapaxes(xs[0], -1, -2), "swap the last two axes"))


def _permute_infer(syms, types, attrs):
    (t,) = types
    perm = attrs["perm"]
    if len(perm) != t.rank:
        raise OpError(f"permute: {list(perm)} has {len(perm)} axes but {t} has rank {t.rank}", arg="perm")
    norm = tuple(normalize_axis(p, t.rank) for p in perm)
    if sorted(norm) != list(range(t.rank)):
        raise OpError(f"permute: {list(perm)} is not a permutation of the axes 0..{t.rank - 1}", arg="perm")
    s = syms.resolve(t.shape)
    return t.with_shape(tuple(s[p] for p in norm)), {"perm": norm}


register_op(OpDef("permute", "shape", (Arg("x", "tensor"), Arg("perm", "perm")), _permute_infer,
                  lambda xs, a, out: np.transpose(xs[0], a["perm"]), "reorder axes"))


def _monomial(shape) -> tuple[int, tuple[str, ...]]:
    coef, syms = 1, []
    for d in shape:
        if isinstance(d, int):
            coef *= d
        else:
            syms.append(d)
    return coef, tuple(sorted(syms))


def _fmt_mono(coef: int, syms: tuple[str, ...]) -> str:
    parts = ([str(coef)] if coef != 1 or not syms else []) + list(syms)
    return "*".join(parts)


def _reshape_infer(syms, types, attrs):
    (t,) = types
    src = syms.resolve(t.shape)
    dims = [syms.find(d) for d in attrs["shape"]]
    if sum(1 for d in dims if d == -1) > 1:
        raise OpError("reshape: only one dimension may be -1", arg="shape")
    if any(isinstance(d, int) and d < 1 and d != -1 for d in dims):
        raise OpError(f"reshape: dimensions must be positive (or one -1), got {attrs['shape']}", arg="shape")
    have_c, have_s = _monomial(src)
    known = [d for d in dims if d != -1]
    want_c, want_s = _monomial(known)
    if -1 in dims:
        rest = list(have_s)
        for s in want_s:
            if s not in rest:
                raise OpError(f"reshape: cannot take {_fmt_mono(want_c, want_s)} elements out of "
                              f"{t.with_shape(src)}", arg="shape")
            rest.remove(s)
        if have_c % want_c:
            raise OpError(f"reshape: {t.with_shape(src)} has {_fmt_mono(have_c, have_s)} elements, "
                          f"not divisible by {_fmt_mono(want_c, want_s)}", arg="shape")
        c = have_c // want_c
        if rest and (c != 1 or len(rest) > 1):
            raise OpError(f"reshape: the -1 dimension would be {_fmt_mono(c, tuple(rest))}; a dimension "
                          "must be a number or a single symbol", arg="shape")
        dims[dims.index(-1)] = rest[0] if rest else c
    elif (have_c, have_s) != (want_c, want_s):
        raise OpError(f"reshape: cannot reshape {t.with_shape(src)} ({_fmt_mono(have_c, have_s)} elements) "
                      f"to {dims} ({_fmt_mono(want_c, want_s)} elements)", arg="shape")
    return t.with_shape(dims), {"shape": tuple(dims)}


register_op(OpDef("reshape", "shape", (Arg("x", "tensor"), Arg("shape", "dims")), _reshape_infer,
                  lambda xs, a, out: np.reshape(xs[0], out), "same elements, new shape (one -1 allowed)"))


def _broadcast_to_infer(syms, types, attrs):
    (t,) = types
    dims = tuple(syms.find(d) for d in attrs["shape"])
    if any(isinstance(d, int) and d < 1 for d in dims):
        raise OpError(f"broadcast_to: dimensions must be positive, got {list(attrs['shape'])}", arg="shape")
    if len(dims) < t.rank:
        raise OpError(f"broadcast_to: cannot broadcast {t} to fewer dimensions {list(dims)}", arg="shape")
    src = syms.resolve(t.shape)
    for s, d in zip(src[::-1], dims[::-1]):
        if s != 1 and not syms.unify(s, d):
            raise OpError(f"broadcast_to: cannot broadcast {t.with_shape(src)} to {list(dims)} "
                          f"({s} vs {d})", arg="shape")
    return t.with_shape(syms.resolve(dims)), {"shape": syms.resolve(dims)}


register_op(OpDef("broadcast_to", "shape", (Arg("x", "tensor"), Arg("shape", "dims")), _broadcast_to_infer,
                  lambda xs, a, out: np.broadcast_to(xs[0], out).copy(), "NumPy broadcasting to a shape"))
