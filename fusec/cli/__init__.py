"""`fusec` command line: compile, run and check FDSL chains. One module per command (`job` is
`fusec FILE`, then `compile`, `run`, `test`, `cache`, `importer` for `fusec import`), each with its `parser()` and `run(args)`,
served by `args`, `inputs`, `options` and `exits`; `main` dispatches through the `_cmd_*` names
below. Flags and exit statuses: docs/CLI.md and docs/GUIDE.md, "Exit status".
"""
from __future__ import annotations

import sys

from fusec.compiler.errors import CacheError
from fusec.dsl.diagnostics import FdslError
from fusec.runtime.artifact import ArtifactError
from fusec.runtime.cache import CompileCacheError
from fusec.runtime.npz import NpzError
from fusec.runtime.remote_cache import RemoteCacheError
from fusec.runtime.targets import TargetError

from ..errors import NumericsError, UsageError
from . import cache, compile, importer, job, run, test
from .exits import FALLBACK_EXIT, INTERRUPTED, NUMERICS, USAGE, internal_error

__all__ = ["main", "FALLBACK_EXIT"]

_cmd_main, _cmd_test, _cmd_compile, _cmd_run, _cmd_cache = job.run, test.run, compile.run, run.run, cache.run
_cmd_import = importer.run


def main(argv: list[str] | None = None) -> int:
    """Run the command line `argv` (default: sys.argv[1:]); returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] == "test":
            return _cmd_test(test.parser().parse_args(argv[1:]))
        if argv and argv[0] == "compile":
            return _cmd_compile(compile.parser().parse_args(argv[1:]))
        if argv and argv[0] == "run":
            return _cmd_run(run.parser().parse_args(argv[1:]))
        if argv and argv[0] == "import":
            return _cmd_import(importer.parser().parse_args(argv[1:]))
        if argv and argv[0] == "cache":
            return _cmd_cache(cache.parser().parse_args(argv[1:]))
        return _cmd_main(job.parser().parse_args(argv))
    except FdslError as e:
        print(e.render(), file=sys.stderr)
        return USAGE
    except UsageError as e:
        print(f"fusec: error: {e}", file=sys.stderr)
        return USAGE
    except (TargetError, ArtifactError, NpzError, CacheError, CompileCacheError, RemoteCacheError) as e:
        print(f"fusec: error: {e}", file=sys.stderr)
        return USAGE
    except MemoryError:
        print("fusec: error: out of memory; bind smaller sizes (--bind), or lower --max-memory so that fusec "
              "refuses such a run before it starts", file=sys.stderr)
        return USAGE
    except NumericsError as e:
        print(f"fusec: numerics failure: {e}", file=sys.stderr)
        return NUMERICS
    except KeyboardInterrupt:
        return INTERRUPTED
    except Exception as e:  # an internal error: never the user's fault
        return internal_error(e, argv)
