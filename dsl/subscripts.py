"""Subscripts: `x[items]` becomes a slice node (dsl/ops/indexing.py: an integer index drops its
axis, `...` stands for the axes not written). Every index, bound and step is static: an integer
literal or const, or (a slice bound only) a dimension symbol of the chain; everything else is
refused with a diagnostic saying what to write instead.
"""
from __future__ import annotations

from typing import Any

from . import ast as A
from .constants import I64_MAX, I64_MIN, Weak
from .diagnostics import Note
from .ops import slice_type
from .scope import POISON
from .shapes import OpError
from .typed import Node

_RUNTIME_INDEX = "use gather(x, idx, axis=k) for indices computed at run time"


class Subscripts:
    """The checker's subscript rules, mixed into its chain checker (dsl/checker.py), whose state
    (scope, sym_spans, syms, nodes) and methods (error, expr, name, scalar, notes_for, add) they use."""

    def subscript(self, e: A.Subscript) -> Any:
        """`x[items]`: a slice node (an integer index drops its axis). Bounds are static."""
        items = [self.sub_item(i) for i in e.items]
        value = self.expr(e.value)
        if value is POISON or POISON in items:
            return POISON
        if isinstance(value, Weak):
            self.error(e.value.span, f"cannot subscript the compile-time scalar {_show_weak(value)}; "
                       "only a tensor has axes to index")
            return POISON
        t = self.nodes[value].type
        t = t.with_shape(self.syms.resolve(t.shape))
        notes = self.notes_for([e.value])
        if t.rank == 0:
            self.error(e.value.span, f"cannot subscript {t}, a scalar: it has no axes to index", notes)
            return POISON
        ellipses = [i for i in e.items if isinstance(i, A.EllipsisItem)]
        if len(ellipses) > 1:
            self.error(ellipses[1].span, "a subscript may hold one '...' only", [Note(ellipses[0].span, "the first")])
            return POISON
        written = [(i, item) for i, item in zip(e.items, items) if not isinstance(i, A.EllipsisItem)]
        if len(written) > t.rank:
            n = len(written)
            self.error(written[t.rank][0].span, f"too many indices: {t} has {t.rank} ax{'is' if t.rank == 1 else 'es'} "
                       f"but the subscript has {n} items", notes)
            return POISON
        full = ("range", None, None, None)
        fill = t.rank - len(written)
        axes: list[tuple[Any, A.Expr | A.SliceItem | A.EllipsisItem]] = []   # (item, its source) per axis
        for i, item in zip(e.items, items):
            if isinstance(i, A.EllipsisItem):
                axes += [(full, i)] * fill
                fill = 0
            else:
                axes.append((item, i))
        axes += [(full, e)] * fill
        resolved = [self._resolve_item(item) for item, _ in axes]
        try:
            out_type, attrs = slice_type(self.syms, t, resolved)
        except OpError as err:
            span = axes[err.arg][1].span if isinstance(err.arg, int) and 0 <= err.arg < len(axes) else e.span
            self.error(span, err.message, notes)
            return POISON
        return self.add(Node(len(self.nodes), "slice", (value,), tuple(attrs.items()), out_type, e.span))

    def _resolve_item(self, item: tuple) -> tuple:
        """Symbols of a slice item as the checker knows them now (a symbol unified with a
        number is that number)."""
        if item[0] == "at":
            return item
        return ("range",) + tuple(self.syms.find(b) if isinstance(b, str) else b for b in item[1:])

    def sub_item(self, item) -> Any:
        """One item of a subscript, static: ("at", i), ("range", start, stop, step) with each part
        an int, a symbol or None, the EllipsisItem itself, or POISON (reported)."""
        if isinstance(item, A.EllipsisItem):
            return item
        if isinstance(item, A.SliceItem):
            parts = (self.sub_int(item.start, "bound", symbols=True), self.sub_int(item.stop, "bound", symbols=True),
                     self.sub_int(item.step, "step"))
            return POISON if POISON in parts else ("range",) + parts
        n = self.sub_int(item, "index")
        return POISON if n is POISON else ("at", n)

    def sub_int(self, e: A.Expr | None, what: str, symbols: bool = False) -> Any:
        """A subscript's integer (an index, a slice bound or step): a literal, a const, a negated
        one, or (a bound) a dimension symbol of the chain. None when omitted."""
        if e is None:
            return None
        the = {"index": "an index", "bound": "a slice bound", "step": "a slice step"}[what]
        if isinstance(e, A.Name) and e.id not in self.scope and e.id in self.sym_spans:
            if symbols:
                return e.id
            self.error(e.span, f"{the} must be an integer; the symbol '{e.id}' can only be a slice bound "
                       f"(x[:{e.id}])" if what == "index" else f"{the} must be an integer, not the symbol '{e.id}'")
            return POISON
        inner = e
        while isinstance(inner, A.Unary):
            inner = inner.operand
        if inner is not e and isinstance(inner, A.Name) and inner.id not in self.scope and inner.id in self.sym_spans:
            self.error(e.span, f"{the} cannot be a negated symbol (-{inner.id}); a bound is an integer or a "
                       "symbol itself")
            return POISON
        if isinstance(e, A.Name) and e.id in ("None", "none", "newaxis") and e.id not in self.scope:
            self.error(e.span, f"a subscript cannot insert a new axis (x[{e.id}]); use reshape(x, [...]) to add "
                       "an axis of extent 1")
            return POISON
        if isinstance(e, A.Name) and e.id not in self.scope:
            return self.name(e)         # unknown: reported there
        v = self.scalar(e)
        if isinstance(v, Weak) and v.kind == "int":
            n = int(v.value)
            if not I64_MIN <= n <= I64_MAX:
                self.error(e.span, f"the {the.split(' ', 1)[1]} {n} does not fit in i64")
                return POISON
            return n
        if isinstance(v, Weak):
            self.error(e.span, f"{the} must be an integer, got the {v.kind} {_show_weak(v)}")
            return POISON
        unknown = self._unknown_name(e)
        if unknown is not None:
            return self.name(unknown)   # reported there
        tensor = self._mentions_tensor(e)
        if tensor is POISON:
            return POISON
        if tensor or isinstance(e, A.ListExpr):
            if what == "index":
                self.error(e.span, f"an index must be a compile-time integer; {_RUNTIME_INDEX}")
            elif what == "bound":
                self.error(e.span, "a slice bound must be a compile-time integer or a dimension symbol: slices "
                           f"have extents known when the chain is compiled ({_RUNTIME_INDEX})")
            else:
                self.error(e.span, f"{the} must be a compile-time integer")
            return POISON
        if isinstance(e, A.Binary):
            self.error(e.span, f"arithmetic is not evaluated in a subscript; declare `const k1 = ...` and write "
                       f"x[k1]" + (" (or use a symbol itself as a bound)" if symbols else ""))
            return POISON
        what_is = {A.Str: "a string", A.DTypeLit: "a dtype"}.get(type(e), "this")
        self.error(e.span, f"{the} must be an integer; {what_is} is not one")
        return POISON

    def _unknown_name(self, e: A.Expr) -> A.Name | None:
        """The first name in an expression (outside calls and subscripts) that is neither bound
        nor a symbol of the chain."""
        if isinstance(e, A.Name):
            return e if e.id not in self.scope and e.id not in self.sym_spans else None
        subs = {A.Unary: lambda: [e.operand], A.Binary: lambda: [e.lhs, e.rhs],
                A.ListExpr: lambda: list(e.items)}.get(type(e), lambda: [])()
        return next((u for u in map(self._unknown_name, subs) if u is not None), None)

    def _mentions_tensor(self, e: A.Expr) -> Any:
        """Whether an expression reads a tensor (a name bound to one, a call, a subscript);
        POISON when it reads a poisoned name."""
        if isinstance(e, (A.Call, A.Subscript)):
            return True
        if isinstance(e, A.Name):
            b = self.scope.get(e.id)
            if b is None:
                return False
            return POISON if b.value is POISON else isinstance(b.value, int)
        subs = {A.Unary: lambda: [e.operand], A.Binary: lambda: [e.lhs, e.rhs],
                A.ListExpr: lambda: list(e.items)}.get(type(e), lambda: [])()
        found: Any = False
        for sub in subs:
            r = self._mentions_tensor(sub)
            if r is POISON:
                return POISON
            found = found or r
        return found


def _show_weak(w: Weak) -> str:
    return str(w.value).lower() if w.kind == "bool" else str(w.value)
