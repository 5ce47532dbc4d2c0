"""FDSL parser: source text -> ast.Module (Lark LALR, grammar in fdsl.lark), and the AST printer.

`parse` never lets a Lark exception out: syntax errors become an FdslError whose
Diagnostic says in words what was expected, at the exact line and column.
"""
from __future__ import annotations

import functools
import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from lark import Lark, Token, Transformer, Tree, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from . import ast
from .diagnostics import Diagnostic, DiagnosticSink, FdslError, Note
from .limits import MAX_NESTING, recursion_room
from .source import SourceFile, Span

DTYPES = ("f16", "bf16", "f32", "f64", "i32", "i64", "bool")
KEYWORDS = frozenset({"chain", "return", "const", "true", "false", *DTYPES})


def parse(text: str, path: str = "<string>") -> ast.Module:
    """Parse FDSL source into an ast.Module; raise FdslError on any syntax error (and on an
    expression nested deeper than MAX_NESTING levels). A leading byte-order mark is dropped."""
    file = SourceFile(path, text[1:] if text.startswith("\ufeff") else text)
    tree = _parse_tree(file)
    _check_nesting(file, tree)
    builder = _AstBuilder(file)
    module = _build(builder, tree)
    builder.sink.raise_if_any()
    return module


def _check_nesting(file: SourceFile, tree: Tree) -> None:
    """Refuse a parse tree deeper than MAX_NESTING (walked without recursion), at the first
    node found past the limit."""
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_NESTING:
            line, col = _position(node)
            raise FdslError([Diagnostic(Span(file, line, col, line, col + 1),
                                        f"this expression is nested more than {MAX_NESTING} levels deep (operators, "
                                        "calls, parentheses and lists each add one); bind parts of it to names "
                                        "first (`a = ...`)")])
        stack.extend((c, depth if c.data in _LEVEL_FREE else depth + 1) for c in node.children if isinstance(c, Tree))


# Parse-tree nodes that group the parts of one construct and add no level of nesting.
_LEVEL_FREE = frozenset({"args", "sub_index", "sub_slice", "sub_ellipsis"})


def _position(node: Tree) -> tuple[int, int]:
    while True:
        if not node.meta.empty:
            return node.meta.line, node.meta.column
        tok = next((c for c in node.children if isinstance(c, Token)), None)
        if tok is not None:
            return tok.line, tok.column
        sub = next((c for c in node.children if isinstance(c, Tree)), None)
        if sub is None:
            return 1, 1
        node = sub


def _build(builder: "_AstBuilder", tree: Tree):
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


@functools.lru_cache(maxsize=1)
def _lark() -> Lark:
    grammar = Path(__file__).with_name("fdsl.lark").read_text(encoding="utf-8")
    return Lark(grammar, parser="lalr", lexer="basic", propagate_positions=True, maybe_placeholders=True)


# ---- the token stream between the lexer and the parser ----------------------------------

_CLOSER_OF = {"LPAR": "RPAR", "LSQB": "RSQB", "LBRACE": "RBRACE"}
_OPENER_OF = {closer: opener for opener, closer in _CLOSER_OF.items()}
_SEP_FREE_AFTER = {None, "LBRACE", "ARROW"}
_SEP_FREE_BEFORE = {"LBRACE", "RBRACE", "ARROW"}


def _statement_tokens(tokens: Iterable[Token]) -> Iterator[Token]:
    """Drop every _SEP that does not separate two statements or two top-level items.

    A _SEP is dropped inside () or [], right after another _SEP, '{', '->' or the start
    of the file, and right before '{', '}', '->' or the end of the file; so it is held
    back one token until we know what follows it.
    """
    open_brackets: list[str] = []
    prev: str | None = None
    pending: Token | None = None
    for tok in tokens:
        if tok.type == "_SEP":
            inside = bool(open_brackets) and open_brackets[-1] != "LBRACE"
            if pending is None and not inside and prev not in _SEP_FREE_AFTER:
                pending = tok
            continue
        if pending is not None and tok.type not in _SEP_FREE_BEFORE:
            yield pending
        pending = None
        if tok.type in _CLOSER_OF:
            open_brackets.append(tok.type)
        elif tok.type in _OPENER_OF and open_brackets and open_brackets[-1] == _OPENER_OF[tok.type]:
            open_brackets.pop()
        prev = tok.type
        yield tok


