"""User-facing diagnostics: `file:line:col: error: ...`, the source line, a caret underline, notes."""
from __future__ import annotations

from dataclasses import dataclass, field

from .source import Span


@dataclass(frozen=True)
class Note:
    span: Span | None
    message: str


@dataclass(frozen=True)
class Diagnostic:
    span: Span | None
    message: str
    notes: tuple[Note, ...] = ()
    severity: str = "error"

    def render(self) -> str:
        out = [_render_one(self.span, self.severity, self.message)]
        out += [_render_one(n.span, "note", n.message) for n in self.notes]
        return "\n".join(out)


def _render_one(span: Span | None, severity: str, message: str) -> str:
    if span is None:
        return f"{severity}: {message}"
    head = f"{span.file.path}:{span.line}:{span.col}: {severity}: {message}"
    text = span.file.line(span.line)
    if not text:
        return head
    width = (span.end_col - span.col) if span.end_line == span.line else len(text) - span.col + 1
    width = max(1, min(width, _SHOWN))
    col = span.col
    if len(text) > _SHOWN:                    # a long line: the part around the column, marked with ...
        start = max(0, min(col - 1 - _SHOWN // 3, len(text) - _SHOWN))
        end = start + _SHOWN
        text = ("..." if start else "") + text[start:end] + ("..." if end < len(text) else "")
        col = col - start + (3 if start else 0)
        width = max(1, min(width, len(text) - col + 1))
    caret = " " * (col - 1) + "^" + "~" * (width - 1)
    return f"{head}\n{text}\n{caret}"


_SHOWN = 120          # at most this much of a source line is shown under a diagnostic


class FdslError(Exception):
    """One or more user errors in FDSL source. `fusec` prints them and exits 1."""

    def __init__(self, diagnostics: list[Diagnostic]):
        self.diagnostics = list(diagnostics)
        super().__init__(self.render())

    def render(self) -> str:
        return "\n".join(d.render() for d in self.diagnostics)


class DiagnosticSink:
    """Collects independent errors so that one run reports as many as it can find."""

    def __init__(self) -> None:
        self.diagnostics: list[Diagnostic] = []

    def error(self, span: Span | None, message: str, notes: tuple[Note, ...] | list[Note] = ()) -> None:
        self.diagnostics.append(Diagnostic(span, message, tuple(notes)))

    def raise_if_any(self) -> None:
        if self.diagnostics:
            raise FdslError(self.diagnostics)
