"""A compiled chain's build (fused or unfused) as a callable on arrays, with timing."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import numpy as np

from .targets import Target


@dataclass(frozen=True)
class Timing:
    median_s: float
    min_s: float
    runs: int

    def as_dict(self) -> dict:
        return {"median_ms": self.median_s * 1e3, "min_ms": self.min_s * 1e3, "runs": self.runs}


class Executable:
    """host(*arrays) -> tuple of arrays, for one target. NumPy inputs give NumPy outputs; on
    `cuda`, device arrays (anything with __cuda_array_interface__) in give device arrays out."""

    def __init__(self, host, target: Target, input_dtypes: list[np.dtype], name: str):
        self.host = host
        self.target = target
        self.input_dtypes = input_dtypes
        self.name = name

    def prepare(self, arrays) -> list:
        """Inputs as the host function wants them (contiguous, right dtype, on the device)."""
        out = []
        for x, dt in zip(arrays, self.input_dtypes):
            if hasattr(x, "__cuda_array_interface__"):
                out.append(x)
            else:
                a = np.asarray(x, dtype=dt)            # (ascontiguousarray would make a scalar 1-D)
                out.append(self.target.to_device(a if a.flags.c_contiguous else np.ascontiguousarray(a)))
        return out

    def run_prepared(self, args) -> tuple:
        return tuple(self.host(*args))

    def __call__(self, *arrays) -> list:
        device_in = any(hasattr(x, "__cuda_array_interface__") for x in arrays)
        outs = self.run_prepared(self.prepare(arrays))
        self.target.synchronize()
        return list(outs) if device_in else [self.target.to_host(o) for o in outs]

    def time(self, arrays, min_runs: int = 3, max_runs: int = 50, budget_s: float = 0.5) -> Timing:
        """Median and minimum of repeated runs after one warm-up (which also JIT-compiles)."""
        args = self.prepare(arrays)
        self.run_prepared(args)
        self.target.synchronize()
        t0 = time.perf_counter()
        first = self.target.timed(self.run_prepared, (args,), 1)
        reps = max(min_runs - 1, min(max_runs - 1, int(budget_s / max(time.perf_counter() - t0, 1e-6))))
        samples = first + self.target.timed(self.run_prepared, (args,), reps)
        return Timing(statistics.median(samples), min(samples), len(samples))
