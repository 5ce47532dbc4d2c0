"""FDSL parser: source text -> ast.Module, through Lark's LALR parser (grammar in fdsl.lark).

`parse_text` never lets a Lark exception out: a syntax error becomes an FdslError whose
Diagnostic says in words what was expected, at the exact line and column (syntax_errors.py).
The parts: the token stream (tokens.py), the parse tree -> AST builder (ast_builder.py), the
AST printer (ast_format.py).
"""
from __future__ import annotations

from lark import Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from . import ast
from .ast_builder import AstBuilder, build_ast
from .diagnostics import Diagnostic, FdslError
from .limits import MAX_NESTING
from .source import SourceFile, Span
from .syntax_errors import lex_error, syntax_error
from .tokens import end_token, grammar, statement_tokens
from .types import DTYPES

KEYWORDS = frozenset({"chain", "return", "const", "true", "false", "inf", "nan", *DTYPES})


def parse_text(text: str, path: str = "<string>") -> ast.Module:
    """Parse FDSL source into an ast.Module; raise FdslError on any syntax error (and on an
    expression nested deeper than MAX_NESTING levels). A leading byte-order mark is dropped."""
    file = SourceFile(path, text[1:] if text.startswith("\ufeff") else text)
    tree = _parse_tree(file)
    _check_nesting(file, tree)
    builder = AstBuilder(file)
    module = build_ast(builder, tree)
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


def _parse_tree(file: SourceFile) -> Tree:
    """Feed the filtered tokens to Lark's LALR parser one by one, keeping those it took.

    Feeding by hand (rather than Lark's `postlex` option) keeps no per-parse state on a
    shared object, and on an error leaves us the exact tokens before the refused one.
    """
    lark = grammar()
    parser = lark.parse_interactive()
    fed: list[Token] = []
    try:
        for tok in statement_tokens(lark.lex(file.text)):
            parser.feed_token(tok)
            fed.append(tok)
        return parser.feed_token(end_token(fed))
    except UnexpectedCharacters as e:
        raise FdslError([lex_error(file, e)]) from None
    except UnexpectedToken as e:
        raise FdslError([syntax_error(file, e.token, fed)]) from None
    except UnexpectedInput as e:  # not raised by LALR today; never show a Lark error regardless
        span = Span(file, e.line, e.column, e.line, e.column + 1)
        raise FdslError([Diagnostic(span, "syntax error")]) from None

