"""The persistent compile cache: artifacts (runtime/artifact.py) stored once per key under
ROOT = $FUSEC_CACHE_DIR/compiled, as ROOT/<chain>.<binding>.<key>/ (the key made by the front
door, fusec/build_cache.py), and loaded by any later process with no MLIR involved. A reader sees
a whole entry or none; a damaged entry is removed and built again; least recently used entries
are evicted to the cap; a directory another user could write is refused (its entries are code
that runs). See docs/GUIDE.md, "The compile cache"; its remote tier: runtime/remote_cache.py.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import artifact as art
from .memory import format_bytes, parse_size

DEFAULT_MAX_BYTES = 1 << 30
MAX_SIZE_VAR = "FUSEC_CACHE_MAX_SIZE"
STAGING = ".staging"


class CompileCacheError(Exception):
    """The compile cache cannot be used as configured (a bad $FUSEC_CACHE_MAX_SIZE, a cache
    directory that is a file): a user error, exit 1, naming the variable or the path."""


def max_bytes() -> int:
    """The cache's cap: $FUSEC_CACHE_MAX_SIZE (8G, 512M, bytes), else DEFAULT_MAX_BYTES."""
    text = os.environ.get(MAX_SIZE_VAR)
    if not text:
        return DEFAULT_MAX_BYTES
    try:
        return parse_size(text)
    except ValueError as e:
        raise CompileCacheError(f"{MAX_SIZE_VAR}={text}: {e}") from None


