"""Source files and spans: every AST node and typed value points back at the user's text."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, eq=False)
class SourceFile:
    path: str
    text: str

    def line(self, n: int) -> str:
        """The 1-based line n, without its newline ('' when out of range). Lines end at '\\n'
        only, as the lexer counts them (not at the other characters str.splitlines knows)."""
        lines = self.text.split("\n")
        return lines[n - 1].rstrip("\r") if 1 <= n <= len(lines) else ""


@dataclass(frozen=True)
class Span:
    """A region of a source file: 1-based line and column, end exclusive."""
    file: SourceFile
    line: int
    col: int
    end_line: int
    end_col: int

    def __repr__(self) -> str:
        return f"{self.file.path}:{self.line}:{self.col}"

    def to(self, other: "Span") -> "Span":
        """The span from the start of self to the end of other."""
        return Span(self.file, self.line, self.col, other.end_line, other.end_col)
