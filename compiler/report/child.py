"""Numba's CUDA mode is per process: `run(fn, kwargs, simulator)` calls `fn(**kwargs)` here when
this process's mode fits, else in a fresh Python with the mode set (`fn` imported by name;
request and result as pickles of plain data in a temporary directory). See docs/GPU.md,
"The kernel report".
"""
from __future__ import annotations

import importlib
import os
import pickle
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Callable

TIMEOUT_S = 600
_PACKAGE = __name__.rpartition(".")[0]


class MeasureError(RuntimeError):
    """A measurement could not be made (the message says why; a child's traceback included)."""


def simulator_mode() -> bool:
    """Whether numba.cuda is (or, not imported yet, will be) the simulator in this process."""
    if "numba.cuda" in sys.modules:
        from numba.cuda.core import config
        return bool(config.ENABLE_CUDASIM)
    return os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def run(fn: Callable, kwargs: dict, *, simulator: bool) -> Any:
    """`fn(**kwargs)` in a process whose numba.cuda is (simulator=True) or is not the simulator."""
    if simulator_mode() == simulator:
        return fn(**kwargs)
    name = f"{fn.__module__}:{fn.__qualname__}"
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    if simulator:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    with tempfile.TemporaryDirectory(prefix="fusec-report-") as tmp:
        req, res = Path(tmp, "request.pkl"), Path(tmp, "result.pkl")
        req.write_bytes(pickle.dumps((name, kwargs), protocol=pickle.HIGHEST_PROTOCOL))
        code = "from fusec.compiler.report.child import main; main()"
        try:
            proc = subprocess.run([sys.executable, "-c", code, str(req), str(res)], env=env,
                                  capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise MeasureError(f"{name} took longer than {TIMEOUT_S} s in its child process") from None
        if not res.exists():
            raise MeasureError(f"the {name} child process failed (exit {proc.returncode}): "
                               f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
        ok, value = pickle.loads(res.read_bytes())
    if not ok:
        raise MeasureError(value)
    return value


def main() -> None:
    """The child's side: argv is (request file, result file)."""
    req, res = sys.argv[1:3]
    name, kwargs = pickle.loads(Path(req).read_bytes())
    module, _, function = name.partition(":")
    try:
        if not module.startswith(_PACKAGE + "."):
            raise MeasureError(f"{name} is not a function of {_PACKAGE}")
        out = (True, getattr(importlib.import_module(module), function)(**kwargs))
    except MeasureError as e:               # says why: the parent raises it again
        out = (False, str(e))
    except Exception:                       # a bug: the parent raises it with this traceback
        out = (False, f"{name} failed in its child process:\n{traceback.format_exc()}")
    Path(res).write_bytes(pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL))
