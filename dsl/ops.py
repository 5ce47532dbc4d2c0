"""The op table: each FDSL operator's signature, shape/dtype rule and NumPy semantics, together.

One op, one place. `infer(ctx, types, attrs)` gets the tensor arguments' types (in signature
order, None for an omitted optional tensor) and the static attributes, and returns the result
type and the normalised attributes; it raises OpError naming the argument to blame.
`ref(xs, attrs, out_shape)` computes the op with NumPy on arrays already in the compute dtype
(out_shape: the concrete result shape, symbols bound; attrs["binding"]: the symbols' extents).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .shapes import OpError, Symbols, broadcast_shapes, normalize_axes, normalize_axis
from .types import BOOL, DTYPES, DType, TensorType

REQUIRED = object()


@dataclass(frozen=True)
class Arg:
    name: str
    kind: str                  # tensor | tensor? | tensors (a list of them) | subscript | int | axes | pair | float | bool | str | dtype | dims | perm
    default: Any = REQUIRED
    choices: tuple = ()
    positive: bool = False     # random inputs feeding this argument are drawn positive

    @property
    def is_tensor(self) -> bool:
        return self.kind in ("tensor", "tensor?", "tensors")


@dataclass(frozen=True)
class OpDef:
    name: str
    category: str              # elementwise | reduction | norm | linalg | shape
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


def _register(op: OpDef) -> OpDef:
    OPS[op.name] = op
    return op


# ---- elementwise -------------------------------------------------------------------------

def _numeric(t: TensorType, op: str, i: int = 0) -> None:
    if t.dtype.is_bool:
        raise OpError(f"{op} expects a numeric tensor, got {t}", arg=i)


def _floating(t: TensorType, op: str, i: int = 0) -> None:
    if not t.dtype.is_float:
        raise OpError(f"{op} expects a floating-point tensor, got {t}; convert with cast(x, f32)", arg=i)


def _c(x: np.ndarray, v: float) -> np.ndarray:
    """A scalar constant in x's dtype (keeps f32 arithmetic in f32)."""
    return np.asarray(v, dtype=x.dtype)


def _sigmoid(x):
    """1/(1+exp(-x)) in the form that never overflows: e = exp(-|x|), then 1/(1+e) for x >= 0 and
    e/(1+e) below (the same value; NaN stays NaN). An `exp(-abs(x))` of the chain is then shared."""
    e = np.exp(-np.abs(x))
    return np.where(x >= _c(x, 0), _c(x, 1), e) / (_c(x, 1) + e)


def _gelu(x, approximate):
    if approximate == "tanh":
        inner = _c(x, math.sqrt(2 / math.pi)) * (x + _c(x, 0.044715) * x * x * x)
        return _c(x, 0.5) * x * (_c(x, 1) + np.tanh(inner))
    return _c(x, 0.5) * x * (_c(x, 1) + _erf(x / _c(x, math.sqrt(2))))


def _scalar_math(fn):
    """A Python `math` function over an array, elementwise (NumPy has no erf/erfc)."""
    ufunc = np.frompyfunc(fn, 1, 1)
    return lambda x: np.asarray(ufunc(x), dtype=object).astype(x.dtype)


_erf = _scalar_math(math.erf)


# IEEE 754-2019 maximum and minimum, as MLIR's arith.maximumf / minimumf compute them on every
# target: NaN if either operand is NaN, and -0 below +0. np.maximum and np.minimum propagate NaN
# but return one of two equal operands (maximum(0, -0) is -0, maximum(-0, 0) is 0), so the sign
# of a zero result is set here; integers are exact as they are.
def _maximum(a, b):
    r = np.maximum(a, b)
    if r.dtype.kind != "f":
        return r
    neg = np.signbit(a) & np.signbit(b)          # max of two zeros is -0 only if both are
    return np.where((a == 0) & (b == 0), np.where(neg, r.dtype.type(-0.0), r.dtype.type(0.0)), r)


