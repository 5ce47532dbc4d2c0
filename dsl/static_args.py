"""Static arguments: an op's non-tensor arguments (dtype, str, bool, float, int, axes, perm, pair,
dims, scalar; dsl/ops/registry.py: Arg.kind), evaluated when the chain is checked into the attributes its
rule reads. Each must be a compile-time value of its kind; otherwise a diagnostic says what it must be.
"""
from __future__ import annotations

from typing import Any

from . import ast as A
from .constants import I64_MAX, I64_MIN, Weak, fit_error
from .ops import Arg, OpDef
from .scope import POISON
from .types import DTYPES


class StaticArgs:
    """The checker's static-argument rules, mixed into its chain checker (dsl/checker.py), whose
    state (scope, sym_spans) and methods (error, scalar) they use."""

    def static(self, arg: Arg, e: A.Expr, op: OpDef) -> Any:
        """The attribute that `e`, written for `op`'s static argument `arg`, gives; POISON (reported)
        when it is not a value of the argument's kind."""
        kind = arg.kind
        where = f"{op.name}'s '{arg.name}'"
        if kind == "dtype":
            if isinstance(e, A.DTypeLit):
                return e.name
            self.error(e.span, f"{where} must be a dtype ({', '.join(DTYPES)})")
            return POISON
        if kind == "str":
            if isinstance(e, A.Str) and (not arg.choices or e.value in arg.choices):
                return e.value
            choices = " or ".join(f'"{c}"' for c in arg.choices)
            self.error(e.span, f"{where} must be {choices}")
            return POISON
        if kind == "bool":
            v = self.scalar(e)
            if isinstance(v, Weak) and v.kind == "bool":
                return bool(v.value)
            self.error(e.span, f"{where} must be true or false")
            return POISON
        if kind == "float":
            v = self.scalar(e)
            if isinstance(v, Weak) and v.kind in ("int", "float"):
                if fit_error(v.value, DTYPES["f64"]) is None:
                    return float(v.value)
                self.error(e.span, f"{where} is out of the range of f64")
                return POISON
            self.error(e.span, f"{where} must be a number")
            return POISON
        if kind == "scalar":
            if isinstance(e, A.Name) and e.id in self.sym_spans and e.id not in self.scope:
                return e.id
            v = self.scalar(e)
            if isinstance(v, Weak):
                if v.kind == "int" and not I64_MIN <= v.value <= I64_MAX:
                    self.error(e.span, f"{where} is {v.value}, which does not fit in i64")
                    return POISON
                return v.value
            self.error(e.span, f"{where} must be a number, true or false (or a symbol of this chain)")
            return POISON
        if kind == "int":
            v = self.scalar(e)
            if isinstance(v, Weak) and v.kind == "int":
                return self.static_int(v, e, where, axis=arg.name == "axis")
            self.error(e.span, f"{where} must be an integer")
            return POISON
        if kind in ("axes", "perm", "pair"):
            if not isinstance(e, A.ListExpr):
                v = self.scalar(e)
                if isinstance(v, Weak) and v.kind == "int" and kind != "perm":
                    n = self.static_int(v, e, where, axis=kind in ("axes", "perm"))
                    return n if n is POISON else ((n,) * 2 if kind == "pair" else n)
                self.error(e.span, f"{where} must be " + {"axes": "an integer or a list of integers",
                                                          "perm": "a list of axes",
                                                          "pair": "an integer or a pair [a, b]"}[kind])
                return POISON
            items = [self.scalar(i) for i in e.items]
            if not all(isinstance(v, Weak) and v.kind == "int" for v in items):
                self.error(e.span, f"{where} must be a list of integers")
                return POISON
            vals = tuple(self.static_int(v, i, where, axis=kind in ("axes", "perm")) for v, i in zip(items, e.items))
            if POISON in vals:
                return POISON
            if kind == "pair" and len(vals) != 2:
                self.error(e.span, f"{where} must be an integer or a pair [a, b], got {len(vals)} values")
                return POISON
            return vals
        if kind == "dims":
            if not isinstance(e, A.ListExpr):
                example = "[64, -1] (one size per part)" if op.name == "split" else "[M, -1, 64]"
                self.error(e.span, f"{where} must be a list of dimensions, such as {example}")
                return POISON
            dims = []
            for item in e.items:
                if isinstance(item, A.Name) and item.id in self.sym_spans and item.id not in self.scope:
                    dims.append(item.id)
                    continue
                v = self.scalar(item)
                if not (isinstance(v, Weak) and v.kind == "int"):
                    self.error(item.span, "a dimension must be an integer, -1 or a symbol of this chain")
                    return POISON
                n = self.static_int(v, item, "a dimension")
                if n is POISON:
                    return POISON
                dims.append(n)
            return tuple(dims)
        raise AssertionError(f"unknown static kind {kind}")

    def static_int(self, v: Weak, e: A.Expr, where: str, axis: bool = False) -> Any:
        """A static integer. Axes are checked against the rank by the op's rule (so an axis
        out of i64 reads as out of range for the rank); every other must fit in i64."""
        n = int(v.value)
        if not axis and not I64_MIN <= n <= I64_MAX:
            self.error(e.span, f"{where} is {n}, which does not fit in i64")
            return POISON
        return n


def default_attr(arg: Arg) -> Any:
    """The attribute of a static argument a call leaves out: its default (a pair's, twice)."""
    if arg.kind == "pair":
        return (arg.default, arg.default)
    return arg.default
