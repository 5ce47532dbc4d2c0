"""Numerics of every op-table operator on the MLIR CPU JIT against the NumPy reference.

For each (op, dtype) all the op's cases become the outputs of one chain, so one JIT compile
covers them (compiling is the cost). Tolerances come from the one per-dtype table
(fusec.runtime.compare.TOLERANCES). An op in dsl/ops.py without cases here fails
test_every_op_has_cases.
"""
from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

from chainbuild import ChainBuilder
from fusec.compiler.jit import jit_run
from fusec.dsl.ops import BINARY, COMPARE, DESUGARED, OPS, UNARY
from fusec.runtime.compare import compare
from fusec.runtime.reference import run_chain
from opcases import ALL, INDEXING_CASES, NUMERIC, SPECIAL_RANGES, C, Case, P, build, dtypes_of

UNARY_CASES = [Case(((2, 3),)), Case(((),)), Case(((1, 4, 1),))]
BROADCAST_CASES = [
    Case(((2, 3), (2, 3))),
    Case(((2, 3), ())),                  # rank-0 scalar parameter
    Case(((2, 3), C(2.0))),              # typed constant
    Case((C(3.0), (2, 3))),              # constant on the left
    Case(((1, 4), (3, 1))),              # [1,N] vs [M,1]
    Case(((2, 3, 4), (4,))),             # leading-dim broadcast
    Case(((3, 1), (2, 1, 4))),
]
REDUCE_CASES = [
    Case(((2, 3, 4),), {"axis": None}),
    Case(((2, 3, 4),), {"axis": -1}),                       # negative axis
    Case(((2, 3, 4),), {"axis": 1, "keepdims": True}),
    Case(((2, 3, 4),), {"axis": [0, 2]}),                    # axis list
    Case(((2, 3, 4),), {"axis": [-1, -3], "keepdims": True}),
    Case(((2, 3, 4),), {"axis": None, "keepdims": True}),
    Case(((),), {"axis": None}),
]

