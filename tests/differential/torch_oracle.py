"""A second oracle: a typed FDSL chain run by PyTorch, written from docs/FDSL.md's semantics.

fusec's reference (runtime/reference.py) runs each op's NumPy formula from dsl/ops/, and the
compiled targets are checked against it: if the two agree on a wrong meaning of an op, nothing in
the project notices. This module is written from the language reference (docs/FDSL.md: the
operator table and "NaN and special values") against PyTorch's own operators, without reading
dsl/ops/. It walks the checked chain (dsl/typed.py: one node per op, attributes normalised by the
checker) and evaluates every node with torch:

- `run(chain, inputs, binding, f64=False)`: values stored in their dtypes; `f16` and `bf16`
  are computed in `f32` and rounded to their dtype after every op (FDSL.md, "NaN and special
  values": "f16 (and bf16) values are computed in f32 and rounded to their dtype after every
  operator on every target").
- `run(..., f64=True)`: every float value stored and computed in float64 (the "truth"); only an
  explicit `cast` to a narrower float still rounds, as the program asks.

`IndexOutOfRange` is raised where FDSL defines a user error (a gather index outside its axis);
`Undefined` where FDSL leaves the result undefined (a float cast to an integer of NaN, an
infinity or a value outside the integer's range).
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

TORCH_DTYPES = {
    "f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "f64": torch.float64,
    "i32": torch.int32, "i64": torch.int64, "bool": torch.bool,
}
FLOATS = ("f16", "bf16", "f32", "f64")


class IndexOutOfRange(Exception):
    """An index outside its axis: FDSL makes this a user error on the reference."""


class Undefined(Exception):
    """FDSL leaves this result undefined (a float cast to an integer of NaN, inf or out of range)."""


def _store(dtype_name: str, f64: bool) -> torch.dtype:
    if f64 and dtype_name in FLOATS:
        return torch.float64
    return TORCH_DTYPES[dtype_name]


def _work(x: torch.Tensor) -> torch.Tensor:
    """16-bit floats compute in f32."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def to_torch(a: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    a = np.asarray(a)
    if a.dtype.name == "bfloat16":
        a = a.astype(np.float32)
    return torch.from_numpy(np.array(a, copy=True)).to(dtype)


def to_numpy(t: torch.Tensor, dtype_name: str, f64: bool) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        import ml_dtypes
        return t.float().numpy().astype(ml_dtypes.bfloat16)
    out = t.detach().numpy()
    return out.copy()


def _dim(d, binding: dict[str, int]) -> int:
    return d if isinstance(d, int) else binding[d]


def _shape(ttype, binding) -> tuple[int, ...]:
    return tuple(_dim(d, binding) for d in ttype.shape)


def _bound(v, binding) -> int:
    """A slice start: an integer, or (symbol, offset)."""
    if isinstance(v, (tuple, list)):
        return binding[v[0]] + v[1]
    return int(v)


# ---- elementwise --------------------------------------------------------------------------

UNARY = {
    "neg": torch.neg,
    "abs": torch.abs,
    "exp": torch.exp,
    "log": torch.log,
    "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "relu": torch.relu,
    "silu": F.silu,
    "erf": torch.erf,
    "erfc": torch.erfc,
    "log1p": torch.log1p,
    "sin": torch.sin,
    "cos": torch.cos,
    "floor": torch.floor,
    "ceil": torch.ceil,
    "reciprocal": torch.reciprocal,
    "square": lambda x: x * x,
    "relu6": F.relu6,
    "hardsigmoid": F.hardsigmoid,
    "hardswish": F.hardswish,
    "logical_not": torch.logical_not,
}

BINARY = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.true_divide,
    "pow": torch.pow,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "eq": torch.eq,
    "ne": torch.ne,
    "lt": torch.lt,
    "le": torch.le,
    "gt": torch.gt,
    "ge": torch.ge,
    "logical_and": torch.logical_and,
    "logical_or": torch.logical_or,
    "logical_xor": torch.logical_xor,
}


