"""Interleaved timing: every implementation of a workload is timed round by round in one process,
so that machine noise (other processes, frequency changes, a threading layer that sleeps) falls
on all of them alike, and fusec's time in a round can be divided by an anchor's time in the
same round (the paired ratio).
"""
from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Budget:
    """How long to time: each implementation gets about `seconds` of runs, at least `min_runs`
    and at most `max_runs`, after `warmup` untimed calls."""
    seconds: float = 2.0
    min_runs: int = 5
    max_runs: int = 60
    warmup: int = 2
    settle: float = 0.0      # seconds idle before a call that follows another implementation's


@dataclass(frozen=True)
class Samples:
    seconds: tuple[float, ...]
    rounds: tuple[int, ...]          # the round each sample was taken in

    @property
    def median_ms(self) -> float:
        return statistics.median(self.seconds) * 1e3

    @property
    def min_ms(self) -> float:
        return min(self.seconds) * 1e3

    def as_dict(self) -> dict:
        return {"median_ms": float(f"{self.median_ms:.4g}"), "min_ms": float(f"{self.min_ms:.4g}"),
                "runs": len(self.seconds)}


def measure(calls: dict[str, Callable[[], object]], budget: Budget,
            clock: Callable[[], float] = time.perf_counter) -> dict[str, Samples]:
    """Warm up each call, then time them in rounds: round r runs every call that still wants
    samples, in an order shuffled by a generator seeded with r (the same orders every time).
    Shuffled, not rotated: a rotation keeps each call's predecessor, and a call timed right
    after another library's measures that library's idle threads, which spin for a while on
    the cores (OpenBLAS's, XLA's, an OpenMP pool's); shuffled, every call follows every other
    alike. Slow calls get fewer runs (at least min_runs)."""
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
    last = None
    for r in range(max(want.values())):
        order = list(names)
        random.Random(r).shuffle(order)
        for name in order:
            if r >= want[name]:
                continue
            if budget.settle and last not in (None, name):
                time.sleep(budget.settle)        # the last one's idle threads stop spinning
            last = name
            t0 = clock()
            calls[name]()
            taken[name].append((r, clock() - t0))
    return {n: Samples(tuple(s for _, s in v), tuple(r for r, _ in v)) for n, v in taken.items()}


def paired_ratio(a: Samples, b: Samples) -> float | None:
    """Median over the rounds both ran in of a's time / b's time (None if they share none)."""
    bs = dict(zip(b.rounds, b.seconds))
    ratios = [s / bs[r] for r, s in zip(a.rounds, a.seconds) if r in bs and bs[r] > 0]
    return statistics.median(ratios) if ratios else None
