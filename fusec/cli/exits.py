"""How a command ends: its exit status, an internal error's report, and the files a run
writes last (--save, --report).

Exit status: 0 ok, 1 a mistake in the input, 2 an internal error (with a reproduction hint),
3 a numerics mismatch, 4 a fallback (a fused kernel failed the numerics check and the unfused
kernels of its ops ran instead: right outputs), 130 interrupted.
"""
from __future__ import annotations

import os
import shlex
import sys
import traceback

from fusec.runtime import npz
from fusec.runtime.files import atomic_write
from fusec.runtime.npz import NpzError

from ..errors import NumericsError, UsageError

OK = 0
USAGE = 1                   # a mistake in the input: a bad flag, a file that is not there, a diagnostic
INTERNAL = 2                # a bug in fusec
NUMERICS = 3                # an output disagreed with the reference
FALLBACK_EXIT = 4           # the outputs are right, but only because a fused kernel was replaced (--fallback)
INTERRUPTED = 130


def internal_error(e: BaseException, argv: list[str]) -> int:
    """Print an internal error (its stage, its IR dump, how to reproduce it); exit 2."""
    stage = getattr(e, "stage", None)
    dump = getattr(e, "dump_path", None)
    text = str(e).splitlines()
    first = text[0] if text else ""
    print(f"fusec: internal error{f' in stage {stage}' if stage else ''}: {type(e).__name__}: {first}", file=sys.stderr)
    for line in text[1:]:
        if not (dump and dump in line):          # the dump is named once, below
            print(f"  {line.strip()}", file=sys.stderr)
    if dump:
        print(f"  the IR at that point is in {dump}", file=sys.stderr)
    print(f"  reproduce with: fusec {_reproduction(argv)}", file=sys.stderr)
    from fusec.compiler.plan.hardware import cache_dir
    print(f"  (fusec caches what it measured in {cache_dir()}; setting FUSEC_CACHE_DIR to an empty directory "
          "rules the cache out)", file=sys.stderr)
    print("  this is a bug in fusec, not in your program; please report it with the file above", file=sys.stderr)
    if os.environ.get("FUSEC_TRACEBACK"):
        traceback.print_exc()
    return INTERNAL


def _reproduction(argv: list[str]) -> str:
    """The command again; for the main command with --dump-dir (the only one that takes it),
    so that every stage's IR is written."""
    sub = argv[0] if argv and argv[0] in ("test", "compile", "run") else None
    if sub is None and "--dump-dir" not in argv and not any(a.startswith("--dump-dir=") for a in argv):
        return f"{shlex.join(argv)} --dump-dir /tmp/fusec-dump"
    return shlex.join(argv)


def finish(args, reports, saved) -> int:
    """Write --save and --report (atomically; on a numerics failure both say which outputs
    failed), then exit 0, or 4 after a fallback; a failed output raises NumericsError (exit 3)."""
    failures = [f for r in reports for f in r.failures()]
    failed = {r.chain: r.failed_outputs() for r in reports if r.failed_outputs()}
    fallbacks = [r for r in reports if getattr(r, "fallback", None) is not None]
    if getattr(args, "save", None):
        try:
            npz.save(args.save, saved, failed)
        except NpzError as e:
            raise UsageError(f"--save: {e}") from None
    if getattr(args, "report", None):
        import json
        data = {"fusec": fusec_version(),
                "status": "numerics mismatch" if failures else "fallback" if fallbacks else "ok",
                "exit_status": NUMERICS if failures else FALLBACK_EXIT if fallbacks else 0, "failed": failures,
                "fallbacks": [dict(r.fallback.as_dict(), chain=r.chain) for r in fallbacks],
                "chains": [r.as_dict() for r in reports]}
        try:
            atomic_write(args.report, json.dumps(data, indent=2) + "\n")
        except OSError as e:
            raise UsageError(f"--report {args.report}: cannot write it: {e.strerror or e}") from None
    if failures:
        raise NumericsError("; ".join(failures))
    if fallbacks:
        print(f"fusec: fallback: {len(fallbacks)} chain{'s' if len(fallbacks) != 1 else ''} ran with a fused kernel "
              f"replaced by unfused ones ({', '.join(r.chain for r in fallbacks)}); exit status {FALLBACK_EXIT}",
              file=sys.stderr)
        return FALLBACK_EXIT
    return OK


def fusec_version() -> str:
    from ..version import __version__
    return __version__
