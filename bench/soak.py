"""Long runs and concurrency: compiled chains called many times, from many threads and processes.

    python -m bench.soak [--calls 100000] [--threads 1,4,16] [--processes 4] [--reloads 2]
                         [--cap 0.8] [--target cpu|cuda-sim|cuda] [--chains block,rows,mlp,resnorm]
                         [--cache-dir DIR] [--note TEXT] [--out bench/results]

Compiles bench/fdsl/soak.fdsl (a pre-norm transformer block; a softmax over rows and an MLP
layer, both taken with M at run time (`dynamic`); a chain with two outputs) into one compile
cache directory, then calls its chains at several bindings (M over five size classes, so one
dynamic build serves several extents) on three inputs each, in phases: one process with 1, 4
and 16 threads sharing one program, then N spawned processes at once. `--calls` is the total
over the phases, split evenly. Up to RELOADERS callers per process compile the program again
from the shared cache `--reloads` times in a phase (a fresh Program: each build looked up on
disk, and built and stored again when it was evicted). The cache's cap ($FUSEC_CACHE_MAX_SIZE)
is `--cap` times the working set (every build stored, without Numba's caches), so stores evict
entries that other callers are reading.

Checked on every call: the outputs against the NumPy reference (fusec.runtime.compare, the
runtime's own tolerances), and the previous call's outputs, when the caller still holds them,
unchanged (an output buffer handed out twice would change them). Per thread phase and per
process: resident memory (VmRSS), open file descriptors and threads at the start, after the
warm-up (every case called once by every caller) and at the end; the end must be within
RSS_SLACK of the warm-up, gain at most FD_SLACK files and no thread; after a thread phase no
more than one idle worker per core may be left. Also counted: cache hits, builds (misses),
evictions, damaged entries reported, exceptions. Writes soak-<date>.json (soak-<target>-<date>.json
off the cpu); exits 1 when any check failed.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import sys
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import scratch_dir, utc_stamp, write_result

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "bench" / "fdsl" / "soak.fdsl"
OPTIONS = {"dynamic": ["M"], "baseline": False}
# (chain, bindings): `rows` and `mlp` take M at run time, 5 and 3 size classes; the others are static
BINDINGS = (("block", ({"S": 16},)),
            ("rows", ({"M": 3}, {"M": 6}, {"M": 7}, {"M": 13}, {"M": 30}, {"M": 50})),
            ("mlp", ({"M": 9}, {"M": 16}, {"M": 40})),
            ("resnorm", ({"T": 8}, {"T": 20})))
VARIANTS = 3                     # input sets per binding
RSS_SLACK = 32 << 20             # bytes the resident memory may grow after the warm-up: a reload that
# finds its entry evicted builds again in the process, which holds about 2 MiB more the first times
# (rebuilding one entry again and again: +4 MiB over three rebuilds, then flat)
FD_SLACK = 2                     # open files it may gain (a cache entry being read at the sample)
RELOADERS = 4                    # callers per process that compile the program again (the others keep theirs)


# ---- what this process holds ----------------------------------------------------------------
def resources() -> dict:
    """This process's resident memory (bytes), open file descriptors and threads (Linux /proc)."""
    rss = threads = None
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    return {"rss": rss, "fds": len(os.listdir("/proc/self/fd")), "threads": threads}


def settled(threads: int, wait_s: float = 5.0) -> dict:
    """resources(), once this process has at most `threads` threads or `wait_s` has passed:
    threads that have finished (the simulator's block threads, an ended caller's OpenMP
    workers) leave the process a moment after Python sees them end."""
    until = time.monotonic() + wait_s
    r = resources()
    while r["threads"] > threads and time.monotonic() < until:
        time.sleep(0.1)
        r = resources()
    return r


def flat(warm: dict, end: dict, threads_too: bool = True) -> list[str]:
    """What grew from the warm-up to the end beyond its slack (empty: flat)."""
    why = []
    if end["rss"] - warm["rss"] > RSS_SLACK:
        why.append(f"resident memory grew {(end['rss'] - warm['rss']) / 2**20:.1f} MiB after the warm-up "
                   f"(slack {RSS_SLACK >> 20} MiB)")
    if end["fds"] - warm["fds"] > FD_SLACK:
        why.append(f"open files grew from {warm['fds']} to {end['fds']}")
    if threads_too and end["threads"] > warm["threads"]:
        why.append(f"threads grew from {warm['threads']} to {end['threads']}")
    return why


