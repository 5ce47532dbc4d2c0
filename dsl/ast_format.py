"""The AST printer (`--emit ast`): a module as a deterministic S-expression dump, and the FDSL
spelling of a type."""
from __future__ import annotations

import json

from . import ast
from .limits import recursion_room


def format_ast(module: ast.Module) -> str:
    """A deterministic S-expression dump: one top-level item per block, statements indented."""
    with recursion_room():
        return "\n\n".join(_format_item(item) for item in module.items)


def _format_item(item: ast.ChainDef | ast.ConstDecl) -> str:
    if isinstance(item, ast.ConstDecl):
        return _format_stmt(item)
    params = "".join(f"\n    ({p.name} {format_type(p.type)})" for p in item.params)
    types = " ".join(format_type(t) for t in item.returns)
    returns = f"({types})" if item.multi_return else types
    body = "".join(f"\n    {_format_stmt(s)}" for s in item.body)
    return f"(chain {item.name}\n  (params{params})\n  (returns {returns})\n  (body{body}))"


def format_type(t: ast.TypeExpr) -> str:
    """FDSL spelling of a type: f32, f32[M,768]."""
    if t.dims is None:
        return t.dtype
    return f"{t.dtype}[{','.join(str(d.value) for d in t.dims)}]"


def _format_stmt(s: ast.Assign | ast.MultiAssign | ast.Return | ast.ConstDecl) -> str:
    if isinstance(s, ast.Assign):
        return f"(assign {s.name} {format_expr(s.value)})"
    if isinstance(s, ast.MultiAssign):
        return f"(assign ({' '.join(s.names)}) {format_expr(s.value)})"
    if isinstance(s, ast.ConstDecl):
        return f"(const {s.name} {format_expr(s.value)})"
    return "(return " + " ".join(format_expr(v) for v in s.values) + ")"


def format_expr(e: ast.Expr) -> str:
    """One expression as an S-expression on one line; piped calls show `|>` before the piped value."""
    if isinstance(e, ast.Name):
        return e.id
    if isinstance(e, ast.Num):
        return repr(e.value)
    if isinstance(e, ast.Bool):
        return "true" if e.value else "false"
    if isinstance(e, ast.Str):
        return json.dumps(e.value)
    if isinstance(e, ast.DTypeLit):
        return e.name
    if isinstance(e, ast.ListExpr):
        return "[" + " ".join(format_expr(i) for i in e.items) + "]"
    if isinstance(e, ast.Unary):
        return f"({e.op} {format_expr(e.operand)})"
    if isinstance(e, ast.Binary):
        return f"({e.op} {format_expr(e.lhs)} {format_expr(e.rhs)})"
    if isinstance(e, ast.Subscript):
        return f"(index {format_expr(e.value)} [{', '.join(_format_sub(i) for i in e.items)}])"
    if isinstance(e, ast.Call):
        parts = [format_expr(a) for a in e.args] + [f":{k.name} {format_expr(k.value)}" for k in e.kwargs]
        if e.piped:
            parts.insert(0, "|>")
        return f"(call {e.func}" + "".join(" " + p for p in parts) + ")"
    raise TypeError(f"not an FDSL expression: {type(e).__name__}")


def _format_sub(item: ast.Expr | ast.SliceItem | ast.EllipsisItem) -> str:
    """A subscript item as written: `0`, `a:b`, `::2`, `...` (its expressions as S-expressions)."""
    if isinstance(item, ast.EllipsisItem):
        return "..."
    if not isinstance(item, ast.SliceItem):
        return format_expr(item)
    start, stop = ("" if p is None else format_expr(p) for p in (item.start, item.stop))
    if not item.two_colons:
        return f"{start}:{stop}"
    return f"{start}:{stop}:{'' if item.step is None else format_expr(item.step)}"
