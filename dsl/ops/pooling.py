"""Pooling over the spatial axes of NCHW tensors, with PyTorch's semantics: max_pool2d and
avg_pool2d (kernel, stride (default: the kernel), padding, dilation for max, ceil_mode, and
count_include_pad for avg) and adaptive_avg_pool2d (torch's windows: rows floor(i*H/oh) to
ceil((i+1)*H/oh)). Max pooling is the IEEE maximum of the window, as FDSL's `max` reduction:
NaN if the window holds one, +0 over -0; padding reads as -inf, so it never wins. See
docs/FDSL.md (pooling).
"""
from __future__ import annotations

import numpy as np

from ..shapes import OpError
from ..types import TensorType
from .reduction import REDUCTIONS
from .registry import Arg, OpDef, register_op, require_float

_AXES = ("height", "width")


def pool_out(size: int, k: int, s: int, p: int, d: int, ceil: bool) -> int:
    """torch's pooling_output_shape: floor (or ceil) of the windows that fit; in ceil mode the
    last window must start inside the input or the left padding."""
    span = size + 2 * p - d * (k - 1) - 1
    out = (span + (s - 1 if ceil else 0)) // s + 1
    if ceil and (out - 1) * s >= size + p:
        out -= 1
    return out


def pool_extra(size: int, k: int, s: int, p: int, d: int, out: int) -> int:
    """The padding past the right padding that ceil mode's last window reads (0 without it)."""
    return max(0, (out - 1) * s + d * (k - 1) + 1 - (size + 2 * p))


def _spatial(syms, x: TensorType, op: str) -> tuple:
    require_float(x, op)
    if x.rank != 4:
        raise OpError(f"{op} expects an NCHW input of rank 4, got {x}", arg=0)
    sx = syms.resolve(x.shape)
    if isinstance(sx[2], str) or isinstance(sx[3], str):
        raise OpError(f"{op} needs concrete spatial sizes, got {x.with_shape(sx)}", arg=0)
    return sx


def _window_infer(op: str, dilated: bool):
    def infer(syms, types, attrs):
        (x,) = types
        sx = _spatial(syms, x, op)
        attrs = dict(attrs)
        kernel = tuple(attrs["kernel"])
        if attrs["stride"] in (None, (None, None)):
            attrs["stride"] = kernel
        names = ("kernel", "stride", "padding") + (("dilation",) if dilated else ())
        for name in names:
            lo = 0 if name == "padding" else 1
            if any(v < lo for v in attrs[name]):
                raise OpError(f"{op}: {name} must be {'non-negative' if lo == 0 else 'positive'}, "
                              f"got {list(attrs[name])}", arg=name)
        dilation = attrs["dilation"] if dilated else (1, 1)
        spatial = []
        for i in (0, 1):
            k, s, p, d = kernel[i], attrs["stride"][i], attrs["padding"][i], dilation[i]
            eff = d * (k - 1) + 1
            if p > eff // 2:
                what = "the dilated kernel" if dilated and d > 1 else "the kernel"
                raise OpError(f"{op}: the {_AXES[i]} padding {p} is more than half of {what} {eff} "
                              f"(at most {eff // 2}, as PyTorch)", arg="padding")
            size = sx[2 + i]
            out = pool_out(size, k, s, p, d, attrs["ceil_mode"])
            if out < 1:
                raise OpError(f"{op}: the {_AXES[i]} {size} (padding {p}) is smaller than {'the dilated kernel' if d > 1 else 'the kernel'} "
                              f"{eff}", arg="kernel")
            spatial.append(out)
        if dilated:
            attrs["dilation"] = tuple(dilation)
        return TensorType(x.dtype, (sx[0], sx[1], *spatial)), attrs
    return infer


def _windows(x: np.ndarray, a: dict, out_shape, fill: float) -> np.ndarray:
    """x padded with `fill` (padding and ceil mode's overhang) and cut into windows:
    [n, c, oh, ow, kh * kw]."""
    (kh, kw), (sh, sw), (ph, pw) = a["kernel"], a["stride"], a["padding"]
    dh, dw = a.get("dilation", (1, 1))
    oh, ow = out_shape[2], out_shape[3]
    h, w = x.shape[2], x.shape[3]
    eh, ew = pool_extra(h, kh, sh, ph, dh, oh), pool_extra(w, kw, sw, pw, dw, ow)
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph + eh), (pw, pw + ew)), constant_values=fill)
    parts = [xp[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw]
             for i in range(kh) for j in range(kw)]
    return np.stack(parts, axis=-1)