def _minimum(a, b):
    r = np.minimum(a, b)
    if r.dtype.kind != "f":
        return r
    neg = np.signbit(a) | np.signbit(b)          # min of two zeros is -0 if either is
    return np.where((a == 0) & (b == 0), np.where(neg, r.dtype.type(-0.0), r.dtype.type(0.0)), r)


def _reduce_extreme(f, largest: bool):
    """np.max / np.min over axes (NaN if the slice holds one), a zero result signed as the
    elementwise maximum / minimum above: max is +0 if the slice holds a +0, min -0 if a -0."""
    def reduce(x, axis, keepdims):
        r = f(x, axis=axis, keepdims=keepdims)
        if x.dtype.kind != "f":
            return r
        sign = ~np.signbit(x) if largest else np.signbit(x)
        has = np.any((x == 0) & sign, axis=axis, keepdims=keepdims)
        zero = np.where(has == largest, r.dtype.type(0.0), r.dtype.type(-0.0))
        return np.where(r == 0, zero, r)
    return reduce


def _power(a, b):
    """np.power on materialised operands: with a broadcast (stride 0) or 0-d exponent of 0.5,
    NumPy takes a square root, so pow(-inf, 0.5) would be NaN and pow(-0, 0.5) -0 where C's pow
    (every compiled target, and NumPy itself on whole arrays) gives +inf and +0. Integers to a
    negative power (which NumPy refuses) are what the compiled targets' math.ipowi gives: 1 and
    -1 keep their power (-1 to an odd one is -1), every other base gives 0."""
    shape = np.broadcast_shapes(np.shape(a), np.shape(b))
    a, b = (np.array(np.broadcast_to(v, shape), ndmin=1) for v in (a, b))
    if a.dtype.kind in "iu" and b.dtype.kind in "iu" and (b < 0).any():
        negative = b < 0
        out = np.power(a, np.where(negative, 0, b))
        odd = (b % 2) != 0
        small = np.where(a == 1, 1, np.where(a == -1, np.where(odd, -1, 1), 0)).astype(out.dtype)
        return np.where(negative, small, out).reshape(shape)
    return np.power(a, b).reshape(shape)


UNARY: dict[str, tuple[str, Callable, str]] = {
    # name: (domain, numpy semantics, doc)
    "neg": ("numeric", lambda x: -x, "-x"),
    "abs": ("numeric", np.abs, "|x|"),
    "exp": ("float", np.exp, "e**x"),
    "log": ("float", np.log, "natural logarithm"),
    "sqrt": ("float", np.sqrt, "square root"),
    "rsqrt": ("float", lambda x: _c(x, 1) / np.sqrt(x), "1/sqrt(x)"),
    "tanh": ("float", np.tanh, "hyperbolic tangent"),
    "sigmoid": ("float", _sigmoid, "1/(1+exp(-x))"),
    "relu": ("numeric", lambda x: _maximum(x, _c(x, 0)), "max(x, 0)"),
    "silu": ("float", lambda x: x * _sigmoid(x), "x*sigmoid(x)"),
    "erf": ("float", _erf, "the error function"),
    "erfc": ("float", _scalar_math(math.erfc), "1 - erf(x), accurate where erf(x) is near 1"),
    "log1p": ("float", np.log1p, "log(1 + x), accurate for small x"),
    "sin": ("float", np.sin, "sine"),
    "cos": ("float", np.cos, "cosine"),
    "floor": ("float", np.floor, "round down"),
    "ceil": ("float", np.ceil, "round up"),
    "reciprocal": ("float", lambda x: _c(x, 1) / x, "1/x"),
    "square": ("numeric", lambda x: x * x, "x*x"),
}
POSITIVE_UNARY = {"log", "log1p", "sqrt", "rsqrt", "reciprocal"}


def _unary_infer(name: str, domain: str):
    def infer(syms, types, attrs):
        (t,) = types
        (_floating if domain == "float" else _numeric)(t, name)
        return t.with_shape(syms.resolve(t.shape)), attrs
    return infer