# ---- the cases -------------------------------------------------------------------------------
@dataclass
class Case:
    chain: str
    binding: dict
    inputs: list
    want: list                   # the NumPy reference's outputs
    dtypes: list                 # the outputs' dtype names (compare's tolerances)


def make_cases(source: str, bindings=BINDINGS, seed: int = 0) -> list[Case]:
    """Every (chain, binding, variant) with its inputs and the reference's outputs."""
    import fusec
    from fusec.runtime import reference
    typed = {c.name: c for c in fusec.check(source).chains}
    cases = []
    for name, bs in bindings:
        chain = typed[name]
        for b in bs:
            for v in range(VARIANTS):
                inputs = reference.random_inputs(chain, b, seed + 1000 * v + sum(b.values()))
                want = reference.run_chain(chain, inputs, b)
                cases.append(Case(name, b, inputs, list(want), [t.dtype.name for t in chain.output_types]))
    return cases


@dataclass
class Setup:
    """What every caller of a run shares (picklable: the processes get it)."""
    source: str                  # the FDSL file
    target: str
    cache_dir: str               # the shared compile cache
    cases: list
    reloads: int                 # times each reloading caller compiles the program again in a phase
    cap: int                     # the cache's cap, bytes


class Tally:
    """Counts of the callers of one process's phase (its threads share it, under its lock)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.counts = Counter()
        self.errors: list[str] = []
        self.first: dict[str, str] = {}      # each count's first text, kept past the ten errors

    def add(self, **kw):
        with self.lock:
            self.counts.update(kw)

    def note(self, count: str, text: str):
        with self.lock:
            self.counts[count] += 1
            self.first.setdefault(count, text)
            if len(self.errors) < 10:
                self.errors.append(text)


_WATCHED: list = [None]          # the Tally this process's evictions and cache notices go to


def watch_cache(tally: Tally) -> None:
    """Count this process's evictions and the damaged entries the cache reports, into `tally`."""
    from fusec import program
    from fusec.runtime.cache import CompileCache
    first = _WATCHED[0] is None
    _WATCHED[0] = tally
    if not first:
        return
    evict, notice = CompileCache.evict, program.notice

    def counted(self, keep=None):
        gone = evict(self, keep)
        if gone:
            _WATCHED[0].add(evictions=len(gone))
        return gone

    def told(text):
        _WATCHED[0].add(cache_notices=1)
        notice(text)
    CompileCache.evict, program.notice = counted, told


def compile_program(setup: Setup):
    import fusec
    return fusec.compile(setup.source, target=setup.target, options=OPTIONS, cache_dir=setup.cache_dir, cache=True)


def call_and_check(program, case: Case, tally: Tally) -> tuple:
    """One call of the case's chain; its outputs, each checked against the reference."""
    from fusec.runtime.compare import compare
    out = program.chains[case.chain](*case.inputs)
    outs = out if isinstance(out, tuple) else (out,)
    if len(outs) != len(case.want) or any(g.shape != w.shape for g, w in zip(outs, case.want)):
        bad = f"shapes {[g.shape for g in outs]}, not {[w.shape for w in case.want]}"
    else:
        bad = next((c.reason or str(c) for c in (compare(g, w, d) for g, w, d in zip(outs, case.want, case.dtypes))
                    if not c.ok), None)
    if bad:
        tally.note("wrong", f"wrong result of {case.chain} at {case.binding}: {bad}")
    tally.add(calls=1)
    return outs


def builds_by_tier(program) -> Counter:
    """The program's builds by where they came from: cache hits, builds (misses)."""
    return Counter({"hit": "cache_hits", "miss": "builds"}.get(b.cache, b.cache)
                   for c in program.chains.values() for b in c._builds.values())


