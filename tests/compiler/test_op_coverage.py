"""One op, one place: every FDSL op has a lowering rule, and every arith/math op the lowering can
produce has an emitter rule and, for the math functions, an entry in compiler/mathfns.py (its
cost weight, whether it is a call, how the cpu profile prices it)."""
from __future__ import annotations

import pytest

from fusec.compiler import mathfns
from fusec.compiler.emit.scalar import has_rule
from fusec.compiler.lowering.registry import RULES
from fusec.compiler.pipeline import run_source_stages
from fusec.compiler.plan.hardware import GPUS
from fusec.dsl.ops import BINARY, COMPARE, DESUGARED, OPS, UNARY

HEADER = ("chain c(x: f32[4, 8], y: f32[4, 8], i: i32[4, 8], j: i32[4, 8], b: bool[4, 8], g: f32[8], "
          "w: f32[8, 8], v: f32[4, 8, 8], im: f32[1, 2, 6, 6], k: f32[2, 2, 3, 3], ch: f32[2]) -> f32[4, 8] {\n")
# every op of the table in every dtype family it takes (float, int, bool), one expression each
EXPRESSIONS: dict[str, list[str]] = {
    **{op: (["x"] if dom == "float" else ["x", "i"]) for op, (dom, _, _) in UNARY.items()},
    **{op: ([("x", "y")] if BINARY[op][1] == "float" else [("x", "y"), ("i", "j")]) for op in BINARY},
    **{op: [("x", "y"), ("i", "j"), ("b", "b")] for op in COMPARE},
}
EXPRESSIONS = {op: [f"{op}({a})" if isinstance(a, str) else f"{op}({a[0]}, {a[1]})" for a in args]
               for op, args in EXPRESSIONS.items()}
EXPRESSIONS.update({
    "gelu": ["gelu(x)", 'gelu(x, approximate="none")'],
    "where": ["where(b, x, y)", "where(b, i, j)"],
    "clamp": ["clamp(x, y, x)", "clamp(i, j, i)"],
    "cast": ["cast(x, i32)", "cast(i, f32)", "cast(b, f32)", "cast(x, bool)", "cast(x, f16)", "cast(x, f64)",
             "cast(i, i64)"],
    **{op: [f"{op}(x, axis=1)", f"{op}(i, axis=0)", f"{op}(x)"] for op in ("sum", "max", "min", "prod")},
    "mean": ["mean(x, axis=1)", "mean(x)"],
    "softmax": ["softmax(x)"], "log_softmax": ["log_softmax(x)"],
    "layernorm": ["layernorm(x, g, g)"], "rmsnorm": ["rmsnorm(x, g)"],
    "batchnorm": ["batchnorm(im, ch, ch, ch, ch)"],
    "matmul": ["x @ w", "v @ w", "matmul(v, v)"],
    "conv2d": ["conv2d(im, k, bias=ch, padding=1, stride=2)", "conv2d(im, k[:, :1], padding=1, groups=2)"],
    "max_pool2d": ["max_pool2d(im, 3, stride=2, padding=1, ceil_mode=true)"],
    "avg_pool2d": ["avg_pool2d(im, 3, stride=2, padding=1, count_include_pad=false)"],
    "adaptive_avg_pool2d": ["adaptive_avg_pool2d(im, [4, 5])", "adaptive_avg_pool2d(im, 1)"],
    "transpose": ["transpose(x)"], "permute": ["permute(v, [2, 0, 1])"], "reshape": ["reshape(x, [8, 4])"],
    "broadcast_to": ["broadcast_to(g, [4, 8])"],
    "slice": ["x[1:3, ::2]", "x[::-1, 0]", "i[:, :4]"], "concat": ["concat([x, -y], axis=1)"],
    "split": ["split(x, [3, 5], axis=1)"], "gather": ["gather(x, i, axis=1)"], "embedding": ["embedding(w, j)"],
    "take_along_axis": ["take_along_axis(x, j[:, :3], axis=1)"], "gather_nd": ["gather_nd(v, i[:, :2])"],
    "index": ["index(v, [i[0], j[1]], axes=[0, 2])"],
    "cumsum": ["cumsum(x)", "cumsum(i, axis=0)"], "cumprod": ["cumprod(x, axis=0)"],
    "argmax": ["argmax(x)", "argmax(i, axis=0)"], "argmin": ["argmin(x, keepdims=true)"],
    # issue 38: the logical ops and any / all on bools, the creation ops
    "logical_not": ["logical_not(b)"], "logical_and": ["logical_and(b, b)"], "logical_or": ["logical_or(b, b)"],
    "logical_xor": ["logical_xor(b, b)"], "any": ["any(b, axis=1)", "any(b)"], "all": ["all(b, axis=0, keepdims=true)"],
    "full": ["full([4, 8], -inf)", "full([2], 3, dtype=i32)", "full([2], true)"],
    "full_like": ["full_like(x, nan) + x", "full_like(i, 2, dtype=f16)"], "arange": ["arange(8)", "arange(1, 9, 2, dtype=f32)"],
})


def test_every_op_of_the_table_has_a_lowering_rule_and_an_expression_here():
    assert set(OPS) - set(RULES) - set(DESUGARED) == set(), "ops without a lowering rule"
    assert set(OPS) - set(EXPRESSIONS) == set(), "ops this test does not lower (add an expression)"


def _body_ops(expr: str) -> set[str]:
    bind = "p, q" if expr.startswith("split") else "t"
    src = HEADER + f"    {bind} = {expr}\n    return x\n}}\n"
    text = run_source_stages(src, "ops.fdsl", ["c"], until="linalg")["linalg"]    # as lowered: no dead code gone
    return {tok for line in text.splitlines() for tok in line.split()
            if tok.startswith(("arith.", "math.")) and tok.rstrip(",:") == tok}


PRODUCED = sorted({op for exprs in EXPRESSIONS.values() for e in exprs for op in _body_ops(e)})


def test_the_lowering_produces_math_functions():
    assert {"math.exp", "math.log1p", "math.erfc", "math.tanh", "arith.maximumf", "arith.divf"} <= set(PRODUCED)


@pytest.mark.parametrize("op", PRODUCED)
def test_every_produced_op_has_an_emitter_rule(op):
    assert has_rule(op), f"{op} is produced by the lowering but the emitter has no rule for it"


@pytest.mark.parametrize("op", [o for o in PRODUCED if o.startswith("math.")])
def test_every_produced_math_function_has_a_table_entry_and_a_weight(op):
    fn = mathfns.BY_MLIR_OP.get(op)
    assert fn is not None, f"{op} has no entry in compiler/mathfns.py"
    name = op.split(".", 1)[1]
    assert GPUS["h200"].weight(name) == fn.gpu_weight > 0
    assert fn.cpu_chain or fn.cpu_like or fn.gpu_weight == 1.0, f"{op}: the cpu profile cannot price it"
    assert fn.py is not None or has_rule(op)


def test_cpu_weights_derive_for_every_entry_priced_like_another():
    measured = {n: 3.0 for n, f in mathfns.FUNCTIONS.items() if f.cpu_chain}
    derived = mathfns.derived_cpu_weights(measured)
    assert all(n in derived for n, f in mathfns.FUNCTIONS.items() if f.cpu_like)
    assert derived["rsqrt"] == 6.0 and derived["powf"] == 6.0 and derived["log1p"] == 3.0
