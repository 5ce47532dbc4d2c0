"""Horizontal fusion: two grown kernels that read the same tensor, or one of which reads the
other, merged into one when the model predicts the one faster than the two; the earlier
kernel's last op becomes a sibling of the later root, tiled alike (docs/ARCHITECTURE.md, "plan";
Kernel.siblings).
"""
from __future__ import annotations

from dataclasses import replace

from .analysis import ChainInfo, sibling_tiles, siblings, sinks, tileable_loops
from .cost import CHEAP, Tiling
from .decisions import Decision, KernelNames
from .describe import time_text
from .grower import read_paths, second_output_error
from .tilechoice import TileChooser


HORIZONTAL_TRIES = 4      # earlier kernels each kernel is weighed with (the nearest that share a read)
HORIZONTAL_WINDOW = 16    # how far back it looks for them


def fuse_horizontally(info: ChainInfo, chooser: TileChooser, target: str, members_list: list[set[int]],
                      unwritten: list[set[int]], names: KernelNames,
                      decisions: list[Decision]) -> tuple[list[set[int]], list[set[int]]]:
    """Horizontal fusion: two kernels that read the same tensor, or one of which reads the other's
    results, become one when the model predicts it faster than the two (one launch, shared reads
    once, results the second read from memory kept on chip). The later kernel's root stays the
    root; an op of the earlier one that no member reads is a sibling, tiled alike (its loops
    match the root's by position: analysis.sibling_loop). The merged kernel runs where the later
    one did, so every other reader of the earlier kernel runs after it."""
    def reads(m: set[int]) -> set[str]:
        return {info.op(x).operand_keys[k] for x in m if info.op(x).kind not in CHEAP
                for k in range(info.op(x).n_inputs) if info.op(x).operand_keys[k].startswith("arg")
                or (info.op(x).producers[k] is not None and info.op(x).producers[k] not in m)}

    said: set[Decision] = set()

    def note(d: Decision) -> None:                      # a kernel that took one in is weighed again: say a thing once
        if d not in said:
            said.add(d)
            decisions.append(d)

    roots = [max(x for x in m if info.op(x).is_compute) for m in members_list]
    keys = [reads(m) for m in members_list]
    b = 0
    while b < len(members_list):                     # the later kernel (members_list runs last first)
        a = _partner(info, chooser, target, members_list, unwritten, names, roots, keys, b, note)
        if a is None:
            b += 1
            continue
        union = members_list[a] | members_list[b]
        # the grower's refusals of these ops for these two kernels no longer hold
        pair = (names[a], names[b])
        decisions[:] = [d for d in decisions if not (d.verdict == "not fused" and d.ops[0] in union and
                                                     any(names.resolve(k) in pair for k in d.named()))]
        inside = {x for x in union if all(u in union for u in info.op(x).users)}
        decisions[:] = [replace(d, also="") if d.verdict == "fused" and d.ops[0] in inside else d for d in decisions]
        members_list[b] = union
        names.merged(a, b)
        for lst in (members_list, unwritten, roots, keys):
            del lst[a]
        keys[b] = reads(union)                       # and b may take another earlier kernel
    return members_list, unwritten


