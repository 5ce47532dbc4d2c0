"""An FDSL file's bytes as text: UTF-8, with or without a byte-order mark; anything else is a
user error at the line and column of the first byte that is not UTF-8 (or at 1:1 for a file
that begins with a UTF-16 or UTF-32 byte-order mark)."""
from __future__ import annotations

import codecs

from .diagnostics import Diagnostic, FdslError
from .source import SourceFile, Span

_OTHER_BOMS = ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
               (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"))


def decode(data: bytes, path: str) -> str:
    """The text of an FDSL file: UTF-8, a leading byte-order mark dropped. Raises
    FdslError at the first byte that is not UTF-8 (or at 1:1 for a UTF-16/32 file)."""
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    for bom, name in _OTHER_BOMS:
        if data.startswith(bom):
            file = SourceFile(path, "")
            raise FdslError([Diagnostic(Span(file, 1, 1, 1, 2), f"this file is {name} text (it starts with a {name} "
                                        "byte-order mark); FDSL files are UTF-8: convert it, e.g. with "
                                        f"iconv -f {name} -t UTF-8")])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        before = data[:e.start].decode("utf-8")
        line = before.count("\n") + 1
        col = len(before) - (before.rfind("\n") + 1) + 1
        shown = data.decode("utf-8", errors="replace")
        file = SourceFile(path, shown)
        what = (f"byte 0x{data[e.start]:02x} is not UTF-8" if e.end - e.start == 1
                else f"bytes {data[e.start:e.end].hex(' ')} are not UTF-8")
        raise FdslError([Diagnostic(Span(file, line, col, line, col + 1),
                                    f"{what}; FDSL files are UTF-8 text")]) from None
    nul = text.find("\x00")
    if nul >= 0:
        line = text.count("\n", 0, nul) + 1
        col = nul - (text.rfind("\n", 0, nul) + 1) + 1
        raise FdslError([Diagnostic(Span(SourceFile(path, text.replace("\x00", " ")), line, col, line, col + 1),
                                    "a NUL byte: is this file UTF-16 without a byte-order mark? FDSL files are "
                                    "UTF-8 text")])
    return text