def _parse_tree(file: SourceFile) -> Tree:
    """Feed the filtered tokens to Lark's LALR parser one by one, keeping those it took.

    Feeding by hand (rather than Lark's `postlex` option) keeps no per-parse state on a
    shared object, and on an error leaves us the exact tokens before the refused one.
    """
    lark = _lark()
    parser = lark.parse_interactive()
    fed: list[Token] = []
    try:
        for tok in _statement_tokens(lark.lex(file.text)):
            parser.feed_token(tok)
            fed.append(tok)
        return parser.feed_token(_end_token(fed))
    except UnexpectedCharacters as e:
        raise FdslError([_lex_error(file, e)]) from None
    except UnexpectedToken as e:
        raise FdslError([_syntax_error(file, e.token, fed)]) from None
    except UnexpectedInput as e:  # not raised by LALR today; never show a Lark error regardless
        span = Span(file, e.line, e.column, e.line, e.column + 1)
        raise FdslError([Diagnostic(span, "syntax error")]) from None


def _end_token(fed: list[Token]) -> Token:
    """The end-of-file token, placed just after the last real token."""
    if not fed:
        return Token("$END", "", 0, 1, 1, 1, 1, 0)
    last = fed[-1]
    return Token("$END", "", last.end_pos, last.end_line, last.end_column,
                 last.end_line, last.end_column, last.end_pos)


# ---- friendly syntax errors -------------------------------------------------------------

_BINARY_OPS = frozenset({"PIPE", "EQ", "NE", "LT", "LE", "GT", "GE", "PLUS", "MINUS",
                         "STAR", "SLASH", "AT", "POW"})
_DTYPE_TOKENS = frozenset(d.upper() for d in DTYPES)
_KEYWORD_TOKENS = frozenset({"CHAIN", "RETURN", "CONST", "TRUE", "FALSE"}) | _DTYPE_TOKENS
# Tokens that are a complete operand by themselves.
_VALUE_TOKENS = frozenset({"NAME", "NUMBER", "STRING", "TRUE", "FALSE"}) | _DTYPE_TOKENS
_EXPR_START = _VALUE_TOKENS | {"LPAR", "LSQB", "MINUS"}
# Tokens after which an operand must come.
_OPERAND_AFTER = _BINARY_OPS | {"EQUAL", "RETURN", "COMMA"}
_NOT_IN_BRACKETS = frozenset({"LBRACE", "RBRACE", "ARROW", "CHAIN", "CONST", "RETURN", "_SEP"})
_EXPR_STATEMENT = "an expression is not a statement; bind it with `name = ...` or `return` it"
_ORDER = ("COLON", "EQUAL", "ARROW", "LPAR", "RPAR", "LSQB", "RSQB", "LBRACE", "RBRACE",
          "COMMA", "CHAIN", "CONST", "RETURN", "TRUE", "FALSE")


@dataclass(frozen=True)
class _ErrorSite:
    """Where the parser stopped: the token it refused and what it would have taken."""
    file: SourceFile
    tok: Token                      # the refused token; type '$END' at the end of the file
    prev: Token | None              # the token before it
    prev2: Token | None             # and the one before that
    accepts: frozenset[str]         # terminal names the parser would have taken instead
    open: tuple[Token, ...]         # brackets still open before tok, innermost last
    level: tuple[Token, ...] = ()   # the tokens after the innermost open bracket, outside nested ones