def _cast(x: torch.Tensor, to: str, store: torch.dtype) -> torch.Tensor:
    if to in ("i32", "i64") and x.is_floating_point():
        info = torch.iinfo(TORCH_DTYPES[to])
        xd = x.double()
        bad = ~torch.isfinite(xd) | (torch.trunc(xd) < info.min) | (torch.trunc(xd) > info.max)
        if bool(bad.any()):
            raise Undefined(f"cast of a non-finite or out-of-range float to {to}")
    if to == "bool":
        return x != 0
    if to in ("f16", "bf16", "f32") and store == torch.float64:
        # float64 mode keeps an explicit cast's rounding: the program asked for it
        return x.to(TORCH_DTYPES[to]).to(store)
    if x.dtype == torch.bool and store.is_floating_point:
        return x.to(torch.float64).to(store)
    return x.to(store)


# ---- reductions ---------------------------------------------------------------------------

def _reduce(op: str, x: torch.Tensor, axes: tuple[int, ...], keepdims: bool, store: torch.dtype) -> torch.Tensor:
    if not axes:
        return x.to(store) if op not in ("any", "all") else x
    if op == "sum":
        return torch.sum(x, dim=axes, keepdim=keepdims, dtype=x.dtype)
    if op == "mean":
        return torch.mean(x, dim=axes, keepdim=keepdims)
    if op in ("max", "min"):
        return (torch.amax if op == "max" else torch.amin)(x, dim=axes, keepdim=keepdims)
    if op in ("prod", "any", "all"):
        # torch's prod/any/all reduce one dim at a time: last axis first keeps the others' numbers
        fn = {"prod": lambda t, d: torch.prod(t, dim=d, keepdim=True, dtype=t.dtype),
              "any": lambda t, d: torch.any(t, dim=d, keepdim=True),
              "all": lambda t, d: torch.all(t, dim=d, keepdim=True)}[op]
        out = x
        for d in sorted(axes, reverse=True):
            out = fn(out, d)
        if not keepdims:
            for d in sorted(axes, reverse=True):
                out = out.squeeze(d)
        return out
    raise NotImplementedError(op)


def _moved(x: torch.Tensor, axes: tuple[int, ...]):
    """x with `axes` moved to the end, and the permutation that undoes it."""
    rest = [d for d in range(x.dim()) if d not in axes]
    perm = rest + list(axes)
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return x.permute(perm), perm, inv


def _norm(op: str, x: torch.Tensor, params: list[torch.Tensor], axes: tuple[int, ...], eps: float) -> torch.Tensor:
    """layernorm / rmsnorm over `axes`, then scaled (and shifted) by gamma (beta) broadcast to
    x's shape (FDSL: gamma and beta broadcast to x's shape without enlarging it)."""
    if op == "layernorm":
        # FDSL's formula, not F.layer_norm: torch's kernel gives NaN for a row whose variance
        # overflows, where (x - mean) * (1 / sqrt(inf)) is 0 (docs/FDSL.md, "NaN and special values")
        mean = x.mean(dim=axes, keepdim=True)
        d = x - mean
        y = d * (1 / torch.sqrt((d * d).mean(dim=axes, keepdim=True) + eps))
    else:
        xm, perm, inv = _moved(x, axes)
        shape = tuple(xm.shape[len(xm.shape) - len(axes):])
        y = F.rms_norm(xm, shape, eps=eps).permute(inv)
    y = y * params[0]
    if op == "layernorm":
        y = y + params[1]
    return y


# ---- indexing -----------------------------------------------------------------------------

def _check_range(idx: torch.Tensor, n: int, negative: bool, what: str) -> torch.Tensor:
    lo = -n if negative else 0
    bad = (idx < lo) | (idx >= n)
    if bool(bad.any()):
        pos = tuple(int(i) for i in torch.nonzero(bad)[0]) if idx.dim() else ()
        raise IndexOutOfRange(f"{what}: index {int(idx[pos])} at {list(pos)} is outside an axis of extent {n}")
    return torch.where(idx < 0, idx + n, idx).long()


