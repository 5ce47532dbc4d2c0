"""Interleaved timing: every implementation of a workload is timed round by round in one process,
so that machine noise (other processes, frequency changes, a threading layer that sleeps) falls
on all of them alike, and fusec's time in a round can be divided by an anchor's time in the
same round (the paired ratio).
"""
from __future__ import annotations

import contextlib
import os
import random
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Callable, ContextManager


@dataclass(frozen=True)
class Budget:
    """How long to time: each implementation gets about `seconds` of runs, at least `min_runs`
    and at most `max_runs`, after `warmup` untimed calls."""
    seconds: float = 2.0
    min_runs: int = 5
    max_runs: int = 60
    warmup: int = 2
    quiesce: float = 1.0     # before each timed call: up to this many seconds for the process's
    #                          other threads to go idle, then one untimed call (0: neither)


@dataclass(frozen=True)
class Samples:
    seconds: tuple[float, ...]
    rounds: tuple[int, ...]          # the round each sample was taken in
    waits: tuple[float, ...] = ()    # seconds quiesce() waited before each sample
    capped: int = 0                  # of those waits, how many reached the cap (threads still busy)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.seconds) * 1e3

    @property
    def min_ms(self) -> float:
        return min(self.seconds) * 1e3

    def as_dict(self) -> dict:
        d = {"median_ms": float(f"{self.median_ms:.4g}"), "min_ms": float(f"{self.min_ms:.4g}"),
             "runs": len(self.seconds)}
        if self.waits:
            d["quiesce"] = {"median_ms": float(f"{statistics.median(self.waits) * 1e3:.3g}"),
                            "max_ms": float(f"{max(self.waits) * 1e3:.3g}"), "capped": self.capped}
        return d


def thread_cpu_ns() -> dict[str, int] | None:
    """Each thread's CPU nanoseconds so far, by thread id, from Linux's
    /proc/self/task/*/schedstat; None where there is no such file (other systems)."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    out = {}
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                out[tid] = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):       # a thread that ended meanwhile
            continue
    return out


def other_threads_cpu_ns() -> int | None:
    """CPU nanoseconds the process's threads other than the caller's have run (thread_cpu_ns);
    None where that cannot be read."""
    ns = thread_cpu_ns()
    if not ns:
        return None
    me = str(threading.get_native_id())
    return sum(v for t, v in ns.items() if t != me)


def quiesce(cap: float, window: float = 0.005, busy: float = 0.05,
            probe: Callable[[], int | None] = other_threads_cpu_ns) -> tuple[float, bool | None]:
    """Sleep until the process's other threads run less than `busy` of a `window` (they have
    stopped spinning), for at most `cap` seconds. Returns the seconds waited and whether they
    went idle (None: no way to tell here, nothing waited). After a call, a library's idle pool
    spins on the cores for a while (OpenBLAS's for about 0.1 s); a call timed meanwhile
    shares the cores with it."""
    before = probe()
    if before is None:
        return 0.0, None
    t0 = time.perf_counter()
    while True:
        time.sleep(window)
        now = probe()
        waited = time.perf_counter() - t0
        if now is None or now - before < busy * window * 1e9:
            return waited, now is not None
        if waited >= cap:
            return waited, False
        before = now


def measure(calls: dict[str, Callable[[], object]], budget: Budget,
            clock: Callable[[], float] = time.perf_counter,
            around: Callable[[str], ContextManager] | None = None) -> dict[str, Samples]:
    """Warm up each call, then time them in rounds: round r runs every call that still wants
    samples, in an order shuffled by a generator seeded with r (the same orders every time),
    so that every call follows every other alike. Slow calls get fewer runs (at least min_runs).

    With budget.quiesce, each timed call waits first for the process's other threads to go
    idle (quiesce()) and follows one untimed call of its own: a call is then timed in its own
    steady state (as in a program that calls it in a loop) and not in the spinning of the
    previous implementation's idle pool. Without it, on two cores, NumPy's OpenBLAS worker
    spins for about 0.1 s after each matmul and takes CPU from whatever is timed next: counted
    per thread (/proc/self/task/*/schedstat), the slow samples of every implementation, fusec's
    and torch's alike, were the ones during which that thread ran, and a median depended on
    how often a call happened to come soon after NumPy's.

    `around(name)`, where given, is a context entered around each timed call, outside its
    clock readings (bench/threads.py reads every thread's CPU time there)."""
    names = list(calls)
    estimate = {}
    for name in names:
        t = float("inf")
        for _ in range(max(1, budget.warmup)):
            t0 = clock()
            calls[name]()
            t = min(t, clock() - t0)
        estimate[name] = max(t, 1e-7)
    want = {n: max(budget.min_runs, min(budget.max_runs, int(budget.seconds / estimate[n])))
            for n in names}
    taken: dict[str, list[tuple[int, float]]] = {n: [] for n in names}
    waits: dict[str, list[float]] = {n: [] for n in names}
    capped = dict.fromkeys(names, 0)
    for r in range(max(want.values())):
        order = list(names)
        random.Random(r).shuffle(order)
        for name in order:
            if r >= want[name]:
                continue
            if budget.quiesce:
                waited, idle = quiesce(budget.quiesce)
                if idle is not None:
                    waits[name].append(waited)
                    capped[name] += not idle
                calls[name]()                  # untimed: its own threads awake, its buffers warm
            with around(name) if around else contextlib.nullcontext():
                t0 = clock()
                calls[name]()
                taken[name].append((r, clock() - t0))
    return {n: Samples(tuple(s for _, s in v), tuple(r for r, _ in v), tuple(waits[n]), capped[n])
            for n, v in taken.items()}


def paired_ratio(a: Samples, b: Samples) -> float | None:
    """Median over the rounds both ran in of a's time / b's time (None if they share none)."""
    bs = dict(zip(b.rounds, b.seconds))
    ratios = [s / bs[r] for r, s in zip(a.rounds, a.seconds) if r in bs and bs[r] > 0]
    return statistics.median(ratios) if ratios else None