def _partner(info: ChainInfo, chooser: TileChooser, target: str, members_list, unwritten, names: KernelNames,
             roots, keys, b: int, note) -> int | None:
    """The earlier kernel (index) that kernel `b` takes in, by horizontal fusion; None if none
    pays. Weighs the nearest HORIZONTAL_TRIES earlier kernels that share a read with it or feed
    it, within HORIZONTAL_WINDOW kernels."""
    def plain(m) -> bool:
        return not any(info.op(x).kind in ("contraction", "pad") or info.op(x).scan for x in m)

    if unwritten[b]:
        return None
    mb, tried = members_list[b], 0
    refused: list[Decision] = []              # the nearest refusal is said (one line per kernel, not per pair)
    for a in range(b + 1, min(len(members_list), b + 1 + HORIZONTAL_WINDOW)):    # nearest first
        if tried >= HORIZONTAL_TRIES:
            break
        ma = members_list[a]
        shared = keys[a] & keys[b]
        feeds = {f"%{x}:0" for x in ma} & keys[b]
        if not shared and not feeds:
            continue
        tried += 1
        if feeds and any(info.op(x).note.startswith("split-reductions") for x in ma):
            continue                                # the partials of a two-stage reduction (the grower's call)
        pair = (f"the kernels of %{roots[a]} {info.op(roots[a]).label} and %{roots[b]} {info.op(roots[b]).label} ("
                + (f"both read {', '.join(sorted(shared))}" if shared else
                   f"%{roots[b]} reads {', '.join(sorted(feeds))} of the first") + ")")
        if not (plain(ma) and plain(mb)):
            if shared:
                one = next(info.op(x) for x in ma | mb if info.op(x).kind in ("contraction", "pad") or info.op(x).scan)
                what = "a scan" if one.scan else "a contraction" if one.kind == "contraction" else "a padded"
                refused.append(Decision("not fused horizontally", pair, f"{what} kernel has one root"))
            continue
        if unwritten[a]:
            continue
        union = frozenset(ma | mb)
        if any(info.op(x).indirect_ops & union for x in union):
            continue                                # one reads the other at computed indices: written first
        if any(u != -1 and u not in union and u <= roots[b] for x in ma for u in info.op(x).users):
            continue                                # read before the merged kernel would run
        if not tileable_loops(info, roots[b], set(union)):
            continue                                # no loop of the root that every sibling has
        if _init_shared_with_a_root(info, union):
            continue                                # the grower's refusal (Grower._shared_init) holds
        if written_reduction_read_twice(info, union) is not None:
            continue                                # the grower's refusal (_second_output_error) holds
        merged = chooser.best(union)
        t = merged.tiling
        if not any(t.block) or t.config.one_root or not _siblings_fit(info, roots[b], union, t):
            continue
        if any(second_output_error(info.op(x), target, t.config.row_outputs) for x in union
               if x not in sinks(info, union) and info.op(x).kind not in CHEAP
               and any(u == -1 or u not in union for u in info.op(x).users)):
            continue
        apart = chooser.best(frozenset(ma)).cost.time_s + chooser.best(frozenset(mb)).cost.time_s
        if merged.cost.time_s >= apart:
            refused.append(Decision("not fused horizontally", pair, f"predicted {time_text(merged.cost.time_s)} "
                                    f"as one, {time_text(apart)} apart",
                                    numbers=(("merged_s", merged.cost.time_s), ("apart_s", apart))))
            continue
        note(Decision("fused horizontally", pair, f"one launch, predicted {time_text(merged.cost.time_s)} against "
                      f"{time_text(apart)} apart", tuple(sorted(union)), (names[b],), ", into kernel",
                      numbers=(("merged_s", merged.cost.time_s), ("apart_s", apart))))
        return a
    if refused:
        note(refused[0])
    return None


def written_reduction_read_twice(info: ChainInfo, members) -> tuple[int, int, int] | None:
    """A reduction of the kernel that it also writes (for users outside, or the chain's result)
    and that two members read: (reduction, first reader, second reader), else None.
    fuse_into_containing_op makes a copy of it for each reader and fuses the fill of its init
    into one copy only, so the copy that writes the result accumulates into an uninitialised
    buffer (tests/regressions/test_written_reduction_read_twice.py)."""
    for m in sorted(members):
        o = info.op(m)
        inside = sorted(u for u in o.users if u in members)
        if (o.kind == "reduction" and inside and read_paths(info, m, members) > 1
                and any(u == -1 or u not in members for u in o.users)):
            return m, inside[0], inside[-1]
    return None


def _fill_readers(info: ChainInfo, members) -> list[set[int]]:
    """Per fill of the kernel, the members it initialises."""
    fills: dict[int, set[int]] = {}
    for m in members:
        o = info.op(m)
        for p in o.producers[o.n_inputs:]:
            if p is not None and info.op(p).kind == "fill":
                fills.setdefault(p, set()).add(m)
    return list(fills.values())


def _init_shared_with_a_root(info: ChainInfo, members) -> bool:
    """Whether a fill initialises both a tiled root (or sibling) and a producer of the kernel:
    tile-and-fuse would initialise it once, for the producer, and leave the root's accumulator
    uninitialised."""
    ends = set(sinks(info, members))
    return any(readers & ends and readers - ends for readers in _fill_readers(info, members))


def _siblings_fit(info: ChainInfo, root: int, members, t: Tiling) -> bool:
    """Whether every sibling takes the root's thread tiles too (block tiles: tileable_loops)."""
    if not any(t.thread):
        return True
    n = sum(1 for x in t.thread if x)
    return all(sum(1 for x in sibling_tiles(info, root, s, t.thread) if x) == n for s in siblings(info, members))