def _slice(x: torch.Tensor, n, binding) -> torch.Tensor:
    starts, steps = n.attr("start"), n.attr("step")
    drop = set(n.attr("drop") or ())
    out_shape = list(_shape(n.type, binding))
    k = 0
    out = x
    picks = []
    for ax in range(x.dim()):
        start = _bound(starts[ax], binding)
        if start < 0:
            start += x.shape[ax]
        if ax in drop:
            picks.append((ax, start))
            continue
        step = int(steps[ax])
        count = out_shape[k]
        k += 1
        idx = start + step * torch.arange(count)
        if bool(((idx < 0) | (idx >= x.shape[ax])).any()):
            raise AssertionError(f"slice of axis {ax} leaves the axis: {idx.tolist()} of {x.shape[ax]}")
        out = out.index_select(ax, idx)
    for ax, i in sorted(picks, reverse=True):
        out = out.select(ax, i)
    return out


def _gather(table: torch.Tensor, idx: torch.Tensor, axis: int) -> torch.Tensor:
    n = table.shape[axis]
    i = _check_range(idx, n, False, "gather")
    flat = table.index_select(axis, i.reshape(-1))
    return flat.reshape(table.shape[:axis] + idx.shape + table.shape[axis + 1:])


def _take_along_axis(x: torch.Tensor, idx: torch.Tensor, axis: int) -> torch.Tensor:
    n = x.shape[axis]
    i = _check_range(idx, n, True, "take_along_axis")
    return torch.take_along_dim(x, i, dim=axis)


def _index(x: torch.Tensor, idxs: list[torch.Tensor], axes) -> torch.Tensor:
    axes = tuple(axes) if axes is not None else tuple(range(len(idxs)))
    key: list = [slice(None)] * x.dim()
    for t, ax in zip(idxs, axes):
        key[ax] = _check_range(t, x.shape[ax], True, "index")
    return x[tuple(key)]


def _gather_nd(x: torch.Tensor, idx: torch.Tensor, batch_dims: int) -> torch.Tensor:
    m = idx.shape[-1]
    positions = []
    for j in range(m):
        ax = batch_dims + j
        positions.append(_check_range(idx[..., j], x.shape[ax], True, "gather_nd"))
    lead = idx.shape[:-1]
    key = []
    for b in range(batch_dims):
        shape = [1] * len(lead)
        shape[b] = x.shape[b]
        key.append(torch.arange(x.shape[b]).reshape(shape))
    key += positions
    return x[tuple(key)]


# ---- the walk -----------------------------------------------------------------------------

def run(chain, inputs: list[np.ndarray], binding: dict[str, int], f64: bool = False) -> list[np.ndarray]:
    """Evaluate the typed chain with torch; outputs as NumPy arrays in the chain's dtypes (float64
    for every float output when `f64`)."""
    vals: dict[int, torch.Tensor] = {}
    params = iter(inputs)
    for n in chain.nodes:
        dt = n.type.dtype.name
        store = _store(dt, f64)
        if n.op == "param":
            vals[n.id] = to_torch(next(params), store)
            continue
        if n.op == "constant":
            vals[n.id] = torch.tensor(n.attr("value"), dtype=torch.float64 if isinstance(n.attr("value"), float)
                                      else None).to(store)
            continue
        xs = [_work(vals[i]) for i in n.inputs]
        out = _eval(n, xs, binding, store, f64)
        out = out.to(store)
        want = _shape(n.type, binding)
        if tuple(out.shape) != want:
            raise AssertionError(f"torch oracle: {n.op} gave shape {tuple(out.shape)}, the type says {want}")
        vals[n.id] = out
    out = []
    for i in chain.outputs:
        t = vals[i]
        out.append(to_numpy(t, chain.nodes[i].type.dtype.name, f64))
    return out


