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


def as_input(x, name: str = "input"):
    """An input as the runtime takes it: a NumPy array as it is; a device array (anything with
    __cuda_array_interface__) as it is; anything else with __array__ (PyTorch cpu tensors, JAX
    arrays, lists) through np.asarray, and a DLPack producer (__dlpack__ only) through
    np.from_dlpack, both without a copy where the producer allows. A TypeError names what
    cannot be read as an array."""
    if isinstance(x, np.ndarray) or hasattr(x, "__cuda_array_interface__"):
        return x
    try:
        if hasattr(x, "__dlpack__") and not hasattr(x, "__array__"):
            return np.from_dlpack(x)
        a = np.asarray(x)
    except (TypeError, ValueError, RuntimeError, BufferError) as e:
        raise TypeError(f"{name} ({type(x).__name__}) cannot be read as an array: {e}") from None
    if a.dtype == object:
        raise TypeError(f"{name} ({type(x).__name__}) is not an array of numbers")
    return a


def input_shape(x) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype of an input from as_input (a device array's from its interface)."""
    if isinstance(x, np.ndarray):
        return x.shape, x.dtype
    cai = x.__cuda_array_interface__
    return tuple(cai["shape"]), np.dtype(cai["typestr"])


class Executable:
    """host(*arrays) -> tuple of arrays, for one target. Host inputs (NumPy arrays, anything
    with __array__ or __dlpack__: as_input) give NumPy outputs; on `cuda`, device arrays
    (anything with __cuda_array_interface__) in give Numba device arrays out."""

    def __init__(self, host, target: Target, input_dtypes: list[np.dtype], name: str):
        # a host function with planned memory (compiler/emit/memplan.py) is called here with its
        # buffers, so that the function compiled and timed is the Numba dispatcher itself
        self.memory = getattr(host, "memory", None)
        self.host = host.planned if self.memory is not None else host
        self.target = target
        self.input_dtypes = input_dtypes
        self.name = name
        # True: every call writes its outputs into newly allocated arrays (as torch and jax hand
        # back fresh outputs) instead of the planned pool's two buffers per output; the arenas
        # of intermediates are kept either way. For like-for-like timing (bench/, "memory-
        # equalised"); a build without planned memory allocates its outputs each call anyway.
        self.fresh_outputs = False
        self.jit_s: float | None = None   # Numba's compile (or cache load) of the host, at the first run
        self.init_s = 0.0                 # before it: Numba's registries loaded (once per process, first use)

    @property
    def jitted(self):
        """The Numba dispatcher the host runs: the host itself, or the one a Python wrapper
        calls (a cpu function whose BLAS calls run inside its prange: emit/module.py)."""
        return getattr(self.host, "jitted", self.host)

    def _compile_for(self, args) -> None:
        """Before the first run: compile the host (a Numba dispatcher) for these arguments and
        time it, apart from the run (Numba loads it from its cache when it can)."""
        jitted = self.jitted
        dispatcher = hasattr(jitted, "py_func") and hasattr(jitted, "compile")
        if dispatcher:
            from numba.core.compiler_lock import global_compiler_lock
            t0 = time.perf_counter()
            # Numba's set-up of its target in this process, under the lock Numba itself takes for it:
            # its registries are read through generators that two threads cannot run at once
            # ("generator already executing" out of a first call made while another thread compiled)
            with global_compiler_lock:
                jitted.typingctx.refresh()
                jitted.targetctx.refresh()
            self.init_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        if dispatcher:
            import numba
            jitted.compile(tuple(numba.typeof(a) for a in args))
        self.jit_s = time.perf_counter() - t0

    def prepare(self, arrays) -> list:
        """Inputs as the host function wants them (contiguous, right dtype, on the device)."""
        out = []
        for i, (x, dt) in enumerate(zip(arrays, self.input_dtypes)):
            x = as_input(x, f"input {i}")
            if hasattr(x, "__cuda_array_interface__"):
                out.append(x)
            else:
                a = np.asarray(x, dtype=dt)            # (ascontiguousarray would make a scalar 1-D)
                out.append(self.target.to_device(a if a.flags.c_contiguous else np.ascontiguousarray(a)))
        return out

    def run_prepared(self, args) -> tuple:
        if self.memory is not None:
            buffers = (self.memory.buffers(*args) if getattr(self.memory, "takes_inputs", False)
                       else self.memory.buffers())
            if self.fresh_outputs:       # the pool's output buffers (after the arenas) replaced by new ones
                k = len(buffers) - len(self.memory.outputs)
                buffers = list(buffers[:k]) + [self.memory.new(b.shape, b.dtype) for b in buffers[k:]]
            args = list(args) + list(buffers)
        if self.jit_s is None:
            self._compile_for(args)
        return tuple(self.host(*args))

    def release(self) -> None:
        """Give back the memory the build keeps between calls (its arenas and output buffers);
        the next call allocates it again."""
        if self.memory is not None:
            self.memory.release()

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
