"""The token stream between Lark's lexer and its LALR parser (grammar in fdsl.lark).

`grammar()` is the one Lark object; `statement_tokens` drops the newlines that separate nothing;
`end_token` ends a stream; `tok_span` is the span diagnostics give one token.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Iterable, Iterator

from lark import Lark, Token

from .source import SourceFile, Span


@functools.lru_cache(maxsize=1)
def grammar() -> Lark:
    """The LALR parser of fdsl.lark, made once."""
    text = Path(__file__).with_name("fdsl.lark").read_text(encoding="utf-8")
    return Lark(text, parser="lalr", lexer="basic", propagate_positions=True, maybe_placeholders=True)


CLOSER_OF = {"LPAR": "RPAR", "LSQB": "RSQB", "LBRACE": "RBRACE"}
OPENER_OF = {closer: opener for opener, closer in CLOSER_OF.items()}
_SEP_FREE_AFTER = {None, "LBRACE", "ARROW"}
_SEP_FREE_BEFORE = {"LBRACE", "RBRACE", "ARROW"}


def statement_tokens(tokens: Iterable[Token]) -> Iterator[Token]:
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
        if tok.type in CLOSER_OF:
            open_brackets.append(tok.type)
        elif tok.type in OPENER_OF and open_brackets and open_brackets[-1] == OPENER_OF[tok.type]:
            open_brackets.pop()
        prev = tok.type
        yield tok


def end_token(fed: list[Token]) -> Token:
    """The end-of-file token, placed just after the last real token."""
    if not fed:
        return Token("$END", "", 0, 1, 1, 1, 1, 0)
    last = fed[-1]
    return Token("$END", "", last.end_pos, last.end_line, last.end_column,
                 last.end_line, last.end_column, last.end_pos)


def tok_span(file: SourceFile, tok: Token) -> Span:
    """The span of one token, kept on its first line (a newline token ends on the next)."""
    end_col = tok.end_column if tok.end_line == tok.line else tok.column + 1
    return Span(file, tok.line, tok.column, tok.line, max(end_col, tok.column + 1))
