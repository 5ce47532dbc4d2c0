"""fusec's benchmark suite against the tools users would pick instead (issue 6).

`python -m bench` times the standard chains (bench/fdsl/*.fdsl) at realistic sizes with fusec
(fused and unfused) and NumPy, PyTorch eager, torch.compile, jax.jit, onnxruntime and TVM Relax
(each optional; the last two through bench/runtimes.py), with memory as users call it and
memory-equalised (docs/PERFORMANCE.md), writes
bench/results/<machine>-<date>.json and regenerates the benchmark table of docs/PERFORMANCE.md
from the results. `python -m bench.gpu` does the same on a GPU from artifacts compiled elsewhere.
"""

import atexit
import datetime as dt
import json
import os
import shutil
import tempfile


def utc_stamp() -> str:
    """Now, UTC, as results record it: 2026-12-02T12:40:05Z."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_result(out_dir: str, stem: str, result: dict) -> str:
    """out_dir/<stem>-<result["date"] to the minute>.json (one file per run); its path."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{stem}-{result['date'][:16].replace(':', '')}.json")
    with open(path, "w") as fh:
        json.dump(result, fh, indent=2)
    return path


def scratch_dir(prefix: str) -> str:
    """A temporary directory removed when the process exits (tools' caches for one run)."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, True)
    return path


def scratch_env(var: str, prefix: str) -> None:
    """$var pointed at a scratch directory, unless the environment already sets it."""
    if not os.environ.get(var):
        os.environ[var] = scratch_dir(prefix)