for _name, (_domain, _fn, _doc) in UNARY.items():
    _register(OpDef(_name, "elementwise", (Arg("x", "tensor", positive=_name in POSITIVE_UNARY),),
                    _unary_infer(_name, _domain), (lambda f: lambda xs, a, out: f(xs[0]))(_fn), _doc))


def _gelu_infer(syms, types, attrs):
    (t,) = types
    _floating(t, "gelu")
    return t.with_shape(syms.resolve(t.shape)), attrs


_register(OpDef("gelu", "elementwise",
                (Arg("x", "tensor"), Arg("approximate", "str", "tanh", choices=("tanh", "none"))),
                _gelu_infer, lambda xs, a, out: _gelu(xs[0], a["approximate"]),
                "GELU; tanh approximation by default, approximate=\"none\" for the erf form"))


def _broadcast_infer(name: str, verb: str, domain: str, result: DType | None = None):
    def infer(syms, types, attrs):
        for i, t in enumerate(types):
            if domain == "float":
                _floating(t, name, i)
            elif domain == "numeric":
                _numeric(t, name, i)
        try:
            shape = broadcast_shapes(syms, [t.shape for t in types])
        except OpError as e:
            shown = " and ".join(str(t) for t in types)
            raise OpError(f"cannot {verb} {shown}: {e.message}", arg=e.arg) from None
        return TensorType(result or types[0].dtype, shape), attrs
    return infer


BINARY: dict[str, tuple[str, str, Callable, str]] = {
    # name: (verb for messages, domain, numpy semantics, doc)
    "add": ("add", "numeric", np.add, "a + b"),
    "sub": ("subtract", "numeric", np.subtract, "a - b"),
    "mul": ("multiply", "numeric", np.multiply, "a * b"),
    "div": ("divide", "float", np.divide, "a / b (floating point)"),
    "pow": ("raise", "numeric", _power, "a ** b"),
    "maximum": ("take the maximum of", "numeric", _maximum, "elementwise maximum"),
    "minimum": ("take the minimum of", "numeric", _minimum, "elementwise minimum"),
}
COMPARE: dict[str, tuple[str, Callable]] = {
    "eq": ("==", np.equal), "ne": ("!=", np.not_equal), "lt": ("<", np.less),
    "le": ("<=", np.less_equal), "gt": (">", np.greater), "ge": (">=", np.greater_equal),
}
BINARY_OPERATORS = {"+": "add", "-": "sub", "*": "mul", "/": "div", "**": "pow", "@": "matmul",
                    **{sym: name for name, (sym, _) in COMPARE.items()}}

for _name, (_verb, _domain, _fn, _doc) in BINARY.items():
    _register(OpDef(_name, "elementwise",
                    (Arg("a", "tensor", positive=_name == "pow"), Arg("b", "tensor", positive=_name == "div")),
                    _broadcast_infer(_name, _verb, _domain), (lambda f: lambda xs, a, out: f(xs[0], xs[1]))(_fn),
                    _doc, verb=_verb))

for _name, (_sym, _fn) in COMPARE.items():
    _register(OpDef(_name, "elementwise", (Arg("a", "tensor"), Arg("b", "tensor")),
                    _broadcast_infer(_name, f"compare ('{_sym}')", "any", BOOL),
                    (lambda f: lambda xs, a, out: f(xs[0], xs[1]))(_fn), f"a {_sym} b (yields bool)",
                    verb=f"compare ('{_sym}')"))


def _where_infer(syms, types, attrs):
    cond, a, b = types
    if not cond.dtype.is_bool:
        raise OpError(f"where expects a bool condition, got {cond}; compare first (x > 0)", arg=0)
    if a.dtype != b.dtype:
        raise OpError(f"where: branches have different dtypes ({a.dtype} vs {b.dtype})", arg=2)
    shape = _broadcast_infer("where", "select between", "any")(syms, types, attrs)[0].shape
    return TensorType(a.dtype, shape), attrs


