"""Peak memory of fused attention on the cpu against the sequence length.

    python -m bench.attention_memory [--sizes 2048,4096,8192] [--out bench/results]

Each size runs in a child process that compiles `examples/attention.fdsl::attention` (B=1, D=64)
for the cpu, makes its inputs and runs the fused build once (Numba compiles it then); then it
resets its peak resident set to the current one (Linux: /proc/self/clear_refs) and runs it again,
and reports the resident set before that run and the peak during it. Online softmax keeps the
S x S scores off memory, so the process grows like S (inputs and output: 4 x S x 64 x 4 bytes)
and the run's own peak stays flat; an unfused run would add 4 * S^2 bytes per score tensor. Writes
attention-memory-<date>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import json, sys
import numpy as np
import fusec

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
S = int(sys.argv[1])
src = open(sys.argv[2]).read()
prog = fusec.compile(src, target="cpu", options={"baseline": False})
f = prog.attention
rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((1, S, 64), dtype=np.float32) for _ in range(3))
f(q, k, v)                          # compiles (Numba) and runs once
with open("/proc/self/clear_refs", "w") as fh:   # reset the peak (VmHWM) to the current RSS
    fh.write("5")
before = status("VmRSS")
(out,) = f(q, k, v)
peak = status("VmHWM")
plan = f.compiled({"B": 1, "S": S}).plan
print(json.dumps({"S": S, "rss_before": before, "rss_after": peak, "kernels": plan["kernels"],
                  "attention": plan["groups"][0].get("attention")}))
"""

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="2048,4096,8192")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = ap.parse_args(argv)
    rows = []
    for s in [int(x) for x in args.sizes.split(",")]:
        r = subprocess.run([sys.executable, "-c", CHILD, str(s), os.path.join(ROOT, "examples", "attention.fdsl")],
                           capture_output=True, text=True, env={**os.environ, "FUSEC_NO_CACHE": "1"})
        if r.returncode:
            print(r.stderr, file=sys.stderr)
            return r.returncode
        row = json.loads(r.stdout.strip().splitlines()[-1])
        row["run_peak_growth"] = row["rss_after"] - row["rss_before"]
        row["scores_bytes_unfused"] = 4 * s * s
        rows.append(row)
        print(f"S={s}: resident {row['rss_before'] / 2**20:.1f} MiB before the run, peak {row['rss_after'] / 2**20:.1f} MiB "
              f"during it (+{row['run_peak_growth'] / 2**20:.1f} MiB; one S x S score tensor would be "
              f"{row['scores_bytes_unfused'] / 2**20:.0f} MiB); {row['kernels']} kernel(s), tiles {row['attention']}")
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"attention-memory-{time.strftime('%Y-%m-%dT%H%M')}.json")
    with open(path, "w") as fh:
        json.dump({"machine": os.uname().nodename, "rows": rows}, fh, indent=1)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
