"""All MLIR imports pass through compiler/mlir.py."""
from __future__ import annotations

import pathlib
import re

from fusec.compiler import mlir

ROOT = pathlib.Path(__file__).resolve().parents[2]
IMPORT = re.compile(r"^\s*(from|import)\s+(torch_mlir|mlir)\b", re.M)


def test_gateway_exports_the_bindings():
    assert mlir.BINDINGS in ("mlir", "torch_mlir")
    for name in ("ir", "passmanager", "arith", "func", "linalg", "math", "tensor", "bufferization",
                 "interpreter", "ExecutionEngine", "get_ranked_memref_descriptor"):
        assert getattr(mlir, name) is not None
    module = mlir.parse_module("func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {\n"
                               "  %e = tensor.empty() : tensor<2xf32>\n"
                               "  %c = linalg.copy ins(%a : tensor<2xf32>) outs(%e : tensor<2xf32>) -> tensor<2xf32>\n"
                               "  return %c : tensor<2xf32>\n}")
    assert module.operation.verify()


def test_no_other_module_imports_the_bindings():
    offenders = []
    for folder in ("compiler", "dsl", "runtime", "fusec"):
        for path in (ROOT / folder).rglob("*.py"):
            if path == ROOT / "compiler" / "mlir.py":
                continue
            if IMPORT.search(path.read_text()):
                offenders.append(str(path.relative_to(ROOT)))
    assert not offenders, f"import MLIR through fusec.compiler.mlir instead: {offenders}"
