"""fusec: a fusion compiler for chains of tensor operators. The library's names: `parse`,
`check`, `reference`, `compile` (-> Program, whose chains run the fused kernels, their builds
kept in the compile cache) and `Options` (compiler/options.py's CompileOptions); `fusec.onnx`,
the ONNX importer, loads on first use. See docs/GUIDE.md, "As a library".
"""
from fusec.dsl.diagnostics import FdslError

from .api import check, parse, reference
from .program import Options, Program, compile
from .version import __version__

__all__ = ["parse", "check", "reference", "compile", "Program", "Options", "FdslError", "__version__"]


def __getattr__(name: str):
    """`fusec.onnx` (the ONNX importer) loads on first use: `import fusec` never imports onnx."""
    if name == "onnx":
        import importlib
        return importlib.import_module(".onnx", __name__)
    raise AttributeError(f"module 'fusec' has no attribute '{name}'")
