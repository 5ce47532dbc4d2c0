"""One combiner, one place: every stage that knows a reduction's combining op and its neutral
element reads compiler/combiners.py. Here: each stage's set of combiners is the table's (the
lowering's reductions and scans, the row-kernel planner, split-rows, split-reductions,
mark-scans, the scan template, the emitter's scalar rules), and each neutral is one
(combine(neutral, x) is x, bit for bit, for sample values of every dtype: ±0, ±inf, NaN)."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

from fusec.compiler import combiners
from fusec.compiler.combiners import BY_ARITH_OP, BY_REDUCTION, BY_SCAN, TABLE
from fusec.compiler.emit.scalar import _HELPERS, has_rule
from fusec.compiler.errors import CompilerInternalError
from fusec.compiler.mlir import ir, new_context, parse_module
from fusec.compiler.pipeline import run_source_stages
from fusec.compiler.plan import rows
from fusec.compiler.plan.analysis import analyze, tag_ops
from fusec.compiler.transforms import split_reductions
from fusec.compiler.transforms.mark_scans import mark_scans
from fusec.compiler.marks import SCAN, SCAN_AXIS
from fusec.dsl.ops import OPS

FLOATS = (np.float16, np.float32, np.float64)
INTS = (np.int32, np.int64)
FLOAT_SAMPLES = (0.0, -0.0, 1.5, -2.25, 1e-40, -3e38, math.inf, -math.inf, math.nan)


def _lowered(expr: str, dtype: str, swap: tuple[str, str] | None = None) -> str:
    """The linalg text of a chain computing `expr` of x (`dtype`[4, 8]); `swap` replaces one op name."""
    out = "i64" if expr.startswith("arg") else "bool" if expr.startswith(("any(", "all(")) else dtype
    src = f"chain c(x: {dtype}[4, 8]) -> {out}[4] {{\n    return {expr}\n}}\n"
    text = run_source_stages(src, "c.fdsl", ["c"], until="linalg")["linalg"]
    return text.replace(*swap) if swap else text


def _reductions(text: str):
    """The ChainInfo of a linalg module's text, and its reductions' OpInfos."""
    module = parse_module(text, new_context())
    with module.context:
        tag_ops(module)
        (info,) = analyze(module).values()
    return info, [o for o in info.ops if o.kind == "reduction"]


def _bits(x) -> bytes:
    return np.asarray(x).tobytes()


# ---- the table itself --------------------------------------------------------------------

def test_each_op_is_one_form_of_one_combiner():
    ops = [f.op for c in TABLE for f in c.forms()]
    assert len(ops) == len(set(ops)) == len(BY_ARITH_OP)
    assert len(combiners.COMBINERS) == len(TABLE)


def test_a_missing_entry_is_an_internal_error_naming_it():
    for lookup, name in ((combiners.form_of, "subf"), (combiners.of_reduction, "median"), (combiners.of_scan, "cummax")):
        with pytest.raises(CompilerInternalError, match=name) as e:
            lookup(name, "graph")
        assert e.value.stage == "graph"
    with pytest.raises(CompilerInternalError, match="maxnum"):
        combiners.COMBINERS["maxnum"].form("int", "linalg")
    assert combiners.of_op("subf") is None                 # no combiner: the general path, by design


def test_every_form_is_an_arith_op_the_emitter_writes():
    from fusec.compiler.mlir import arith
    for op in BY_ARITH_OP:
        assert hasattr(arith, op) and has_rule(f"arith.{op}"), op


def test_a_neutral_the_planner_cannot_compare_belongs_to_an_idempotent_combiner():
    # plan/rows.py takes any init for them: each of T partials combines it once, which is once
    for c in TABLE:
        for f in c.forms():
            assert not f.bound or c.idempotent, f.op


# ---- neutral elements --------------------------------------------------------------------

def _float_combines(c: combiners.Combiner):
    """The combiner on floats, as NumPy computes it and, for min/max, as the emitter's helper does."""
    yield getattr(np, c.numpy)
    op = c.on_float.op
    if op in _HELPERS:
        scope = {"math": math}
        exec(_HELPERS[op].format(key="f", one="1.0", zero="0.0"), scope)
        yield scope["f"]


