"""Parse tree -> AST: `AstBuilder` builds ast nodes bottom-up (`build_ast` walks the tree without
recursion), every node with its span. What the grammar lets through but the language refuses
(an unknown dtype, a bad dimension, an out-of-range literal, a positional argument after a
keyword one...) goes to the builder's DiagnosticSink.
"""
from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass

from lark import Token, Transformer, Tree, v_args

from . import ast
from .diagnostics import DiagnosticSink, Note
from .source import SourceFile, Span
from .tokens import tok_span
from .types import DTYPES


def build_ast(builder: "AstBuilder", tree: Tree):
    """The builder's transform, bottom-up, without recursion: an explicit stack of (tree, its
    children not yet visited, its children's results)."""
    stack = [(tree, iter(tree.children), [])]
    while True:
        node, pending, done = stack[-1]
        for child in pending:
            if isinstance(child, Tree):
                stack.append((child, iter(child.children), []))
                break
            done.append(child)
        else:
            stack.pop()
            value = builder._call_userfunc(node, done)
            if not stack:
                return value
            stack[-1][2].append(value)


@dataclass(frozen=True)
class _Head:
    name: str
    name_span: Span
    params: tuple[ast.Param, ...]
    span: Span


_MAX_DIGITS = 100              # longer integer literals are refused here; each dtype's range is checked later


def _short(text: str) -> str:
    return text if len(text) <= 40 else text[:20] + "..." + text[-10:]


def _unescape(literal: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), literal[1:-1])