def key(**parts) -> str:
    """A stable hash of the parts of a cache key (JSON data)."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def entry_name(chain: str, binding: dict[str, int], digest: str) -> str:
    tag = "_".join(f"{k}{v}" for k, v in sorted(binding.items())) or "static"
    return f"{chain}.{tag}.{digest}"


@dataclass(frozen=True)
class CacheEntry:
    name: str
    path: Path
    bytes: int
    last_used: float                  # seconds since the epoch


class CompileCache:
    """The cache under `root` (see the module docstring). `warn(text)` is told, in one line,
    of every damaged entry found."""

    def __init__(self, root: str | Path, warn: Callable[[str], None] | None = None,
                 cap: int | None = None):
        self.root = Path(root)
        self.warn = warn or (lambda text: None)
        self.cap = cap

    def check(self) -> None:
        """A CompileCacheError when the cap is not a size, the cache cannot be a directory (it, or a
        folder above, is a file), or another user could write into it (see `check_private`)."""
        max_bytes() if self.cap is None else None
        above = next((p for p in (self.root, *self.root.parents) if p.exists()), None)
        if above is not None and not above.is_dir():
            raise CompileCacheError(f"the compile cache {self.root} cannot be a directory: {above} is a file; remove it "
                                    "or set FUSEC_CACHE_DIR to a directory")
        check_private(self.root)

    def lookup(self, name: str, accept: Callable[[art.Artifact], str | None] | None = None) -> art.Artifact | None:
        """The checked artifact of entry `name`, marked as just used; None when there is none.
        A damaged entry, or one `accept` finds a reason to refuse, is reported, removed and None."""
        d = self.root / name
        if not d.is_dir():
            return None
        try:
            found = art.load(d)
            why = accept(found) if accept else None
        except (art.ArtifactError, OSError) as e:
            if not (d / art.MANIFEST).is_file():     # evicted or replaced while it was read: a plain miss
                return None
            why = f"is damaged ({str(e).split('; ')[0]})"
        if why is not None:
            self.warn(f"the cached build {d} {why}; removed it and compiling again")
            self.remove(d)
            return None
        try:
            os.utime(d)
        except OSError:
            pass
        return found

    def store(self, name: str, write: Callable[[Path], object]) -> Path:
        """Entry `name`, written by `write(directory)` into the staging folder and renamed into
        place; when another process stored it first, that entry is kept. Then evicts."""
        self.check()
        staging = self.root / STAGING / f"{name}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        d = self.root / name
        try:
            make_private_dirs(staging.parent)
            write(staging)
            for _ in range(2):
                try:
                    os.rename(staging, d)
                    os.utime(d)              # just used: the newest entry, the last an eviction takes
                    break
                except OSError:
                    if not d.is_dir():
                        raise
                    if (d / art.MANIFEST).is_file():
                        shutil.rmtree(staging, ignore_errors=True)      # stored by another process first
                        break
                    # not a whole entry: a reader's Numba cache of an entry evicted under it (Numba makes
                    # the folder it saves into), or a store interrupted long ago; this one replaces it
                    self.remove(d)
            else:
                raise OSError(f"{d} keeps reappearing")
        except OSError as e:
            shutil.rmtree(staging, ignore_errors=True)
            raise CompileCacheError(f"cannot write to the compile cache {self.root}: {e.strerror or e}") from None
        self.evict(keep=name)
        return d

    def entries(self) -> list[CacheEntry]:
        """Every entry, least recently used first."""
        if not self.root.is_dir():
            return []
        out = []
        for p in self.root.iterdir():
            if p.name.startswith(".") or not p.is_dir() or p.is_symlink():
                continue
            try:
                out.append(CacheEntry(p.name, p, _tree_bytes(p), p.stat().st_mtime))
            except OSError:
                continue                     # removed meanwhile
        return sorted(out, key=lambda e: (e.last_used, e.name))

    def evict(self, keep: str | None = None) -> list[CacheEntry]:
        """Remove the least recently used entries (never `keep`) until the cache is under its cap."""
        cap = self.cap if self.cap is not None else max_bytes()
        entries = self.entries()
        total = sum(e.bytes for e in entries)
        removed = []
        for e in entries:
            if total <= cap:
                break
            if e.name == keep:
                continue
            self.remove(e.path)
            total -= e.bytes
            removed.append(e)
        return removed

    def clear(self) -> list[CacheEntry]:
        """Remove every entry (and anything left in the staging folder)."""
        gone = self.entries()
        for e in gone:
            self.remove(e.path)
        stale = self.root / STAGING
        if stale.is_dir():
            for p in stale.iterdir():
                _remove_tree(p)
        return gone

    def remove(self, d: Path) -> None:
        """Rename the entry out of the way (one atomic step), then delete it."""
        aside = self.root / STAGING / f"{d.name}.gone.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        try:
            aside.parent.mkdir(parents=True, exist_ok=True)
            os.rename(d, aside)
        except OSError:
            return                           # already removed, or another process has it
        _remove_tree(aside)

    def info(self) -> dict:
        entries = self.entries()
        total = sum(e.bytes for e in entries)
        cap = self.cap if self.cap is not None else max_bytes()
        return {"directory": str(self.root), "entries": len(entries), "bytes": total, "max_bytes": cap,
                "size": format_bytes(total), "max_size": format_bytes(cap),
                "max_size_from": MAX_SIZE_VAR if os.environ.get(MAX_SIZE_VAR) else "default"}


def check_private(root: Path) -> None:
    """A CompileCacheError when another user could change what the cache at `root` holds (its
    entries are code that is run): `root` or the folder above it owned by another user (root
    aside), or writable by its group or by others (the folder above may be a sticky one, as /tmp
    is). As ssh refuses a key file others can write."""
    for p, sticky_ok in ((root, False), (root.parent, True)):
        try:
            st = os.stat(p)
        except OSError:
            continue                         # made by fusec, privately
        writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if st.st_uid not in (os.geteuid(), 0):
            why = f"belongs to another user (uid {st.st_uid})"
        elif writable and not (sticky_ok and st.st_mode & stat.S_ISVTX):
            why = f"can be written by {'other users' if st.st_mode & stat.S_IWOTH else 'its group'} " \
                  f"(mode {stat.S_IMODE(st.st_mode):o})"
        else:
            continue
        fix = "chmod go-w " + str(p) if "mode" in why else "point FUSEC_CACHE_DIR at a directory of your own"
        raise CompileCacheError(f"refusing the compile cache {root}: {p} {why}, and what the cache holds is code "
                                f"fusec runs; {fix}")


def make_private_dirs(d: Path) -> None:
    """Make `d` and the missing folders above it, writable by this user alone."""
    missing = [p for p in (d, *d.parents) if not p.exists()]
    for p in reversed(missing):
        try:
            p.mkdir(mode=0o755)
        except FileExistsError:
            continue
        os.chmod(p, 0o755)


def _tree_bytes(p: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(p):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


def _remove_tree(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        try:
            p.unlink()
        except OSError:
            pass


def age(seconds_since_epoch: float) -> str:
    """'3 min ago' and the like, for `fusec cache list`."""
    s = max(0.0, time.time() - seconds_since_epoch)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= size:
            return f"{s / size:.0f} {unit} ago"
    return f"{s:.0f} s ago"
