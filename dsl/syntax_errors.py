"""Syntax errors in words: the token the LALR parser refused, and what it would have taken,
explained as one Diagnostic at the exact line and column.

`syntax_error` tries the rules in `_ERROR_RULES` in order (the first that recognises the
situation explains it), else lists what was expected; `lex_error` explains a character the
lexer refused.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from lark import Token
from lark.exceptions import UnexpectedCharacters

from .diagnostics import Diagnostic
from .source import SourceFile, Span
from .tokens import CLOSER_OF, OPENER_OF, grammar, tok_span
from .types import DTYPES

_BINARY_OPS = frozenset({"PIPE", "EQ", "NE", "LT", "LE", "GT", "GE", "PLUS", "MINUS",
                         "STAR", "SLASH", "AT", "POW"})
_DTYPE_TOKENS = frozenset(d.upper() for d in DTYPES)
_KEYWORD_TOKENS = frozenset({"CHAIN", "RETURN", "CONST", "TRUE", "FALSE", "INF", "NAN"}) | _DTYPE_TOKENS
# Tokens that are a complete operand by themselves.
_VALUE_TOKENS = frozenset({"NAME", "NUMBER", "STRING", "TRUE", "FALSE", "INF", "NAN"}) | _DTYPE_TOKENS
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


def syntax_error(file: SourceFile, tok: Token, fed: list[Token]) -> Diagnostic:
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
    parser = grammar().parse_interactive()
    for tok in fed:
        parser.feed_token(tok)
    return frozenset(parser.accepts())


def _open_brackets(fed: list[Token]) -> tuple[Token, ...]:
    stack: list[Token] = []
    for tok in fed:
        if tok.type in CLOSER_OF:
            stack.append(tok)
        elif tok.type in OPENER_OF and stack and stack[-1].type == OPENER_OF[tok.type]:
            stack.pop()
    return tuple(stack)


def _innermost_level(fed: list[Token]) -> tuple[Token, ...]:
    """The tokens fed since the innermost bracket still open, leaving out nested brackets."""
    level: list[Token] = []
    depth = 0
    for tok in reversed(fed):
        if tok.type in OPENER_OF:
            depth += 1
        elif tok.type in CLOSER_OF:
            if depth == 0:
                break
            depth -= 1
        elif depth == 0:
            level.append(tok)
    return tuple(reversed(level))


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
        return Diagnostic(tok_span(s.file, s.tok), f"'{s.tok}' is a keyword and cannot be used as a name")
    binds = s.prev2 is None or s.prev2.type in {"_SEP", "LBRACE", "CONST", "LPAR", "COMMA"}
    if s.prev is not None and s.prev.type in _KEYWORD_TOKENS and s.tok.type == "EQUAL" and binds:
        return Diagnostic(tok_span(s.file, s.prev), f"'{s.prev}' is a keyword and cannot be used as a name")
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
        return Diagnostic(tok_span(s.file, s.tok), f"expected a type after ':', found {_found(s.tok)}")
    if s.prev.type == "ARROW":
        return Diagnostic(tok_span(s.file, s.tok), f"expected a return type after '->', found {_found(s.tok)}")
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
    closer = CLOSER_OF[opener.type]
    if s.tok.type == "$END":
        return Diagnostic(tok_span(s.file, opener), f"'{opener}' was never closed")
    if s.tok.type in OPENER_OF and opener.type not in {"LBRACE", OPENER_OF[s.tok.type]}:
        return Diagnostic(tok_span(s.file, s.tok),
                          f"closing '{s.tok}' does not match the opening '{opener}' on line {opener.line}")
    # A body's statements span lines, so only () and [] are suspect when a later line follows.
    if opener.type == "LBRACE" or closer not in s.accepts:
        return None
    if s.tok.line > opener.line or s.tok.type in _NOT_IN_BRACKETS:
        return Diagnostic(tok_span(s.file, s.tok),
                          f"expected '{_literal(closer)}' to close the '{opener}' on line {opener.line}, "
                          f"found {_found(s.tok)}")
    return None


def _unmatched_closer(s: _ErrorSite) -> Diagnostic | None:
    if s.tok.type in OPENER_OF and all(o.type != OPENER_OF[s.tok.type] for o in s.open):
        return Diagnostic(tok_span(s.file, s.tok), f"unmatched '{s.tok}'")
    return None


def _chain_header(s: _ErrorSite) -> Diagnostic | None:
    if s.accepts == {"ARROW"}:
        return Diagnostic(tok_span(s.file, s.tok), "expected '->' and a return type after the parameter list")
    if "LBRACE" in s.accepts:
        return Diagnostic(tok_span(s.file, s.tok),
                          f"expected '{{' to start the body of the chain, found {_found(s.tok)}")
    if "CHAIN" in s.accepts:
        return Diagnostic(tok_span(s.file, s.tok),
                          f"expected 'chain' or 'const' at the top level, found {_found(s.tok)}")
    return None


def _bad_statement(s: _ErrorSite) -> Diagnostic | None:
    if "RETURN" in s.accepts and s.tok.type in _EXPR_START - {"NAME"}:
        return Diagnostic(tok_span(s.file, s.tok), _EXPR_STATEMENT)
    if "RETURN" in s.accepts and s.tok.type in _BINARY_OPS:
        return Diagnostic(tok_span(s.file, s.tok),
                          f"a statement cannot start with '{s.tok}'; a newline ends a statement, "
                          f"so wrap a multi-line expression in ( )")
    # After a name at the start of a statement only '=' (or ',' for `a, b = split(...)`) can come.
    if s.accepts - {"COMMA"} != {"EQUAL"} or s.prev is None or s.prev.type != "NAME":
        return None
    binds = s.prev2 is not None and s.prev2.type in {"CONST", "COMMA"}
    if s.tok.type == "LSQB" and not binds and re.match(r"\s*\w+\s*\[.*\]\s*=(?!=)", s.file.line(s.tok.line)):
        return Diagnostic(tok_span(s.file, s.tok), f"cannot assign into a subscript of '{s.prev}': values are "
                          "immutable; make a new one (with concat, where...) and bind it to a new name")
    if binds or s.tok.type in _VALUE_TOKENS:
        return Diagnostic(tok_span(s.file, s.tok), f"expected '=' after '{s.prev}'")
    return Diagnostic(tok_span(s.file, s.prev), _EXPR_STATEMENT)


def _slice_parts(s: _ErrorSite) -> Diagnostic | None:
    item = s.level[max((i + 1 for i, t in enumerate(s.level) if t.type == "COMMA"), default=0):]
    if s.tok.type == "COLON" and "COLON" not in s.accepts and sum(t.type == "COLON" for t in item) == 2:
        return Diagnostic(tok_span(s.file, s.tok), "a slice has at most three parts, start:stop:step")
    return None


def _missing_separator(s: _ErrorSite) -> Diagnostic | None:
    if "_SEP" in s.accepts and "PLUS" in s.accepts and s.tok.type in _VALUE_TOKENS | _KEYWORD_TOKENS | {"LSQB"}:
        return Diagnostic(tok_span(s.file, s.tok), f"expected an operator or a newline, found {_found(s.tok)}")
    return None


def _generic(s: _ErrorSite) -> Diagnostic:
    return Diagnostic(tok_span(s.file, s.tok), f"expected {_expected(s.accepts)}, found {_found(s.tok)}")


def _literal(terminal: str) -> str:
    """The text of a fixed terminal: RPAR -> ')'."""
    return next((t.pattern.value for t in grammar().terminals if t.name == terminal), terminal)


# Tried in order; the first that recognises the situation explains it.
_ERROR_RULES = (_keyword_as_name, _missing_operand, _unclosed, _unmatched_closer,
                _chain_header, _bad_statement, _slice_parts, _missing_separator)


def lex_error(file: SourceFile, e: UnexpectedCharacters) -> Diagnostic:
    if e.char == '"':
        end = len(file.line(e.line)) + 1
        return Diagnostic(Span(file, e.line, e.column, e.line, max(end, e.column + 1)), "unterminated string")
    char = e.char if e.char.isprintable() else repr(e.char)[1:-1]
    hint = " (a NUL byte: is this file UTF-16? FDSL files are UTF-8)" if e.char == "\x00" else ""
    return Diagnostic(Span(file, e.line, e.column, e.line, e.column + 1), f"unexpected character '{char}'{hint}")

