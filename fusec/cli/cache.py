"""`fusec cache list|info|clear`: show or empty the compile cache (fusec/build_cache.py names its
directory; runtime/cache.py keeps it). Exit 0.
"""
from __future__ import annotations

import argparse

from .args import Parser


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="fusec cache", description="Show or empty the compile cache ($FUSEC_CACHE_DIR/compiled, "
                "default ~/.cache/fusec/compiled): one compiled artifact per chain, binding, options, hardware "
                "profile and target, least recently used evicted past $FUSEC_CACHE_MAX_SIZE (default 1G).")
    p.add_argument("action", choices=("list", "info", "clear"),
                   help="list: every entry, least recently used first; info: where, how many, how big; "
                        "clear: remove every entry")
    return p


def run(args: argparse.Namespace) -> int:
    from fusec.build_cache import compile_cache_dir
    from fusec.runtime.cache import CompileCache, age
    from fusec.runtime.memory import format_bytes
    cache = CompileCache(compile_cache_dir())
    cache.check()
    if args.action == "info":
        info = cache.info()
        cap = ("$FUSEC_CACHE_MAX_SIZE" if info["max_size_from"] != "default"
               else "the default; set FUSEC_CACHE_MAX_SIZE to change it")
        print(f"compile cache: {info['directory']}")
        print(f"  {info['entries']} entr{'y' if info['entries'] == 1 else 'ies'}, {info['size']} of at most "
              f"{info['max_size']} ({cap})")
        return 0
    if args.action == "list":
        entries = cache.entries()
        if not entries:
            print(f"the compile cache {cache.root} is empty")
        for e in entries:
            print(f"{e.name}  {format_bytes(e.bytes)}  used {age(e.last_used)}")
        return 0
    gone = cache.clear()
    print(f"removed {len(gone)} entr{'y' if len(gone) == 1 else 'ies'} ({format_bytes(sum(e.bytes for e in gone))}) "
          f"from {cache.root}")
    return 0
