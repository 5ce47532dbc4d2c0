"""The per-op numerics cases, shared by the targets' matrices: test_jit_ops.py (mlir-jit, every op)
and tests/numerics/test_indexing_ops.py (cpu and cuda-sim, issue 17's ops).

A Case lists an op's tensor arguments (a shape: a parameter of the test dtype; C: a constant of
the test dtype; P: a parameter of a fixed dtype), its static attributes and the dtypes it runs in.
`build` packs several (op, case) pairs into one chain, one output each, with seeded inputs: index
parameters of gather, embedding, take_along_axis, gather_nd and index are drawn within the axis they
index (both ends included; from -n for the last three, which count a negative index from the end), and
SPECIAL_RANGES narrows other integer parameters where an op needs it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from chainbuild import ChainBuilder, random_input
from fusec.dsl.ops import BINARY, COMPARE, OPS, UNARY
from fusec.dsl.shapes import normalize_axis
from fusec.dsl.types import DTYPES

FLOATS = ("f32", "f64", "f16", "bf16")
INTS = ("i32", "i64")
NUMERIC = FLOATS + INTS
ALL = NUMERIC + ("bool",)


@dataclass(frozen=True)
class C:
    """A constant of the test dtype."""
    value: float


@dataclass(frozen=True)
class P:
    """A parameter of a fixed dtype (not the test dtype)."""
    shape: tuple
    dtype: str


@dataclass(frozen=True)
class Case:
    args: tuple                          # per tensor arg: shape (param of the test dtype) | C | P
    attrs: dict = field(default_factory=dict)
    dtypes: tuple | None = None          # None: the op's default dtypes
    bind: dict = field(default_factory=dict)     # sizes of the symbols in the shapes


def domain_dtypes(op: str) -> tuple:
    if op in UNARY:
        return FLOATS if UNARY[op][0] == "float" else NUMERIC
    if op in BINARY:
        return FLOATS if BINARY[op][1] == "float" else NUMERIC
    return FLOATS


# int pow: NumPy refuses negative integer exponents, so draw exponents from [0, 3].
SPECIAL_RANGES = {("pow", 1): (0, 3)}
INDEXING = ("gather", "embedding", "take_along_axis", "gather_nd", "index")   # arguments 1... index argument 0


def _r(start=None, stop=None, step=None):
    return ("range", start, stop, step)


def _at(i):
    return ("at", i)


_ALL_AXIS = _r()

# issue 17's ops (split is not one: the checker makes its parts slices). Odd sizes, negative axes
# and steps, dropped axes, rank-0 results, keepdims, symbolic extents; ints and floats with ties
# for the arg-reductions (their inputs are drawn on a grid of halves).
INDEXING_CASES: dict[str, list[Case]] = {
    "slice": [
        Case(((5, 7),), {"items": (_r(1, None, 2), _at(-1))}, dtypes=ALL),            # a step, a dropped axis
        Case(((5, 7),), {"items": (_r(None, None, -1), _r(-2, 0, -2))}, dtypes=ALL),   # negative steps
        Case(((3, 4, 5),), {"items": (_at(1), _at(-1), _at(2))}, dtypes=ALL),          # rank 0
        Case(((3, 4, 5),), {"items": (_ALL_AXIS, _r(1, 3), _r(-4, None, 3))}),
        Case(((9,),), {"items": (_r(7, 0, -3),)}),
        Case(((2, 1, 6),), {"items": (_r(-1, None, -1), _at(0), _r(None, None, 5))}),
        Case((("N", 3),), {"items": (_r(-2), _r(None, None, -1))}, bind={"N": 5}),     # N - 2 as the start
        Case((("L", 3),), {"items": (_r(None, None, -1), _at(-1))}, bind={"L": 4}),     # keeps L, reversed
    ],
    "concat": [
        Case(((2, 3), (4, 3), (1, 3)), {"axis": 0}, dtypes=ALL),
        Case(((2, 3), (2, 1)), {"axis": -1}, dtypes=ALL),
        Case(((5,),), {"axis": 0}),                                                     # one part
        Case(((2, 1, 3), (2, 2, 3), (2, 1, 3)), {"axis": 1}),
        Case(((3,), (1,)), {"axis": -1}),
        Case((("S", 2), ("S", 3)), {"axis": 1}, bind={"S": 3}),                       # a symbolic other axis
    ],
    "gather": [
        Case(((5, 3), P((4,), "i64")), {"axis": 0}, dtypes=ALL),
        Case(((2, 5, 3), P((2, 3), "i32")), {"axis": -2}, dtypes=ALL),                # the index's axes go in
        Case(((4, 6), P((), "i64")), {"axis": 1}),                                     # a scalar index: the axis goes
        Case(((7,), P((), "i32")), {"axis": 0}),                                       # rank 0
        Case(((3, 2, 7), P((5,), "i32")), {"axis": -1}),
        Case(((1, 3), P((3, 1), "i64")), {"axis": 0}),                                 # an axis of one
        Case((("V", 3), P((4,), "i64")), {"axis": 0}, bind={"V": 6}),
    ],
    "embedding": [
        Case(((6, 4), P((3,), "i64")), dtypes=ALL),
        Case(((5, 3), P((2, 3), "i32")), dtypes=ALL),
        Case(((4, 5), P((), "i64"))),                                                  # one id: one row
        Case(((1, 5), P((3,), "i32"))),                                                # one row only
        Case(((9, 1), P((2, 2, 2), "i64"))),
    ],
    "take_along_axis": [
        Case(((4, 5), P((4, 3), "i64")), {"axis": 1}, dtypes=ALL),
        Case(((3, 4, 2), P((3, 6, 2), "i32")), {"axis": -2}, dtypes=ALL),             # more indices than x has
        Case(((1, 5), P((3, 2), "i32")), {"axis": 1}),                                 # x broadcast on axis 0
        Case(((4, 6, 3), P((1, 2, 1), "i64")), {"axis": 1}),                           # idx broadcast on 0 and 2
        Case(((7,), P((9,), "i32")), {"axis": 0}),                                     # rank 1
        Case((("W", 3), P((2, 3), "i64")), {"axis": 0}, bind={"W": 5}),
    ],
    "gather_nd": [
        Case(((4, 5), P((3, 2), "i64")), dtypes=ALL),                                  # whole elements
        Case(((4, 5, 3), P((2, 2, 1), "i32")), dtypes=ALL),                            # rows: x's last axes kept
        Case(((3, 4, 5), P((3, 2, 2), "i64")), {"batch_dims": 1}),
        Case(((2, 3, 4, 2), P((2, 3, 1), "i32")), {"batch_dims": 2}),
        Case(((6,), P((1,), "i64"))),                                                  # rank 0
        Case(((3, 5), P((2,), "i32"))),                                                # one index: rank 0
        Case((("Q", 4), P((5, 1), "i64")), bind={"Q": 3}),
    ],
    "index": [
        Case(((4, 5), P((3,), "i64")), dtypes=ALL),                                     # x[i]: rows
        Case(((4, 5, 3), P((2, 3), "i32"), P((3,), "i64")), {"axes": (0, 2)}, dtypes=ALL),   # x[i, :, j]: S first
        Case(((4, 5, 3), P((2, 1), "i64"), P((4,), "i64")), {"axes": (1, 2)}),          # x[:, i, j]: S in place
        Case(((3, 6), P((), "i32")), {"axes": (1,)}),                                  # x[:, k]: the axis goes
        Case(((5,), P((2, 2), "i64"))),                                                # rank 1
        Case((("U", 2, 3), P((4,), "i64"), P((4,), "i32"), P((1,), "i64")), bind={"U": 4}),   # every axis
    ],
    **{op: [
        Case(((3, 5),)),                                                               # the last axis
        Case(((4, 3, 2),), {"axis": 0}),
        Case(((2, 7, 3),), {"axis": -2}),
        Case(((9,),), {"axis": -1}),
        Case(((1,),)),
        Case((("T", 4),), {"axis": 0}, bind={"T": 3}),
    ] for op in ("cumsum", "cumprod")},
    **{op: [
        Case(((3, 5),)),
        Case(((4, 3, 2),), {"axis": 0, "keepdims": True}),
        Case(((2, 7, 3),), {"axis": -2}),
        Case(((6,),)),                                                                 # rank 0
        Case(((5,),), {"keepdims": True}),
        Case(((1, 4),), {"axis": 0}),                                                  # an axis of one: 0
        Case((("R", 5),), {"axis": -1, "keepdims": True}, bind={"R": 3}),
    ] for op in ("argmax", "argmin")},
}
NUMERIC_OPS = ("cumsum", "cumprod", "argmax", "argmin")      # the others take any dtype
DISCRETE = set(COMPARE) | {"argmax", "argmin"}               # inputs on a grid: equal values meet


def dtypes_of(op: str, case: Case) -> tuple:
    if case.dtypes is not None:
        return case.dtypes
    if op in INDEXING_CASES:
        return NUMERIC if op in NUMERIC_OPS else ALL
    return domain_dtypes(op)


def _tensor_arg(op: str, i: int):
    args = OPS[op].tensor_args
    return args[-1] if i >= len(args) and args[-1].kind == "tensors" else args[i]


def _concrete(shape, bind: dict) -> tuple:
    return tuple(bind[d] if isinstance(d, str) else d for d in shape)


def _index_input(rng, op: str, case: Case, spec: P, ai: int = 1) -> np.ndarray:
    """Indices within the indexed axis, its first and last position among them; for
    take_along_axis and gather_nd, from -n to n - 1 (negative ones count from the end)."""
    table = _concrete(case.args[0], case.bind)
    shape = _concrete(spec.shape, case.bind)
    if op == "gather_nd":
        b = case.attrs.get("batch_dims", 0)
        extents = np.array(table[b:b + shape[-1]])
        x = rng.integers(-extents, extents, size=shape)
        if x[..., 0].size >= 2:
            x.reshape(-1, shape[-1])[0], x.reshape(-1, shape[-1])[-1] = extents - 1, -extents
        return x.astype(DTYPES[spec.dtype].np)
    axis = case.attrs.get("axes", range(len(case.args) - 1))[ai - 1] if op == "index" else case.attrs.get("axis", 0)
    n = table[normalize_axis(axis, len(table))]
    lo = -n if op in ("take_along_axis", "index") else 0
    x = rng.integers(lo, n, size=shape)
    flat = x.reshape(-1)
    if flat.size >= 2:
        flat[0], flat[-1] = n - 1, lo
    return x.astype(DTYPES[spec.dtype].np)


def build(name: str, items: list[tuple], dtype: str | None, rng, special_ranges: dict = SPECIAL_RANGES) -> tuple:
    """(chain, inputs) of one chain whose outputs are each (op, case) of `items` in `dtype`, or
    (op, case, dtype) in that one."""
    b = ChainBuilder(name)
    inputs, outs = [], []
    for ci, (op, case, *own) in enumerate(items):
        test_dtype = own[0] if own else dtype
        ids = []
        for ai, spec in enumerate(case.args):
            arg = _tensor_arg(op, ai)
            if isinstance(spec, C):
                value = spec.value if test_dtype not in ("i32", "i64", "bool") else int(spec.value)
                ids.append(b.const(bool(value) if test_dtype == "bool" else value, test_dtype))
                continue
            shape, dt = (spec.shape, spec.dtype) if isinstance(spec, P) else (spec, test_dtype)
            ids.append(b.param(f"a{ci}_{ai}", dt, shape))
            concrete = _concrete(shape, case.bind)
            if op in INDEXING and (ai == 1 or op == "index" and ai >= 1):
                inputs.append(_index_input(rng, op, case, spec, ai))
            elif (op, ai) in special_ranges and dt in INTS:
                lo, hi = special_ranges[(op, ai)]
                inputs.append(rng.integers(lo, hi + 1, size=concrete).astype(DTYPES[dt].np))
            else:
                inputs.append(random_input(rng, dt, concrete, positive=arg.positive, discrete=op in DISCRETE))
        outs.append(b.op(op, *ids, **case.attrs))
    return b.build(*outs), inputs