@v_args(meta=True)
class AstBuilder(Transformer):
    """Builds ast nodes bottom-up; errors that the grammar lets through go to `sink`."""

    def __init__(self, file: SourceFile):
        super().__init__()
        self.file = file
        self.sink = DiagnosticSink()
        self._parenthesized: dict[int, ast.Expr] = {}  # id -> node, kept alive so ids stay unique

    def _span(self, meta) -> Span:
        return Span(self.file, meta.line, meta.column, meta.end_line, meta.end_column)

    def _tspan(self, tok: Token) -> Span:
        return tok_span(self.file, tok)

    # -- items
    def start(self, meta, items):
        return ast.Module(self.file, tuple(items))

    def chain_def(self, meta, children):
        head, (returns, multi), body = children
        return ast.ChainDef(name=head.name, params=head.params, returns=returns, multi_return=multi,
                            body=body, span=head.span, name_span=head.name_span)

    def chain_head(self, meta, children):
        name, params = children
        return _Head(str(name), self._tspan(name), params or (), self._span(meta))

    def params(self, meta, children):
        return tuple(children)

    def param(self, meta, children):
        name, type_ = children
        return ast.Param(name=str(name), type=type_, span=self._span(meta), name_span=self._tspan(name))

    def ret_single(self, meta, children):
        return (children[0],), False

    def ret_multi(self, meta, children):
        return tuple(children), True

    # -- types
    def scalar_type(self, meta, children):
        return ast.TypeExpr(dtype=self._dtype(children[0]), dims=None, span=self._span(meta))

    def tensor_type(self, meta, children):
        dtype = self._dtype(children[0])
        if len(children) == 1:
            self.sink.error(self._span(meta), f"a tensor type needs at least one dimension; "
                                              f"a bare '{dtype}' is a scalar")
        dims = children[1] if len(children) > 1 else ()
        return ast.TypeExpr(dtype=dtype, dims=dims, span=self._span(meta))

    def dims(self, meta, children):
        return tuple(d for d in (self._dim(e) for e in children) if d is not None)

    def _dtype(self, tok: Token) -> str:
        if tok.type == "NAME":
            self.sink.error(self._tspan(tok), f"unknown dtype '{tok}'",
                            [Note(None, "the dtypes are " + ", ".join(DTYPES))])
        return str(tok)

    def _dim(self, e: ast.Expr) -> ast.DimExpr | None:
        if isinstance(e, ast.Num) and not e.is_float:
            return ast.DimExpr(value=e.value, span=e.span)
        if isinstance(e, ast.Name):
            return ast.DimExpr(value=e.id, span=e.span)
        self.sink.error(e.span, "a dimension must be an integer or a symbol")
        return None

    # -- statements
    def body(self, meta, children):
        return tuple(c for c in children if c is not None)

    def assign(self, meta, children):
        name, value = children
        return ast.Assign(name=str(name), value=value, span=self._span(meta), name_span=self._tspan(name))

    def multi_assign(self, meta, children):
        *names, value = children
        return ast.MultiAssign(names=tuple(str(n) for n in names), value=value, span=self._span(meta),
                               name_spans=tuple(self._tspan(n) for n in names))

    def const_decl(self, meta, children):
        name, value = children
        return ast.ConstDecl(name=str(name), value=value, span=self._span(meta), name_span=self._tspan(name))

    def return_stmt(self, meta, children):
        return ast.Return(values=tuple(children), span=self._span(meta))

    # -- expressions
    def pipeline(self, meta, children):
        lhs, _, rhs = children
        span = self._span(meta)
        if id(rhs) in self._parenthesized or not isinstance(rhs, (ast.Name, ast.Call)):
            self.sink.error(rhs.span, "the right side of '|>' must be an operator name or call")
            return lhs
        if isinstance(rhs, ast.Name):
            return ast.Call(span=span, func=rhs.id, func_span=rhs.span, args=(lhs,), piped=True)
        return ast.Call(span=span, func=rhs.func, func_span=rhs.func_span, args=(lhs, *rhs.args),
                        kwargs=rhs.kwargs, piped=True)

    def binary(self, meta, children):
        lhs, op, rhs = children
        return ast.Binary(span=self._span(meta), op=str(op), lhs=lhs, rhs=rhs, op_span=self._tspan(op))

    def neg(self, meta, children):
        op, operand = children
        return ast.Unary(span=self._span(meta), op="-", operand=operand, op_span=self._tspan(op))

    def number(self, meta, children):
        text = str(children[0])
        span = self._span(meta)
        is_float = any(c in text for c in ".eE")
        if not is_float:
            if len(text) > _MAX_DIGITS:
                self.sink.error(span, f"this integer literal has {len(text)} digits, more than {_MAX_DIGITS}; "
                                      f"write a float (1e{len(text.lstrip('0')) - 1}) if you mean one")
                return ast.Num(span=span, value=0, is_float=False)
            return ast.Num(span=span, value=int(text), is_float=False)
        value = float(text)
        if math.isinf(value):
            self.sink.error(span, f"the float literal {_short(text)} is out of range: the largest finite f64 is "
                                  f"{sys.float_info.max:.6g}")
        elif value == 0.0 and any(c in "123456789" for c in re.split("[eE]", text)[0]):
            self.sink.error(span, f"the float literal {_short(text)} is too small for f64: it would be 0 "
                                  f"(the smallest f64 is {5e-324:.3g})")
        return ast.Num(span=span, value=value, is_float=True)

    def true(self, meta, children):
        return ast.Bool(span=self._span(meta), value=True)

    def false(self, meta, children):
        return ast.Bool(span=self._span(meta), value=False)

    def inf(self, meta, children):
        return ast.Num(span=self._span(meta), value=math.inf, is_float=True)

    def nan(self, meta, children):
        return ast.Num(span=self._span(meta), value=math.nan, is_float=True)

    def string(self, meta, children):
        return ast.Str(span=self._span(meta), value=_unescape(str(children[0])))

    def name(self, meta, children):
        return ast.Name(span=self._span(meta), id=str(children[0]))

    def dtype_lit(self, meta, children):
        return ast.DTypeLit(span=self._span(meta), name=str(children[0]))

    def paren(self, meta, children):
        inner = children[0]
        self._parenthesized[id(inner)] = inner
        return inner

    def subscript(self, meta, children):
        value, *items = children
        return ast.Subscript(span=self._span(meta), value=value, items=tuple(items))

    def sub_index(self, meta, children):
        return children[0]

    def sub_slice(self, meta, children):
        start, _, stop, second, step = children
        return ast.SliceItem(start=start, stop=stop, step=step, span=self._span(meta), two_colons=second is not None)

    def sub_ellipsis(self, meta, children):
        return ast.EllipsisItem(span=self._span(meta))

    def list_expr(self, meta, children):
        return ast.ListExpr(span=self._span(meta), items=tuple(c for c in children if c is not None))

    def call(self, meta, children):
        func, arguments = children
        args: list[ast.Expr] = []
        kwargs: list[ast.Keyword] = []
        for a in arguments or ():
            if isinstance(a, ast.Keyword):
                kwargs.append(a)
            elif kwargs:
                self.sink.error(a.span, "positional argument after keyword argument",
                                [Note(kwargs[0].span, "the first keyword argument is here")])
            else:
                args.append(a)
        return ast.Call(span=self._span(meta), func=str(func), func_span=self._tspan(func),
                        args=tuple(args), kwargs=tuple(kwargs))

    def args(self, meta, children):
        return tuple(children)

    def kwarg(self, meta, children):
        name, value = children
        return ast.Keyword(name=str(name), value=value, span=self._span(meta))
