"""The special-values matrix: every elementwise op, reduction and scan of the op table (dsl/ops.py) on
IEEE special values, as one FDSL chain per dtype, and the position-by-position check of a
target's outputs against the reference.

Values per dtype: +-0, the smallest denormal, the smallest normal, +-1, the values at each op's
thresholds (exp's last finite and first infinite argument, its last normal and first zero
result, the same for exp(-x) inside sigmoid and silu, square's and gelu's x**3 overflow, tanh's
saturation, the poles of log, log1p and reciprocal), +-large, the largest finite, +-inf and NaN.
The unary ops, casts there and back included, see all of them; the binary ops and comparisons
every pair of a smaller set (an outer product by broadcasting); the reductions, arg-reductions,
softmax and scans (along the rows and down the columns) rows holding NaN (first and last), +-inf,
only -inf, both infinities, signed zeros (-0 first), 0 and inf, overflowing sums and denormals.

Compiling is the cost (on the cpu, each kernel is a parallel loop Numba compiles), so the ops of
one iteration space are one output of one kernel: `where(s == 0, exp(x), where(s == 1, tanh(x),
...))` with the selector s = [0, 1, ...] along a leading axis; row i of the output is op i.
A select moves its operand's bits unchanged, so each row is exactly the op's result.
"""
from __future__ import annotations

import contextlib
import re
import sys
from dataclasses import dataclass

import numpy as np

from fusec.dsl.ops import BINARY, COMPARE, OPS, REDUCTIONS, UNARY
from fusec.dsl.ops.elementwise import LOGICAL
from fusec.dsl.ops.reduction import BOOL_REDUCTIONS

NP = {"f16": np.float16, "f32": np.float32, "f64": np.float64}
DTYPES = tuple(NP)


