"""The emitter: a total translator from the lowered MLIR (func, gpu, scf, memref, arith, math) to
a readable Python module of Numba code (CUDA kernels and a host function, or one njit parallel
function for the cpu).

`module.py` drives it (one kernel per gpu.launch, the host schedule); `body.py` walks op
bodies; `control.py` translates scf; `views.py` folds memref views into index arithmetic;
`values.py` names values and materialises typed constants; `scalar.py` has one expression per
arith/math op (the math functions come from compiler/mathfns.py); `cpu.py` holds the cpu
target's vectorisable forms and BLAS calls; `shared.py` proves which buffers a block shares.
"""
from .module import EmittedModule, EmitError, Entry, Launch, emit

__all__ = ["EmittedModule", "EmitError", "Entry", "Launch", "emit"]