@pytest.mark.parametrize("c", [c for c in TABLE if c.on_float], ids=lambda c: c.name)
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.__name__)
def test_the_float_neutral_is_neutral(c, dtype):
    neutral = dtype(c.on_float.value())
    with np.errstate(all="ignore"):
        samples = [dtype(x) for x in FLOAT_SAMPLES]
        for combine in _float_combines(c):
            for x in samples:
                for got in (dtype(combine(neutral, x)), dtype(combine(x, neutral))):
                    if math.isnan(x) and c.numpy in ("fmax", "fmin"):
                        assert _bits(got) == _bits(neutral), (c.name, x)     # maxnum/minnum drop a NaN
                    elif math.isnan(x):
                        assert math.isnan(got), (c.name, x)                  # maximum/minimum keep it
                    else:
                        assert _bits(got) == _bits(x), (c.name, x, got)


@pytest.mark.parametrize("c", [c for c in TABLE if c.on_int], ids=lambda c: c.name)
@pytest.mark.parametrize("dtype", INTS, ids=lambda d: d.__name__)
def test_the_int_neutral_is_neutral(c, dtype):
    width = np.iinfo(dtype).bits
    neutral = dtype(c.on_int.value(width))
    if c.on_int.bound:
        assert neutral in (np.iinfo(dtype).min, np.iinfo(dtype).max)
    combine = getattr(np, c.numpy)
    for x in (0, 1, -1, 12345, np.iinfo(dtype).min, np.iinfo(dtype).max):
        x = dtype(x)
        assert combine(neutral, x) == x and combine(x, neutral) == x, (c.name, x)


def test_a_reduction_starts_from_the_neutral_but_a_float_sum_from_plus_zero():
    for c in TABLE:
        for f in c.forms():
            assert f.start(32) == f.value(32) or f.op == "addf"
    add = combiners.ADD.on_float
    assert _bits(add.start()) == _bits(0.0) and _bits(add.value()) == _bits(-0.0)
    assert _bits(np.sum(np.array([-0.0, -0.0]))) == _bits(add.start())          # as NumPy's sum
    assert _bits(np.cumsum(np.array([-0.0]))[0]) == _bits(add.value())          # as NumPy's cumsum


@pytest.mark.parametrize("c", TABLE, ids=lambda c: c.name)
def test_idempotent_is_what_it_says(c):
    combine = getattr(np, c.numpy)
    same = [combine(np.float32(x), np.float32(x)) == np.float32(x) for x in (1.5, -2.0, 7.0)]
    assert all(same) == c.idempotent


# ---- every stage's set is the table's ----------------------------------------------------

def test_the_lowerings_reductions_and_scans_are_the_tables():
    lowered = {n for n, o in OPS.items() if o.category in ("reduction", "scan")}
    assert lowered == set(BY_REDUCTION) | set(BY_SCAN)


@pytest.mark.parametrize("op", sorted(set(BY_REDUCTION) | set(BY_SCAN)))
@pytest.mark.parametrize("dtype", ["f32", "f16", "i32"])
def test_the_lowering_combines_and_starts_as_the_table_says(op, dtype):
    if op == "mean" and dtype == "i32":
        pytest.skip("mean takes floats")
    if op in ("any", "all") and dtype != "i32":
        pytest.skip("any and all take bools, reduced as i32 0 / 1 whatever the comparison's dtype")
    expr = f"{op}(x, axis=1)" if op not in BY_SCAN else f"{op}(x, axis=1)[:, 0]"
    if op in ("any", "all"):
        expr = f"{op}(x > 0, axis=1)"
    info, reds = _reductions(_lowered(expr, dtype))
    c = BY_REDUCTION.get(op) or BY_SCAN[op]
    form = c.on_int if dtype == "i32" else c.on_float
    first = reds[0]                 # argmax's second reduction is its index search (a min over indices)
    assert first.reduction_ops == (form.op,)
    init = info.op(first.producers[first.n_inputs])
    want = form.value(32) if op in BY_SCAN else form.start(32)
    assert init.kind == "fill" and init.fill_value == want and math.copysign(1, init.fill_value) == math.copysign(1, want)


def _row_combiner(expr: str, dtype: str, swap=None) -> str:
    info, reds = _reductions(_lowered(expr, dtype, swap))
    return rows._combiner(info, reds[-1])


@pytest.mark.parametrize("op", sorted(BY_ARITH_OP))
def test_the_row_planner_takes_every_combiner_of_the_table(op):
    c, form = BY_ARITH_OP[op]
    dtype = "f32" if form is c.on_float else "i32"
    # a combiner no FDSL reduction lowers to (maxnum): swapped into one that starts from its neutral
    lowered = c if c.reductions else next(o for o in TABLE if o.reductions and o.on_float.neutral == form.neutral)
    swap = None if lowered is c else (f"arith.{lowered.on_float.op}", f"arith.{op}")
    assert _row_combiner(f"{lowered.reductions[0]}(x, axis=1)", dtype, swap) == op


