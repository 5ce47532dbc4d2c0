"""`fusec cache list|info|clear`: show or empty the compile cache (fusec/build_cache.py names its
directory; runtime/cache.py keeps it). `fusec cache push|pull|stats`: its remote tier
($FUSEC_REMOTE_CACHE or --remote-cache; runtime/remote_cache.py): every local entry (with
Numba's cache of it), this machine's measured profile and autotuning results published; every
remote entry fetched here; what the server holds. Exit 0; 1 when the remote tier is not asked
for, or fails.
"""
from __future__ import annotations

import argparse

from ..errors import UsageError
from .args import Parser

REMOTE_ACTIONS = ("push", "pull", "stats")


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="fusec cache", description="Show or empty the compile cache ($FUSEC_CACHE_DIR/compiled, "
                "default ~/.cache/fusec/compiled): one compiled artifact per chain, binding, options, hardware "
                "profile and target, least recently used evicted past $FUSEC_CACHE_MAX_SIZE (default 1G); "
                "or move entries between it and its remote tier (a Redis server shared by a fleet).")
    p.add_argument("action", choices=("list", "info", "clear") + REMOTE_ACTIONS,
                   help="list: every entry, least recently used first; info: where, how many, how big; "
                        "clear: remove every entry; push: publish every local entry, this machine's measured "
                        "profile and autotuning results to the remote tier; pull: fetch every remote entry this "
                        "cache lacks; stats: what the remote tier's server holds")
    p.add_argument("--remote-cache", metavar="URL",
                   help="redis://HOST:PORT/DB (default $FUSEC_REMOTE_CACHE); needs $FUSEC_CACHE_SECRET")
    return p


def run(args: argparse.Namespace) -> int:
    from fusec.build_cache import compile_cache_dir
    from fusec.runtime.cache import CompileCache, age
    from fusec.runtime.memory import format_bytes
    cache = CompileCache(compile_cache_dir())
    cache.check()
    if args.action in REMOTE_ACTIONS:
        return _remote(args, cache)
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


def _entries(n: int) -> str:
    return f"{n} entr{'y' if n == 1 else 'ies'}"


def _remote(args, cache) -> int:
    from fusec.runtime import remote_cache as remote_mod
    from fusec.runtime.remote_cache import RemoteCache
    from fusec.target_options import notice
    config = remote_mod.configured(args.remote_cache)
    if config is None:
        raise UsageError(f"fusec cache {args.action} needs a remote compile cache: set {remote_mod.URL_VAR} or give "
                         "--remote-cache redis://HOST:PORT/DB")
    failed: list[str] = []
    remote = RemoteCache(config, warn=lambda text: (notice(text) if text.startswith("refused") else
                                                    failed.append(text)))
    done = {"push": _push, "pull": _pull, "stats": _stats}[args.action](remote, cache)
    if failed:
        raise UsageError(f"{failed[0].split('; going on')[0]}; {args.action} did not finish")
    print(done)
    return 0


def _push(remote, cache) -> str:
    from fusec.build_cache import publish_entry, publish_json, share_profile
    from fusec.compiler.plan.hardware import cached_cpu_profile
    from fusec.runtime.memory import format_bytes
    outcomes: dict[str, int] = {}
    sent = 0
    for e in cache.entries():
        how = publish_entry(remote, e.path, e.name)
        outcomes[how] = outcomes.get(how, 0) + 1
        sent += e.bytes if how == "stored" else 0
    share_profile(remote, cached_cpu_profile())
    tuned = _local_autotune()
    stored_tunes = sum(publish_json(remote, f"autotune:{k}", v) == "stored" for k, v in tuned.items())
    big = outcomes.get("too large", 0)
    return (f"pushed {_entries(outcomes.get('stored', 0))} ({format_bytes(sent)} on disk) and {stored_tunes} "
            f"autotuning result{'s' if stored_tunes != 1 else ''} to {remote.config.url}"
            + (f"; {_entries(big)} over the entry limit ({format_bytes(remote.config.max_entry)}) left out"
               if big else ""))


def _local_autotune() -> dict:
    from fusec.compiler.plan.autotune import load_cache
    return load_cache()


def _pull(remote, cache) -> str:
    from fusec.build_cache import fetch_entry, fetch_profile
    from fusec.compiler.plan.hardware import cached_cpu_profile
    have = {e.name for e in cache.entries()}
    fetched = 0
    for key in remote.keys("entry"):
        name = key.split(":", 1)[1]
        if name not in have and _plain_name(name) and remote.up:
            fetched += fetch_entry(remote, cache, name)
    profile = cached_cpu_profile() is None and fetch_profile(remote) is not None
    refused = len(remote.refused)
    return (f"pulled {_entries(fetched)} from {remote.config.url} into {cache.root}"
            + ("; and this machine kind's measured cpu profile" if profile else "")
            + (f"; refused {_entries(refused)} whose signature did not verify" if refused else ""))


def _plain_name(name: str) -> bool:
    return bool(name) and not name.startswith(".") and "/" not in name and "\\" not in name and name != ".."


def _stats(remote, cache) -> str:
    from fusec.runtime.memory import format_bytes
    s = remote.stats()
    if s is None:
        return ""
    limit = format_bytes(s["maxmemory"]) if s["maxmemory"] else "no limit"
    return "\n".join([
        f"remote compile cache: {remote.describe()}",
        f"  {s['server']}: {format_bytes(s['used_memory'])} used of {limit} (policy {s['policy']}, "
        f"{s['evicted_keys']} keys evicted so far)",
        f"  {_entries(s['entry']['keys'])} ({format_bytes(s['entry']['bytes'])}), "
        f"{s['profile']['keys']} measured profile{'s' if s['profile']['keys'] != 1 else ''}, "
        f"{s['autotune']['keys']} autotuning result{'s' if s['autotune']['keys'] != 1 else ''}"])