CASES: dict[str, list[Case]] = {
    **{op: UNARY_CASES for op in UNARY},
    "gelu": [Case(((2, 3),)), Case(((2, 3),), {"approximate": "none"}), Case(((),))],
    **{op: BROADCAST_CASES for op in BINARY},
    **{op: BROADCAST_CASES[:2] + [Case(((1, 4), (3, 1)), dtypes=ALL), Case(((2, 3), C(0.5)))] for op in COMPARE},
    "where": [
        Case((P((2, 3), "bool"), (2, 3), (2, 3)), dtypes=ALL),
        Case((P((3, 1), "bool"), (1, 4), ()), dtypes=ALL),
        Case((P((), "bool"), (2, 3), C(1.0))),
    ],
    "clamp": [Case(((2, 3), C(-0.5), C(0.5))), Case(((2, 3), (3,), ())), Case(((2, 1), (1, 3), C(1.0)))],
    "cast": [Case(((2, 3),), {"dtype": d}, dtypes=ALL) for d in ALL],
    **{op: REDUCE_CASES for op in ("sum", "max", "min", "prod")},
    "mean": REDUCE_CASES,
    "softmax": [Case(((2, 5),)), Case(((3, 4, 2),), {"axis": 1}), Case(((3, 4),), {"axis": 0})],
    "log_softmax": [Case(((2, 5),)), Case(((3, 4, 2),), {"axis": -2})],
    "layernorm": [
        Case(((2, 3, 4), (4,), (4,))),
        Case(((2, 3, 4), (3, 4), ()), {"axis": [-2, -1], "eps": 1e-3}),
        Case(((2, 3, 4), C(1.5), C(0.25)), {"axis": [0, 2]}),
    ],
    "rmsnorm": [Case(((2, 3, 4), (4,))), Case(((2, 3, 4), (3, 1)), {"axis": [1, 2], "eps": 1e-3})],
    "batchnorm": [
        Case(((2, 3, 4, 4), (3,), (3,), (3,), (3,))),
        Case(((4, 3), (3,), (3,), (3,), (3,)), {"eps": 1e-3}),
        Case(((2, 3, 5), (3,), (3,), (3,), (3,))),
    ],
    "matmul": [Case(s, dtypes=NUMERIC) for s in [
        ((3, 4), (4, 5)),
        ((2, 3, 4), (4, 5)),             # b 2-D: batch folds into M
        ((2, 3, 4), (1, 4, 5)),          # b's batch all ones
        ((2, 3, 4), (2, 4, 5)),          # same batch: batch_matmul
        ((2, 2, 3, 4), (2, 2, 4, 5)),    # two batch dims collapse into one
        ((2, 1, 4, 8), (3, 8, 5)),       # broadcast batch dims: contraction generic
        ((4, 8), (2, 8, 5)),             # a 2-D, b batched
        ((1, 3, 4), (1, 4, 2)),
    ]],
    "conv2d": [
        Case(((1, 2, 5, 5), (3, 2, 3, 3))),
        Case(((2, 2, 6, 6), (3, 2, 3, 3)), {"stride": 2, "padding": 1}),
        Case(((1, 2, 7, 7), (2, 2, 3, 3), (2,)), {"dilation": 2, "padding": 2}),
        Case(((1, 3, 7, 6), (4, 3, 3, 2), (4,)), {"stride": (2, 1), "padding": (0, 1), "dilation": (1, 2)}),
        Case(((1, 2, 4, 4), (3, 2, 1, 1)), {"stride": 3}),
    ],
    "max_pool2d": [
        Case(((2, 3, 7, 8),), {"kernel": 3, "stride": 2, "padding": 1}),
        Case(((1, 2, 7, 8),), {"kernel": (2, 3), "stride": (2, 3), "padding": 1, "dilation": (2, 1), "ceil_mode": True}),
        Case(((1, 2, 5, 5),), {"kernel": 2}),
    ],
    "avg_pool2d": [
        Case(((2, 3, 7, 8),), {"kernel": 3, "stride": 2, "padding": 1}),
        Case(((1, 2, 7, 8),), {"kernel": (3, 2), "stride": 2, "padding": 1, "ceil_mode": True,
                               "count_include_pad": False}),
        Case(((1, 2, 6, 5),), {"kernel": 3, "padding": 1, "ceil_mode": True}),
    ],
    "adaptive_avg_pool2d": [
        Case(((2, 3, 7, 8),), {"output_size": 1}),
        Case(((1, 2, 7, 8),), {"output_size": (3, 5)}),
        Case(((1, 2, 6, 8),), {"output_size": (3, 2)}),
    ],
    "transpose": [Case(((2, 3),), dtypes=ALL), Case(((2, 3, 4),), dtypes=ALL)],
    "permute": [Case(((2, 3, 4),), {"perm": [2, 0, 1]}, dtypes=ALL), Case(((2, 3, 4),), {"perm": [0, -1, 1]}),
                Case(((2, 3),), {"perm": [0, 1]})],
    "reshape": [Case(((2, 3, 4),), {"shape": s}, dtypes=ALL) for s in
                ([6, 4], [2, 12], [4, 6], [-1], [2, 3, 2, 2], [24, 1], [1, 2, 1, 12])]
               + [Case(((),), {"shape": [1, 1]}), Case(((1, 1),), {"shape": []})],
    "broadcast_to": [Case(((3, 1),), {"shape": [2, 3, 4]}, dtypes=ALL), Case(((),), {"shape": [2, 2]}),
                     Case(((4,),), {"shape": [3, 4]}), Case((C(1.5),), {"shape": [2, 3]})],
    **INDEXING_CASES,       # issue 17's ops (opcases.py; tests/numerics/test_indexing_ops.py runs them compiled)
    # issue 38: the logical ops and any / all on bools (UNARY holds relu6, hardsigmoid, hardswish), creation
    "logical_not": [Case(((2, 3),), dtypes=("bool",)), Case(((),), dtypes=("bool",))],
    **{op: [Case(((1, 4), (3, 1)), dtypes=("bool",)), Case(((2, 3), C(1.0)), dtypes=("bool",))]
       for op in ("logical_and", "logical_or", "logical_xor")},
    **{op: [Case(c.args, c.attrs, dtypes=("bool",)) for c in REDUCE_CASES] for op in ("any", "all")},
    "full": [Case((), {"shape": [2, 3], "value": 1.5}, dtypes=("f32",)),
             Case((), {"shape": [4], "value": -math.inf, "dtype": "f16"}, dtypes=("f32",)),
             Case((), {"shape": [1, 2], "value": 7, "dtype": "i32"}, dtypes=("i32",)),
             Case((), {"shape": [3], "value": True}, dtypes=("bool",))],
    "full_like": [Case(((2, 3),), {"value": 2}, dtypes=NUMERIC), Case(((2, 3),), {"value": True}, dtypes=("bool",)),
                  Case(((2,),), {"value": math.nan, "dtype": "f64"}, dtypes=("i64",))],
    "arange": [Case((), {"start": 5}, dtypes=("i64",)),
               Case((), {"start": 2, "stop": 11, "step": 3, "dtype": "f32"}, dtypes=("f32",)),
               Case((), {"start": 10, "stop": -2, "step": -4, "dtype": "i32"}, dtypes=("i32",))],
}


def _cases_for(op: str, dtype: str) -> list[Case]:
    return [c for c in CASES[op] if dtype in dtypes_of(op, c)]


def _dtypes_for(op: str) -> list[str]:
    seen = []
    for c in CASES.get(op, []):
        for d in dtypes_of(op, c):
            if d not in seen:
                seen.append(d)
    return seen


def _build(op: str, dtype: str, rng):
    return build(f"{op}_{dtype}", [(op, c) for c in _cases_for(op, dtype)], dtype, rng, SPECIAL_RANGES)


def test_every_op_has_cases():
    missing = sorted(set(OPS) - set(CASES) - set(DESUGARED))     # a desugared op reaches no typed chain
    assert not missing, f"ops without numerics cases in {__file__}: {missing}"


@pytest.mark.parametrize("op,dtype", [(op, d) for op in sorted(OPS) for d in _dtypes_for(op)])
def test_op_matches_reference(op, dtype):
    rng = np.random.default_rng(zlib.crc32(f"{op}/{dtype}".encode()))
    chain, inputs = _build(op, dtype, rng)
    got = jit_run(chain, chain.name, inputs)
    want = run_chain(chain, inputs)
    cases = _cases_for(op, dtype)
    for case, g, w, t in zip(cases, got, want, chain.output_types):
        assert g.shape == w.shape and g.dtype == w.dtype, (case, g.shape, g.dtype, w.shape, w.dtype)
        c = compare(g, w, t.dtype.name)
        assert c.ok, f"{op} {dtype} {case}: {c.describe()}"


def test_erf_rank0_reference():
    b = ChainBuilder("erf0")
    chain = b.build(b.op("erf", b.param("x", "f32", ())))
    x = np.asarray(0.5, np.float32)
    (want,) = run_chain(chain, [x])
    (got,) = jit_run(chain, "erf0", [x])
    assert compare(got, want, "f32").ok
