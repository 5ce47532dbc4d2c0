"""Peak intermediate memory of every benchmark workload, fused and unfused, on cpu and cuda.

    python -m bench.memory_plan [--size full|tiny] [--out bench/results]

For each workload of bench/workloads.py at the benchmark size, both builds are compiled (cuda
through the simulator target: the same emitted host functions, nothing runs) and their memory
plans read (compiler/emit/memplan.py): `unplanned` is what the build's intermediates add up to,
which is what a build held before memory planning (every buffer allocated per call and kept
until the chain returned); `planned` is the arena they share now (buffers whose lifetimes do
not overlap at one offset). Nothing is timed. Writes memory-plan-<date>.json and prints a table.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def measure(size: str) -> list[dict]:
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
    os.environ.setdefault("FUSEC_NO_CACHE", "1")
    import fusec
    from bench.workloads import WORKLOADS
    rows = []
    for w in WORKLOADS:
        binding = w.binding(size)
        for target in ("cpu", "cuda-sim"):
            prog = fusec.compile(str(w.fdsl), target=target, options={"hw": "h200"} if target != "cpu" else None)
            compiled = getattr(prog, w.chain).compiled(binding)
            row = {"workload": w.name, "target": "cuda" if target == "cuda-sim" else "cpu", "binding": binding}
            for build, m in sorted(compiled.memory.items()):
                row[build] = {"unplanned_bytes": m["intermediate_bytes"], "planned_bytes": m["planned_bytes"],
                              "intermediates": m["intermediates"], "outputs": m["outputs"]}
            rows.append(row)
    return rows


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="full", choices=("full", "tiny"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = ap.parse_args(argv)
    rows = measure(args.size)
    print(f"{'workload':<14} {'target':<6} {'unfused MiB (unplanned -> planned)':>36} {'fused MiB':>24}")
    for r in rows:
        u, f = r.get("unfused", {}), r.get("fused", {})
        print(f"{r['workload']:<14} {r['target']:<6} {_mib(u.get('unplanned_bytes', 0)):>20} -> "
              f"{_mib(u.get('planned_bytes', 0)):<12} {_mib(f.get('unplanned_bytes', 0)):>10} -> "
              f"{_mib(f.get('planned_bytes', 0))}")
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"memory-plan-{time.strftime('%Y-%m-%dT%H%M')}.json")
    with open(path, "w") as fh:
        json.dump({"size": args.size, "command": "python -m bench.memory_plan", "rows": rows}, fh, indent=1)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
