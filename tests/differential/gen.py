"""Random FDSL chains for the differential test: tests/fusion/test_properties.py's grammar, widened.

Every chain has one dtype (f16, bf16, f32, f64, i32 or i64; bools appear as comparisons, masks
and `any`/`all`), rank 1 to 3 with symbolic and fixed dimensions (a fixed 1 among them), and one
to five steps. A step keeps the value's shape and draws from: elementwise ops, broadcasting
against new parameters of smaller shapes (leading axes dropped, axes of one), reductions with and
without `keepdims` over positive, negative and listed axes, normalisations, matmuls (batched with
broadcast weights), transposes, permutes and reshapes, slices (reversed, negative bounds, an
index that drops an axis), concats, gathers, take_along_axis with negative indices, scans,
arg-reductions, casts and creation ops. Values are reused two and three times, and a chain
returns one to four outputs. Inputs hold special values (NaN, ±inf, -0.0, huge and denormal
numbers; the integer extremes) in about half the chains.

`chain_case(seed)` is deterministic: the same seed gives the same source, binding and inputs.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

FLOAT_DTYPES = ("f16", "bf16", "f32", "f64")
INT_DTYPES = ("i32", "i64")
# chain dtypes, weighted: f32 is what models use most
DTYPE_WEIGHTS = (("f32", 5), ("f16", 2), ("f64", 2), ("bf16", 1), ("i32", 2), ("i64", 1))


@dataclass
class Case:
    seed: int
    source: str
    binding: dict[str, int]
    dtype: str
    specials: bool = False
    negative_index: dict[str, int] = field(default_factory=dict)   # take_along_axis index param -> its axis

    def describe(self) -> str:
        bind = ",".join(f"{k}={v}" for k, v in self.binding.items())
        return f"seed {self.seed} (--bind {bind}){' with special values' if self.specials else ''}:\n{self.source}"


class _Gen:
    def __init__(self, rng: random.Random):
        self.r = rng
        self.params: list[tuple[str, str]] = []      # (name, type)
        self.n_params = 0
        self.neg_index: dict[str, int] = {}          # index params whose values may be negative: name -> axis

    def param(self, dtype: str, dims: list) -> str:
        self.n_params += 1
        name = f"p{self.n_params}"
        self.params.append((name, f"{dtype}[{', '.join(map(str, dims))}]" if dims else dtype))
        return name

    def axis(self, rank: int, ax: int | None = None) -> int:
        """An axis, written positive or negative at random."""
        ax = self.r.randrange(rank) if ax is None else ax
        return ax - rank if self.r.random() < 0.5 else ax

    def bshape(self, dims: list) -> list:
        """A shape that broadcasts to `dims` without enlarging it: leading axes dropped, some of one."""
        drop = self.r.randrange(len(dims) + 1)
        out = [1 if self.r.random() < 0.3 else d for d in dims[drop:]]
        return out


def _fmt(v: float, dtype: str) -> str:
    if dtype in INT_DTYPES:
        return str(int(v))
    return repr(float(v))


def _steps_float(g: _Gen, c: str, dt: str, dims: list) -> str:
    r = g.r
    rank = len(dims)
    k = r.randrange(rank)
    ax = g.axis(rank, k)
    last = dims[-1]
    choice = r.randrange(46)
    if choice < 8:
        u = r.choice(["tanh", "sigmoid", "relu", "gelu", "silu", "sin", "cos", "erf", "erfc", "floor", "ceil",
                      "square", "relu6", "hardsigmoid", "hardswish", "abs", "neg", "exp", "reciprocal", "log",
                      "sqrt", "rsqrt", "log1p"])
        if u in ("exp",):
            return f"exp(tanh({c}))" if r.random() < 0.7 else f"exp({c})"
        if u in ("log", "sqrt", "rsqrt", "log1p", "reciprocal") and r.random() < 0.7:
            return f"{u}(abs({c}) + 0.5)"
        if u == "gelu" and r.random() < 0.5:
            return f'gelu({c}, approximate="none")'
        return f"{u}({c})"
    if choice < 13:
        y = g.param(dt, g.bshape(dims))
        op = r.choice(["+", "-", "*", "maximum", "minimum", "/", "**", "where"])
        if op in ("maximum", "minimum"):
            return f"{op}({c}, {y})" if r.random() < 0.5 else f"{op}({y}, {c})"
        if op == "/":
            return f"{c} / (abs({y}) + 0.5)"
        if op == "**":
            return f"(abs({c}) + 0.5) ** {y}" if r.random() < 0.5 else f"{c} ** {r.choice(['2.0', '3.0', '0.5', '-1.0'])}"
        if op == "where":
            return f"where({c} > {y}, {c}, {y})"
        return f"{c} {op} {y}" if r.random() < 0.5 else f"{y} {op} {c}"
    if choice < 18:
        red = r.choice(["max", "min", "sum", "mean", "prod"])
        axes = f"axis={ax}"
        if rank >= 2 and r.random() < 0.3:
            ks = sorted(r.sample(range(rank), 2))
            axes = f"axis=[{g.axis(rank, ks[0])}, {g.axis(rank, ks[1])}]"
        inner = f"1.0 + 0.1 * tanh({c})" if red == "prod" else c
        if red == "sum":
            inner = f"abs({c})"
            return f"{c} / (1.0 + sum({inner}, {axes}, keepdims=true))"
        if r.random() < 0.25 and k == 0 and "[" not in axes:
            return f"{c} - {red}({inner}, axis={ax})"                   # a leading axis dropped broadcasts back
        return f"{c} - {red}({inner}, {axes}, keepdims=true)"
    if choice < 20:
        return f"{r.choice(['softmax', 'log_softmax'])}({c}, axis={ax})"
    if choice < 22:
        gam = g.param(dt, g.bshape(dims)[-1:] or [last])
        axes = f"axis={ax}" if r.random() < 0.6 else f"axis=[{g.axis(rank, rank - 1)}]"
        if r.random() < 0.5:
            bet = g.param(dt, g.bshape(dims))
            return f"layernorm({c}, {gam}, {bet}, {axes})"
        return f"rmsnorm({c}, {gam}, {axes})"
    if choice < 24:
        if rank >= 2 and r.random() < 0.4:
            return f"(({c} @ transpose({c})) @ {c}) * 0.1"
        kk = r.choice([1, 2, 3, "K"])
        w = g.param(dt, [last, kk])
        v = g.param(dt, [kk, last])
        if rank >= 2 and r.random() < 0.5:
            return f"(tanh({c}) @ {w}) @ {v}"
        return f"{c} + (tanh({c}) @ {w}) @ {v}" if rank >= 2 else f"{c} + sum(tanh({c}) * {v}[0], axis=0)"
    if choice < 26 and rank >= 2:
        if rank == 3 and r.random() < 0.5:
            return f"permute(tanh(permute({c}, [2, 0, 1])), [1, 2, 0])"
        if r.random() < 0.5:
            shp = list(dims[:-1]) + [1, last]
            return f"reshape(sigmoid(reshape({c}, [{', '.join(map(str, shp))}])), [{', '.join(map(str, dims))}])"
        return f"transpose(tanh(transpose({c})) + 1.0)"
    if choice < 31:
        return _slice_step(g, c, dt, dims, k)
    if choice < 34:
        return _index_step(g, c, dt, dims, k)
    if choice < 36:
        if r.random() < 0.5:
            return f"cumsum({c}, axis={ax}) * 0.25"
        return f"cumprod(1.0 + 0.1 * tanh({c}), axis={ax})"
    if choice < 38:
        am = r.choice(["argmax", "argmin"])
        return f"{c} + cast({am}({c}, axis={ax}, keepdims=true), {dt})"
    if choice < 41:
        y = g.param(dt, g.bshape(dims))
        return r.choice([
            f"where({c} > 0.0, {c}, 0.1 * {c})", f"where({c} == {c}, {c}, 0.0)",
            f"where(logical_and({c} > -0.5, {c} < 0.5), {c}, {y})", f"clamp({c}, -0.5, 0.5)",
            f"clamp({c}, {y}, 1.0)", f"where(logical_or({c} >= {y}, {c} != {c}), {y}, {c})",
            f"{c} * cast(any({c} > 1.0, axis={ax}, keepdims=true), {dt})",
            f"{c} * cast(logical_xor(all({c} < 1.0, axis={ax}, keepdims=true), {c} <= 0.0), {dt})",
            f"where(logical_not({c} < 0.0), {c}, -inf)"])
    if choice < 43:
        other = r.choice([t for t in FLOAT_DTYPES if t not in ("bf16", dt)])
        if dt == "bf16":
            other = r.choice(["f32", "f16"])
        return r.choice([f"cast(cast({c}, {other}) * 2.0, {dt})", f"cast(cast({c} * 4.0, i32), {dt})",
                         f"{c} * cast({c} > 0.25, {dt})"])
    if choice < 45:
        sym = [d for d in dims if isinstance(d, str)]
        if sym and r.random() < 0.5 and dims[-1] == sym[-1]:
            return f"{c} + cast(arange({sym[-1]}), {dt}) * 0.5"
        y = g.param(dt, g.bshape(dims))
        return f"{c} + full_like({y}, 0.5) + full([{', '.join(map(str, dims))}], -0.25, dtype={dt})"
    y = g.param(dt, list(dims))
    return f"{c} + broadcast_to({g.param(dt, g.bshape(dims))}, [{', '.join(map(str, dims))}]) * {y}"


def _steps_int(g: _Gen, c: str, dt: str, dims: list) -> str:
    r = g.r
    rank = len(dims)
    k = r.randrange(rank)
    ax = g.axis(rank, k)
    choice = r.randrange(30)
    if choice < 5:
        return r.choice([f"-{c}", f"abs({c})", f"square({c})", f"relu({c})", f"{c} ** 2", f"{c} * 3 - 1"])
    if choice < 10:
        y = g.param(dt, g.bshape(dims))
        op = r.choice(["+", "-", "*", "maximum", "minimum", "clamp", "where"])
        if op in ("maximum", "minimum"):
            return f"{op}({c}, {y})"
        if op == "clamp":
            return f"clamp({c}, {y}, 4)"
        if op == "where":
            return f"where({c} > {y}, {c}, {y})"
        return f"{c} {op} {y}"
    if choice < 14:
        red = r.choice(["max", "min", "sum", "prod"])
        if red == "prod":
            return f"{c} + prod(clamp({c}, -3, 3), axis={ax}, keepdims=true)"
        return f"{c} - {red}({c}, axis={ax}, keepdims=true)"
    if choice < 16:
        return f"{r.choice(['cumsum', 'cumprod'])}({c}, axis={ax})"
    if choice < 18:
        return f"{c} + cast({r.choice(['argmax', 'argmin'])}({c}, axis={ax}, keepdims=true), {dt})"
    if choice < 22:
        return _slice_step(g, c, dt, dims, k)
    if choice < 25:
        return _index_step(g, c, dt, dims, k)
    if choice < 27 and rank >= 2:
        if r.random() < 0.5:
            return f"transpose(abs(transpose({c})))"
        w = g.param(dt, [dims[-1], dims[-1]])
        return f"{c} @ {w}"
    if choice < 29:
        return r.choice([f"cast(cast({c}, f32) * 0.5, {dt})", f"cast(cast({c}, f64) / 3.0, {dt})",
                         f"{c} * cast({c} > 0, {dt})", f"cast({c} != 0, {dt}) + {c}"])
    return f"{c} + cast(any({c} > 2, axis={ax}, keepdims=true), {dt})"


def _slice_step(g: _Gen, c: str, dt: str, dims: list, k: int) -> str:
    r = g.r
    rank = len(dims)
    lead = ", ".join([":"] * k)
    pre = f"{lead}, " if k else ""
    half = "0.5" if dt in FLOAT_DTYPES else "2"
    opts = [f"{c}[{pre}::-1] * {half} + {c}", f"{c} - {c}[{pre}:1]", f"{c} * {c}[{pre}-1:]",
            f"{c} + {c}[..., ::-1]", f"{c} - {c}[-1]" if rank >= 2 else f"{c} - {c}[-1:]"]
    d = dims[k]
    if isinstance(d, int) and d >= 2:
        j = r.randrange(1, d)
        opts.append(f"concat([{c}[{pre}{j}:], {c}[{pre}:{j}]], axis={g.axis(rank, k)})")
        opts.append(f"concat([{c}[{pre}{-j}:], {c}[{pre}:{-j}] * {half}], axis={g.axis(rank, k)})")
    opts.append(f"{c} + sum(concat([{c}[..., :1], {c}[..., -1:] * {half}], axis=-1), axis=-1, keepdims=true)")
    return r.choice(opts)


def _index_step(g: _Gen, c: str, dt: str, dims: list, k: int) -> str:
    r = g.r
    rank = len(dims)
    it = r.choice(["i32", "i64"])
    kind = r.randrange(3)
    if kind == 0:
        p = g.param(it, [dims[k]])
        return f"gather({c}, {p}, axis={g.axis(rank, k)})"
    if kind == 1:
        shp = list(dims)
        for j in range(rank):
            if j != k and r.random() < 0.3:
                shp[j] = 1
        p = g.param(it, shp)
        g.neg_index[p] = k
        return f"take_along_axis({c}, {p}, axis={g.axis(rank, k)})"
    if rank >= 2 and k == 0:
        p = g.param(it, [dims[0]])
        return f"embedding({c}, {p})" if rank == 2 else f"gather({c}, {p}, axis=0)"
    p = g.param(it, [dims[k]])
    return f"gather({c}, {p}, axis={k})"


def make_source(seed: int) -> tuple[str, dict[str, int], str, dict[str, int]]:
    r = random.Random(seed)
    g = _Gen(r)
    dt = r.choices([d for d, _ in DTYPE_WEIGHTS], weights=[w for _, w in DTYPE_WEIGHTS])[0]
    rank = r.choice([1, 2, 2, 2, 3])
    names = ["B", "M", "N"][3 - rank:]
    dims = [r.choice([1, 2, 3, 4]) if r.random() < 0.25 else s for s in names]
    x = g.param(dt, dims)
    vals = [x]
    lines = []
    for i in range(r.randint(1, 5)):
        c = vals[-1]
        expr = (_steps_float if dt in FLOAT_DTYPES else _steps_int)(g, c, dt, dims)
        if i and r.random() < 0.4:
            for _ in range(r.randint(1, 2)):
                expr = f"({expr}) + {r.choice(vals[:-1])}"
        name = f"t{i}"
        lines.append(f"    {name} = {expr}\n")
        vals.append(name)
    last = vals[-1]
    tshape = f"{dt}[{', '.join(map(str, dims))}]"
    rets, types = [last], [tshape]
    extra = r.sample(["sum", "mid", "arg", "mask"], r.randint(0, 2))
    for e in extra:
        if e == "sum":
            rets.append(f"sum({last})")
            types.append(dt)
        elif e == "mid" and len(vals) > 2:
            rets.append(vals[len(vals) // 2])
            types.append(tshape)
        elif e == "arg":
            rets.append(f"argmax({last}, axis=-1)")
            types.append(f"i64[{', '.join(map(str, dims[:-1]))}]" if rank > 1 else "i64")
        elif e == "mask":
            rets.append(f"{last} > {'0.0' if dt in FLOAT_DTYPES else '0'}")
            types.append(f"bool[{', '.join(map(str, dims))}]")
    ret = types[0] if len(types) == 1 else f"({', '.join(types)})"
    params = ", ".join(f"{n}: {t}" for n, t in g.params)
    src = f"chain r({params}) -> {ret} {{\n" + "".join(lines) + f"    return {', '.join(rets)}\n}}\n"
    binding = {"B": r.randint(1, 3), "M": r.randint(1, 5), "N": r.randint(1, 6), "K": r.randint(1, 4)}
    return src, binding, dt, g.neg_index


def inputs_for(case: Case, typed) -> list[np.ndarray]:
    """Seeded inputs: fusec's random_inputs (indices in range, domains respected), then negative
    indices for take_along_axis (from -n) and special values in about half the chains."""
    from fusec.runtime import reference
    xs = reference.random_inputs(typed, case.binding, seed=case.seed)
    rng = np.random.default_rng([case.seed, 7])
    params = typed.param_nodes
    for j, (p, x) in enumerate(zip(params, xs)):
        if p.name in case.negative_index and x.size:
            flip = rng.random(x.shape) < 0.5          # half the indices counted from the end
            xs[j] = np.where(flip, x - _axis_extent(typed, p, case.binding), x).astype(x.dtype)
    if not case.specials:
        return xs
    for j, (p, x) in enumerate(zip(params, xs)):
        dt = p.type.dtype
        if p.name in case.negative_index or x.size == 0 or _is_index(typed, p):
            continue
        if rng.random() < 0.5:
            continue
        x = x.copy()
        count = max(1, int(x.size * rng.uniform(0.05, 0.3)))
        flat = x.reshape(-1)
        pos = rng.choice(x.size, size=min(count, x.size), replace=False)
        if dt.is_float:
            info = np.finfo(np.float32 if dt.name == "bf16" else dt.np)
            big = float(info.max) * (1e-2 if dt.name != "bf16" else 1e-4)
            if "@" in case.source:
                # a product beyond the range inside a matmul is inf or NaN depending on whether the
                # target contracts it into a fused multiply-add (docs/FDSL.md, matmul's row of
                # "NaN and special values"): keep matmul chains' huge values in range of a product
                big = float(np.cbrt(big)) * 1e-2          # three factors: (x @ x^T) @ x
            pool = [np.nan, np.inf, -np.inf, -0.0, big, -big, float(info.tiny) / 4, 0.0, 1e4]
            if dt.name in ("f16", "bf16"):
                pool[-1] = 300.0
            vals = rng.choice(np.array(pool, dtype=np.float64), size=pos.size)
            flat[pos] = vals.astype(np.float32).astype(x.dtype) if dt.name == "bf16" else vals.astype(x.dtype)
        elif dt.is_int:
            info = np.iinfo(dt.np)
            pool = np.array([info.max, info.min, 0, -1, info.max // 2], dtype=dt.np)
            flat[pos] = rng.choice(pool, size=pos.size)
        xs[j] = flat.reshape(x.shape)
    return xs


def _is_index(typed, p) -> bool:
    users = typed.users()[p.id]
    for u in users:
        n = typed.nodes[u]
        if n.op in ("gather", "embedding", "take_along_axis", "index", "gather_nd") and n.inputs[0] != p.id:
            return True
    return False


def _axis_extent(typed, p, binding) -> int:
    """The extent of the axis that index parameter `p` indexes in its take_along_axis."""
    for u in typed.users()[p.id]:
        n = typed.nodes[u]
        if n.op == "take_along_axis":
            return typed.nodes[n.inputs[0]].type.concrete(binding)[n.attr("axis")]
    return 0


def chain_case(seed: int) -> Case:
    src, binding, dt, neg = make_source(seed)
    specials = random.Random(seed * 7919 + 1).random() < 0.5
    return Case(seed, src, binding, dt, specials, neg)
