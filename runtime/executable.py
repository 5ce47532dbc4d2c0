"""A compiled chain's build (fused or unfused) as a callable on arrays, with timing."""
from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass

import numpy as np

from .targets import Target

SPREAD = 1.5          # a median this many times the minimum: the runs were disturbed


def load_average() -> float | None:
    """The 1-minute load average (None where the system does not say)."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def other_runnable(samples: int = 3, pause_s: float = 0.005) -> int | None:
    """Tasks runnable right now besides this thread (Linux: /proc/loadavg), the least of a few
    readings some milliseconds apart, so that this process's own worker threads, which spin for
    a moment after a parallel loop, are not counted. None where the system does not say."""
    counts = []
    try:
        for i in range(samples):
            if i:
                time.sleep(pause_s)
            with open("/proc/loadavg") as f:
                counts.append(int(f.read().split()[3].split("/")[0]))
    except (OSError, ValueError, IndexError):
        return None
    return max(0, min(counts) - 1)


@dataclass(frozen=True)
class Timing:
    median_s: float
    min_s: float
    runs: int
    load: float | None = None         # the 1-minute load average when the timing started
    cores: int = 0                    # this machine's cores
    others: int | None = None         # other tasks runnable both before and after the runs
    parallel: bool = False            # the runs are parallel loops over every core (the cpu target)

    def as_dict(self) -> dict:
        return {"median_ms": self.median_s * 1e3, "min_ms": self.min_s * 1e3, "runs": self.runs,
                "load_average": self.load, "cores": self.cores, "other_runnable": self.others,
                "unreliable": self.unreliable()}

    def unreliable(self) -> str | None:
        """Why these figures cannot be trusted (None: no sign of trouble): the machine was busy
        (load average above the core count; on the cpu target, whose parallel loops wait for
        every core, any other runnable task) or the runs spread widely (median far above minimum)."""
        return " and ".join(self.reasons()) or None

    def reasons(self) -> list[str]:
        why = []
        if self.load is not None and self.cores and self.load > self.cores:
            why.append(f"the machine was busy (load average {self.load:.1f} on {self.cores} cores)")
        elif self.parallel and self.others:
            why.append(f"{self.others} other task{'s' if self.others != 1 else ''} kept a core busy, and the "
                       "parallel loops wait for every core")
        if self.min_s > 0 and self.median_s > SPREAD * self.min_s:
            why.append(f"the runs spread widely (median {self.median_s / self.min_s:.1f}x the minimum)")
        return why


def unreliable(timings) -> str | None:
    """Why any of these timings cannot be trusted, in one phrase (None: none shows trouble): the
    reasons of the most disturbed of them, each said once."""
    ts = [t for t in timings if t is not None]
    if not ts:
        return None
    loads = [t.load for t in ts if t.load is not None]
    others = [t.others for t in ts if t.others is not None and t.parallel]
    worst = Timing(max(t.median_s / t.min_s if t.min_s > 0 else 1.0 for t in ts), 1.0, 0,
                   max(loads) if loads else None, ts[0].cores, max(others) if others else None, bool(others))
    return worst.unreliable()


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
        load, before = load_average(), other_runnable()
        args = self.prepare(arrays)
        self.run_prepared(args)
        self.target.synchronize()
        t0 = time.perf_counter()
        first = self.target.timed(self.run_prepared, (args,), 1)
        reps = max(min_runs - 1, min(max_runs - 1, int(budget_s / max(time.perf_counter() - t0, 1e-6))))
        samples = first + self.target.timed(self.run_prepared, (args,), reps)
        after = other_runnable()
        others = None if before is None or after is None else min(before, after)
        return Timing(statistics.median(samples), min(samples), len(samples), load, os.cpu_count() or 1, others,
                      self.target.name == "cpu")
