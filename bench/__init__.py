"""fusec's benchmark suite against the tools users would pick instead (issue 6).

`python -m bench` times the standard chains (bench/fdsl/*.fdsl) at realistic sizes with fusec
(fused and unfused) and NumPy, PyTorch eager, torch.compile and jax.jit (each optional), writes
bench/results/<machine>-<date>.json and regenerates the README's benchmark table from the
results. `python -m bench.gpu` does the same on a GPU from artifacts compiled elsewhere.
"""

import atexit
import os
import shutil
import tempfile


def scratch_dir(prefix: str) -> str:
    """A temporary directory removed when the process exits (tools' caches for one run)."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, True)
    return path


def scratch_env(var: str, prefix: str) -> None:
    """$var pointed at a scratch directory, unless the environment already sets it."""
    if not os.environ.get(var):
        os.environ[var] = scratch_dir(prefix)
