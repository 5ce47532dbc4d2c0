"""The FDSL abstract syntax tree. Every node carries the Span of its source text.

The pipeline operator is desugared by the parser: `a |> f(b)` is the Call `f(a, b)`
(with `piped=True`, so the AST printer can show where it came from).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .source import SourceFile, Span


# ---- types -------------------------------------------------------------------------------

@dataclass(frozen=True)
class DimExpr:
    value: int | str          # an integer extent or a symbol name
    span: Span


@dataclass(frozen=True)
class TypeExpr:
    dtype: str                # an FDSL dtype name
    dims: tuple[DimExpr, ...] | None   # None: a scalar (bare dtype)
    span: Span


# ---- expressions -------------------------------------------------------------------------

@dataclass(frozen=True)
class Expr:
    span: Span


@dataclass(frozen=True)
class Name(Expr):
    id: str


@dataclass(frozen=True)
class Num(Expr):
    value: int | float
    is_float: bool


@dataclass(frozen=True)
class Bool(Expr):
    value: bool


@dataclass(frozen=True)
class Str(Expr):
    value: str


@dataclass(frozen=True)
class DTypeLit(Expr):
    """A dtype used as a value, as in cast(x, f16)."""
    name: str


@dataclass(frozen=True)
class ListExpr(Expr):
    items: tuple[Expr, ...]


@dataclass(frozen=True)
class Unary(Expr):
    op: str                   # '-'
    operand: Expr
    op_span: Span


@dataclass(frozen=True)
class Binary(Expr):
    op: str                   # '+', '-', '*', '/', '@', '**', '==', '!=', '<', '<=', '>', '>='
    lhs: Expr
    rhs: Expr
    op_span: Span


@dataclass(frozen=True)
class SliceItem:
    """`start:stop:step` in a subscript; a part left out is None."""
    start: Expr | None
    stop: Expr | None
    step: Expr | None
    span: Span
    two_colons: bool = False  # written with a second ':' (`::2`, `a:b:`), for the printer


@dataclass(frozen=True)
class EllipsisItem:
    """`...` in a subscript: as many full slices as the axes the other items leave."""
    span: Span


@dataclass(frozen=True)
class Subscript(Expr):
    """`value[item, ...]`: each item an index expression, a SliceItem or an EllipsisItem."""
    value: Expr
    items: tuple[Expr | SliceItem | EllipsisItem, ...]


@dataclass(frozen=True)
class Keyword:
    name: str
    value: Expr
    span: Span                # the whole `name=value`


@dataclass(frozen=True)
class Call(Expr):
    func: str
    func_span: Span
    args: tuple[Expr, ...]
    kwargs: tuple[Keyword, ...] = ()
    piped: bool = False


# ---- statements and declarations ---------------------------------------------------------

@dataclass(frozen=True)
class Param:
    name: str
    type: TypeExpr
    span: Span                # the whole `name: type`
    name_span: Span


@dataclass(frozen=True)
class Assign:
    name: str
    value: Expr
    span: Span
    name_span: Span


@dataclass(frozen=True)
class MultiAssign:
    """`a, b = value`: several names bound at once (only a split may be the value)."""
    names: tuple[str, ...]
    value: Expr
    span: Span
    name_spans: tuple[Span, ...]


@dataclass(frozen=True)
class Return:
    values: tuple[Expr, ...]
    span: Span


@dataclass(frozen=True)
class ConstDecl:
    name: str
    value: Expr               # a Num, possibly negated; checked by the checker
    span: Span
    name_span: Span


@dataclass(frozen=True)
class ChainDef:
    name: str
    params: tuple[Param, ...]
    returns: tuple[TypeExpr, ...]
    multi_return: bool        # written as `-> (T, ...)`
    body: tuple[Assign | MultiAssign | Return | ConstDecl, ...]
    span: Span                # the header `chain NAME(...)`
    name_span: Span


@dataclass(frozen=True)
class Module:
    file: SourceFile
    items: tuple[ChainDef | ConstDecl, ...] = field(default_factory=tuple)

    @property
    def chains(self) -> tuple[ChainDef, ...]:
        return tuple(i for i in self.items if isinstance(i, ChainDef))
