"""The one gateway to the MLIR Python bindings: every other module imports MLIR from here.

Prefers the upstream `mlir` package when it is installed (complete: ir, passmanager, the
dialects, the execution engine and runtime helpers); otherwise uses the same upstream bindings
as shipped inside the torch-mlir wheel (`torch_mlir.ir`, ...). The choice is all-or-nothing, so
IR from one set is never handed to the other. `BINDINGS` names the package in use.
"""
from __future__ import annotations

import importlib
from types import ModuleType

_SUBMODULES = (
    "ir", "passmanager", "execution_engine", "runtime",
    "dialects.arith", "dialects.bufferization", "dialects.func", "dialects.linalg",
    "dialects.math", "dialects.memref", "dialects.scf", "dialects.tensor",
    "dialects.transform", "dialects.transform.interpreter", "dialects.transform.structured",
    "dialects.gpu",
)


def _load(prefix: str) -> dict[str, ModuleType]:
    return {name: importlib.import_module(f"{prefix}.{name}") for name in _SUBMODULES}


def _choose() -> tuple[str, dict[str, ModuleType]]:
    try:
        return "mlir", _load("mlir")
    except ImportError:
        return "torch_mlir", _load("torch_mlir")


BINDINGS, _mods = _choose()

ir = _mods["ir"]
passmanager = _mods["passmanager"]
arith = _mods["dialects.arith"]
bufferization = _mods["dialects.bufferization"]
func = _mods["dialects.func"]
linalg = _mods["dialects.linalg"]
math = _mods["dialects.math"]
memref = _mods["dialects.memref"]
scf = _mods["dialects.scf"]
tensor = _mods["dialects.tensor"]
transform = _mods["dialects.transform"]
interpreter = _mods["dialects.transform.interpreter"]
structured = _mods["dialects.transform.structured"]
gpu = _mods["dialects.gpu"]
ExecutionEngine = _mods["execution_engine"].ExecutionEngine
runtime = _mods["runtime"]
get_ranked_memref_descriptor = runtime.get_ranked_memref_descriptor

PassManager = passmanager.PassManager
MLIRError = ir.MLIRError


def new_context() -> "ir.Context":
    """A fresh context with every upstream dialect available (the bindings register them)."""
    return ir.Context()


def parse_module(text: str, context: "ir.Context | None" = None) -> "ir.Module":
    """Parse MLIR text into a module of `context` (a fresh one when None)."""
    with context or new_context():
        return ir.Module.parse(text)


__all__ = [
    "BINDINGS", "ir", "passmanager", "PassManager", "MLIRError", "arith", "bufferization", "func",
    "linalg", "math", "memref", "scf", "tensor", "transform", "interpreter", "structured", "gpu", "ExecutionEngine",
    "runtime", "get_ranked_memref_descriptor", "new_context", "parse_module",
]
