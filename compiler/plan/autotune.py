"""Measured tile choice (--autotune): time the model's best candidates, keep the fastest.

Kernel by kernel, in plan order, the model's top-k tile candidates (by predicted time) are
built and timed on the target, the other kernels keeping their current tiles; the fastest is
kept. Choices are cached on disk by (group signature with shapes and dtypes, hardware profile
(for the cpu: this CPU and the emitter's version), target), so a later compile of the same
kernel reuses them without timing; `shared` carries them between machines of one kind. The
timing itself is a callback (the runtime does it): this module only chooses and remembers.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from .cost import Tiling
from .hardware import cache_dir, move_aside, profile_key
from .kernels import FusionPlan
from .templates import candidate_fields
from .tilechoice import group_signature


@dataclass(frozen=True)
class Trial:
    tiling: Tiling
    predicted_s: float
    measured_s: float


def cache_path() -> Path:
    return cache_dir() / "autotune.json"


def tuning_key(signature: str, hw: str, target: str) -> str:
    return hashlib.sha1(f"{signature}|{hw}|{target}".encode()).hexdigest()


def machine(plan: FusionPlan) -> str:
    """The hardware part of the key: the profile's name; for the cpu, this CPU and emitter."""
    if plan.target == "cpu" and plan.hardware == "cpu":
        return profile_key()
    return plan.hardware


def load_cache(path: Path | None = None) -> dict:
    """The cached tile choices; {} when there are none. A file that is not a valid cache (not
    JSON, or an entry without well-formed tiles) is reported in one line on stderr and moved
    aside, and the kernels are tuned again; a cache directory that is a file is reported too."""
    import sys

    def invalid(why: str) -> dict:
        print(f"fusec: the autotune cache {path} {why}; {move_aside(path)} and tuning again", file=sys.stderr)
        return {}

    path = path or cache_path()
    if path.parent.exists() and not path.parent.is_dir():
        print(f"fusec: the fusec cache directory {path.parent} is not a directory; autotuned tiles are not "
              "cached", file=sys.stderr)
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as e:
        return invalid(f"cannot be read ({e})")
    except ValueError as e:
        return invalid(f"is not JSON ({e})")
    if not isinstance(data, dict):
        return invalid("is not a JSON object")

    for key, entry in data.items():
        if not valid_entry(entry):
            return invalid(f"has an entry without valid tiles ({key[:12]}...)")
    return data


def valid_entry(entry) -> bool:
    """Whether a cached (or shared) autotuning result holds well-formed tiles."""
    def ints(v, lo: int = 0) -> bool:
        return isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) and x >= lo for x in v)

    t = entry.get("tiles") if isinstance(entry, dict) else None
    return bool(isinstance(t, dict) and ints(t.get("block")) and ints(t.get("thread", [])) and ints(t.get("mapped"))
                and all(m < len(t["block"]) for m in t["mapped"])
                and (not t.get("thread") or len(t["thread"]) == len(t["block"]))
                and isinstance(t.get("row_threads", 0), int) and not isinstance(t.get("row_threads", 0), bool)
                and t.get("row_threads", 0) >= 0)


def save_cache(cache: dict, path: Path | None = None) -> None:
    path = path or cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cache, indent=1, sort_keys=True) + "\n")
        tmp.replace(path)
    except OSError:
        pass


def tiles(t: Tiling) -> dict:
    return {"block": list(t.block), "thread": list(t.thread), "mapped": list(t.mapped), **candidate_fields(t.config)}


def top_candidates(plan: FusionPlan, group: int, k: int) -> list[tuple[Tiling, float]]:
    """The model's k best distinct tilings of one kernel, fastest first."""
    out, seen = [], set()
    for t, s in plan.candidates[group]:
        if t not in seen:
            seen.add(t)
            out.append((t, s))
        if len(out) == k:
            break
    return out


class SharedTuning(Protocol):
    """Autotuning results shared beyond this machine (the front door's remote cache tier), by
    the same keys as the local cache."""
    def get(self, key: str) -> dict | None: ...
    def put(self, key: str, entry: dict) -> None: ...


def tune(plan: FusionPlan, measure: Callable[[dict], float], k: int = 3, cache: dict | None = None,
         save: bool = True, shared: SharedTuning | None = None) -> tuple[dict, dict[int, list[Trial]]]:
    """Tuned tiles {signature: tiles} for the plan's kernels, and the trials run per kernel.
    `measure(tuned)` builds the chain with those tiles and returns its time in seconds. A kernel
    tuned neither here nor in `shared` is timed, and its result given to both."""
    cache = load_cache() if cache is None else cache
    tuned: dict[str, dict] = {}
    trials: dict[int, list[Trial]] = {}
    for i, g in enumerate(plan.kernels):
        if g.serial:
            continue
        sig = group_signature(plan.info, g.ops)
        key = tuning_key(sig, machine(plan), plan.target)
        if key not in cache and shared is not None and valid_entry(found := shared.get(key)):
            cache[key] = found
        if key in cache:
            tuned[sig] = cache[key]["tiles"]
            continue
        runs = []
        for t, predicted in top_candidates(plan, i, k):
            runs.append(Trial(t, predicted, measure(dict(tuned, **{sig: tiles(t)}))))
        if not runs:
            continue
        best = min(runs, key=lambda r: r.measured_s)
        tuned[sig] = tiles(best.tiling)
        trials[g.id] = runs
        cache[key] = {"tiles": tiles(best.tiling),
                      "trials": [{"tiles": tiles(r.tiling), "predicted_s": r.predicted_s, "measured_s": r.measured_s}
                                 for r in runs]}
        if shared is not None:
            shared.put(key, cache[key])
    if save:
        save_cache(cache)
    return tuned, trials


def kendall_tau(predicted: dict, measured: dict) -> float:
    """Rank agreement of two timings of the same candidates: 1 the same order, -1 reversed."""
    keys = sorted(predicted)
    concordant = discordant = 0
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            s = (predicted[a] - predicted[b]) * (measured[a] - measured[b])
            concordant += s > 0
            discordant += s < 0
    pairs = len(keys) * (len(keys) - 1) // 2
    return (concordant - discordant) / pairs if pairs else 1.0