def test_the_row_planner_refuses_what_is_not_a_combiner_or_not_its_neutral():
    assert _row_combiner("sum(x, axis=1)", "f32", ("arith.addf", "arith.subf")) == "!combines with subf"
    reason = _row_combiner("sum(x, axis=1)", "f32", ("arith.addf", "arith.mulf"))
    assert reason == "!starts from 0.0, not the neutral element of mulf"
    assert _row_combiner("argmax(x, axis=1)", "f32") == "minsi"          # any init: min is idempotent


def _split_combiner(op: str) -> str | None:
    c, form = BY_ARITH_OP.get(op, (None, None))
    t = "f32" if form is None or form is c.on_float else "i32"
    text = f"""func.func @f(%x: tensor<4096x{t}>, %init: tensor<{t}>) -> tensor<{t}> {{
      %r = linalg.generic {{indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> ()>],
                            iterator_types = ["reduction"]}} ins(%x : tensor<4096x{t}>) outs(%init : tensor<{t}>) {{
      ^bb0(%a: {t}, %b: {t}):
        %c = arith.{op} %a, %b : {t}
        linalg.yield %c : {t}
      }} -> tensor<{t}>
      return %r : tensor<{t}>
    }}"""
    module = parse_module(text, new_context())
    with module.context:
        (gen,) = [o.operation for o in module.body.operations[0].regions[0].blocks[0].operations
                  if o.operation.name == "linalg.generic"]
        return split_reductions._combiner(gen)


def test_split_reductions_splits_the_tables_combiners_that_split():
    assert {op for op in BY_ARITH_OP if _split_combiner(op) == op} == {op for op, (_, f) in BY_ARITH_OP.items() if f.splits}
    assert _split_combiner("subf") is None


def _scan_text(op: str, dtype: str, swap=None) -> str:
    return _lowered(f"{op}(x, axis=1)[:, 0]", dtype, swap)


@pytest.mark.parametrize("dtype", ["f32", "i32"])
def test_mark_scans_marks_the_tables_scans_only(dtype):
    marked = {}
    for scan in BY_SCAN:
        form = BY_SCAN[scan].on_float if dtype == "f32" else BY_SCAN[scan].on_int
        others = [f.op for c in TABLE for f in c.forms() if f.op != form.op and (dtype == "f32") == (f is c.on_float)]
        for op in [form.op] + others + ["subf" if dtype == "f32" else "subi"]:
            module = parse_module(_scan_text(scan, dtype, (f"arith.{form.op}", f"arith.{op}")), new_context())
            with module.context:
                for o in module.body.operations[0].regions[0].blocks[0].operations:
                    for attr in (SCAN, SCAN_AXIS):
                        if attr in o.operation.attributes:
                            del o.operation.attributes[attr]
                n = mark_scans(module)
                kinds = [ir.StringAttr(o.operation.attributes[SCAN]).value
                         for o in module.body.operations[0].regions[0].blocks[0].operations if SCAN in o.operation.attributes]
            marked[(scan, op)] = kinds
            assert n == len(kinds)
    assert {k: v for k, v in marked.items() if v} == {(s, BY_SCAN[s].on_float.op if dtype == "f32" else BY_SCAN[s].on_int.op): [s]
                                                      for s in BY_SCAN}


@pytest.mark.parametrize("scan", sorted(BY_SCAN))
@pytest.mark.parametrize("dtype", ["f32", "f16", "i32", "i64"])
def test_the_scan_template_starts_from_the_tables_neutral(scan, dtype):
    src = f"chain c(x: {dtype}[4, 8]) -> {dtype}[4, 8] {{\n    return {scan}(x, axis=1)\n}}\n"
    py = run_source_stages(src, "c.fdsl", ["c"], until="kernels")["kernels"]
    (const,) = set(re.findall(r"_carry\w* = (\w+)\n", py))          # the carry of the chunks before
    (value,) = re.findall(rf"^{const} = (np\.\w+\([^)]*\))$", py, re.M)
    form = BY_SCAN[scan].on_int if dtype.startswith("i") else BY_SCAN[scan].on_float
    want = form.value(int(dtype[1:]))
    assert _bits(eval(value, {"np": np})) == _bits(np.asarray(want, eval(value.split("(")[0], {"np": np})))