@contextlib.contextmanager
def fast_simulator():
    """Numba's CUDA simulator runs each block's threads as Python threads and polls them in a
    loop; at Python's default thread switch interval (5 ms) every cuda.syncthreads() of a row
    kernel costs milliseconds of that loop. A shorter interval while the simulator runs: the
    same results, row kernels several times faster."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(2e-4)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def unary_values(dtype: str) -> np.ndarray:
    t = NP[dtype]
    fi = np.finfo(t)
    big, tiny, sub, eps = float(fi.max), float(fi.tiny), float(fi.smallest_subnormal), float(fi.eps)
    ln_max, ln_tiny, ln_sub = np.log(big), np.log(tiny), np.log(sub)
    large = 1e3 if dtype == "f16" else 1e4
    vals = [0.0, -0.0, sub, -sub, tiny, -tiny, 1e-3, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 9.0, -9.0,
            10.0, -10.0, 20.0, -20.0,
            ln_max * (1 - 4 * eps), ln_max * (1 + 4 * eps),        # exp: last finite, first inf
            -ln_max * (1 - 4 * eps), -ln_max * (1 + 4 * eps),      # exp(-x) in sigmoid, silu
            ln_tiny, ln_sub * (1 - 4 * eps), ln_sub * 1.05,        # exp: normal, denormal, 0
            np.sqrt(big) * 0.99, np.sqrt(big) * 1.01, -np.sqrt(big) * 1.01,   # square overflows
            big ** (1 / 3) * 1.01, -big ** (1 / 3) * 1.01,         # gelu's x**3 overflows
            large, -large, big / 2, -big / 2, big, -big, np.inf, -np.inf, np.nan]
    return np.array(vals, dtype=np.float64).astype(t)


def pair_values(dtype: str) -> np.ndarray:
    """Operands of the binary ops (every pair): fewer values, the classes that matter."""
    fi = np.finfo(NP[dtype])
    vals = [0.0, -0.0, float(fi.smallest_subnormal), 1.0, -1.0, -2.5, float(fi.max), np.inf, -np.inf, np.nan]
    return np.array(vals, dtype=np.float64).astype(NP[dtype])


def row_values(dtype: str) -> np.ndarray:
    """Rows of 4 for the reductions and normalisations."""
    fi = np.finfo(NP[dtype])
    big, sub = float(fi.max), float(fi.smallest_subnormal)
    inf, nan = np.inf, np.nan
    rows = [
        [1.0, -2.0, 0.5, 3.0],              # finite
        [1.0, nan, 0.5, 3.0],               # a NaN
        [nan, 1.0, 0.5, 3.0],               # a NaN first
        [1.0, inf, 0.5, 3.0],               # +inf
        [1.0, -inf, 0.5, 3.0],              # -inf
        [-inf, -inf, -inf, -inf],           # only -inf (softmax: NaN)
        [inf, inf, inf, inf],               # only +inf
        [inf, -inf, 1.0, 2.0],              # both infinities
        [0.0, -0.0, -0.0, 0.0],             # signed zeros
        [-0.0, -0.0, -0.0, -0.0],           # only -0
        [big, big, -1.0, 1.0],              # the sum overflows (in any order)
        [-big, -big, 1.0, 1.0],
        [sub, sub, -sub, sub],              # denormals
        [nan, inf, -inf, 0.0],              # NaN among infinities
        [20.0, -20.0, 80.0, -80.0],         # large logits
        [-0.0, 0.0, 0.0, -0.0],             # -0 first: argmax and argmin 0 (-0 equals +0)
        [1.0, 3.0, 3.0, nan],               # a NaN last: argmax 3, not the first 3.0
        [0.0, inf, 2.0, -1.0],              # cumprod: 0 * inf is NaN from there
    ]
    return np.array(rows, dtype=np.float64).astype(NP[dtype])


@dataclass(frozen=True)
class Kernel:
    """Ops over one iteration space, packed into one output: row i is `exprs[i]`."""
    name: str
    labels: tuple[str, ...]
    exprs: tuple[str, ...]
    shape: str           # the shape of one op's result, FDSL dims: "1, N"

    def selector(self) -> str:
        return f"s_{self.name}"

    def selector_shape(self) -> tuple[int, ...]:
        """A leading unit dim of the op's shape becomes the op axis; else one is prepended."""
        rank = len(self.shape.split(",")) if self.shape else 0
        lead = self.shape.startswith("1,")
        return (len(self.exprs),) + (1,) * (rank - 1 if lead else rank)

    def packed(self) -> str:
        s = self.selector()
        e = self.exprs[-1]
        for i in range(len(self.exprs) - 2, -1, -1):
            e = f"where({s} == {i}, {self.exprs[i]}, {e})"
        return e


def groups(dtype: str) -> list[Kernel]:
    unary = [(op, f"{op}(x)") for op in UNARY] + [("gelu", "gelu(x)"), ("gelu none", 'gelu(x, approximate="none")')]
    # casts there and back (to another float rounds: overflow to inf, NaN, -0, denormals), and to bool
    unary += [(f"cast {d}", f"cast(cast(x, {d}), {dtype})") for d in DTYPES if d != dtype]
    unary += [("cast bool", f"cast(cast(x, bool), {dtype})")]
    binary = [(op, f"{op}(a, b)") for op in BINARY] + [
        ("where", "where(a > b, a, b)"), ("clamp lo", "clamp(a, b, 1.0)"), ("clamp hi", "clamp(a, -1.0, b)")]
    binary += [(op, f"cast({op}(a, b), {dtype})") for op in COMPARE]          # bool as 0 / 1
    unary += [("logical_not", f"cast(logical_not(x > 0.0), {dtype})")]
    binary += [(op, f"cast({op}(a > 0.0, b < 1.0), {dtype})") for op in LOGICAL if op != "logical_not"]
    rows = [(f"{op} rows", f"{op}(r, axis=-1)") for op in REDUCTIONS]
    rows += [(f"{op} rows", f"cast({op}(r, axis=-1), {dtype})") for op in ("argmax", "argmin")]     # i64 as a float
    rows += [(f"{op} rows", f"cast({op}(r > 0.0, axis=-1), {dtype})") for op in BOOL_REDUCTIONS]    # bool as 0 / 1
    cols = [("max cols", "max(r, axis=0)")]            # a reduction along the outer axis
    whole = [("max all", "max(r)")]                    # every axis: R * C partials, not a power of 2
    norms = [("softmax", "softmax(r)"), ("log_softmax", "log_softmax(r)")]
    scans = [("cumsum", "cumsum(r)"), ("cumprod", "cumprod(r)"),                   # along the rows
             ("cumsum cols", "cumsum(r, axis=0)"), ("cumprod cols", "cumprod(r, axis=0)")]

    def g(name, items, shape):
        return Kernel(name, tuple(label for label, _ in items), tuple(e for _, e in items), shape)
    return [g("unary", unary, "1, N"), g("binary", binary, "1, K, K"), g("rows", rows, "R"), g("cols", cols, "C"),
            g("whole", whole, ""), g("norms", norms, "1, R, C"), g("scans", scans, "1, R, C")]