_register(OpDef("where", "elementwise", (Arg("cond", "tensor"), Arg("a", "tensor"), Arg("b", "tensor")),
                _where_infer, lambda xs, a, out: np.where(xs[0], xs[1], xs[2]),
                "cond ? a : b, broadcasting", dtype_args=(1, 2)))

_register(OpDef("clamp", "elementwise", (Arg("x", "tensor"), Arg("lo", "tensor"), Arg("hi", "tensor")),
                _broadcast_infer("clamp", "clamp", "numeric"),
                lambda xs, a, out: _minimum(_maximum(xs[0], xs[1]), xs[2]), "min(max(x, lo), hi)"))


def _cast_infer(syms, types, attrs):
    (t,) = types
    return TensorType(DTYPES[attrs["dtype"]], syms.resolve(t.shape)), attrs


_register(OpDef("cast", "elementwise", (Arg("x", "tensor"), Arg("dtype", "dtype")),
                _cast_infer, lambda xs, a, out: xs[0].astype(DTYPES[a["dtype"]].np), "convert to another dtype",
                dtype_args=()))


# ---- reductions --------------------------------------------------------------------------

def _reduce_infer(name: str):
    def infer(syms, types, attrs):
        (t,) = types
        if name == "mean":
            _floating(t, name)
        else:
            _numeric(t, name)
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
    _register(OpDef(_name, "reduction",
                    (Arg("x", "tensor"), Arg("axis", "axes", None), Arg("keepdims", "bool", False)),
                    _reduce_infer(_name),
                    (lambda f: lambda xs, a, out: np.asarray(
                        f(xs[0], axis=a["axis"], keepdims=a["keepdims"]), dtype=xs[0].dtype))(_fn), _doc))


# ---- normalisations ----------------------------------------------------------------------

def _softmax_ref(x, axis, log):
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    s = np.sum(e, axis=axis, keepdims=True)
    return (x - m - np.log(s)) if log else e * (_c(x, 1) / s)


def _axis_infer(name: str):
    def infer(syms, types, attrs):
        (t,) = types
        _floating(t, name)
        return t.with_shape(syms.resolve(t.shape)), {"axis": normalize_axis(attrs["axis"], t.rank)}
    return infer


_register(OpDef("softmax", "norm", (Arg("x", "tensor"), Arg("axis", "int", -1)), _axis_infer("softmax"),
                lambda xs, a, out: _softmax_ref(xs[0], a["axis"], False), "exp(x - max) / sum(exp(x - max))"))
