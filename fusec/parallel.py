"""Compiling chains in worker processes (`fusec compile -j N`, `Program.prepare` with
`fusec.compile(..., jobs=N)`). Workers are spawned, fresh interpreters (never forks of a process
that may hold MLIR's threads), each importing the compiler once; a job is one chain at one
binding, and hands back plain data (an artifact's record of the chain, or the directory it
wrote); the calling process compiles too. Results come back in the jobs' order whatever order the workers finish in, so what is
written from them is the same bytes for any N; the first job's error (in that order) is raised.
"""
from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from fusec.compiler.options import CompileOptions


def default_jobs() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@dataclass(frozen=True)
class _Failure:
    """An exception as data: ours take other arguments than their message, so pickling them
    whole would fail on the way back."""
    cls: type
    args: tuple
    state: dict

    def rebuild(self) -> BaseException:
        e = self.cls.__new__(self.cls)
        e.args = self.args
        e.__dict__.update(self.state)
        return e


def _guarded(fn, job):
    try:
        return fn(job)
    except Exception as e:
        return _Failure(type(e), e.args, dict(vars(e)))


def _warm() -> None:
    import fusec.compiler.pipeline  # noqa: F401  (MLIR's import, once per worker, before the first job)


def run_jobs(fn: Callable, jobs: list, n: int, done: Callable[[int, object], None] | None = None) -> list:
    """fn(job) for every job by `n` processes: this one and n - 1 workers (this one alone when n
    is 1 or there is one job). This process takes jobs from the front, the workers from the back,
    until they meet: it has the compiler imported already, while a worker needs a second or two
    to import it. `done(i, result)` is told of each as it finishes. The results, in order."""
    results: list = [None] * len(jobs)

    def finish(i: int, result) -> None:
        results[i] = result
        if done is not None:
            done(i, result)
    if n <= 1 or len(jobs) <= 1:
        for i, job in enumerate(jobs):
            finish(i, fn(job))
        return results
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=min(n - 1, len(jobs) - 1), mp_context=context, initializer=_warm)
    lo, hi, running = 0, len(jobs), {}
    try:
        while lo < hi or running:
            while lo < hi and len(running) < n:          # the workers' queue: never more than a job each ahead
                hi -= 1
                running[pool.submit(_guarded, fn, jobs[hi])] = hi
            if lo < hi:
                finish(lo, _guarded(fn, jobs[lo]))
                lo += 1
                finished = [f for f in running if f.done()]
            else:
                finished = list(wait(running, return_when=FIRST_COMPLETED).done)
            for f in finished:
                finish(running.pop(f), f.result())
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    failed = next((r for r in results if isinstance(r, _Failure)), None)
    if failed is not None:
        raise failed.rebuild()
    return results


# ---- the jobs --------------------------------------------------------------------------------

@dataclass(frozen=True)
class ChainJob:
    """One chain of an FDSL file to compile at one binding (the file is parsed in the worker)."""
    text: str
    path: str
    chain: str
    binding: dict
    options: CompileOptions
    target: str


@dataclass(frozen=True)
class ChainResult:
    record: tuple                 # fusec.artifacts.ChainRecord, without compile times
    kernels: int


_TYPED: dict = {}


def typed_module(job: ChainJob):
    """The job's FDSL file, checked (once per worker and file)."""
    from . import api
    key = (job.path, job.text)
    if key not in _TYPED:
        _TYPED.clear()
        _TYPED[key] = api.check(api.parse_text(job.text, job.path))
    return _TYPED[key]


def _typed_chain(job: ChainJob):
    return next(c for c in typed_module(job).chains if c.name == job.chain)


def compile_chain(job: ChainJob, progress=None) -> ChainResult:
    """`fusec compile`'s job: the chain's builds, as an artifact's record of them."""
    from fusec.compiler.pipeline import build_chain
    from .artifacts import chain_record
    built = build_chain(_typed_chain(job), job.binding, job.options, progress=progress)
    return ChainResult(chain_record(built, times=False), built.plan.kernel_count)
