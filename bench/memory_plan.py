"""Peak intermediate memory of every benchmark workload, fused and unfused, on cpu and cuda.

    python -m bench.memory_plan [--size full|tiny] [--out bench/results]

For each workload of bench/workloads.py at the benchmark size, both builds are compiled (cuda
through the simulator target: the same emitted host functions, nothing runs) and their memory
plans read (compiler/emit/memplan.py): `unplanned` is what the build's intermediates add up to,
which is what a build held before memory planning (every buffer allocated per call and kept
until the chain returned); `planned` is the arena they share now (buffers whose lifetimes do
not overlap at one offset). `op by op` is the unfused build with the graph's elementwise fusion
switched off too (`--disable-pass linalg-fuse-elementwise-ops`): one kernel per FDSL-level op.
Both figures count what is left after elementwise kernels write over dead inputs
(compiler/transforms/in_place.py). Nothing is timed. Writes memory-plan-<date>.json and prints a
table.
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
            hw = {"hw": "h200"} if target != "cpu" else {}
            row = {"workload": w.name, "target": "cuda" if target == "cuda-sim" else "cpu", "binding": binding}
            for options, builds in ((hw, {"fused": "fused", "unfused": "unfused"}),
                                    (dict(hw, disabled_passes=["linalg-fuse-elementwise-ops"]),
                                     {"unfused": "op_by_op"})):
                prog = fusec.compile(str(w.fdsl), target=target, options=options or None)
                memory = getattr(prog, w.chain).compiled(binding).memory
                for build, name in builds.items():
                    m = memory[build]
                    row[name] = {"unplanned_bytes": m["intermediate_bytes"], "planned_bytes": m["planned_bytes"],
                                 "intermediates": m["intermediates"], "outputs": m["outputs"]}
            rows.append(row)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="full", choices=("full", "tiny"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = ap.parse_args(argv)
    from fusec.runtime.memory import format_bytes
    rows = measure(args.size)
    builds = (("op_by_op", "op by op"), ("unfused", "unfused"), ("fused", "fused"))
    print(f"{'unplanned -> planned':<21}" + "".join(f"{title:>26}" for _, title in builds))
    for r in rows:
        cells = [f"{format_bytes(r[b]['unplanned_bytes'])} -> {format_bytes(r[b]['planned_bytes'])}" for b, _ in builds]
        print(f"{r['workload']:<14} {r['target']:<6}" + "".join(f"{c:>26}" for c in cells))
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"memory-plan-{time.strftime('%Y-%m-%dT%H%M')}.json")
    with open(path, "w") as fh:
        json.dump({"size": args.size, "command": "python -m bench.memory_plan", "rows": rows}, fh, indent=1)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
