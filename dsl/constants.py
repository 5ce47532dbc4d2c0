"""Compile-time constants: weak scalars (literals and consts, which take their dtype from where
they are used), `const` declarations, folding an elementwise op on weak scalars with the op's own
NumPy semantics, and whether a value fits a dtype.

Integer folds compute in i64 and float folds in f64. A failure is reported to the sink at the
span given, and the value is POISON.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from . import ast as A
from .diagnostics import DiagnosticSink, Note
from .ops import BINARY_OPERATORS, OPS, OpDef
from .scope import POISON, Binding
from .types import fit_error  # noqa: F401  (the checker's and static arguments' name for it)
from .source import Span
from .types import DType


@dataclass(frozen=True)
class Weak:
    """A compile-time scalar without a dtype yet: a literal or a const. It adopts its context's dtype."""
    value: int | float | bool

    @property
    def kind(self) -> str:
        if isinstance(self.value, (bool, np.bool_)):
            return "bool"
        return "int" if isinstance(self.value, (int, np.integer)) else "float"


I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
_F64_MAX_INT = int(np.finfo(np.float64).max)          # the largest finite f64, as an integer


def declare_const(sink: DiagnosticSink, scope: dict[str, Binding], decl: A.ConstDecl) -> None:
    """A module-level `const`: its folded value bound in `scope` (a name defined twice is an error)."""
    if decl.name in scope:
        prev = scope[decl.name]
        sink.error(decl.name_span, f"'{decl.name}' is already defined",
                   [Note(prev.span, f"'{decl.name}' first defined here")])
        return
    value = fold_const(sink, scope, decl.value)
    scope[decl.name] = Binding(value, decl.name_span, "const")


def fold_const(sink: DiagnosticSink, scope: dict[str, Binding], e: A.Expr) -> Any:
    """A const's value: numbers, other consts and arithmetic on them, folded now."""
    if isinstance(e, A.Num):
        return Weak(e.value)
    if isinstance(e, A.Bool):
        return Weak(e.value)
    if isinstance(e, A.Name):
        b = scope.get(e.id)
        if b is None:
            sink.error(e.span, f"unknown name '{e.id}'; a const is made of numbers and other consts")
            return POISON
        if b.value is POISON or isinstance(b.value, Weak):
            return b.value
        sink.error(e.span, f"a const must be a compile-time number, and '{e.id}' is a tensor {b.what}; "
                           f"bind it with `name = ...` instead", [Note(b.span, f"'{e.id}' defined here")])
        return POISON
    if isinstance(e, A.Unary):
        v = fold_const(sink, scope, e.operand)
        return v if v is POISON else fold(OPS["neg"], [v], {}, sink, e.span)
    if isinstance(e, A.Binary) and e.op in BINARY_OPERATORS and BINARY_OPERATORS[e.op] != "matmul":
        l, r = fold_const(sink, scope, e.lhs), fold_const(sink, scope, e.rhs)
        if POISON in (l, r):
            return POISON
        return fold(OPS[BINARY_OPERATORS[e.op]], [l, r], {}, sink, e.span)
    sink.error(e.span, "a const must be a number (or arithmetic on numbers and other consts)")
    return POISON


def fold(op: OpDef, args: list[Weak], attrs: dict, sink: DiagnosticSink, span: Span) -> Any:
    """Evaluate an elementwise op on weak scalars now, with the op's own NumPy semantics.
    Negating an integer is exact (its range is checked where it meets a dtype); any other
    integer fold computes in i64, so its operands must fit there."""
    kinds = {a.kind for a in args}
    if op.name.startswith("logical_") and kinds != {"bool"}:
        sink.error(span, f"{op.name} expects bool values (true, false), got {', '.join(str(a.value) for a in args)}")
        return POISON
    if op.name == "neg" and kinds == {"int"}:
        return Weak(-int(args[0].value))
    dt = np.float64 if "float" in kinds else (np.bool_ if kinds == {"bool"} else np.int64)
    for a in args:
        if a.kind != "int":
            continue
        if dt is np.int64 and not I64_MIN <= a.value <= I64_MAX:
            sink.error(span, f"the integer {a.value} does not fit in i64, in which integer constants are computed")
            return POISON
        if dt is np.float64 and abs(a.value) > _F64_MAX_INT:
            sink.error(span, f"the integer {a.value} is out of the range of f64, in which this constant is computed")
            return POISON
    if op.name == "pow" and dt is np.int64 and args[1].value < 0:
        sink.error(span, "cannot evaluate pow on constants: an integer to a negative power is not an integer; "
                         f"write a float ({float(args[0].value)!r} ** {args[1].value})")
        return POISON
    with np.errstate(all="ignore"):
        try:
            out = op.ref([np.asarray(a.value, dtype=dt) for a in args], dict(attrs), ())
        except (ValueError, ZeroDivisionError, TypeError, OverflowError) as e:
            sink.error(span, f"cannot evaluate {op.name} on constants: {e}")
            return POISON
    out = np.asarray(out)
    if out.dtype == np.bool_:
        return Weak(bool(out))
    return Weak(int(out) if np.issubdtype(out.dtype, np.integer) else float(out))


