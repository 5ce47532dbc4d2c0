"""The front door's side of the persistent compile cache (runtime/cache.py): whether it is on,
where it is, and `build_key`, what an entry is the build of (the compiler's code among it); and
of its remote tier (runtime/remote_cache.py): which one, and entries, measured profiles and
autotuning results moved between it and the local cache.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
from pathlib import Path

from fusec.compiler.options import CompileOptions
from fusec.runtime import artifact as art
from fusec.runtime import cache as cache_mod
from fusec.runtime import remote_cache as remote_mod
from fusec.runtime import signed
from fusec.runtime.remote_cache import RemoteCache
from fusec.runtime.targets import Target

from .version import __version__


def build_key(source: str, chain: str, binding: dict[str, int], options: CompileOptions, target: Target) -> str:
    """What a compile cache entry is the build of: the compiler (its version and its code),
    the FDSL source, the chain, the binding, the options (their hash holds the hardware
    profile) and the runtime target."""
    return cache_mod.key(fusec=__version__, format=art.FORMAT, compiler=compiler_digest(),
                         source=hashlib.sha256(source.encode("utf-8")).hexdigest(), chain=chain,
                         binding=sorted(binding.items()), options=options.key(),
                         hardware=options.hardware.as_dict() if options.hardware else None, target=target.name)


@functools.lru_cache(maxsize=1)
def compiler_digest() -> str:
    """A hash of the compiler's and the language's code: a cached build is never reused by a
    compiler that has changed since, version bump or not."""
    import fusec.compiler as compiler_pkg
    import fusec.dsl as dsl_pkg
    h = hashlib.sha256()
    for pkg in (compiler_pkg, dsl_pkg):
        root = Path(pkg.__file__).resolve().parent
        for f in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".lark") and "__pycache__" not in p.parts):
            h.update(f.relative_to(root).as_posix().encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def cache_enabled() -> bool:
    """The persistent compile cache is on unless FUSEC_NO_CACHE=1."""
    return os.environ.get("FUSEC_NO_CACHE") != "1"


def compile_cache_dir() -> Path:
    """$FUSEC_CACHE_DIR/compiled (default ~/.cache/fusec/compiled)."""
    from fusec.compiler.plan.hardware import cache_dir
    return cache_dir() / "compiled"


# ---- the remote tier (runtime/remote_cache.py) ------------------------------------------------

_REMOTES: dict[str, RemoteCache] = {}


def remote_cache(url: str | None = None) -> RemoteCache | None:
    """The remote tier asked for by `url` or $FUSEC_REMOTE_CACHE (one per URL and process), or
    None. A RemoteCacheError when it is asked for without $FUSEC_CACHE_SECRET."""
    config = remote_mod.configured(url)
    if config is None:
        return None
    found = _REMOTES.get(config.url)
    if found is None or found.config != config:
        found = _REMOTES[config.url] = RemoteCache(config, warn=_notice)
    return found


def _notice(text: str) -> None:
    print(f"fusec: {text}", file=sys.stderr)


def fetch_entry(remote: RemoteCache, cache: cache_mod.CompileCache, name: str) -> bool:
    """Entry `name` from the remote tier into the local cache; False when the remote has none
    (or it was refused, or Redis failed)."""
    payload = remote.get(f"entry:{name}")
    if payload is None:
        return False
    try:
        files = signed.unpack(payload, remote.config.max_entry * 16)
    except signed.BadEntry as e:             # signed by the fleet, yet not an entry: refused all the same
        remote.refuse(f"entry:{name}", str(e))
        return False
    cache.store(name, lambda d: signed.unpack_into(files, d))
    return True


def publish_entry(remote: RemoteCache, directory: Path, name: str) -> str:
    """A local entry (with Numba's cache of it, when there is one) to the remote tier."""
    if not remote.up:
        return "off"
    try:
        payload = signed.pack_dir(directory)
    except OSError:
        return "gone"                        # evicted meanwhile
    return remote.put(f"entry:{name}", payload)


def profile_key_name(key: str) -> str:
    """The remote key of a measured hardware profile for one machine kind (its profile key)."""
    return "profile:" + hashlib.sha256(key.encode()).hexdigest()[:32]


def fetch_json(remote: RemoteCache, key: str):
    """A JSON value of the remote tier (a profile, an autotuning result), or None."""
    payload = remote.get(key)
    if payload is None:
        return None
    try:
        return json.loads(payload)
    except ValueError:
        remote.refuse(key, "is not JSON")
        return None


def publish_json(remote: RemoteCache, key: str, value) -> str:
    if not remote.up:
        return "off"
    return remote.put(key, json.dumps(value, sort_keys=True).encode())


class RemoteTuning:
    """Autotuning results through the remote tier (compiler/plan/autotune.py's `shared`):
    keyed as the local ones are, by kernel, shapes, dtypes, machine kind and target."""

    def __init__(self, remote: RemoteCache):
        self.remote = remote

    def get(self, key: str):
        return fetch_json(self.remote, f"autotune:{key}")

    def put(self, key: str, entry) -> None:
        publish_json(self.remote, f"autotune:{key}", entry)


def fetch_profile(remote: RemoteCache):
    """This machine kind's measured cpu profile from the remote tier, written to the local cache
    as if measured here; None when the remote has none."""
    from fusec.compiler.plan.hardware import checked_profile, profile_key, store_cpu_profile
    key = profile_key()
    data = fetch_json(remote, profile_key_name(key))
    if data is None:
        return None
    profile = checked_profile(data.get("profile")) if isinstance(data, dict) and data.get("key") == key else \
        "is not a profile of this machine kind"
    if isinstance(profile, str):
        remote.refuse(profile_key_name(key), profile)
        return None
    store_cpu_profile(profile)
    return profile


_SHARED: set[str] = set()                # remote keys this process has published (profiles)


def share_profile(remote: RemoteCache, profile) -> None:
    """This machine's measured cpu profile to the remote tier (once per process), keyed by its
    machine kind, so that machines of the kind plan alike and so share entries."""
    from fusec.compiler.plan.hardware import cached_cpu_profile, profile_key
    key = profile_key()
    if profile is None or profile.kind != "cpu" or profile != cached_cpu_profile():
        return
    name = profile_key_name(key)
    if name not in _SHARED and publish_json(remote, name, {"key": key, "profile": profile.as_dict()}) == "stored":
        _SHARED.add(name)
