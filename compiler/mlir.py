"""The one gateway to the MLIR Python bindings: every other module imports MLIR from here. The
upstream `mlir` package when installed, else the same bindings inside torch-mlir, all or
nothing (`BINDINGS` names the one in use); the execution engine loads on first use of
`ExecutionEngine` or `get_ranked_memref_descriptor`. Also `verify` and `print_ir`. See
docs/ARCHITECTURE.md, "Layout".
"""
from __future__ import annotations

import importlib
from types import ModuleType

from .errors import CompilerInternalError

_SUBMODULES = (
    "ir", "passmanager",
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
PassManager = passmanager.PassManager
MLIRError = ir.MLIRError
_LAZY = {"ExecutionEngine": ("execution_engine", "ExecutionEngine"), "runtime": ("runtime", None),
         "get_ranked_memref_descriptor": ("runtime", "get_ranked_memref_descriptor")}


def __getattr__(name: str):
    """The execution engine and its runtime helpers, imported when first asked for."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attr = _LAZY[name]
    mod = importlib.import_module(f"{BINDINGS}.{module}")
    value = mod if attr is None else getattr(mod, attr)
    globals()[name] = value
    return value


def new_context() -> "ir.Context":
    """A fresh context with every upstream dialect available (the bindings register them)."""
    return ir.Context()


def parse_module(text: str, context: "ir.Context | None" = None) -> "ir.Module":
    """Parse MLIR text into a module of `context` (a fresh one when None)."""
    with context or new_context():
        return ir.Module.parse(text)


def verify(module: "ir.Module", stage: str) -> None:
    """Raise CompilerInternalError naming `stage` when the module does not verify."""
    try:
        ok = module.operation.verify()
    except MLIRError as e:
        raise CompilerInternalError(stage, f"the IR does not verify:\n{e}") from None
    if not ok:
        raise CompilerInternalError(stage, "the IR does not verify")


def print_ir(module: "ir.Module | ir.Operation", locations: bool = False) -> str:
    """Deterministic text of a module (no addresses, stable SSA names); with `locations`, every
    op shows its loc("file":line:col)."""
    op = module.operation if isinstance(module, ir.Module) else module
    return op.get_asm(enable_debug_info=locations)


__all__ = [
    "BINDINGS", "ir", "passmanager", "PassManager", "MLIRError", "arith", "bufferization", "func",
    "linalg", "math", "memref", "scf", "tensor", "transform", "interpreter", "structured", "gpu", "ExecutionEngine",
    "runtime", "get_ranked_memref_descriptor", "new_context", "parse_module", "verify", "print_ir",
]