# the ops of the op table the matrix leaves out, and why (softmax and log_softmax are in: rows with
# NaN and infinities are where they go wrong; layernorm and rmsnorm are sums, sqrt and divisions)
NOT_COVERED = {
    "layernorm": "a normalisation of sums: its terms are covered",
    "rmsnorm": "a normalisation of sums: its terms are covered",
    "matmul": "a contraction (BLAS on the cpu), not elementwise or a reduction",
    "conv2d": "a contraction, not elementwise or a reduction",
    "batchnorm": "elementwise per channel: its terms (sub, div, sqrt, mul, add) are covered",
    "transpose": "moves values", "permute": "moves values", "reshape": "moves values",
    "broadcast_to": "moves values",
    "slice": "moves values", "concat": "moves values", "gather": "moves values", "embedding": "moves values",
    "take_along_axis": "moves values", "gather_nd": "moves values", "index": "moves values",
    "split": "no op of its own: the checker makes its parts slices",
    **{op: "windowed reductions over NCHW: tests/numerics/test_pooling.py places NaN, signed zeros and infinities "
           "in their windows" for op in ("max_pool2d", "avg_pool2d", "adaptive_avg_pool2d")},
    "full": "makes a tensor of one static value (inf and nan: test_nan_semantics.py)",
    "full_like": "makes a tensor of one static value", "arange": "makes integers from static arguments",
}


def covered_ops_of(group: Kernel) -> set[str]:
    return {name for e in group.exprs for name in re.findall(r"(\w+)\(", e)}


def covered_ops(dtype: str) -> set[str]:
    return {name for g in groups(dtype) for name in covered_ops_of(g)}


def program(dtype: str, only: tuple[str, ...] | None = None) -> tuple[str, list[Kernel], list[np.ndarray]]:
    """(FDSL source, its groups in output order, the inputs) of the matrix chain for `dtype`,
    of every group or those named in `only`."""
    x, p, r = unary_values(dtype), pair_values(dtype), row_values(dtype)
    dims = {"N": x.size, "K": p.size, "R": r.shape[0], "C": r.shape[1]}
    grs = [g for g in groups(dtype) if only is None or g.name in only]
    params = [f"x: {dtype}[1, {x.size}]", f"a: {dtype}[1, {p.size}, 1]", f"b: {dtype}[1, 1, {p.size}]",
              f"r: {dtype}[{r.shape[0]}, {r.shape[1]}]"]
    inputs = [x.reshape(1, -1), p.reshape(1, -1, 1), p.reshape(1, 1, -1), r]
    results, body = [], []
    for gr in grs:
        shape = [dims.get(d.strip(), d.strip()) for d in gr.shape.split(",")] if gr.shape else []
        if len(gr.exprs) > 1:
            sel = gr.selector_shape()
            params.append(f"{gr.selector()}: i32[{', '.join(map(str, sel))}]")
            inputs.append(np.arange(len(gr.exprs), dtype=np.int32).reshape(sel))
            shape = [len(gr.exprs)] + shape[1:] if gr.shape.startswith("1,") else [len(gr.exprs)] + shape
        results.append(f"{dtype}[{', '.join(map(str, shape))}]" if shape else dtype)
        body.append(gr.packed())
    src = (f"chain special_{dtype}({', '.join(params)})\n    -> ({', '.join(results)}) {{\n"
           f"    return {', '.join(body)}\n}}\n")
    return src, grs, inputs