def drive(setup: Setup, calls: int, seed: int, tally: Tally, reloads: int, program=None, warm=None, end=None) -> None:
    """One caller: every case once (the warm-up; then `warm()`), then `calls` random cases,
    compiling the program again from the cache `reloads` times, evenly; `end()` at the end.
    The previous call's outputs, held half the time, must not change."""
    rng = np.random.default_rng(seed)
    own = program is None            # builds are counted of the programs this caller compiled
    try:
        program = program or compile_program(setup)
        for case in setup.cases:
            call_and_check(program, case, tally)
    except Exception as e:                                   # noqa: BLE001 (counted, reported)
        tally.note("exceptions", f"warm-up: {type(e).__name__}: {e}\n{traceback.format_exc(limit=8)}")
    if warm is not None:
        warm()
    at = {calls * (k + 1) // (reloads + 1) for k in range(reloads)} if calls > reloads else set()
    held = None
    for i in range(calls):
        try:
            if i in at:
                if own:
                    tally.add(**builds_by_tier(program))
                program, own = compile_program(setup), True
                tally.add(reloads=1)
            case = setup.cases[int(rng.integers(len(setup.cases)))]
            outs = call_and_check(program, case, tally)
            if held is not None and not all(np.array_equal(a, b) for a, b in zip(*held)):
                tally.note("changed_held", f"an output held by the caller changed under its next call (call {i})")
            held = (outs, [o.copy() for o in outs]) if rng.random() < 0.5 else None
        except Exception as e:                               # noqa: BLE001
            tally.note("exceptions", f"call {i}: {type(e).__name__}: {e}\n{traceback.format_exc(limit=8)}")
    held = None
    if own and program is not None:
        tally.add(**builds_by_tier(program))
    if end is not None:
        end()


# ---- the phases ------------------------------------------------------------------------------
def thread_phase(setup: Setup, program, threads: int, calls: int, seed: int) -> dict:
    """`threads` threads of this process call the chains `calls` times in all: one program
    shared by all (one Chain, one build, one memory keeper per module), until a caller's reload
    gives it one of its own (RELOADERS callers reload)."""
    tally = Tally()
    watch_cache(tally)
    samples = {"start": resources()}
    ready = threading.Barrier(threads + 1)
    done = threading.Barrier(threads + 1)
    sampled = threading.Barrier(threads + 1)      # the callers live on until the end is sampled

    def end():
        done.wait()
        sampled.wait()
    share = [calls // threads + (i < calls % threads) for i in range(threads)]
    t0 = time.perf_counter()
    workers = [threading.Thread(target=drive, name=f"soak-{i}",
                                args=(setup, share[i], seed + i, tally, setup.reloads if i < RELOADERS else 0,
                                      program, ready.wait, end))
               for i in range(threads)]
    for w in workers:
        w.start()
    ready.wait()
    samples["warm"] = resources()
    t1 = time.perf_counter()
    done.wait()
    t2 = time.perf_counter()
    samples["end"] = settled(samples["warm"]["threads"])
    sampled.wait()
    for w in workers:
        w.join()
    idle = os.cpu_count() or 1
    samples["joined"] = settled(samples["start"]["threads"] + idle)
    problems = flat(samples["warm"], samples["end"])
    if samples["joined"]["threads"] > samples["start"]["threads"] + idle:
        problems.append(f"threads left behind: {samples['start']['threads']} before, {samples['joined']['threads']} "
                        f"after the callers ended (slack {idle}: idle worker pools)")
    return _row(f"threads={threads}", tally, samples, problems, t1 - t0, t2 - t1, threads=threads, processes=1)


def _process_main(job) -> dict:
    setup, calls, seed = job
    os.environ["FUSEC_CACHE_MAX_SIZE"] = str(setup.cap)
    samples = {"start": resources()}
    tally = Tally()
    watch_cache(tally)
    marks = {}

    def warm():
        samples["warm"] = resources()
        marks["warm"] = time.perf_counter()
    t0 = time.perf_counter()
    drive(setup, calls, seed, tally, setup.reloads, warm=warm)
    t2 = time.perf_counter()
    samples["end"] = settled(samples["warm"]["threads"])
    return _row(f"process {seed}", tally, samples, flat(samples["warm"], samples["end"]), marks["warm"] - t0,
                t2 - marks["warm"], threads=1, processes=1)


def process_phase(setup: Setup, processes: int, calls: int, seed: int) -> dict:
    """`processes` spawned processes call the chains `calls` times in all, sharing the cache."""
    share = [calls // processes + (i < calls % processes) for i in range(processes)]
    t0 = time.perf_counter()
    with mp.get_context("spawn").Pool(processes) as pool:
        rows = pool.map(_process_main, [(setup, share[i], seed + i) for i in range(processes)])
    counts = Counter()
    for r in rows:
        counts.update(r["counts"])
    return {"phase": f"processes={processes}", "threads": 1, "processes": processes,
            "wall_s": round(time.perf_counter() - t0, 1), "counts": dict(counts), "per_process": rows,
            "problems": [f"{r['phase']}: {p}" for r in rows for p in r["problems"]],
            "errors": [e for r in rows for e in r["errors"]][:10]}


def _row(phase, tally, samples, problems, warm_s, run_s, threads, processes) -> dict:
    c = tally.counts
    for count, what in (("wrong", "wrong results"), ("changed_held", "held outputs changed"),
                        ("exceptions", "exceptions")):
        if c[count]:
            problems.append(f"{c[count]} {what}; the first: {tally.first[count]}")
    return {"phase": phase, "threads": threads, "processes": processes, "warmup_s": round(warm_s, 1),
            "run_s": round(run_s, 1), "calls_per_s": round(c["calls"] / run_s, 1) if run_s > 0 else None,
            "counts": dict(c), "resources": samples, "problems": problems, "errors": tally.errors}


def entry_bytes(cache_dir: str) -> int:
    """The entries' bytes without Numba's caches of them (an entry built again in a process that
    already runs its module holds none)."""
    from fusec.runtime.cache import CompileCache, _tree_bytes
    return sum(e.bytes - _tree_bytes(e.path / "__pycache__") for e in CompileCache(cache_dir, cap=1 << 60).entries())


def soak(calls: int, threads: list[int], processes: int, target: str = "cpu", reloads: int = 2,
         cap_fraction: float = 0.8, cache_dir: str | None = None, bindings=BINDINGS, seed: int = 0,
         say=print) -> dict:
    """The whole run (see the module docstring); the result as data. The cache's size limit the
    run sets (FUSEC_CACHE_MAX_SIZE) is this process's environment only while it runs: a caller
    (the test suite's worker) gets its own back, or its later compiles would be evicted at once."""
    before = os.environ.get("FUSEC_CACHE_MAX_SIZE")
    try:
        return _soak(calls, threads, processes, target, reloads, cap_fraction, cache_dir, bindings, seed, say)
    finally:
        if before is None:
            os.environ.pop("FUSEC_CACHE_MAX_SIZE", None)
        else:
            os.environ["FUSEC_CACHE_MAX_SIZE"] = before


def _soak(calls: int, threads: list[int], processes: int, target: str = "cpu", reloads: int = 2,
         cap_fraction: float = 0.8, cache_dir: str | None = None, bindings=BINDINGS, seed: int = 0,
         say=print) -> dict:
    """The whole run (see the module docstring); the result as data."""
    t0 = time.perf_counter()
    start = resources()
    source = str(SOURCE)
    cache_dir = cache_dir or os.path.join(scratch_dir("fusec-soak-"), "compiled")
    cases = make_cases(source, bindings, seed)
    os.environ.pop("FUSEC_CACHE_MAX_SIZE", None)
    setup = Setup(source, target, cache_dir, cases, reloads, 0)
    program = compile_program(setup)
    tally = Tally()
    watch_cache(tally)
    for case in cases:                                       # every build stored and run once
        call_and_check(program, case, tally)
    ws = entry_bytes(cache_dir)
    setup.cap = max(1, int(ws * cap_fraction))
    os.environ["FUSEC_CACHE_MAX_SIZE"] = str(setup.cap)
    from fusec.runtime.cache import CompileCache
    evicted = len(CompileCache(cache_dir).evict())          # as the next store would: the callers start
    # with part of the working set gone, so their reloads build and store, and so evict
    builds = sum(len(c._builds) for c in program.chains.values())
    say(f"soak: {len(cases)} cases, {builds} builds of {len(bindings)} chains; working set {ws / 2**20:.2f} MiB "
        f"(without Numba's caches), cache cap {setup.cap / 2**20:.2f} MiB, {evicted} evicted; setup "
        f"{time.perf_counter() - t0:.0f} s, {tally.counts['wrong']} wrong")
    phases = len(threads) + (1 if processes else 0)
    per = [calls // phases + (i < calls % phases) for i in range(phases)]
    rows = []
    for i, n in enumerate(threads):
        rows.append(thread_phase(setup, program, n, per[i], seed + 100 * (i + 1)))
        say(_line(rows[-1]))
    if processes:
        rows.append(process_phase(setup, processes, per[-1], seed + 1000))
        say(_line(rows[-1]))
        for r in rows[-1]["per_process"]:
            say("    " + _line(r))
    total = Counter(setup_wrong=tally.counts["wrong"])
    for r in rows:
        total.update(r["counts"])
    problems = [f"{r['phase']}: {p}" for r in rows for p in r["problems"]]
    if tally.counts["wrong"]:
        problems.append(f"setup: {tally.counts['wrong']} wrong results")
    return {"date": utc_stamp(), "target": target, "calls": calls, "threads": threads, "processes": processes,
            "reloads_per_caller": reloads, "reloading_callers_per_process": RELOADERS, "cases": len(cases),
            "bindings": {n: list(b) for n, b in bindings}, "variants": VARIANTS, "builds": builds,
            "working_set_bytes": ws, "cache_cap_bytes": setup.cap, "evicted_at_setup": evicted,
            "slack": {"rss_bytes": RSS_SLACK, "fds": FD_SLACK, "threads": 0},
            "resources": {"start": start, "end": resources()}, "totals": dict(total), "phases": rows,
            "problems": problems, "wall_s": round(time.perf_counter() - t0, 1)}


def _line(row) -> str:
    c = row["counts"]
    res = row.get("resources")
    mem = ""
    if res:
        mem = (f"; RSS {res['start']['rss'] / 2**20:.0f}/{res['warm']['rss'] / 2**20:.0f}/{res['end']['rss'] / 2**20:.0f}"
               f" MiB, fds {res['warm']['fds']}->{res['end']['fds']}, threads {res['warm']['threads']}->"
               f"{res['end']['threads']}")
    return (f"{row['phase']:>12}: {c.get('calls', 0)} calls, {c.get('wrong', 0)} wrong, "
            f"{c.get('exceptions', 0)} exceptions, {c.get('reloads', 0)} reloads, {c.get('builds', 0)} builds, "
            f"{c.get('evictions', 0)} evictions{mem}" + ("; " + "; ".join(row["problems"]) if row["problems"] else ""))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=100_000, help="calls in all, split evenly over the phases")
    ap.add_argument("--threads", default="1,4,16", help="the thread phases: threads of one process")
    ap.add_argument("--processes", type=int, default=4, help="processes of the last phase (0: none)")
    ap.add_argument("--target", default="cpu", choices=("cpu", "cuda-sim", "cuda"))
    ap.add_argument("--reloads", type=int, default=2,
                    help=f"times a caller compiles the program again from the shared cache in a phase "
                         f"({RELOADERS} callers per process do)")
    ap.add_argument("--cap", type=float, default=0.8, help="the cache's cap as a fraction of the working set")
    ap.add_argument("--chains", default=",".join(n for n, _ in BINDINGS),
                    help="the chains called (cuda-sim: a small dose, rows,resnorm)")
    ap.add_argument("--cache-dir", default=None, help="the shared compile cache (default: a scratch directory)")
    ap.add_argument("--note", default="", help="recorded in the JSON (the machine's load, say)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args(argv)
    threads = [int(x) for x in args.threads.split(",") if x]
    chains = args.chains.split(",")
    unknown = sorted(set(chains) - {n for n, _ in BINDINGS})
    if unknown:
        ap.error(f"--chains: no chain {', '.join(unknown)} in {SOURCE.name}")
    if args.target == "cuda-sim":
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"         # before numba.cuda is imported (runtime/targets.py)
    bindings = tuple((n, b) for n, b in BINDINGS if n in chains)
    result = soak(args.calls, threads, args.processes, args.target, args.reloads, args.cap, args.cache_dir, bindings)
    from .machine import describe
    result["machine"] = describe()
    result["load_average"] = os.getloadavg()
    result["note"] = args.note
    stem = "soak" if args.target == "cpu" else f"soak-{args.target}"
    print(f"wrote {write_result(args.out, stem, result)}")
    for p in result["problems"]:
        print(f"soak: {p}", file=sys.stderr)
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
