"""The library front door: load and check FDSL, bind symbols, run the reference."""
from __future__ import annotations

import numpy as np

from fusec.dsl import ast as A
from fusec.dsl.checker import check as _check
from fusec.dsl.parser import parse as _parse
from fusec.dsl.typed import TypedChain, TypedModule
from fusec.runtime import reference as _ref

from .errors import UsageError


def read_source(path_or_source: str) -> tuple[str, str]:
    """(text, path) from a path to a .fdsl file, or from FDSL source text itself."""
    if "\n" not in path_or_source and ("{" not in path_or_source):
        try:
            with open(path_or_source, encoding="utf-8") as f:
                return f.read(), path_or_source
        except OSError as e:
            raise UsageError(f"cannot read {path_or_source}: {e.strerror}") from None
    return path_or_source, "<string>"


def parse(path_or_source: str) -> A.Module:
    """Parse FDSL (a file path or source text) into an AST; raises FdslError on syntax errors."""
    text, path = read_source(path_or_source)
    return _parse(text, path)


def check(module_or_source: A.Module | str) -> TypedModule:
    """Type-check a parsed module (or a path / source text) into typed chains; raises FdslError."""
    module = module_or_source if isinstance(module_or_source, A.Module) else parse(module_or_source)
    return _check(module)


def reference(chain: TypedChain, inputs: list[np.ndarray], binding: dict[str, int] | None = None,
              compute_f64: bool = False) -> list[np.ndarray]:
    """Run one typed chain with the NumPy reference; returns its outputs."""
    return _ref.run_chain(chain, inputs, binding, compute_f64)


def parse_bind(text: str | None) -> dict[str, int]:
    """`M=64,N=128` -> {"M": 64, "N": 128}."""
    out: dict[str, int] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        name, eq, value = part.partition("=")
        if not eq or not name.strip().isidentifier() or not value.strip().isdigit() or int(value) < 1:
            raise UsageError(f"--bind expects NAME=SIZE pairs such as M=64,N=128; got '{part.strip()}'")
        out[name.strip()] = int(value)
    return out
