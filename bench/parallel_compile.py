"""`fusec compile -j N` against -j 1 on a 24-chain file (bench/fdsl/blocks24.fdsl: two transformer
blocks per chain, as a model imported from PyTorch becomes many chains).

    python -m bench.parallel_compile [--jobs 2] [--reps 2] [--out bench/results]

Runs `fusec compile bench/fdsl/blocks24.fdsl -o DIR --target cpu --bind S=64 -j J` for J = 1 and
--jobs, alternately, --reps times each; records every wall time, the CPU seconds the run and its
workers used (how much of the machine it got), the load average before each run, and whether
the artifacts are byte-identical. Writes parallel-compile-<date>.json.
"""
from __future__ import annotations

import argparse
import filecmp
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

from . import utc_stamp, write_result
from .machine import describe

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILE = os.path.join(ROOT, "bench", "fdsl", "blocks24.fdsl")


def _same(a: str, b: str) -> bool:
    """The two artifact trees hold the same files, byte for byte, at every depth."""
    cmp = filecmp.dircmp(a, b)
    if cmp.left_only or cmp.right_only or cmp.funny_files:
        return False
    _match, mismatch, errors = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)
    return not mismatch and not errors and all(_same(os.path.join(a, d), os.path.join(b, d)) for d in cmp.common_dirs)


def _run(jobs: int, out: str) -> dict:
    fusec = os.path.join(os.path.dirname(sys.executable), "fusec")
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run([fusec, "compile", FILE, "-o", out, "--target", "cpu", "--bind", "S=64", "-j", str(jobs),
                        "-q"], capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(r.stderr)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"jobs": jobs, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "cores_used": round(cpu / wall, 2),
            "load_average_before": round(load, 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="fusec-parallel-bench-")
    runs = []
    try:
        for rep in range(args.reps):
            for j in (1, args.jobs):
                runs.append(_run(j, os.path.join(work, f"j{j}")))
                print(runs[-1], flush=True)
        identical = _same(os.path.join(work, "j1"), os.path.join(work, f"j{args.jobs}"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    best = {j: min(r["wall_s"] for r in runs if r["jobs"] == j) for j in (1, args.jobs)}
    result = {"date": utc_stamp(), "machine": describe(), "cores": os.cpu_count(), "file": "bench/fdsl/blocks24.fdsl",
              "command": "python -m bench.parallel_compile " + " ".join(argv or sys.argv[1:]), "runs": runs,
              "best_wall_s": best, "ratio": round(best[args.jobs] / best[1], 3), "byte_identical": identical}
    print(f"-j {args.jobs}: {best[args.jobs]:.2f} s, -j 1: {best[1]:.2f} s, ratio {result['ratio']}, "
          f"byte-identical: {identical}")
    print(f"wrote {write_result(args.out, 'parallel-compile', result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
