"""fusec: a fusion compiler for chains of tensor operators.

    fusec.parse(path_or_source)    -> AST (raises FdslError with file:line:col diagnostics)
    fusec.check(module_or_source)  -> TypedModule: every value with its dtype and shape
    fusec.reference(chain, inputs) -> the NumPy reference outputs of one typed chain
    fusec.compile(path_or_source, target=None, options=None, cache_dir=None, max_memory=None, cache=None)
                                   -> Program: program.chains[name](*arrays) runs fused kernels;
                                      .plan(binding), .stages(binding), .check() on each chain;
                                      builds are kept in the compile cache (runtime/cache.py)
    fusec.Options                  the compile options (compiler/options.py's CompileOptions)
"""
from fusec.dsl.diagnostics import FdslError

from .api import check, parse, reference
from .program import Options, Program, compile
from .version import __version__

__all__ = ["parse", "check", "reference", "compile", "Program", "Options", "FdslError", "__version__"]
