"""Normalisations: softmax and log_softmax along an axis, layernorm and rmsnorm over a list of
axes with per-feature parameters, inference batchnorm over channel axis 1.

Each reference is the textbook formula the lowering decomposes (compiler/lowering/norm.py).
"""
from __future__ import annotations

import numpy as np

from ..shapes import OpError, broadcast_shapes, normalize_axes, normalize_axis
from ..types import TensorType
from .elementwise import const_like
from .registry import Arg, OpDef, register_op, require_float


def _softmax_ref(x, axis, log):
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    s = np.sum(e, axis=axis, keepdims=True)
    return (x - m - np.log(s)) if log else e * (const_like(x, 1) / s)


def _axis_infer(name: str):
    def infer(syms, types, attrs):
        (t,) = types
        require_float(t, name)
        return t.with_shape(syms.resolve(t.shape)), {"axis": normalize_axis(attrs["axis"], t.rank)}
    return infer


register_op(OpDef("softmax", "norm", (Arg("x", "tensor"), Arg("axis", "int", -1)), _axis_infer("softmax"),
                  lambda xs, a, out: _softmax_ref(xs[0], a["axis"], False), "exp(x - max) / sum(exp(x - max))"))
register_op(OpDef("log_softmax", "norm", (Arg("x", "tensor"), Arg("axis", "int", -1)), _axis_infer("log_softmax"),
                  lambda xs, a, out: _softmax_ref(xs[0], a["axis"], True), "x - max - log(sum(exp(x - max)))"))


def _affine_params_fit(syms, name, x: TensorType, params: list[tuple[int, TensorType]]) -> None:
    """Each per-feature parameter must share x's dtype and broadcast to exactly x's shape."""
    xs = syms.resolve(x.shape)
    for i, p in params:
        if p.dtype != x.dtype:
            raise OpError(f"{name}: {p} has dtype {p.dtype} but the input is {x.dtype}", arg=i)
        try:
            out = broadcast_shapes(syms, [xs, p.shape])
        except OpError as e:
            raise OpError(f"{name}: {p.with_shape(syms.resolve(p.shape))} does not fit the input "
                          f"{x.with_shape(xs)}: {e.message}", arg=i) from None
        if syms.resolve(out) != syms.resolve(xs):
            raise OpError(f"{name}: {p} would broadcast the input {x} to a larger shape", arg=i)


def _norm_infer(name: str, n_params: int):
    def infer(syms, types, attrs):
        x = types[0]
        require_float(x, name)
        _affine_params_fit(syms, name, x, list(enumerate(types))[1:1 + n_params])
        axes = normalize_axes(attrs["axis"], x.rank)
        return x.with_shape(syms.resolve(x.shape)), {"axis": axes, "eps": float(attrs["eps"])}
    return infer


def _layernorm_ref(xs, a, out=None):
    x, gamma, beta = xs
    mean = np.mean(x, axis=a["axis"], keepdims=True)
    d = x - mean
    var = np.mean(d * d, axis=a["axis"], keepdims=True)
    return d * (const_like(x, 1) / np.sqrt(var + const_like(x, a["eps"]))) * gamma + beta


def _rmsnorm_ref(xs, a, out=None):
    x, gamma = xs
    ms = np.mean(x * x, axis=a["axis"], keepdims=True)
    return x * (const_like(x, 1) / np.sqrt(ms + const_like(x, a["eps"]))) * gamma


register_op(OpDef("layernorm", "norm",
                  (Arg("x", "tensor"), Arg("gamma", "tensor"), Arg("beta", "tensor"),
                   Arg("axis", "axes", -1), Arg("eps", "float", 1e-5)),
                  _norm_infer("layernorm", 2), _layernorm_ref,
                  "(x - mean) / sqrt(var + eps) * gamma + beta, biased variance over axis"))
register_op(OpDef("rmsnorm", "norm",
                  (Arg("x", "tensor"), Arg("gamma", "tensor"), Arg("axis", "axes", -1), Arg("eps", "float", 1e-6)),
                  _norm_infer("rmsnorm", 1), _rmsnorm_ref, "x * rsqrt(mean(x*x) + eps) * gamma"))


def _batchnorm_infer(syms, types, attrs):
    x = types[0]
    require_float(x, "batchnorm")
    if x.rank < 2:
        raise OpError(f"batchnorm expects an input with a channel axis 1 (N, C, ...), got {x}", arg=0)
    c = x.shape[1]
    for i, p in enumerate(types[1:], start=1):
        if p.dtype != x.dtype:
            raise OpError(f"batchnorm: {p} has dtype {p.dtype} but the input is {x.dtype}", arg=i)
        if p.rank != 1 or not syms.unify(p.shape[0], c):
            raise OpError(f"batchnorm: {p} must be a vector of the {syms.find(c)} channels of "
                          f"{x.with_shape(syms.resolve(x.shape))}", arg=i)
    return x.with_shape(syms.resolve(x.shape)), {"eps": float(attrs["eps"])}


def _batchnorm_ref(xs, a, out=None):
    x, mean, var, gamma, beta = xs
    shape = (1, -1) + (1,) * (x.ndim - 2)
    mean, var, gamma, beta = (p.reshape(shape) for p in (mean, var, gamma, beta))
    return (x - mean) / np.sqrt(var + const_like(x, a["eps"])) * gamma + beta


register_op(OpDef("batchnorm", "norm",
                  (Arg("x", "tensor"), Arg("mean", "tensor"), Arg("var", "tensor", positive=True),
                   Arg("gamma", "tensor"), Arg("beta", "tensor"), Arg("eps", "float", 1e-5)),
                  _batchnorm_infer, _batchnorm_ref,
                  "inference batchnorm over channel axis 1: (x - mean) / sqrt(var + eps) * gamma + beta"))