_register(OpDef("log_softmax", "norm", (Arg("x", "tensor"), Arg("axis", "int", -1)), _axis_infer("log_softmax"),
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
        _floating(x, name)
        _affine_params_fit(syms, name, x, list(enumerate(types))[1:1 + n_params])
        axes = normalize_axes(attrs["axis"], x.rank)
        return x.with_shape(syms.resolve(x.shape)), {"axis": axes, "eps": float(attrs["eps"])}
    return infer


def _layernorm_ref(xs, a, out=None):
    x, gamma, beta = xs
    mean = np.mean(x, axis=a["axis"], keepdims=True)
    d = x - mean
    var = np.mean(d * d, axis=a["axis"], keepdims=True)
    return d * (_c(x, 1) / np.sqrt(var + _c(x, a["eps"]))) * gamma + beta


def _rmsnorm_ref(xs, a, out=None):
    x, gamma = xs
    ms = np.mean(x * x, axis=a["axis"], keepdims=True)
    return x * (_c(x, 1) / np.sqrt(ms + _c(x, a["eps"]))) * gamma


_register(OpDef("layernorm", "norm",
                (Arg("x", "tensor"), Arg("gamma", "tensor"), Arg("beta", "tensor"),
                 Arg("axis", "axes", -1), Arg("eps", "float", 1e-5)),
                _norm_infer("layernorm", 2), _layernorm_ref,
                "(x - mean) / sqrt(var + eps) * gamma + beta, biased variance over axis"))
_register(OpDef("rmsnorm", "norm",
                (Arg("x", "tensor"), Arg("gamma", "tensor"), Arg("axis", "axes", -1), Arg("eps", "float", 1e-6)),
                _norm_infer("rmsnorm", 1), _rmsnorm_ref, "x * rsqrt(mean(x*x) + eps) * gamma"))


def _batchnorm_infer(syms, types, attrs):
    x = types[0]
    _floating(x, "batchnorm")
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
    return (x - mean) / np.sqrt(var + _c(x, a["eps"])) * gamma + beta


_register(OpDef("batchnorm", "norm",
                (Arg("x", "tensor"), Arg("mean", "tensor"), Arg("var", "tensor", positive=True),
                 Arg("gamma", "tensor"), Arg("beta", "tensor"), Arg("eps", "float", 1e-5)),
                _batchnorm_infer, _batchnorm_ref,
                "inference batchnorm over channel axis 1: (x - mean) / sqrt(var + eps) * gamma + beta"))


# ---- linear algebra and convolution ------------------------------------------------------

def _matmul_infer(syms, types, attrs):
    a, b = types
    for i, t in enumerate(types):
        _numeric(t, "matmul", i)
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


_register(OpDef("matmul", "linalg", (Arg("a", "tensor"), Arg("b", "tensor")), _matmul_infer,
                lambda xs, a, out: np.matmul(xs[0], xs[1]), "matrix product, batched with broadcast batch dims",
                verb="multiply"))


def _conv_out(size: int, k: int, s: int, p: int, d: int) -> int:
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def _conv2d_infer(syms, types, attrs):
    x, w, bias = types
    _floating(x, "conv2d")
    if x.rank != 4:
        raise OpError(f"conv2d expects an NCHW input of rank 4, got {x}", arg=0)
    if w.rank != 4:
        raise OpError(f"conv2d expects FCHW weights of rank 4, got {w}", arg=1)
    if w.dtype != x.dtype:
        raise OpError(f"conv2d: weights {w} have dtype {w.dtype} but the input is {x.dtype}", arg=1)
    sx, sw = syms.resolve(x.shape), syms.resolve(w.shape)
    if not syms.unify(sx[1], sw[1]):
        raise OpError(f"conv2d: the input has {sx[1]} channels but the weights {w.with_shape(sw)} "
                      f"expect {sw[1]}", arg=1)
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
    n, c, h, wd = x.shape
    f, _, kh, kw = w.shape
    ho, wo = _conv_out(h, kh, sh, ph, dh), _conv_out(wd, kw, sw, pw, dw)
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    out = np.zeros((n, f, ho, wo), dtype=np.result_type(x.dtype, np.float32) if x.dtype.itemsize < 4 else x.dtype)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i * dh: i * dh + sh * (ho - 1) + 1: sh, j * dw: j * dw + sw * (wo - 1) + 1: sw]
            out += np.einsum("nchw,fc->nfhw", patch, w[:, :, i, j])
    if bias is not None:
        out += bias.reshape(1, -1, 1, 1)
    return out.astype(x.dtype)


_register(OpDef("conv2d", "linalg",
                (Arg("x", "tensor"), Arg("w", "tensor"), Arg("bias", "tensor?", None),
                 Arg("stride", "pair", 1), Arg("padding", "pair", 0), Arg("dilation", "pair", 1)),
                _conv2d_infer, _conv2d_ref, "2-D convolution, NCHW input, FCHW weights, optional bias"))


# ---- shape -------------------------------------------------------------------------------

def _transpose_infer(syms, types, attrs):
    (t,) = types
    if t.rank < 2:
        raise OpError(f"transpose swaps the last two axes and needs rank 2 or more, got {t}", arg=0)
    s = syms.resolve(t.shape)
    return t.with_shape(s[:-2] + (s[-1], s[-2])), attrs


_register(OpDef("transpose", "shape", (Arg("x", "tensor"),), _transpose_infer,
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


_register(OpDef("permute", "shape", (Arg("x", "tensor"), Arg("perm", "perm")), _permute_infer,
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


_register(OpDef("reshape", "shape", (Arg("x", "tensor"), Arg("shape", "dims")), _reshape_infer,
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


_register(OpDef("broadcast_to", "shape", (Arg("x", "tensor"), Arg("shape", "dims")), _broadcast_to_infer,
                lambda xs, a, out: np.broadcast_to(xs[0], out).copy(), "NumPy broadcasting to a shape"))


# ---- indexing: slices, concat and split, gathers -------------------------------------------
#
# A slice (x[a:b:s, ..., i]) is not called by name: the checker builds it from a subscript. Its
# typed attributes, per input axis: `start` (an int, or (SYMBOL, OFFSET) for SYMBOL + OFFSET when
# the bound counts from a symbolic extent, as x[-4:] of f32[N]), `step` (a non-zero int); `drop`
# lists the input axes an integer index removes. The result type holds each axis' extent. Bounds
# never clamp: a bound outside the axis is an error, at compile time for a number extent, at run
# time (bind_slice_errors) for a symbolic one.

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


_register(OpDef("slice", "shape", (Arg("x", "tensor"), Arg("items", "subscript")), _slice_infer, _slice_ref,
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


_register(OpDef("concat", "shape", (Arg("xs", "tensors"), Arg("axis", "int", 0)), _concat_infer,
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


_register(OpDef("split", "shape", (Arg("x", "tensor"), Arg("sizes", "dims"), Arg("axis", "int", 0)), _split_infer,
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


_register(OpDef("gather", "index", (Arg("table", "tensor"), Arg("idx", "tensor"), Arg("axis", "int", 0)),
                _gather_infer, _gather_ref,
                "the slices of table at integer indices along an axis (np.take); indices from 0 to n-1"))


def _embedding_infer(syms, types, attrs):
    table, ids = types
    if table.rank != 2:
        raise OpError(f"embedding expects a table of rank 2 [rows, features], got {table}", arg=0)
    _index_dtype(ids, "embedding", 1)
    s = syms.resolve(table.shape)
    return table.with_shape(syms.resolve(ids.shape) + s[1:]), {"axis": 0}


_register(OpDef("embedding", "index", (Arg("table", "tensor"), Arg("ids", "tensor")), _embedding_infer,
                _gather_ref, "rows of a [rows, features] table at integer ids: gather(table, ids, axis=0)"))


# ---- scans and arg-reductions ------------------------------------------------------------

def _scan_infer(name: str):
    def infer(syms, types, attrs):
        (t,) = types
        _numeric(t, name)
        if t.rank == 0:
            raise OpError(f"{name} runs along an axis and needs rank 1 or more, got {t}", arg=0)
        return t.with_shape(syms.resolve(t.shape)), {"axis": normalize_axis(attrs["axis"], t.rank)}
    return infer


for _name, (_fn, _doc) in {"cumsum": (np.cumsum, "running sum along an axis"),
                           "cumprod": (np.cumprod, "running product along an axis")}.items():
    _register(OpDef(_name, "scan", (Arg("x", "tensor"), Arg("axis", "int", -1)), _scan_infer(_name),
                    (lambda f: lambda xs, a, out: f(xs[0], axis=a["axis"], dtype=xs[0].dtype))(_fn), _doc))


def _arg_infer(name: str):
    def infer(syms, types, attrs):
        (t,) = types
        _numeric(t, name)
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
    _register(OpDef(_name, "reduction", (Arg("x", "tensor"), Arg("axis", "int", -1), Arg("keepdims", "bool", False)),
                    _arg_infer(_name),
                    (lambda f: lambda xs, a, out: np.asarray(f(xs[0], axis=a["axis"], keepdims=a["keepdims"]),
                                                             dtype=np.int64))(_fn), _doc))
