"""The fusion plan: which linalg ops share a kernel, with what tiles, and why.

A plan is a frozen value computed from `ChainInfo` (compiler/analysis.py); it never touches IR.
The tiling stage (compiler/tiling.py) reads it. Plans print (`--emit plan`), compare, and can
be given by hand (`plan_from_dict`), so tests pin groups and tiles without heuristics.

First-form rules (the cost model refines them):
- elementwise and reduction producers fuse into their consumer when every user of the
  producer is in the same kernel;
- a contraction (matmul, batched matmul, conv) fuses as the producer of an elementwise or
  reduction epilogue, at most one per kernel; nothing but its fills and pads fuses *into* a
  contraction (that would recompute the producer once per tile of the other operand);
- fills and pads always travel with their consumer (a pad is re-gathered per tile, halo included);
- a root loop is tiled only where every reduction/contraction in the kernel varies with it
  (tiling any other loop would recompute that op once per tile); a producer that would leave
  no loop to tile is not fused.
"""
from __future__ import annotations

import heapq
import os
from dataclasses import dataclass, field

from .analysis import ChainInfo, OpInfo

CHEAP = ("fill", "pad")


@dataclass(frozen=True)
class Group:
    id: int
    root: int
    ops: tuple[int, ...]                 # op ids in program order, root last
    roles: tuple[tuple[int, str], ...]   # (op id, role): root | producer | init | pad
    block_tiles: tuple[int, ...]         # per root loop; 0 = not tiled at this level
    thread_tiles: tuple[int, ...]        # per root loop (gpu only); 0 = not tiled
    mapped: tuple[int, ...]              # root loops mapped to block/thread dims, outermost first

    @property
    def serial(self) -> bool:
        return not any(self.block_tiles)

    def threads(self) -> tuple[int, ...]:
        """Threads per mapped loop, outermost first (1 each when there is no thread level)."""
        out = []
        for loop in self.mapped:
            b, t = self.block_tiles[loop], self.thread_tiles[loop] if self.thread_tiles else 0
            out.append(b // t if t else 1)
        return tuple(out)


@dataclass(frozen=True)
class FusionPlan:
    chain: str
    target: str                          # 'gpu' | 'cpu'
    fused: bool
    groups: tuple[Group, ...]
    decisions: tuple[str, ...]
    info: ChainInfo = field(compare=False, repr=False)

    @property
    def kernel_count(self) -> int:
        return len(self.groups)

    def group_of(self, op: int) -> Group:
        for g in self.groups:
            if op in g.ops:
                return g
        raise KeyError(op)

    def summary(self) -> dict:
        """The plan as plain data (for reports and artifacts)."""
        return {
            "chain": self.chain, "target": self.target, "fused": self.fused,
            "ops": sum(1 for o in self.info.ops if o.is_compute), "kernels": self.kernel_count,
            "groups": [{
                "kernel": g.id, "root": g.root, "serial": g.serial,
                "block_tiles": list(g.block_tiles), "thread_tiles": list(g.thread_tiles),
                "threads": list(g.threads()),
                "ops": [{"id": op, "label": self.info.op(op).label, "role": role,
                         "loc": _loc(self.info.op(op).loc)} for op, role in g.roles],
            } for g in self.groups],
            "decisions": list(self.decisions),
        }

    def format(self) -> str:
        n_compute = sum(1 for o in self.info.ops if o.is_compute)
        head = (f"plan {self.chain} (target {self.target}, {'fused' if self.fused else 'unfused'}): "
                f"{n_compute} compute ops -> {self.kernel_count} kernel{'s' if self.kernel_count != 1 else ''}")
        lines = [head]
        for g in self.groups:
            root = self.info.op(g.root)
            shape = "x".join(map(str, root.loops)) or "scalar"
            tiles = "serial (one thread)" if g.serial else (
                f"block tile {list(g.block_tiles)}" + (f", thread tile {list(g.thread_tiles)}, threads "
                                                      f"{list(g.threads())}" if g.thread_tiles else ""))
            lines.append(f"  kernel {g.id}: root %{g.root} {root.label} over {shape}; {tiles}")
            for op, role in g.roles:
                o = self.info.op(op)
                lines.append(f"    %{op:<3} {o.label:<34} {role:<9} {_loc(o.loc)}")
        if self.decisions:
            lines.append("  decisions:")
            lines += [f"    {d}" for d in self.decisions]
        return "\n".join(lines)


def _loc(loc: str) -> str:
    return loc.replace("loc(", "").rstrip(")").replace('"', "")


# ---- the planner -----------------------------------------------------------------------------

def plan_chain(info: ChainInfo, target: str, fuse: bool = True, cores: int | None = None) -> FusionPlan:
    """Partition a chain's ops into kernels and pick tiles for `target` ('gpu' or 'cpu')."""
    assigned: dict[int, int] = {}
    decisions: list[str] = []
    members_list: list[set[int]] = []
    claimed: set[int] = set()          # cheap ops (fills, pads) some kernel already carries
    for op in reversed(info.ops):
        if not op.is_compute or op.id in assigned or op.id in claimed:
            continue
        members = _grow(info, op, assigned, fuse, decisions, len(members_list))
        for m in members:
            if info.op(m).kind not in CHEAP:
                assigned[m] = len(members_list)
        claimed |= members
        members_list.append(members)
    groups = []
    for gid, members in enumerate(reversed(members_list)):
        root = max(m for m in members if info.op(m).is_compute)
        groups.append(_make_group(info, gid, root, members, target, cores))
    # kernel numbers follow program order; decisions were written with provisional numbers
    n = len(members_list)
    decisions = [d.replace("{K", "{").format(*[n - 1 - k for k in range(n)]) if "{" in d else d
                 for d in decisions]
    return FusionPlan(info.func, target, fuse, tuple(groups), tuple(decisions), info)


def _grow(info: ChainInfo, root: OpInfo, assigned, fuse: bool, decisions: list[str], gid: int) -> set[int]:
    members = {root.id}
    contractions = 1 if root.kind == "contraction" else 0
    heap: list[int] = []
    edges: dict[int, int] = {}                       # producer -> the consumer that proposed it

    def propose(consumer: int) -> None:
        for p in info.op(consumer).producers:
            if p is not None and p not in members and p not in edges:
                edges[p] = consumer
                heapq.heappush(heap, -p)

    propose(root.id)
    while heap:
        p = -heapq.heappop(heap)
        prod, cons = info.op(p), info.op(edges[p])
        if prod.kind in CHEAP:
            members.add(p)
            continue
        if prod.kind == "view" or p in assigned:
            continue
        who = f"%{p} {prod.label}"
        if not fuse:
            continue
        outside = [u for u in prod.users if u not in members]
        if outside:
            shown = ", ".join("the chain's result" if u == -1 else f"%{u}" for u in outside)
            decisions.append(f"not fused: {who} into kernel {{K{gid}}}: also used by {shown} "
                             f"(fusing would compute it twice)")
            continue
        if cons.kind == "contraction":
            decisions.append(f"not fused: {who} into the {cons.label} of kernel {{K{gid}}}: it would be "
                             f"recomputed for every tile of the other operand")
            continue
        if prod.kind == "contraction" and contractions:
            decisions.append(f"not fused: {who} into kernel {{K{gid}}}: one contraction per kernel")
            continue
        trial = members | {p}
        if tileable_loops(info, root.id, members) and not tileable_loops(info, root.id, trial):
            decisions.append(f"not fused: {who} into kernel {{K{gid}}}: the kernel would have no loop left "
                             f"to split across blocks (it reduces every loop of %{root.id})")
            continue
        members.add(p)
        contractions += prod.kind == "contraction"
        decisions.append(f"fused: {who} into kernel {{K{gid}}} (all its users are there)")
        propose(p)
    return members


def loop_correspondence(info: ChainInfo, root: int, members: set[int]) -> dict[int, dict[int, frozenset]]:
    """For each member op: root loop -> the member's loops that move with it."""
    corr = {root: {r: frozenset({r}) for r in range(len(info.op(root).loops))}}
    order = sorted(members, reverse=True)
    for c in order:
        if c not in corr:
            continue
        cons = info.op(c)
        for k, p in enumerate(cons.producers):
            if p is None or p not in members or p in corr or info.op(p).kind in ("pad", "view"):
                continue
            prod = info.op(p)
            if k >= len(cons.operand_loops):
                continue
            dims = cons.operand_loops[k]
            corr[p] = {r: frozenset().union(*[prod.result_loops[t] for t, d in enumerate(dims)
                                               if t < len(prod.result_loops) and d & corr[c][r]])
                       for r in corr[c]}
    return corr


def tileable_loops(info: ChainInfo, root: int, members: set[int]) -> tuple[int, ...]:
    """Root loops that can be split across blocks without recomputing a reduction or contraction."""
    r = info.op(root)
    corr = loop_correspondence(info, root, members)
    out = []
    for loop in r.parallel_loops:
        if r.loops[loop] <= 1:
            continue
        if all(corr.get(m, {}).get(loop) for m in members if info.op(m).kind in ("reduction", "contraction")):
            out.append(loop)
    return tuple(out)


def _largest_divisor(n: int, limit: int) -> int:
    for d in range(min(n, max(1, limit)), 0, -1):
        if n % d == 0:
            return d
    return 1


def _make_group(info: ChainInfo, gid: int, root: int, members: set[int], target: str, cores: int | None) -> Group:
    r = info.op(root)
    ops = tuple(sorted(members))
    roles = tuple((m, _role(info, m, root)) for m in ops)
    tile = tileable_loops(info, root, members)
    n = len(r.loops)
    block = [0] * n
    thread = [0] * n if target == "gpu" else []
    if not tile:
        return Group(gid, root, ops, roles, tuple(block), tuple(thread), ())
    if target == "cpu":
        loop = tile[0]
        chunks = 4 * (cores or os.cpu_count() or 1)
        block[loop] = _largest_divisor(r.loops[loop], max(1, -(-r.loops[loop] // chunks)))
        return Group(gid, root, ops, roles, tuple(block), (), (loop,))
    mapped = tile[-3:]
    limits = {0: 32, 1: 8, 2: 2} if r.kind != "contraction" else {0: 16, 1: 16, 2: 1}
    for depth, loop in enumerate(reversed(mapped)):
        block[loop] = _largest_divisor(r.loops[loop], limits[depth])
        thread[loop] = 1
    return Group(gid, root, ops, roles, tuple(block), tuple(thread), tuple(mapped))


def _role(info: ChainInfo, op: int, root: int) -> str:
    o = info.op(op)
    if op == root:
        return "root"
    return {"fill": "init", "pad": "pad"}.get(o.kind, "producer")


# ---- plans given by hand ---------------------------------------------------------------------

class PlanError(ValueError):
    """A hand-written plan that does not fit the chain."""


def plan_from_dict(info: ChainInfo, target: str, spec: dict) -> FusionPlan:
    """A plan from {"groups": [{"ops": [...], "block_tiles": [...], "thread_tiles": [...]}]}.
    Fills and pads may be omitted: they join the group of their consumer."""
    groups = []
    seen: set[int] = set()
    for gid, g in enumerate(spec["groups"]):
        members = set(g["ops"])
        for m in list(members):
            members |= {p for p in info.op(m).producers if p is not None and info.op(p).kind in CHEAP}
        compute = [m for m in members if info.op(m).is_compute]
        if not compute:
            raise PlanError(f"group {gid} has no compute op")
        dup = seen & set(compute)
        if dup:
            raise PlanError(f"ops {sorted(dup)} are in more than one group")
        seen |= set(compute)
        root = max(compute)
        r = info.op(root)
        block = tuple(g.get("block_tiles", [0] * len(r.loops)))
        thread = tuple(g.get("thread_tiles", [0] * len(r.loops) if target == "gpu" else []))
        if len(block) != len(r.loops) or (thread and len(thread) != len(r.loops)):
            raise PlanError(f"group {gid}: root %{root} has {len(r.loops)} loops")
        allowed = tileable_loops(info, root, members)
        bad = [i for i, t in enumerate(block) if t and i not in allowed]
        if bad:
            raise PlanError(f"group {gid}: loops {bad} of %{root} cannot be tiled (tileable: {list(allowed)})")
        mapped = tuple(i for i, t in enumerate(block) if t)
        if target == "gpu" and len(mapped) > 3:
            raise PlanError(f"group {gid}: at most 3 loops can be mapped to GPU blocks")
        groups.append(Group(gid, root, tuple(sorted(members)), tuple((m, _role(info, m, root)) for m in sorted(members)),
                            block, thread, mapped))
    missing = [o.id for o in info.ops if o.is_compute and o.id not in seen]
    if missing:
        raise PlanError(f"ops {missing} are in no group")
    groups.sort(key=lambda g: g.root)
    groups = [Group(i, g.root, g.ops, g.roles, g.block_tiles, g.thread_tiles, g.mapped) for i, g in enumerate(groups)]
    return FusionPlan(info.func, target, True, tuple(groups), ("plan given by hand",), info)
