"""Contractions: matmul (batched, NumPy's broadcasting of the batch dims) and conv2d (NCHW input,
FCHW weights, optional bias; stride, padding and dilation per spatial axis; `groups` splits the
channels into groups convolved apart, PyTorch's semantics: weights [F, C / groups, KH, KW])."""
from __future__ import annotations

import numpy as np

from ..shapes import OpError, broadcast_shapes
from ..types import TensorType
from .registry import Arg, OpDef, register_op, require_float, require_numeric


def _matmul_infer(syms, types, attrs):
    a, b = types
    for i, t in enumerate(types):
        require_numeric(t, "matmul", i)
        if t.rank < 2:
            raise OpError(f"matmul expects operands of rank 2 or more, got {t}", arg=i)
    if a.dtype != b.dtype:
        raise OpError(f"cannot multiply {a} and {b}: dtypes differ ({a.dtype} vs {b.dtype})", arg=1)
    sa, sb = syms.resolve(a.shape), syms.resolve(b.shape)
    if not syms.unify(sa[-1], sb[-2]):
        raise OpError(f"cannot multiply {a.with_shape(sa)} and {b.with_shape(sb)}: inner dimensions differ "
                      f"({sa[-1]} vs {sb[-2]})", arg=1)
    try:
        batch = broadcast_shapes(syms, [sa[:-2], sb[:-2]])
    except OpError as e:
        raise OpError(f"cannot multiply {a} and {b}: batch dimensions "
                      f"{e.message.replace('shapes do not', 'do not')}", arg=1) from None
    return TensorType(a.dtype, batch + (syms.find(sa[-2]), syms.find(sb[-1]))), attrs


register_op(OpDef("matmul", "linalg", (Arg("a", "tensor"), Arg("b", "tensor")), _matmul_infer,
                  lambda xs, a, out: np.matmul(xs[0], xs[1]), "matrix product, batched with broadcast batch dims",
                  verb="multiply"))


def _conv_out(size: int, k: int, s: int, p: int, d: int) -> int:
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def _conv2d_infer(syms, types, attrs):
    x, w, bias = types
    require_float(x, "conv2d")
    if x.rank != 4:
        raise OpError(f"conv2d expects an NCHW input of rank 4, got {x}", arg=0)
    if w.rank != 4:
        raise OpError(f"conv2d expects FCHW weights of rank 4, got {w}", arg=1)
    if w.dtype != x.dtype:
        raise OpError(f"conv2d: weights {w} have dtype {w.dtype} but the input is {x.dtype}", arg=1)
    sx, sw = syms.resolve(x.shape), syms.resolve(w.shape)
    groups = attrs.get("groups", 1)
    if groups < 1:
        raise OpError(f"conv2d: groups must be positive, got {groups}", arg="groups")
    if groups == 1:
        if not syms.unify(sx[1], sw[1]):
            raise OpError(f"conv2d: the input has {sx[1]} channels but the weights {w.with_shape(sw)} "
                          f"expect {sw[1]}", arg=1)
    else:
        for what, d, i in (("input", sx[1], 0), ("weights' filter", sw[0], 1)):
            if isinstance(d, str):
                raise OpError(f"conv2d with groups={groups} needs a concrete {what} count, got the symbol {d} "
                              f"in {(x if i == 0 else w).with_shape(sx if i == 0 else sw)}", arg=i)
            if d % groups:
                raise OpError(f"conv2d: groups={groups} does not divide the {what} count {d} "
                              f"(of {(x if i == 0 else w).with_shape(sx if i == 0 else sw)})", arg="groups")
        if not syms.unify(sx[1] // groups, sw[1]):
            raise OpError(f"conv2d: the input has {sx[1]} channels in {groups} groups, {sx[1] // groups} per "
                          f"group, but the weights {w.with_shape(sw)} expect {sw[1]} per group "
                          f"(weights are [F, C / groups, KH, KW])", arg=1)
    for name in ("stride", "padding", "dilation"):
        lo = 0 if name == "padding" else 1
        if any(v < lo for v in attrs[name]):
            raise OpError(f"conv2d: {name} must be {'non-negative' if lo == 0 else 'positive'}, "
                          f"got {list(attrs[name])}", arg=name)
    spatial = []
    for i in (0, 1):
        size, k = sx[2 + i], sw[2 + i]
        if isinstance(size, str) or isinstance(k, str):
            raise OpError(f"conv2d needs concrete spatial sizes and kernel sizes, got input "
                          f"{x.with_shape(sx)} and weights {w.with_shape(sw)}", arg=0 if isinstance(size, str) else 1)
        out = _conv_out(size, k, attrs["stride"][i], attrs["padding"][i], attrs["dilation"][i])
        if out < 1:
            raise OpError(f"conv2d: the {'height' if i == 0 else 'width'} {size} (padding "
                          f"{attrs['padding'][i]}) is smaller than the dilated kernel "
                          f"{attrs['dilation'][i] * (k - 1) + 1}", arg=1)
        spatial.append(out)
    if bias is not None:
        if bias.dtype != x.dtype or bias.rank != 1 or not syms.unify(bias.shape[0], sw[0]):
            raise OpError(f"conv2d: bias must be {x.dtype}[{syms.find(sw[0])}] (one per output channel), "
                          f"got {bias}", arg=2)
    return TensorType(x.dtype, (syms.find(sx[0]), syms.find(sw[0]), *spatial)), attrs


def _conv2d_ref(xs, a, out=None):
    x, w, bias = xs
    (sh, sw), (ph, pw), (dh, dw) = a["stride"], a["padding"], a["dilation"]
    g = a.get("groups", 1)
    n, c, h, wd = x.shape
    f, cg, kh, kw = w.shape
    fg = f // g
    ho, wo = _conv_out(h, kh, sh, ph, dh), _conv_out(wd, kw, sw, pw, dw)
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    out = np.zeros((n, f, ho, wo), dtype=np.result_type(x.dtype, np.float32) if x.dtype.itemsize < 4 else x.dtype)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i * dh: i * dh + sh * (ho - 1) + 1: sh, j * dw: j * dw + sw * (wo - 1) + 1: sw]
            if g == 1:
                out += np.einsum("nchw,fc->nfhw", patch, w[:, :, i, j])
            else:       # group k: input channels k*cg.., filters k*fg..
                pg = patch.reshape(n, g, cg, ho, wo)
                wg = w[:, :, i, j].reshape(g, fg, cg)
                out += np.einsum("ngchw,gfc->ngfhw", pg, wg).reshape(n, f, ho, wo)
    if bias is not None:
        out += bias.reshape(1, -1, 1, 1)
    return out.astype(x.dtype)


register_op(OpDef("conv2d", "linalg",
                  (Arg("x", "tensor"), Arg("w", "tensor"), Arg("bias", "tensor?", None),
                   Arg("stride", "pair", 1), Arg("padding", "pair", 0), Arg("dilation", "pair", 1),
                   Arg("groups", "int", 1)),
                  _conv2d_infer, _conv2d_ref, "2-D convolution, NCHW input, FCHW weights, optional bias, "
                  "grouped or depthwise with groups"))
