"""The front door's side of the persistent compile cache (runtime/cache.py): whether it is on,
where it is, and `build_key`, what an entry is the build of (the compiler's code among it).
"""
from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

from fusec.compiler.options import CompileOptions
from fusec.runtime import artifact as art
from fusec.runtime import cache as cache_mod
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
