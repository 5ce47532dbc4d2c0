"""Recomputation: an elementwise op computed by every kernel that reads it instead of written by
a kernel of its own, when the model says so (docs/ARCHITECTURE.md, "plan"; Kernel.recomputed).
"""
from __future__ import annotations

from .analysis import ChainInfo, tileable_loops
from .cost import CHEAP, with_cheap_producers
from .decisions import Decision, KernelNames
from .describe import bytes_text, signed_time_text, time_text
from .tilechoice import TileChooser


def recompute(info: ChainInfo, chooser: TileChooser, members_list: list[set[int]], names: KernelNames,
              decisions: list[Decision]) -> tuple[list[set[int]], list[set[int]]]:
    """An elementwise kernel of one op whose every user is in other kernels (none returns it) is
    computed by each of those kernels instead, when the model predicts their added time below the
    time of the kernel it saves (its write, its launch, the reads of its result): the op is then in
    several kernels and never written. Returns the kernels and, per kernel, the members it
    computes without writing."""
    unwritten: list[set[int]] = [set() for _ in members_list]

    def cost(members, skip):
        with chooser.writing_none_of(skip):
            return chooser.best(frozenset(members))
    done = False
    while not done:
        done = True
        for k, m in enumerate(members_list):
            compute = [x for x in m if info.op(x).is_compute and info.op(x).kind not in CHEAP]
            if len(compute) != 1 or info.op(compute[0]).kind != "elementwise" or -1 in info.op(compute[0]).users:
                continue
            p = info.op(compute[0])
            if any(p.id in o.indirect_ops for o in info.ops):
                continue                            # read at computed indices: it must be in memory
            users = [j for j, other in enumerate(members_list) if j != k and other & set(p.users)][::-1]
            # a user in one kernel is the grower's plain fusion, decided already; one in no kernel
            # (a view) reads the op from memory
            if len(users) < 2 or not all(any(u in other for other in members_list) for u in p.users):
                continue
            if any(info.op(x).scan for j in users for x in members_list[j]):
                continue                            # a scan's kernel is its template: the scan alone
            alone = with_cheap_producers(info, p.id)
            trials = [frozenset(members_list[j] | alone) for j in users]
            if any(cost(members_list[j], unwritten[j]).tiling.config.whole or
                   (tileable_loops(info, max(members_list[j]), members_list[j]) and
                    not tileable_loops(info, max(members_list[j]), set(t)))
                   for j, t in zip(users, trials)):
                continue
            added = sum(cost(t, unwritten[j] | {p.id}).cost.time_s - cost(members_list[j], unwritten[j]).cost.time_s
                        for j, t in zip(users, trials))
            saved = cost(m, unwritten[k]).cost
            delta = added - saved.time_s
            kernels = tuple(names[j] for j in users)
            numbers = (("time_s", delta), ("added_s", added), ("saved_s", saved.time_s))
            if delta >= 0:
                decisions.append(Decision("not recomputed", f"%{p.id} {p.label}", f"computing it in each costs "
                                          f"{signed_time_text(added)}, its own kernel {time_text(saved.time_s)}",
                                          (p.id,), kernels, " in kernels", numbers=numbers))
                continue
            decisions.append(Decision("recomputed", f"%{p.id} {p.label}", "saves its kernel "
                                      f"({bytes_text(p.result_bytes)} written, a launch) for {signed_time_text(added)}"
                                      f" there; {signed_time_text(delta)}", (p.id,), kernels, " in kernels",
                                      ", never written", numbers))
            for j in users:
                members_list[j] = members_list[j] | alone
                unwritten[j] = unwritten[j] | {p.id}
            names.merged(k, users[0])
            del members_list[k]
            del unwritten[k]
            done = False
            break
    return members_list, unwritten