def _eval(n, xs: list[torch.Tensor], binding, store: torch.dtype, f64: bool) -> torch.Tensor:
    op, a = n.op, n.attr
    if op in UNARY:
        return UNARY[op](xs[0])
    if op == "gelu":
        return F.gelu(xs[0], approximate=a("approximate", "tanh"))
    if op in BINARY:
        return BINARY[op](xs[0], xs[1])
    if op == "where":
        return torch.where(xs[0], xs[1], xs[2])
    if op == "clamp":
        return torch.clamp(xs[0], xs[1], xs[2])
    if op == "cast":
        return _cast(xs[0], a("dtype"), store)
    if op in ("sum", "mean", "max", "min", "prod", "any", "all"):
        return _reduce(op, xs[0], tuple(a("axis")), bool(a("keepdims")), store)
    if op == "softmax":
        return torch.softmax(xs[0], dim=a("axis"))
    if op == "log_softmax":
        return torch.log_softmax(xs[0], dim=a("axis"))
    if op in ("layernorm", "rmsnorm"):
        return _norm(op, xs[0], xs[1:], tuple(a("axis")), a("eps"))
    if op == "batchnorm":
        x, mean, var, gamma, beta = xs
        return F.batch_norm(x, mean, var, gamma, beta, training=False, eps=a("eps"))
    if op == "matmul":
        return torch.matmul(xs[0], xs[1])
    if op == "conv2d":
        bias = xs[2] if a("has_bias") else None
        return F.conv2d(xs[0], xs[1], bias, stride=tuple(a("stride")), padding=tuple(a("padding")),
                        dilation=tuple(a("dilation")), groups=a("groups"))
    if op == "max_pool2d":
        return F.max_pool2d(xs[0], tuple(a("kernel")), tuple(a("stride")), tuple(a("padding")),
                            tuple(a("dilation")), ceil_mode=a("ceil_mode"))
    if op == "avg_pool2d":
        return F.avg_pool2d(xs[0], tuple(a("kernel")), tuple(a("stride")), tuple(a("padding")),
                            ceil_mode=a("ceil_mode"), count_include_pad=a("count_include_pad"))
    if op == "adaptive_avg_pool2d":
        return F.adaptive_avg_pool2d(xs[0], tuple(a("output_size")))
    if op == "transpose":
        return xs[0].transpose(-1, -2)
    if op == "permute":
        return xs[0].permute(tuple(a("perm")))
    if op == "reshape":
        return xs[0].reshape(_shape(n.type, binding))
    if op == "broadcast_to":
        return torch.broadcast_to(xs[0], _shape(n.type, binding))
    if op == "slice":
        return _slice(xs[0], n, binding)
    if op == "concat":
        return torch.cat(xs, dim=a("axis"))
    if op == "gather":
        return _gather(xs[0], xs[1], a("axis"))
    if op == "embedding":
        return F.embedding(_check_range(xs[1], xs[0].shape[0], False, "embedding"), xs[0])
    if op == "take_along_axis":
        return _take_along_axis(xs[0], xs[1], a("axis"))
    if op == "index":
        return _index(xs[0], xs[1:], a("axes"))
    if op == "gather_nd":
        return _gather_nd(xs[0], xs[1], a("batch_dims", 0))
    if op in ("cumsum", "cumprod"):
        fn = torch.cumsum if op == "cumsum" else torch.cumprod
        return fn(xs[0], dim=a("axis"), dtype=xs[0].dtype)
    if op in ("argmax", "argmin"):
        return _arg(op, xs[0], a("axis"), bool(a("keepdims")))
    if op == "full":
        return torch.full(_shape(n.type, binding), a("value"), dtype=torch.float64 if store.is_floating_point
                          else store)
    if op == "full_like":
        return torch.full(_shape(n.type, binding), a("value"), dtype=torch.float64 if store.is_floating_point
                          else store)
    if op == "arange":
        count = _shape(n.type, binding)[0]
        return a("begin") + a("step") * torch.arange(count, dtype=torch.int64)
    raise NotImplementedError(f"torch oracle: no translation of {op}")


def _arg(op: str, x: torch.Tensor, axis: int, keepdims: bool) -> torch.Tensor:
    fn = torch.argmax if op == "argmax" else torch.argmin
    return fn(x, dim=axis, keepdim=keepdims)


def has_translation(op: str) -> bool:
    return op in UNARY or op in BINARY or op in {
        "gelu", "where", "clamp", "cast", "sum", "mean", "max", "min", "prod", "any", "all", "softmax",
        "log_softmax", "layernorm", "rmsnorm", "batchnorm", "matmul", "conv2d", "max_pool2d", "avg_pool2d",
        "adaptive_avg_pool2d", "transpose", "permute", "reshape", "broadcast_to", "slice", "concat", "gather",
        "embedding", "take_along_axis", "index", "gather_nd", "cumsum", "cumprod", "argmax", "argmin", "full", "full_like",
        "arange"}