def _syntax_error(file: SourceFile, tok: Token, fed: list[Token]) -> Diagnostic:
    site = _ErrorSite(
        file=file, tok=tok,
        prev=fed[-1] if fed else None,
        prev2=fed[-2] if len(fed) > 1 else None,
        accepts=_accepts(fed),
        open=_open_brackets(fed),
        level=_innermost_level(fed),
    )
    for rule in _ERROR_RULES:
        diagnostic = rule(site)
        if diagnostic is not None:
            return diagnostic
    return _generic(site)


def _accepts(fed: list[Token]) -> frozenset[str]:
    """What the parser accepts after `fed`, replayed from scratch.

    The parser that raised may already have made reductions that LALR's merged
    lookaheads allowed, so its own `expected` set can be too wide or too narrow.
    """
    parser = _lark().parse_interactive()
    for tok in fed:
        parser.feed_token(tok)
    return frozenset(parser.accepts())


def _open_brackets(fed: list[Token]) -> tuple[Token, ...]:
    stack: list[Token] = []
    for tok in fed:
        if tok.type in _CLOSER_OF:
            stack.append(tok)
        elif tok.type in _OPENER_OF and stack and stack[-1].type == _OPENER_OF[tok.type]:
            stack.pop()
    return tuple(stack)


def _innermost_level(fed: list[Token]) -> tuple[Token, ...]:
    """The tokens fed since the innermost bracket still open, leaving out nested brackets."""
    level: list[Token] = []
    depth = 0
    for tok in reversed(fed):
        if tok.type in _OPENER_OF:
            depth += 1
        elif tok.type in _CLOSER_OF:
            if depth == 0:
                break
            depth -= 1
        elif depth == 0:
            level.append(tok)
    return tuple(reversed(level))


def _tok_span(file: SourceFile, tok: Token) -> Span:
    """The span of one token, kept on its first line (a newline token ends on the next)."""
    end_col = tok.end_column if tok.end_line == tok.line else tok.column + 1
    return Span(file, tok.line, tok.column, tok.line, max(end_col, tok.column + 1))


def _after(file: SourceFile, tok: Token) -> Span:
    """The one column just after tok."""
    return Span(file, tok.end_line, tok.end_column, tok.end_line, tok.end_column + 1)


def _found(tok: Token) -> str:
    if tok.type == "$END":
        return "end of file"
    if tok.type == "_SEP":
        return "';'" if tok.value == ";" else "newline"
    if tok.type == "NAME":
        return f"name '{tok}'"
    if tok.type == "NUMBER":
        return f"number {tok}"
    if tok.type == "STRING":
        return f"string {tok}"
    if tok.type in _KEYWORD_TOKENS:
        return f"keyword '{tok}'"
    return f"'{tok}'"


def _expected(accepts: frozenset[str]) -> str:
    """A short readable list for a set of terminal names."""
    names = set(accepts)
    words = []
    if "NUMBER" in names:
        words.append("an expression")
        names -= _EXPR_START
    if "PLUS" in names:
        words.append("an operator")
        names -= _BINARY_OPS | {"LPAR", "LSQB", "EQUAL"}
    if "RETURN" in names:
        words.append("a statement")
        names -= {"NAME", "CONST", "RETURN"}
    if "NAME" in names and _DTYPE_TOKENS <= names:
        words.append("a type")
        names -= _DTYPE_TOKENS | {"NAME"}
    if "NAME" in names:
        words.append("a name")
    if "_SEP" in names:
        words.append("a newline")
    rank = {n: i for i, n in enumerate(_ORDER)}
    rest = sorted(names - {"NAME", "_SEP", "$END"}, key=lambda n: (rank.get(n, len(rank)), n))
    words += [f"'{_literal(n)}'" for n in rest]
    if "$END" in names:
        words.append("end of file")
    if not words:
        return "nothing more"
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def _keyword_as_name(s: _ErrorSite) -> Diagnostic | None:
    if s.tok.type in _KEYWORD_TOKENS and "NAME" in s.accepts and "F32" not in s.accepts:
        return Diagnostic(_tok_span(s.file, s.tok), f"'{s.tok}' is a keyword and cannot be used as a name")
    binds = s.prev2 is None or s.prev2.type in {"_SEP", "LBRACE", "CONST", "LPAR", "COMMA"}
    if s.prev is not None and s.prev.type in _KEYWORD_TOKENS and s.tok.type == "EQUAL" and binds:
        return Diagnostic(_tok_span(s.file, s.prev), f"'{s.prev}' is a keyword and cannot be used as a name")
    return None


