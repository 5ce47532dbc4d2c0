"""What the kernel report (compiler/report) measured of a kernel, as the cost model reads it.
Plain data without MLIR: the report builds it where only the emitted source is at hand."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Measured:
    """A kernel's resources as the kernel report measured them (compiler/report): they replace
    the model's estimates of registers, private (local) memory, shared memory and coalescing,
    and, from its SASS, of the instructions a warp issues per step of the template's main loop
    (plan/cost.py: issue_per_step) and the global loads a thread keeps in flight
    (plan/cost.py: in_flight_loads)."""
    registers: int
    local_bytes: int                  # per thread: ptxas's stack frame and lmem
    spill_bytes: int                  # per thread: spill stores + loads
    shared_bytes: int                 # per block
    coalescing: float | None          # sector-weighted efficiency of the global accesses (1: ideal)
    loop_instructions: int | None = None   # the hot innermost SASS loop: instructions per iteration (a warp's)
    loop_math: int | None = None      # of them math (FFMA, FADD, FMUL, HMMA, MUFU, ...)
    loads_in_flight: int | None = None     # the fewest global loads a thread has in flight over its phases
    global_load_bytes: float | None = None    # bytes per global load instruction, averaged over the kernel's