# ------------------------------------------------------------------------------------- the check

RTOL = {"f16": 2e-3, "f32": 2e-5, "f64": 1e-12}


def mismatches(label: str, got, want, dtype: str, where=None, finite: bool = True) -> list[str]:
    """Position by position: a NaN where the reference has none or the reverse, an infinity (with
    its sign) that differs, and (`finite`) a zero whose sign differs or a finite value outside
    |got - want| <= rtol |want| + 4 denormals. `where(idx)` describes a position (the inputs)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return [f"{label}: shape {got.shape} vs the reference's {want.shape}"]
    rtol = RTOL[dtype]
    atol = 4 * float(np.finfo(NP[dtype]).smallest_subnormal)
    g, w = got.astype(np.float64), want.astype(np.float64)
    out = []
    with np.errstate(all="ignore"):
        for idx in np.ndindex(w.shape):
            a, e = g[idx], w[idx]
            if want.dtype == np.bool_:
                bad = bool(a) != bool(e)
            elif np.isnan(e) or np.isnan(a):
                bad = np.isnan(e) != np.isnan(a)
            elif np.isinf(e) or np.isinf(a):
                bad = a != e
            elif not finite:
                bad = False
            elif e == 0 and a == 0:
                bad = np.signbit(a) != np.signbit(e)
            else:
                bad = abs(a - e) > rtol * abs(e) + atol
            if bad:
                at = where(idx) if where else f"at {list(idx)}"
                out.append(f"{label}: {_show(got[idx])} where the reference has {_show(want[idx])} {at}")
    return out


def _show(v) -> str:
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    v = float(v)
    return "-0" if v == 0 and np.signbit(v) else f"{v:.9g}"


def check(dtype: str, groups_: list[Kernel], got: list, want: list, inputs: list[np.ndarray],
          specials_only: frozenset[str] = frozenset()) -> list[str]:
    """Every group's rows against the reference's; messages name the op and the inputs. Ops in
    `specials_only` are checked for their NaN and infinities only (a known inaccuracy)."""
    x, a, b, r = inputs[0].reshape(-1), inputs[1].reshape(-1), inputs[2].reshape(-1), inputs[3]
    out = []
    for gr, g, w in zip(groups_, got, want):
        g, w = np.asarray(g), np.asarray(w)
        rows = [(gr.labels[0], g, w)] if len(gr.exprs) == 1 else [
            (label, g[i], w[i]) for i, label in enumerate(gr.labels)]
        for label, gi, wi in rows:
            def where(idx, gr=gr):
                if gr.name == "unary":
                    return f"for x = {_show(x[idx[-1]])}"
                if gr.name == "binary":
                    return f"for ({_show(a[idx[-2]])}, {_show(b[idx[-1]])})"
                if gr.name == "rows":
                    return f"for the row {[_show(v) for v in r[idx[-1]]]}"
                if gr.name == "cols":
                    return f"for the column {idx[-1]}"
                if gr.name in ("norms", "scans"):
                    return f"at {idx[-1]} of the row {[_show(v) for v in r[idx[-2]]]}"
                return f"at {list(idx)}"
            out += mismatches(label, gi, wi, dtype, where, finite=label not in specials_only)
    return out