def _missing_operand(s: _ErrorSite) -> Diagnostic | None:
    """An operator, '=', 'return' or ',' with nothing usable after it.

    For these the span is the column just after the operator, not the refused token
    (often a newline, or something on the next line), so the caret points at the gap.
    After ':' and '->' a type is missing, and the refused token is shown instead.
    """
    if s.prev is None:
        return None
    if s.prev.type == "COLON" and "F32" in s.accepts and "NUMBER" not in s.accepts:   # not a slice's ':'
        return Diagnostic(_tok_span(s.file, s.tok), f"expected a type after ':', found {_found(s.tok)}")
    if s.prev.type == "ARROW":
        return Diagnostic(_tok_span(s.file, s.tok), f"expected a return type after '->', found {_found(s.tok)}")
    if s.prev.type not in _OPERAND_AFTER or "NUMBER" not in s.accepts:
        return None
    if {"RPAR", "RSQB"} & s.accepts:  # a trailing comma before a closing bracket is fine
        return None
    if s.prev.type == "PIPE":
        return Diagnostic(_after(s.file, s.prev), "expected an operator name or call after '|>'")
    return Diagnostic(_after(s.file, s.prev), f"expected an expression after '{s.prev}'")


def _unclosed(s: _ErrorSite) -> Diagnostic | None:
    if not s.open:
        return None
    opener = s.open[-1]
    closer = _CLOSER_OF[opener.type]
    if s.tok.type == "$END":
        return Diagnostic(_tok_span(s.file, opener), f"'{opener}' was never closed")
    if s.tok.type in _OPENER_OF and opener.type not in {"LBRACE", _OPENER_OF[s.tok.type]}:
        return Diagnostic(_tok_span(s.file, s.tok),
                          f"closing '{s.tok}' does not match the opening '{opener}' on line {opener.line}")
    # A body's statements span lines, so only () and [] are suspect when a later line follows.
    if opener.type == "LBRACE" or closer not in s.accepts:
        return None
    if s.tok.line > opener.line or s.tok.type in _NOT_IN_BRACKETS:
        return Diagnostic(_tok_span(s.file, s.tok),
                          f"expected '{_literal(closer)}' to close the '{opener}' on line {opener.line}, "
                          f"found {_found(s.tok)}")
    return None


def _unmatched_closer(s: _ErrorSite) -> Diagnostic | None:
    if s.tok.type in _OPENER_OF and all(o.type != _OPENER_OF[s.tok.type] for o in s.open):
        return Diagnostic(_tok_span(s.file, s.tok), f"unmatched '{s.tok}'")
    return None


def _chain_header(s: _ErrorSite) -> Diagnostic | None:
    if s.accepts == {"ARROW"}:
        return Diagnostic(_tok_span(s.file, s.tok), "expected '->' and a return type after the parameter list")
    if "LBRACE" in s.accepts:
        return Diagnostic(_tok_span(s.file, s.tok),
                          f"expected '{{' to start the body of the chain, found {_found(s.tok)}")
    if "CHAIN" in s.accepts:
        return Diagnostic(_tok_span(s.file, s.tok),
                          f"expected 'chain' or 'const' at the top level, found {_found(s.tok)}")
    return None


