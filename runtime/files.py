"""Writing files so that nothing is ever half-written: to a temporary file beside the target,
renamed over it only once complete (a rename within one directory is atomic)."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable, IO


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], None] | bytes | str) -> None:
    """Write `path` atomically: `write(f)` (or the bytes or text given) into a temporary file in
    the same directory, flushed, then renamed over `path`. On any failure the temporary file is
    removed and `path` is left as it was; the OSError (or the writer's exception) propagates."""
    target = Path(path)
    if target.is_dir():
        raise IsADirectoryError(21, "Is a directory", str(target))
    parent = target.parent
    parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=parent)
    try:
        with os.fdopen(fd, "wb") as f:
            if isinstance(write, str):
                f.write(write.encode("utf-8"))
            elif isinstance(write, bytes):
                f.write(write)
            else:
                write(f)
            f.flush()
            os.fsync(f.fileno())
        if os.path.exists(target):
            try:
                os.chmod(tmp, os.stat(target).st_mode & 0o777)
            except OSError:
                pass
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
