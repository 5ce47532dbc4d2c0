"""Measured tile choice (--autotune): time the model's best candidates, keep the fastest.

Kernel by kernel, in plan order, the model's top-k tile candidates (by predicted time) are
built and timed on the target, the other kernels keeping their current tiles; the fastest is
kept. Choices are cached on disk by (group signature with shapes and dtypes, hardware profile
(for the cpu: this CPU and the emitter's version), target), so a later compile of the same kernel reuses them without timing. The timing itself is
a callback (the runtime does it): this module only chooses and remembers.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .cost import Tiling
from .hardware import cache_dir, profile_key
from .planner import FusionPlan
from .tilechoice import group_signature


@dataclass(frozen=True)
class Trial:
    tiling: Tiling
    predicted_s: float
    measured_s: float


def cache_path() -> Path:
    return cache_dir() / "autotune.json"


def cache_key(signature: str, hw: str, target: str) -> str:
    return hashlib.sha1(f"{signature}|{hw}|{target}".encode()).hexdigest()


def machine(plan: FusionPlan) -> str:
    """The hardware part of the key: the profile's name; for the cpu, this CPU and emitter."""
    if plan.target == "cpu" and plan.hardware == "cpu":
        return profile_key()
    return plan.hardware


def load_cache(path: Path | None = None) -> dict:
    try:
        return json.loads((path or cache_path()).read_text())
    except (OSError, ValueError):
        return {}


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
    return {"block": list(t.block), "thread": list(t.thread), "mapped": list(t.mapped)}


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


def tune(plan: FusionPlan, measure: Callable[[dict], float], k: int = 3, cache: dict | None = None,
         save: bool = True) -> tuple[dict, dict[int, list[Trial]]]:
    """Tuned tiles {signature: tiles} for the plan's kernels, and the trials run per kernel.
    `measure(tuned)` builds the chain with those tiles and returns its time in seconds."""
    cache = load_cache() if cache is None else cache
    tuned: dict[str, dict] = {}
    trials: dict[int, list[Trial]] = {}
    for i, g in enumerate(plan.groups):
        if g.serial:
            continue
        sig = group_signature(plan.info, g.ops)
        key = cache_key(sig, machine(plan), plan.target)
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
