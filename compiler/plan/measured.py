"""What the kernel report (compiler/report) measured of a kernel, as the cost model reads it.
Plain data without MLIR: the report builds it where only the emitted source is at hand."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Measured:
    """A kernel's resources as the kernel report measured them (compiler/report): they replace
    the model's estimates of registers, private (local) memory, shared memory and coalescing."""
    registers: int
    local_bytes: int                  # per thread: ptxas's stack frame and lmem
    spill_bytes: int                  # per thread: spill stores + loads
    shared_bytes: int                 # per block
    coalescing: float | None          # sector-weighted efficiency of the global accesses (1: ideal)
