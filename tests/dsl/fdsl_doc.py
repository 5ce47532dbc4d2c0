"""The programs of docs/FDSL.md, the language reference (part of the repository: reading it
never skips). A program is a ```fdsl block, or an untagged block holding a chain. A program
followed by a ```text block that starts with `FILE:LINE:COL: error:` is a deliberate error, and
that block is exactly what fusec prints for it (with FILE as the path)."""
from __future__ import annotations

import re
from pathlib import Path

FDSL_MD = Path(__file__).resolve().parents[2] / "docs" / "FDSL.md"
DIAGNOSTIC = re.compile(r"(\S+?):\d+:\d+: error: ")


def doc_text() -> str:
    return FDSL_MD.read_text(encoding="utf-8")


def doc_blocks() -> list[tuple[str, str]]:
    """Every fenced block of docs/FDSL.md as (info string, text)."""
    return re.findall(r"^```(\w*)[^\n]*\n(.*?)^```", doc_text(), re.S | re.M)


def is_program(lang: str, body: str) -> bool:
    return lang == "fdsl" or (lang == "" and re.search(r"^\s*chain\s", body, re.M) is not None)


def doc_programs() -> list[tuple[str, str | None, str]]:
    """(source, the documented diagnostics or None, path) for every program of docs/FDSL.md."""
    blocks = doc_blocks()
    out = []
    for i, (lang, body) in enumerate(blocks):
        if lang == "text" and DIAGNOSTIC.match(body):
            assert i > 0 and is_program(*blocks[i - 1]), f"FDSL.md: diagnostics without a program:\n{body}"
        if not is_program(lang, body):
            continue
        nxt = blocks[i + 1] if i + 1 < len(blocks) else ("", "")
        m = DIAGNOSTIC.match(nxt[1]) if nxt[0] == "text" else None
        out.append((body, nxt[1].rstrip("\n") if m else None, m.group(1) if m else "FDSL.md"))
    return out