def _max_pool_ref(xs, a, out_shape):
    x = xs[0]
    win = _windows(x, a, out_shape, -np.inf)
    return np.asarray(REDUCTIONS["max"][0](win, axis=-1, keepdims=False), dtype=x.dtype)


def avg_divisor(size: int, k: int, s: int, p: int, out: int, include_pad: bool) -> np.ndarray:
    """torch's divisor per output position along one axis: the window clipped to the padded
    input (count_include_pad), or to the input itself."""
    start = np.arange(out) * s - p
    end = np.minimum(start + k, size + p)
    if include_pad:
        return end - start
    return np.minimum(end, size) - np.maximum(start, 0)


def _avg_pool_ref(xs, a, out_shape):
    x = xs[0]
    win = _windows(x, a, out_shape, 0.0)
    total = win.sum(axis=-1)
    (kh, kw), (sh, sw), (ph, pw) = a["kernel"], a["stride"], a["padding"]
    inc = a["count_include_pad"]
    dh = avg_divisor(x.shape[2], kh, sh, ph, out_shape[2], inc)
    dw = avg_divisor(x.shape[3], kw, sw, pw, out_shape[3], inc)
    return (total / (dh[:, None] * dw[None, :]).astype(total.dtype)).astype(x.dtype)


register_op(OpDef("max_pool2d", "pooling",
                  (Arg("x", "tensor"), Arg("kernel", "pair"), Arg("stride", "pair", None), Arg("padding", "pair", 0),
                   Arg("dilation", "pair", 1), Arg("ceil_mode", "bool", False)),
                  _window_infer("max_pool2d", True), _max_pool_ref,
                  "2-D max pooling of an NCHW tensor (torch.nn.functional.max_pool2d; padding is -inf)"))

register_op(OpDef("avg_pool2d", "pooling",
                  (Arg("x", "tensor"), Arg("kernel", "pair"), Arg("stride", "pair", None), Arg("padding", "pair", 0),
                   Arg("ceil_mode", "bool", False), Arg("count_include_pad", "bool", True)),
                  _window_infer("avg_pool2d", False), _avg_pool_ref,
                  "2-D average pooling of an NCHW tensor (torch.nn.functional.avg_pool2d)"))


def adaptive_windows(size: int, out: int) -> list[tuple[int, int]]:
    """torch's adaptive pooling windows along one axis: [floor(i*size/out), ceil((i+1)*size/out))."""
    return [((i * size) // out, -(-((i + 1) * size) // out)) for i in range(out)]


def _adaptive_infer(syms, types, attrs):
    (x,) = types
    op = "adaptive_avg_pool2d"
    sx = _spatial(syms, x, op)
    size = tuple(attrs["output_size"])
    if any(v < 1 for v in size):
        raise OpError(f"{op}: output_size must be positive, got {list(size)}", arg="output_size")
    return TensorType(x.dtype, (sx[0], sx[1], *size)), attrs


def _adaptive_ref(xs, a, out_shape):
    x = xs[0]
    n, c, h, w = x.shape
    out = np.empty((n, c, out_shape[2], out_shape[3]), dtype=x.dtype)
    for i, (h0, h1) in enumerate(adaptive_windows(h, out_shape[2])):
        for j, (w0, w1) in enumerate(adaptive_windows(w, out_shape[3])):
            out[:, :, i, j] = x[:, :, h0:h1, w0:w1].mean(axis=(2, 3))
    return out


register_op(OpDef("adaptive_avg_pool2d", "pooling",
                  (Arg("x", "tensor"), Arg("output_size", "pair")), _adaptive_infer, _adaptive_ref,
                  "average pooling of an NCHW tensor to a given spatial size (torch.nn.functional."
                  "adaptive_avg_pool2d); output_size=1 is global average pooling"))
