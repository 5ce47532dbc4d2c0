"""The library front door: read FDSL (a path or source text), parse and check it, run the
NumPy reference of a typed chain, read a `--bind` list. `parse_text` (source text and the path
its diagnostics name) is dsl.parser's, re-exported."""
from __future__ import annotations

import os
import re

import numpy as np

from fusec.dsl import ast as A
from fusec.dsl.checker import check_module
from fusec.dsl.encoding import decode
from fusec.dsl.parser import parse_text
from fusec.dsl.typed import TypedChain, TypedModule
from fusec.runtime import reference as _ref

from .errors import UsageError


def read_file(path: str) -> tuple[str, str]:
    """(text, path) of an FDSL file: UTF-8 (a byte-order mark is dropped); UsageError when it
    cannot be read, FdslError at the first byte that is not UTF-8."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from None
    return decode(data, path), path


def read_source(path_or_source: str) -> tuple[str, str]:
    """(text, path) from a path to a .fdsl file, or from FDSL source text itself: a string
    naming an existing file is that file (whatever characters its name holds); any other
    string with a newline or a brace is source text."""
    if "\n" not in path_or_source and (os.path.exists(path_or_source) or "{" not in path_or_source):
        return read_file(path_or_source)
    return path_or_source, "<string>"


def parse(path_or_source: str) -> A.Module:
    """Parse FDSL (a file path or source text) into an AST; raises FdslError on syntax errors."""
    text, path = read_source(path_or_source)
    return parse_text(text, path)


def check(module_or_source: A.Module | str) -> TypedModule:
    """Type-check a parsed module (or a path / source text) into typed chains; raises FdslError."""
    module = module_or_source if isinstance(module_or_source, A.Module) else parse(module_or_source)
    return check_module(module)


def reference(chain: TypedChain, inputs: list[np.ndarray], binding: dict[str, int] | None = None,
              compute_f64: bool = False) -> list[np.ndarray]:
    """Run one typed chain with the NumPy reference; returns its outputs."""
    return _ref.run_chain(chain, inputs, binding, compute_f64)


def parse_bind(text: str | None) -> dict[str, int]:
    """`M=64,N=128` -> {"M": 64, "N": 128}: sizes in ASCII digits, positive, each symbol once."""
    out: dict[str, int] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        name, eq, value = (p.strip() for p in part.partition("="))
        if not eq or not name.isidentifier() or not re.fullmatch(r"[0-9]+", value) or int(value) < 1:
            raise UsageError(f"--bind expects NAME=SIZE pairs with positive sizes, such as M=64,N=128; "
                             f"got '{part.strip()}'")
        if len(value) > 18:
            raise UsageError(f"--bind {name}={value[:20]}{'...' if len(value) > 20 else ''}: the size is out of range "
                             "(at most 18 digits)")
        if name in out:
            raise UsageError(f"--bind gives {name} twice ({name}={out[name]} and {name}={int(value)})")
        out[name] = int(value)
    return out
