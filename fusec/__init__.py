"""fusec: a fusion compiler for chains of tensor operators. The library's names: `parse`,
`check`, `reference`, `compile` (-> Program, whose chains run the fused kernels, their builds
kept in the compile cache) and `Options` (compiler/options.py's CompileOptions). See
docs/GUIDE.md, "As a library".
"""
from fusec.dsl.diagnostics import FdslError

from .api import check, parse, reference
from .program import Options, Program, compile
from .version import __version__

__all__ = ["parse", "check", "reference", "compile", "Program", "Options", "FdslError", "__version__"]
