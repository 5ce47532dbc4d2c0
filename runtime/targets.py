"""Where chains run: `cuda` (a real GPU), `cuda-sim` (Numba's CUDA simulator), `cpu` (Numba
parallel loops), and the two references: `reference` (the NumPy oracle) and `mlir-jit` (MLIR's
own CPU JIT, a check of lowering independent of the Numba emitter).

The simulator is process-wide: Numba reads NUMBA_ENABLE_CUDASIM when `numba.cuda` is first
imported, so `cuda-sim` must be chosen before anything imports it, and a process that chose
it cannot use a real GPU afterwards (and the other way round).
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass

import numpy as np

from . import simulator

TARGETS = ("cuda", "cuda-sim", "cpu", "reference", "mlir-jit")
COMPILED = ("cuda", "cuda-sim", "cpu")       # the targets fusec plans and emits kernels for


class TargetError(Exception):
    """The requested target cannot run in this process or on this machine."""


@dataclass(frozen=True)
class Target:
    name: str

    @property
    def kind(self) -> str:
        """What the compiler builds for it: 'gpu' kernels, 'cpu' loops, or (the references)
        the target's own name."""
        return {"cuda": "gpu", "cuda-sim": "gpu"}.get(self.name, self.name)

    @property
    def compiled(self) -> bool:
        """fusec plans, fuses and emits kernels for it (not a reference)."""
        return self.name in COMPILED

    @property
    def is_cuda(self) -> bool:
        return self.name in ("cuda", "cuda-sim")

    @property
    def checks_index_inputs(self) -> bool:
        """A gather's or embedding's index input outside its axis is refused before anything
        runs, as a user error at the op (runtime/reference.py: check_index_inputs): on `cpu`
        (docs/FDSL.md). The GPU targets clamp every index; the reference refuses it as it runs."""
        return self.name == "cpu"

    @property
    def untimed(self) -> str | None:
        """Why runs on this target are not timed (None: they are). The simulator runs each
        kernel thread as Python: its times say nothing of a GPU's, so each build runs once."""
        return "not measured on cuda-sim (the simulator runs kernels as Python)" if self.name == "cuda-sim" else None

    def to_device(self, x):
        if not self.is_cuda or hasattr(x, "__cuda_array_interface__"):
            return x
        from numba import cuda
        return cuda.to_device(np.ascontiguousarray(x))

    def to_host(self, x) -> np.ndarray:
        if hasattr(x, "copy_to_host"):
            return x.copy_to_host()
        return np.asarray(x)

    def synchronize(self) -> None:
        if self.is_cuda:
            from numba import cuda
            cuda.synchronize()

    def timed(self, fn, args, reps: int) -> list[float]:
        """Seconds per call of fn(*args), `reps` times (after the caller's warm-up). On a real
        GPU with CUDA events around each call; elsewhere with the host clock."""
        if self.name == "cuda":
            from numba import cuda
            out = []
            for _ in range(reps):
                start, stop = cuda.event(), cuda.event()
                start.record()
                fn(*args)
                stop.record()
                stop.synchronize()
                out.append(cuda.event_elapsed_time(start, stop) / 1e3)
            return out
        out = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn(*args)
            self.synchronize()
            out.append(time.perf_counter() - t0)
        return out


def _cuda_imported() -> bool:
    return "numba.cuda" in sys.modules


def _simulating() -> bool:
    return os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def select(name: str) -> Target:
    """Prepare this process for `name`; raises TargetError when it cannot run here."""
    if name not in TARGETS:
        raise TargetError(f"unknown target '{name}'; expected one of {', '.join(TARGETS)}")
    if name == "cuda-sim":
        if _cuda_imported() and not _simulating():
            raise TargetError("cuda-sim must be chosen before numba.cuda is imported (it is process-wide); "
                              "run it in a fresh process")
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        simulator.mend()
    elif name == "cuda":
        if _simulating():
            raise TargetError("this process runs the CUDA simulator (NUMBA_ENABLE_CUDASIM=1); "
                              "the cuda target needs a fresh process without it")
        from numba import cuda
        if not cuda.is_available():
            raise TargetError("no CUDA GPU is available; use --target cpu or --target cuda-sim")
    return Target(name)


def best_available() -> str:
    """`cuda` when a GPU is present (and this process is not simulating), else `cpu`."""
    if _simulating():
        return "cpu"
    try:
        from numba import cuda
        return "cuda" if cuda.is_available() else "cpu"
    except Exception:   # a broken driver install counts as no GPU
        return "cpu"
