"""Two machines sharing one Redis as the compile cache's remote tier, simulated as two processes
with two local cache directories.

    python -m bench.remote_cache [--size 16] [--out bench/results]

Starts a Redis server on a free loopback port (bench/redis_server.py), then runs every chain of
examples/*.fdsl on the cpu target (each symbol bound to --size) in a fresh process per machine:
machine A finds both caches empty and compiles everything (publishing each build, then Numba's
cache of it once it ran); machine B, with an empty local cache of its own, finds everything in
Redis. Each process records its wall time to build every chain (`build_s`, process start and
imports included; `build_after_imports_s` without them, `imports_s`) and to build and call each
once (`run_s`, Numba's compile or cache load included: what a chain costs before it runs),
and the MLIR modules it imported. Writes remote-cache-<date>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

from . import utc_stamp, write_result
from .machine import describe
from .redis_server import RedisServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MACHINE = r"""
import glob, json, sys, time
t0 = time.perf_counter()
import numpy as np
import fusec
from fusec.dsl.diagnostics import FdslError
from fusec.runtime import reference
imported_s = time.perf_counter() - t0
size, root = int(sys.argv[1]), sys.argv[2]
built, skipped, tiers = [], [], {}
for path in sorted(glob.glob(root + "/examples/*.fdsl")):
    p = fusec.compile(path, target="cpu")
    for name, c in p.chains.items():
        binding = {s: size for s in c.typed.symbols}
        try:
            b = c.compiled(binding)
        except FdslError as e:
            skipped.append(f"{name}: {str(e).splitlines()[0]}")
            continue
        tiers[b.cache] = tiers.get(b.cache, 0) + 1
        built.append((p, c, binding))
build_s = time.perf_counter() - t0
for p, c, binding in built:
    c(*reference.random_inputs(c.typed, binding, 0))
run_s = time.perf_counter() - t0
shared = sum(p.share() for p in {id(p): p for p, _, _ in built}.values())
mlir = sorted(m for m in sys.modules if m.split(".")[0] in ("mlir", "torch_mlir"))
print(json.dumps({"chains": len(built), "skipped": skipped, "cache": tiers, "imports_s": round(imported_s, 3),
                  "build_s": round(build_s, 3), "build_after_imports_s": round(build_s - imported_s, 3),
                  "run_s": round(run_s, 3), "republished_with_numba_cache": shared, "mlir_modules": len(mlir)}))
"""


def _machine(name: str, url: str, cache_dir: str, size: int) -> dict:
    env = {**os.environ, "FUSEC_REMOTE_CACHE": url, "FUSEC_CACHE_SECRET": "bench-secret", "FUSEC_CACHE_DIR": cache_dir}
    env.pop("FUSEC_NO_CACHE", None)
    r = subprocess.run([sys.executable, "-c", MACHINE, str(size), ROOT], capture_output=True, text=True, env=env,
                       timeout=3600)
    if r.returncode != 0:
        raise SystemExit(f"machine {name} failed:\n{r.stderr[-3000:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out["stderr"] = r.stderr.strip().splitlines()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=16, help="every symbol's size (default 16)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="fusec-remote-bench-")
    try:
        a, b = os.path.join(work, "machine-a"), os.path.join(work, "machine-b")
        os.makedirs(a, mode=0o700)
        profile = os.path.expanduser("~/.cache/fusec/hardware-cpu.json")
        if os.path.exists(profile):             # machine A measured itself before; B has measured nothing
            shutil.copy(profile, a)
        with RedisServer() as server:
            first = _machine("A", server.url, a, args.size)
            second = _machine("B", server.url, b, args.size)
            stats = server.admin().info("memory")
        result = {"date": utc_stamp(), "machine": describe(), "command": "python -m bench.remote_cache "
                  + " ".join(argv or sys.argv[1:]), "size": args.size, "first": first, "second": second,
                  "build_ratio": round(second["build_s"] / first["build_s"], 3),
                  "build_after_imports_ratio": round(second["build_after_imports_s"] / first["build_after_imports_s"], 3),
                  "run_ratio": round(second["run_s"] / first["run_s"], 3),
                  "redis_used_memory": stats.get("used_memory"), "load_average": os.getloadavg()}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=1))
    print(f"wrote {write_result(args.out, 'remote-cache', result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
