"""The emitter: lowered MLIR (func, gpu, scf, memref, arith, math, and the marked linalg patterns)
to a readable Python module of Numba code: CUDA kernels and a host function, or one njit
parallel function for the cpu. `module.py` drives it; the other modules are one concern each
(docs/ARCHITECTURE.md, "Layout" and "GPU kernels: how a plan becomes CUDA").
"""
from .module import EmittedModule, EmitError, Entry, Launch, emit

__all__ = ["EmittedModule", "EmitError", "Entry", "Launch", "emit"]
