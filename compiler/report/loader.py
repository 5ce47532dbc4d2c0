"""An emitted module's source executed as a fresh module, with its source findable by line."""
from __future__ import annotations

import itertools
import linecache
import sys
import types

_COUNTER = itertools.count(1)


def exec_module(source: str, tag: str) -> types.ModuleType:
    """Execute `source` as a new module. Its code gets a unique file name, registered with
    linecache, so tracebacks show the emitted lines and the tracer can read access sites back;
    the module is in sys.modules so Numba's typing can find its functions' globals."""
    n = next(_COUNTER)
    name = f"fusec_report_{tag}_{n}"
    filename = f"<fusec-report:{tag}:{n}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    mod = types.ModuleType(name)
    mod.__file__ = filename
    sys.modules[name] = mod
    exec(compile(source, filename, "exec"), mod.__dict__)
    return mod