def _bad_statement(s: _ErrorSite) -> Diagnostic | None:
    if "RETURN" in s.accepts and s.tok.type in _EXPR_START - {"NAME"}:
        return Diagnostic(_tok_span(s.file, s.tok), _EXPR_STATEMENT)
    if "RETURN" in s.accepts and s.tok.type in _BINARY_OPS:
        return Diagnostic(_tok_span(s.file, s.tok),
                          f"a statement cannot start with '{s.tok}'; a newline ends a statement, "
                          f"so wrap a multi-line expression in ( )")
    # After a name at the start of a statement only '=' (or ',' for `a, b = split(...)`) can come.
    if s.accepts - {"COMMA"} != {"EQUAL"} or s.prev is None or s.prev.type != "NAME":
        return None
    binds = s.prev2 is not None and s.prev2.type in {"CONST", "COMMA"}
    if s.tok.type == "LSQB" and not binds and re.match(r"\s*\w+\s*\[.*\]\s*=(?!=)", s.file.line(s.tok.line)):
        return Diagnostic(_tok_span(s.file, s.tok), f"cannot assign into a subscript of '{s.prev}': values are "
                          "immutable; make a new one (with concat, where...) and bind it to a new name")
    if binds or s.tok.type in _VALUE_TOKENS:
        return Diagnostic(_tok_span(s.file, s.tok), f"expected '=' after '{s.prev}'")
    return Diagnostic(_tok_span(s.file, s.prev), _EXPR_STATEMENT)


def _slice_parts(s: _ErrorSite) -> Diagnostic | None:
    item = s.level[max((i + 1 for i, t in enumerate(s.level) if t.type == "COMMA"), default=0):]
    if s.tok.type == "COLON" and "COLON" not in s.accepts and sum(t.type == "COLON" for t in item) == 2:
        return Diagnostic(_tok_span(s.file, s.tok), "a slice has at most three parts, start:stop:step")
    return None


def _missing_separator(s: _ErrorSite) -> Diagnostic | None:
    if "_SEP" in s.accepts and "PLUS" in s.accepts and s.tok.type in _VALUE_TOKENS | _KEYWORD_TOKENS | {"LSQB"}:
        return Diagnostic(_tok_span(s.file, s.tok), f"expected an operator or a newline, found {_found(s.tok)}")
    return None


def _generic(s: _ErrorSite) -> Diagnostic:
    return Diagnostic(_tok_span(s.file, s.tok), f"expected {_expected(s.accepts)}, found {_found(s.tok)}")


def _literal(terminal: str) -> str:
    """The text of a fixed terminal: RPAR -> ')'."""
    return next((t.pattern.value for t in _lark().terminals if t.name == terminal), terminal)


# Tried in order; the first that recognises the situation explains it.
_ERROR_RULES = (_keyword_as_name, _missing_operand, _unclosed, _unmatched_closer,
                _chain_header, _bad_statement, _slice_parts, _missing_separator)


def _lex_error(file: SourceFile, e: UnexpectedCharacters) -> Diagnostic:
    if e.char == '"':
        end = len(file.line(e.line)) + 1
        return Diagnostic(Span(file, e.line, e.column, e.line, max(end, e.column + 1)), "unterminated string")
    char = e.char if e.char.isprintable() else repr(e.char)[1:-1]
    hint = " (a NUL byte: is this file UTF-16? FDSL files are UTF-8)" if e.char == "\x00" else ""
    return Diagnostic(Span(file, e.line, e.column, e.line, e.column + 1), f"unexpected character '{char}'{hint}")


# ---- parse tree -> AST ------------------------------------------------------------------

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
class _AstBuilder(Transformer):
    """Builds ast nodes bottom-up; errors that the grammar lets through go to `sink`."""

    def __init__(self, file: SourceFile):
        super().__init__()
        self.file = file
        self.sink = DiagnosticSink()
        self._parenthesized: dict[int, ast.Expr] = {}  # id -> node, kept alive so ids stay unique

    def _span(self, meta) -> Span:
        return Span(self.file, meta.line, meta.column, meta.end_line, meta.end_column)

    def _tspan(self, tok: Token) -> Span:
        return _tok_span(self.file, tok)

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


# ---- the AST printer (--emit ast) --------------------------------------------------------

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
