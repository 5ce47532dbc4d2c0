"""The fusion plan: which linalg ops share a kernel, with what tiles, and why.

A plan is a frozen value computed from `ChainInfo` (analysis.py) and a hardware profile
(hardware.py); it never touches IR. The tiling stage (compiler/transforms/tile_and_fuse.py)
reads it. Plans print (`--emit plan`), compare, and can be given by hand (handplan.py:
`plan_from_dict`), so tests pin groups and tiles without the model. Each kernel's template is
one config (templates.py).

The planner grows one kernel per root, consumers first. A producer joins a kernel when the
cost model (cost.py) predicts the kernel with it faster than the kernel without it
plus the producer as a kernel of its own; the decision keeps the decisive numbers (bytes
saved, recomputation, spills, the time difference). Structural limits come first, each one
guard:
- fills and pads always travel with their consumer (a pad is re-gathered per tile);
- a producer with users outside the kernel joins it only as a second output the kernel writes
  (a reduction; a returned elementwise result on the cpu and in a GPU row kernel) when those
  users run after the kernel; an elementwise op whose users are all in other kernels is instead
  weighed once every kernel is grown (`_recompute`): each of them may compute it, and nothing
  writes it (Group.recomputed). An op may so be in several kernels;
- one contraction per kernel;
- the partials of a two-stage reduction (split-reductions) stay a kernel of their own;
- a producer that would leave the kernel no loop to split across blocks is not fused.
Last, horizontal fusion (`_horizontal`) merges two grown kernels that read the same tensor or
one of which reads the other, when the model predicts the one faster than the two; the earlier
kernel's last op becomes a sibling of the later root (Group.siblings), tiled alike.
Tiles are the model's pick among candidates (tilechoice.py).
"""
from __future__ import annotations

import heapq
import re
from dataclasses import asdict, dataclass, field, replace

from .attention import Attention, attention_kernel, find_attention
from .analysis import ChainInfo, OpInfo, analyze, sibling_tiles, siblings, sinks, tag_ops, tileable_loops
from .hardware import HardwareProfile
from .measured import Measured
from .describe import bytes_text, format_plan, time_text
from .cost import (KernelCost, Tiling, big_transfers, cpu_chunks, hoistable_matmuls, hoisted_matmuls, op_flops,
                   total_time, unfused_kernels, with_cheap_producers)
from .gemm import gemm_kernel, gemm_shape, mma_error
from .conv import choose as choose_conv
from .tilechoice import TileChooser, group_signature
from .templates import (AttentionConfig, Config, ContractionConfig, ConvConfig, ElementwiseConfig, candidate_fields,
                        resolved, summary_fields)
from ..dynamic import taken_at_run_time
from ..errors import CompilerInternalError
from ..mlir import ir

CHEAP = ("fill", "pad")


@dataclass(frozen=True, kw_only=True)
class Group:
    id: int
    root: int
    ops: tuple[int, ...]                 # op ids in program order, root last
    roles: tuple[tuple[int, str], ...]   # (op id, role): root | producer | init | pad
    block_tiles: tuple[int, ...]         # per root loop; 0 = not tiled at this level
    thread_tiles: tuple[int, ...]        # per root loop (gpu only); 0 = not tiled
    mapped: tuple[int, ...]              # root loops mapped to block/thread dims, outermost first
    config: Config = ElementwiseConfig()  # the template that writes the kernel, and its levels (plan/templates.py)
    # members the kernel computes for itself only: other kernels compute them too, or one writes
    # them. The kernel writes its root and every other member used outside it or returned.
    recomputed: tuple[int, ...] = ()
    # other ops no member reads (horizontal fusion): the kernel writes them too, each tiled with
    # the root's tiles over the loops of its position (analysis.sibling_tiles)
    siblings: tuple[int, ...] = ()
    whole_calls: tuple[int, ...] = ()    # cpu: matmuls called once, whole, before the chunk loop (cost.hoisted_matmuls)

    @property
    def template(self) -> str:
        return self.config.name

    @property
    def serial(self) -> bool:
        """One thread does it all (no loop split across blocks, no row split across threads)."""
        return not any(self.block_tiles) and not self.config.parallel

    def threads(self) -> tuple[int, ...]:
        """Threads per mapped loop, outermost first (1 each when there is no thread level), then
        the row threads of a row kernel."""
        return self.config.mapped_threads(self.block_tiles, self.thread_tiles, self.mapped)

    @property
    def tiling(self) -> Tiling:
        return Tiling(self.block_tiles, self.thread_tiles, self.mapped, self.config.searched())


@dataclass(frozen=True)
class FusionPlan:
    chain: str
    target: str                          # 'gpu' | 'cpu'
    fused: bool
    groups: tuple[Group, ...]
    decisions: tuple[str, ...]
    info: ChainInfo = field(compare=False, repr=False)
    hardware: str = field(default="", compare=False)
    roof: tuple[tuple[str, float], ...] = field(default=(), compare=False)           # the profile's roofline
    costs: tuple[KernelCost, ...] = field(default=(), compare=False, repr=False)      # per group
    baseline: tuple[KernelCost, ...] = field(default=(), compare=False, repr=False)   # unfused kernels
    candidates: tuple[tuple[tuple[Tiling, float], ...], ...] = field(default=(), compare=False, repr=False)
    transfers: tuple[tuple[str, int], ...] = field(default=(), compare=False)        # big tensors moved
    measured: tuple[tuple[int, Measured], ...] = field(default=(), compare=False)    # group -> kernel report
    dynamic: tuple[tuple[str, int], ...] = ()      # symbols taken at run time -> the extent planned for

    @property
    def kernel_count(self) -> int:
        return len(self.groups)

    @property
    def predicted_s(self) -> float:
        return total_time(self.costs)

    @property
    def predicted_unfused_s(self) -> float:
        return total_time(self.baseline)

    def group_of(self, op: int) -> Group:
        for g in self.groups:
            if op in g.ops:
                return g
        raise KeyError(op)

    def summary(self) -> dict:
        """The plan as plain data (for reports and artifacts)."""
        out = {
            "chain": self.chain, "target": self.target, "fused": self.fused,
            "ops": sum(1 for o in self.info.ops if o.is_compute), "kernels": self.kernel_count,
            "groups": [{
                "kernel": g.id, "root": g.root, "serial": g.serial, "loops": list(self.info.op(g.root).loops),
                "block_tiles": list(g.block_tiles), "thread_tiles": list(g.thread_tiles),
                "threads": list(g.threads()), "row_threads": f["row_threads"], "gemm": f["gemm"],
                "tensor_cores": f["tensor_cores"], "double_buffered": f["double_buffered"], "attention": f["attention"],
                "recomputed": list(g.recomputed), "siblings": list(g.siblings), "scan": f["scan"],
                "scan_axis": self.info.op(g.root).scan_axis, "conv": f["conv"],
                "ops": [{"id": op, "label": self.info.op(op).label, "role": role,
                         "loc": _loc(self.info.op(op).loc)} for op, role in g.roles],
            } for g, f in ((g, summary_fields(g.config)) for g in self.groups)],
            "decisions": list(self.decisions),
        }
        if self.dynamic:
            out["dynamic"] = dict(self.dynamic)
        if self.costs:
            measured = dict(self.measured)
            for g, c, cands in zip(out["groups"], self.costs, self.candidates or [()] * len(self.costs)):
                g["cost"] = c.as_dict()
                if g["kernel"] in measured:
                    g["measured"] = asdict(measured[g["kernel"]])
                g["candidates"] = [{"block_tiles": list(t.block), "thread_tiles": list(t.thread),
                                    **candidate_fields(t.config), "predicted_s": s} for t, s in cands[:5]]
            out["model"] = {
                "hardware": self.hardware, "roof": dict(self.roof), "predicted_s": self.predicted_s,
                "unfused_predicted_s": self.predicted_unfused_s,
                "predicted_speedup": self.predicted_unfused_s / max(self.predicted_s, 1e-30),
                "launches": len(self.costs), "unfused_launches": len(self.baseline),
                "unfused_kernels": [c.as_dict() for c in self.baseline],
                "rejected": [d for d in self.decisions if d.startswith("not fused")],
                "big_transfers": dict(self.transfers),
            }
        return out

    def format(self) -> str:
        """--emit plan (compiler/plan/describe.py prints it from the summary)."""
        return format_plan(self.summary())


def _loc(loc: str) -> str:
    return loc.replace("loc(", "").rstrip(")").replace('"', "")


# ---- the planner -----------------------------------------------------------------------------

def plan_chain(info: ChainInfo, target: str, *, hw: HardwareProfile, fuse: bool = True, cores: int | None = None,
               tuned: dict | None = None, dynamic: tuple[str, ...] = (),
               run_time_loops: dict[int, frozenset[int]] | None = None, horizontal: str = "") -> FusionPlan:
    """Partition a chain's ops into kernels and pick tiles for `target` ('gpu' or 'cpu') on `hw`.
    `horizontal`: why no kernels are fused horizontally ("": they may be).
    `tuned` maps group signatures to measured tiles. `dynamic`: symbols the build takes at run
    time, and `run_time_loops` each op's loops whose extent they are (no attention template
    over run-time queries, keys or head dims: it is laid out for static ones)."""
    if cores and hw.kind == "cpu":
        hw = replace(hw, units=cores)
    chooser = TileChooser(info, target, hw, tuned, run_time_loops if target == "gpu" else None)
    assigned: dict[int, int] = {}
    decisions: list[str] = []
    members_list: list[set[int]] = []
    claimed: set[int] = set()          # cheap ops (fills, pads) some kernel already carries
    for op in reversed(info.ops):
        if not op.is_compute or op.id in assigned or op.id in claimed:
            continue
        members = _Grower(info, chooser, op, assigned, fuse, decisions, len(members_list)).grow()
        for m in members:
            if info.op(m).kind not in CHEAP:
                assigned[m] = len(members_list)
        claimed |= members
        members_list.append(members)
    unwritten: list[set[int]] = [set() for _ in members_list]     # per kernel: members it computes, never writes
    if fuse:
        members_list = _attention_kernels(info, chooser, members_list, decisions, dynamic, run_time_loops or {})
        members_list, unwritten = _recompute(info, chooser, members_list, decisions)
        if not horizontal:
            members_list, unwritten = _horizontal(info, chooser, target, members_list, unwritten, decisions)
        else:
            decisions.append(f"not fused horizontally: {horizontal}")
    # kernel numbers follow program order; decisions were written with provisional numbers
    n = len(members_list)
    decisions = [d.replace("{K", "{").format(*[n - 1 - k for k in range(n)]) if "{" in d else d
                 for d in decisions]
    groups = [_make_group(info, gid, m, chooser, frozenset(u))
              for gid, (m, u) in enumerate(zip(reversed(members_list), reversed(unwritten)))]
    decisions = [f"%{o.id} {o.label}: {o.note}" for o in info.ops if o.note] + decisions
    decisions += [f"tiles of kernel {g.id}: block {list(g.block_tiles)} measured fastest (--autotune)"
                  for g in groups if _best(chooser, g).tuned]
    if target == "gpu":
        decisions += [d for g in groups for d in _contraction_note(info, g, chooser)]
    decisions += _conv_notes(info, groups, chooser.hw)
    if target == "cpu":
        decisions += _library_notes(info, groups)
    return _with_costs(FusionPlan(info.func, target, fuse, tuple(groups), tuple(decisions), info), chooser)


def _renumber(decisions: list[str], new_index: dict[int, int]) -> None:
    """Decisions name kernels by provisional position ({K3}); kernels merged or dropped renumber them."""
    decisions[:] = [re.sub(r"\{K(\d+)\}", lambda mt: "{K%d}" % new_index[int(mt.group(1))], d) for d in decisions]


def _cost(chooser: TileChooser, g: "Group", measured: Measured | None = None) -> KernelCost:
    """A group's cost at its tiling, priced with the members it does not write."""
    with chooser.writing_none_of(g.recomputed):
        return chooser.cost(g.ops, g.tiling, measured)


def _best(chooser: TileChooser, g: "Group"):
    """A group's tiling choice, priced with the members it does not write."""
    with chooser.writing_none_of(g.recomputed):
        return chooser.best(frozenset(g.ops))


def _recompute(info: ChainInfo, chooser: TileChooser, members_list: list[set[int]],
               decisions: list[str]) -> tuple[list[set[int]], list[set[int]]]:
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
            where = ", ".join(f"{{K{j}}}" for j in users)
            if delta >= 0:
                decisions.append(f"not recomputed: %{p.id} {p.label} in kernels {where}: computing it in each costs "
                                 f"{_signed(added)}, its own kernel {time_text(saved.time_s)}")
                continue
            decisions.append(f"recomputed: %{p.id} {p.label} in kernels {where}, never written: saves its kernel "
                             f"({bytes_text(p.result_bytes)} written, a launch) for {_signed(added)} there; "
                             f"{_signed(delta)}")
            for j in users:
                members_list[j] = members_list[j] | alone
                unwritten[j] = unwritten[j] | {p.id}
            new_index = {j: (j if j < k else j - 1) for j in range(len(members_list)) if j != k}
            new_index[k] = new_index[users[0]]
            _renumber(decisions, new_index)
            del members_list[k]
            del unwritten[k]
            done = False
            break
    return members_list, unwritten


HORIZONTAL_TRIES = 4      # earlier kernels each kernel is weighed with (the nearest that share a read)
HORIZONTAL_WINDOW = 16    # how far back it looks for them


def _horizontal(info: ChainInfo, chooser: TileChooser, target: str, members_list: list[set[int]],
                unwritten: list[set[int]], decisions: list[str]) -> tuple[list[set[int]], list[set[int]]]:
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

    said: set[str] = set()

    def note(d: str) -> None:                      # a kernel that took one in is weighed again: say a thing once
        if d not in said:
            said.add(d)
            decisions.append(d)

    roots = [max(x for x in m if info.op(x).is_compute) for m in members_list]
    keys = [reads(m) for m in members_list]
    b = 0
    while b < len(members_list):                     # the later kernel (members_list runs last first)
        a = _horizontal_partner(info, chooser, target, members_list, unwritten, roots, keys, b, note)
        if a is None:
            b += 1
            continue
        union = members_list[a] | members_list[b]
        # the grower's refusals of these ops for these two kernels no longer hold
        stale = tuple(f"not fused: %{x} " for x in union)
        decisions[:] = [d for d in decisions if not (d.startswith(stale) and ("{K%d}" % a in d or "{K%d}" % b in d))]
        inside = tuple(f"fused: %{x} " for x in union if all(u in union for u in info.op(x).users))
        decisions[:] = [re.sub(r", which also writes it for [^:]*:", ":", d) if d.startswith(inside) else d
                        for d in decisions]
        members_list[b] = union
        new_index = {j: (j if j < a else j - 1) for j in range(len(members_list)) if j != a}
        new_index[a] = new_index[b]
        _renumber(decisions, new_index)
        for lst in (members_list, unwritten, roots, keys):
            del lst[a]
        keys[b] = reads(union)                       # and b may take another earlier kernel
    return members_list, unwritten


def _horizontal_partner(info: ChainInfo, chooser: TileChooser, target: str, members_list, unwritten, roots, keys,
                        b: int, note) -> int | None:
    """The earlier kernel (index) that kernel `b` takes in, by horizontal fusion; None if none
    pays. Weighs the nearest HORIZONTAL_TRIES earlier kernels that share a read with it or feed
    it, within HORIZONTAL_WINDOW kernels."""
    def plain(m) -> bool:
        return not any(info.op(x).kind in ("contraction", "pad") or info.op(x).scan for x in m)

    if unwritten[b]:
        return None
    mb, tried = members_list[b], 0
    refused: list[str] = []              # the nearest refusal is said (one line per kernel, not per pair)
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
                refused.append(f"not fused horizontally: {pair}: {what} kernel has one root")
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
            continue                                # the grower's refusal (_Grower._shared_init) holds
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
            refused.append(f"not fused horizontally: {pair}: predicted {time_text(merged.cost.time_s)} as one, "
                           f"{time_text(apart)} apart")
            continue
        note(f"fused horizontally: {pair}, into kernel {{K{b}}}: one launch, predicted "
             f"{time_text(merged.cost.time_s)} against {time_text(apart)} apart")
        return a
    if refused:
        note(refused[0])
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


def second_output_error(prod: OpInfo, target: str, row: bool = False) -> str | None:
    """What tile-and-fuse and the emitter carry through as a kernel's second output: a reduction
    (its value goes out once per row), an elementwise result on the cpu, and on the gpu one in a
    row kernel (`row`: split_rows gives it a phase that stores it). Why not, for `prod`; None
    when it can be. (The thread level of other GPU kernels cannot store an elementwise value
    for the outside.)"""
    if prod.kind == "elementwise" and target == "gpu" and not row:
        return "on the gpu a kernel writes a second elementwise output only when it is a row kernel"
    if prod.kind not in ("elementwise", "reduction"):
        return f"a {prod.kind} is written by a kernel of its own"
    return None


def _needs_writing(info: ChainInfo, op: int, kernels: list[set[int]]) -> bool:
    """Whether some use of `op` reads it from memory: it is returned, or a kernel computes one of
    its users without computing it."""
    for u in info.op(op).users:
        holding = [k for k in kernels if u in k]
        if u == -1 or not holding or any(op not in k for k in holding):     # returned, read through a view, or read
            return True
    return False


def _check_writers(info: ChainInfo, groups: list[Group], target: str) -> None:
    """A hand plan's ops are written where they are read from memory, once, and before that: a
    group writes its root and its other members used outside it, but for its `recomputed` ones."""
    kernels = [set(g.ops) for g in groups]
    for o in info.ops:
        if not o.is_compute or o.kind in CHEAP:
            continue
        writers = [g for g in groups if o.id in g.ops and o.id not in g.recomputed and
                   (o.id == g.root or any(u == -1 or u not in g.ops for u in o.users))]
        if len(writers) > 1:
            raise PlanError(f"op {o.id} is written by groups {[g.id for g in writers]}: list it under \"recomputed\" "
                            "in all but one")
        if not writers and _needs_writing(info, o.id, kernels):
            raise PlanError(f"ops [{o.id}] are read outside the groups that compute them, but no group writes them "
                            "(a group writes its root and its other members used outside it, but its \"recomputed\" ones)")
        if writers and writers[0].root != o.id:
            g = writers[0]
            if any(info.op(m).kind == "contraction" for m in g.ops) or g.config.one_root:
                raise PlanError(f"group {g.id}: a contraction kernel writes its root only, not op {o.id}")
            early = [u for u in o.users if u != -1 and u not in g.ops and u < g.root]
            if early:
                raise PlanError(f"group {g.id} writes op {o.id} after op {early[0]} reads it (groups run in the "
                                "order of their roots)")
            if o.id in g.siblings:
                if not any(g.block_tiles):
                    raise PlanError(f"group {g.id}: op {o.id} is a second root (no member reads it): a kernel with "
                                    "several roots tiles them alike, so it needs block tiles")
                continue
            why = second_output_error(o, target, g.config.row_outputs)
            if why:
                raise PlanError(f"group {g.id} cannot write op {o.id} besides its root: {why}")


# the matcher's answers that only say "this is not attention at all" (not worth a decision line)
_NOT_ATTENTION = ("not a contraction", "its body is not a multiply-add", "no operand is a division",
                  "its body divides", "its body multiplies", "the divisor is not a sum reduction",
                  "the numerator is not")


def _attention_kernels(info: ChainInfo, chooser: TileChooser, members_list: list[set[int]],
                       decisions: list[str], dynamic: tuple[str, ...] = (),
                       run_time_loops: dict[int, frozenset[int]] | None = None) -> list[set[int]]:
    """Merge the kernels an attention pattern spans (plan/attention.py) into one online-softmax
    kernel when the model predicts it faster than the kernels the greedy planner made. Not over
    queries, keys or a head dim taken at run time (`run_time_loops`): the template is laid out
    for static ones (a run-time batch is fine)."""
    for op in reversed(info.ops):
        if op.kind != "contraction":
            continue
        a = find_attention(info, op.id)
        if isinstance(a, str):
            if not a.startswith(_NOT_ATTENTION):
                decisions.append(f"not attention: %{op.id} {op.label}: {a}")
            continue
        if (run_time_loops or {}).get(a.scores, frozenset()) & {a.q_loop, a.k_loop, a.d_loop}:
            decisions.append(f"not attention: %{a.scores}..%{a.out}: the online-softmax template is laid out for "
                             f"static queries, keys and head dims, and {taken_at_run_time(dynamic)}")
            continue
        touched = [k for k, m in enumerate(members_list) if m & set(a.ops)]
        union = set().union(*[members_list[k] for k in touched]) | set(a.ops)
        # kernels of elementwise ops that only feed this one (K's transpose, a scaled Q, a mask
        # computed in the chain): the template evaluates them in its loaders instead
        grew = True
        while grew:
            grew = False
            for k, m in enumerate(members_list):
                if k in touched or not all(info.op(x).kind in ("elementwise", "fill", "view") for x in m):
                    continue
                users = [u for x in m for u in info.op(x).users]     # -1 (a result) is in neither
                if all(u in union or u in m for u in users) and any(u in union for u in users):
                    touched.append(k)
                    union |= m
                    grew = True
        kernel = attention_kernel(info, union, chooser.target)
        where = f"%{a.scores}..%{a.out}"
        if isinstance(kernel, str):
            decisions.append(f"not attention: {where}: {kernel}")
            continue
        choice = chooser.best(frozenset(union))
        if not isinstance(choice.tiling.config, AttentionConfig):
            decisions.append(f"not attention: {where}: no tile fits the device's shared memory "
                             f"(head dims {a.d} and {a.dv})")
            continue
        apart = sum(chooser.best(frozenset(members_list[k])).cost.time_s for k in touched)
        fused = choice.cost.time_s
        bq, bkv = choice.tiling.config.block_q, choice.tiling.config.block_kv
        score = info.op(a.scores).result_bytes
        if fused >= apart:
            decisions.append(f"not attention: {where}: predicted {time_text(fused)} as one online-softmax kernel "
                             f"against {time_text(apart)} in {len(touched)} kernels")
            continue
        decisions.append(f"attention: {where} as one online-softmax kernel ({bq} queries per block, keys in steps "
                         f"of {bkv}; the {bytes_text(score)} of scores never reach memory): predicted "
                         f"{time_text(fused)} against {time_text(apart)} in {len(touched)} kernels")
        first = min(touched)
        new_index, n = {}, 0               # decisions name kernels by position: the merged ones are `first`
        for k in range(len(members_list)):
            if k in touched and k != first:      # k > first: new_index[first] is set
                new_index[k] = new_index[first]
            else:
                new_index[k] = n
                n += 1
        _renumber(decisions, new_index)
        members_list = [union if k == first else m for k, m in enumerate(members_list) if k == first or k not in touched]
    return members_list


def _contraction_note(info: ChainInfo, g: Group, chooser: TileChooser) -> list[str]:
    """How a GPU kernel's contraction is computed and why: a tiled contraction (plan/gemm.py;
    for a conv, implicit GEMM) or a dot product per output (direct), with both predictions."""
    cs = [m for m in g.ops if info.op(m).kind == "contraction"]
    if len(cs) != 1:
        return []
    c = info.op(cs[0])
    conv = c.name == "linalg.conv_2d_nchw_fchw"
    tiled_name = "implicit GEMM" if conv else "tiled contraction"
    direct_name = "direct convolution" if conv else "a dot product per output"
    choice = _best(chooser, g)
    gk = gemm_kernel(info, g.ops, g.root)
    if isinstance(gk, str):
        return [f"kernel {g.id}: %{c.id} {c.label} as {direct_name} (not a {tiled_name}: {gk})"]
    tiled = [(t, s) for t, s in choice.candidates if isinstance(t.config, ContractionConfig)]
    direct = [(t, s) for t, s in choice.candidates if not isinstance(t.config, ContractionConfig)]
    if not tiled:
        return [f"kernel {g.id}: %{c.id} {c.label} as {direct_name} (no {tiled_name} shape fits the device)"]
    k = f"K = {gk.k}" + (" (channels x kernel window)" if conv else "")
    best_t = min(tiled, key=lambda x: x[1])[1]
    other = (f"; {direct_name} {time_text(min(s for _, s in direct))}" if direct else "")
    cfg = g.config
    if isinstance(cfg, ContractionConfig):
        if cfg.mma:
            how = f", on {cfg.mma} tensor cores (mma.sync)"
        elif c.operand_dtypes[:2] == ("f16", "f16"):
            why = mma_error(info, gk, gemm_shape(info, gk, g.root, g.block_tiles, cfg.steps), chooser.hw)
            how = f", on FMAs, not tensor cores: {why}"
        else:
            how = ""
        if cfg.prefetch:
            how += ", double-buffered (the next K step loaded into registers while this one computes)"
        return [f"kernel {g.id}: %{c.id} {c.label} as {tiled_name}, {k} in steps of {cfg.bk} through "
                f"shared memory, {cfg.tm}x{cfg.tn} outputs per thread{how}: predicted "
                f"{time_text(choice.cost.time_s)}{other}"]
    return [f"kernel {g.id}: %{c.id} {c.label} as {direct_name}: predicted {time_text(choice.cost.time_s)}; "
            f"{tiled_name} {time_text(best_t)}"]


def _conv_notes(info: ChainInfo, groups, hw: HardwareProfile, given=frozenset()) -> list[str]:
    """How each cpu kernel's conv is computed and why (plan/conv.py), with every algorithm's
    prediction; `given`: the roots of kernels whose algorithm a hand plan gave."""
    out = []
    for g in groups:
        if isinstance(g.config, ConvConfig):
            forced = g.config.algorithm if g.root in given else ""
            choice = choose_conv(info, g.ops, g.root, g.block_tiles, g.mapped, hw, forced)
            out.append(f"kernel {g.id}: {choice.reason()}")
    return out


def _library_notes(info: ChainInfo, groups) -> list[str]:
    """Where each cpu kernel's BLAS products run and where their epilogue runs
    (transforms/cpu_library_calls.py); a kernel without a chunk loop says nothing."""
    out = []
    for g in groups:
        if not g.mapped:
            continue
        hoistable = set(hoistable_matmuls(info, g.ops, g.root, g.mapped))
        chunks = cpu_chunks(info, g.root, g.block_tiles, g.mapped)
        for m in g.ops:
            o = info.op(m)
            if o.name not in ("linalg.matmul", "linalg.batch_matmul") or o.operand_dtypes[:1] not in (("f32",), ("f64",)):
                continue
            if m in g.whole_calls:
                out.append(f"kernel {g.id}: %{m} {o.label}: one BLAS call for the whole product before the chunk "
                           f"loop, on BLAS's own threads, then the rest of the kernel on each chunk (the loop has "
                           f"{chunks} chunk{'s' if chunks != 1 else ''}, fewer than the cores: calls per chunk would "
                           "leave cores idle)")
            else:
                why = (" (not one whole call before the loop, followed by the loop: BLAS's and Numba's thread "
                       "pools then spin on the same cores while the other works, measured 1.3-1.6x slower; "
                       "python -m bench.blas_epilogue)") if m in hoistable else ""
                out.append(f"kernel {g.id}: %{m} {o.label}: one BLAS call per chunk ({chunks} chunks), on one "
                           f"thread per worker, then the rest of the kernel on that chunk while it is in cache{why}")
    return out


def _with_costs(plan: FusionPlan, chooser: TileChooser) -> FusionPlan:
    info = plan.info
    costs = tuple(_cost(chooser, g) for g in plan.groups)
    cands = tuple(_best(chooser, g).candidates for g in plan.groups)
    singles = list(dict.fromkeys(k for g in plan.groups for k in unfused_kernels(info, g.ops)))  # an op recomputed: once
    baseline = tuple(chooser.best(k).cost for k in sorted(singles, key=max))
    transfers = (("unfused", big_transfers(info, singles)),
                 ("fused", big_transfers(info, [g.ops for g in plan.groups], unwritten=[g.recomputed for g in plan.groups])))
    hw = chooser.hw
    roof = (("bandwidth", hw.bandwidth), ("peak_flops", hw.peak_flops), ("cache_bandwidth", hw.cache_bandwidth),
            ("l2_bytes", hw.l2_bytes))
    return replace(plan, hardware=hw.name, roof=roof, costs=costs, baseline=baseline, candidates=cands,
                   transfers=transfers)


def with_measured(plan: FusionPlan, hw: HardwareProfile, measured: dict[int, Measured]) -> FusionPlan:
    """The plan priced again with the kernel report's measured resources for the groups in
    `measured` (group id -> Measured); the tiles and the decisions stay the model's."""
    chooser = TileChooser(plan.info, plan.target, hw)
    costs = tuple(_cost(chooser, g, measured[g.id]) if g.id in measured else c
                  for g, c in zip(plan.groups, plan.costs))
    return replace(plan, costs=costs, measured=tuple(sorted(measured.items())))


class _Grower:
    """Grow one kernel from its root: propose producers, largest id first; keep each that the
    model says pays for itself."""

    def __init__(self, info: ChainInfo, chooser: TileChooser, root: OpInfo, assigned, fuse: bool,
                 decisions: list[str], gid: int):
        self.info, self.chooser, self.root = info, chooser, root
        self.assigned, self.fuse, self.decisions, self.gid = assigned, fuse, decisions, gid
        self.members = set(with_cheap_producers(info, root.id))
        self.contractions = 1 if root.kind == "contraction" else 0

    def grow(self) -> set[int]:
        heap: list[int] = []
        edges: dict[int, int] = {}

        def propose(consumer: int) -> None:
            for p in self.info.op(consumer).producers:
                if p is not None and p not in self.members and p not in edges:
                    edges[p] = consumer
                    heapq.heappush(heap, -p)

        propose(self.root.id)
        while heap:
            p = -heapq.heappop(heap)
            if self._consider(self.info.op(p)):
                propose(p)
        return self.members

    def _consider(self, prod: OpInfo) -> bool:
        """Fuse `prod` if it pays; True when a compute op joined (its producers are proposed next)."""
        p, info, gid = prod.id, self.info, self.gid
        if prod.kind in CHEAP:
            self.members.add(p)
            return False
        if prod.kind == "view" and self.fuse:
            self._view_stop(prod)
            return False
        if p in self.assigned or not self.fuse:
            return False
        who = f"%{p} {prod.label}"
        outside = [u for u in prod.users if u not in self.members]
        shown = ", ".join("the chain's result" if u == -1 else f"%{u}" for u in outside)
        if outside:                          # fused, the kernel writes it too (a second output), or not at all
            why = self._second_output_error(prod, outside)
            if why:
                self.decisions.append(f"not fused: {who} into kernel {{K{gid}}}: also used by {shown} ({why})")
                return False
        if self.root.scan or prod.scan:
            what = (f"kernel {{K{gid}}} is a scan" if self.root.scan else "a scan is computed whole, by a kernel of its own")
            self.decisions.append(f"not fused: {who} into kernel {{K{gid}}}: {what} (it runs each row in order; "
                                  "elementwise producers are already part of its body)")
            return False
        gathers = sorted(m for m in self.members if p in info.op(m).indirect_ops)
        if gathers:
            self.decisions.append(f"not fused: {who} into kernel {{K{gid}}}: %{gathers[0]} reads it at computed "
                                  "indices (a gather, concat or reversed slice), so it is written first")
            return False
        if prod.kind == "contraction" and self.contractions:
            self.decisions.append(f"not fused: {who} into kernel {{K{gid}}}: one contraction per kernel")
            return False
        written = sorted(m for m in self.members if m != self.root.id and info.op(m).is_compute
                         and any(u == -1 or u not in self.members for u in info.op(m).users))
        if prod.kind == "contraction" and written:
            self.decisions.append(f"not fused: {who} into kernel {{K{gid}}}: the kernel also writes %{written[0]} for "
                                  "its users outside it, and a contraction kernel writes its root only")
            return False
        if prod.note.startswith("split-reductions"):
            self.decisions.append(f"not fused: {who} into kernel {{K{gid}}}: it is the first stage of a two-stage "
                                  f"reduction (its partials spread the work over the grid)")
            return False
        shared = self._shared_init(prod)
        if shared is not None:
            # tile-and-fuse initialises a fill shared by the root and a producer only once, for
            # the producer, and leaves the root's accumulator uninitialised (nll at B=C=64)
            self.decisions.append(f"not fused: {who} into kernel {{K{gid}}}: it shares its init %{shared} with the "
                                  f"root's accumulator, which the tiling would then leave uninitialised")
            return False
        alone = with_cheap_producers(info, p)
        trial = frozenset(self.members | alone)
        if tileable_loops(info, self.root.id, self.members) and not tileable_loops(info, self.root.id, trial):
            self.decisions.append(f"not fused: {who} into kernel {{K{gid}}}: the kernel would have no loop left "
                                  f"to split across blocks (it reduces every loop of %{self.root.id})")
            return False
        if outside and not any(self.chooser.best(trial).tiling.block):
            self.decisions.append(f"not fused: {who} into kernel {{K{gid}}}: also used by {shown} (a kernel of one "
                                  "block, untiled, writes its root only)")
            return False
        if self._no_row_kernel_to_write(trial):
            self.decisions.append(f"not fused: {who} into kernel {{K{gid}}}: the kernel would write an elementwise "
                                  "result of the chain, which on the gpu only a row kernel stores, and it would "
                                  "have no row-kernel tiling")
            return False
        fused = self.chooser.best(trial).cost
        now = self.chooser.offer(frozenset(self.members), self.chooser.best(trial).tiling).cost
        apart = self.chooser.best(alone).cost
        delta = fused.time_s - now.time_s - apart.time_s
        saved = now.bytes + apart.bytes - fused.bytes
        if delta < 0:
            self.members |= alone
            self.contractions += prod.kind == "contraction"
            also = f", which also writes it for {shown}" if outside else ""
            self.decisions.append(f"fused: {who} into kernel {{K{gid}}}{also}: saves {_saved(saved, prod)}"
                                  f" and a launch, {_signed(delta)}")
            return True
        self.decisions.append(f"not fused: {who} into kernel {{K{gid}}}: {self._reason(prod, now, apart, fused)}"
                              f" (saves {_saved(saved, prod)}; net {_signed(delta)})")
        return False

    def _no_row_kernel_to_write(self, members: frozenset) -> bool:
        """On the gpu, whether `members` would return an elementwise result besides the root
        (a second output only split_rows stores) with no row-kernel tiling among its candidates."""
        info = self.info
        if self.chooser.target != "gpu" or not any(
                m != self.root.id and info.op(m).kind == "elementwise" and -1 in info.op(m).users for m in members):
            return False
        choice = self.chooser.best(members)
        return not choice.tiling.config.row_outputs and not any(c.config.row_outputs for c, _ in choice.candidates)

    def _second_output_error(self, prod: OpInfo, outside: list[int]) -> str | None:
        """Why the kernel cannot compute `prod` and also write it for its users outside (None: it
        can). tile-and-fuse then gives the kernel's loop a second result (fuse_into_containing_op
        adds one for uses after the loop)."""
        info = self.info
        if any(info.op(m).kind == "contraction" for m in self.members) or prod.kind == "contraction":
            return "a contraction kernel writes its root only"
        if prod.kind == "elementwise" and -1 not in outside:
            return ("whether every kernel that uses it computes it is weighed once all kernels are grown")
        early = [u for u in outside if u != -1 and u < self.root.id]
        if early:
            return f"%{early[0]} runs before this kernel's root %{self.root.id}"
        row = (prod.kind == "elementwise" and self.chooser.target == "gpu" and
               self.chooser.best(frozenset(self.members | with_cheap_producers(info, prod.id))).tiling.config.row_outputs)
        return second_output_error(prod, self.chooser.target, row)

    def _view_stop(self, view: OpInfo) -> None:
        """Say why a reshape between a compute op and this kernel stops their fusion (the
        hoist-reshapes pass moves the ones it can onto their producers' inputs)."""
        src = view.producers[0]
        while src is not None and self.info.op(src).kind == "view":   # a reshape is a collapse, then an expand
            view = self.info.op(src)
            src = view.producers[0]
        if src is None or not self.info.op(src).is_compute or src in self.assigned:
            return
        prod = self.info.op(src)
        ident = tuple(frozenset({i}) for i in range(len(prod.loops)))
        reads_own_shape = all(d in (ident, ()) for d in prod.operand_loops[:prod.n_inputs])
        why = _view_reason(prod.kind, reads_own_shape, len(prod.users) > 1)
        self.decisions.append(f"not fused: %{src} {prod.label} into kernel {{K{self.gid}}}: the reshape %{view.id} "
                              f"({_loc(view.loc)}) between them stops fusion: {why}")

    def _shared_init(self, prod: OpInfo) -> int | None:
        """The fill that initialises both `prod` and the root of a tiled reduction/contraction."""
        if self.root.kind not in ("reduction", "contraction") or prod.kind not in ("reduction", "contraction"):
            return None
        inits = {p for p in self.root.producers[self.root.n_inputs:] if p is not None and self.info.op(p).kind == "fill"}
        mine = {p for p in prod.producers[prod.n_inputs:] if p is not None and self.info.op(p).kind == "fill"}
        both = inits & mine
        return min(both) if both and tileable_loops(self.info, self.root.id, self.members) else None

    def _reason(self, prod: OpInfo, now: KernelCost, apart: KernelCost, fused: KernelCost) -> str:
        hw = self.chooser.hw
        d_recompute = fused.recompute_s - now.recompute_s - apart.recompute_s
        d_spill = fused.spill_s - now.spill_s - apart.spill_s
        if d_recompute >= d_spill and d_recompute > 0:
            times = 1 + (fused.recompute_flops - now.recompute_flops) / max(op_flops(prod, hw), 1e-30)
            return f"recompute {times:.3g}x {prod.label} costs {_signed(d_recompute)}"
        if d_spill > 0:
            where = (f"{hw.onchip_per_unit // 1024} KiB of shared memory/L1 per SM" if hw.kind == "gpu"
                     else f"{hw.onchip_per_unit // 1024} KiB L2 of a core")
            per = "per thread" if hw.kind == "gpu" else "per tile"
            return (f"its on-chip intermediates ({bytes_text(fused.onchip_bytes)} {per}) overflow the {where}: "
                    f"spilling {bytes_text(fused.bytes_spilled)} costs {_signed(d_spill)}")
        return (f"predicted {time_text(fused.time_s)} fused against {time_text(now.time_s)} + {time_text(apart.time_s)} "
                f"apart ({fused.bound}-bound, occupancy {fused.occupancy:.0%})")


def _view_reason(producer_kind: str, reads_own_shape: bool, other_users: bool) -> str:
    """Why a reshape of a producer's result stays between it and its consumer (what
    transforms/hoist_reshapes.py cannot move)."""
    if producer_kind != "elementwise":
        return f"a reshape of a {producer_kind}'s result is not a view of its inputs"
    if other_users:
        return "its producer has other users (moving the reshape would compute it twice)"
    if not reads_own_shape:
        return "its producer broadcasts or transposes an input, so the reshape cannot move onto its inputs"
    return "its body reads its loop indices"


def _saved(nbytes: float, prod: OpInfo) -> str:
    size = prod.result_bytes
    k = nbytes / size if size else 0
    if size and 0.95 <= k <= 4.05 and abs(k - round(k)) < 0.05:
        return f"{round(k)}x{bytes_text(size)}"
    return bytes_text(nbytes)


def _signed(s: float) -> str:
    return ("+" if s >= 0 else "-") + time_text(abs(s))


def _make_group(info: ChainInfo, gid: int, members: set[int], chooser: TileChooser,
                unwritten: frozenset = frozenset()) -> Group:
    root = max(m for m in members if info.op(m).is_compute)
    ops = tuple(sorted(members))
    roles = tuple((m, _role(info, m, root, members, unwritten)) for m in ops)
    with chooser.writing_none_of(unwritten):
        choice = chooser.best(frozenset(members))
    t = choice.tiling
    if not any(t.block) and any(r == "written" for _, r in roles):   # a second output needs the tiled loop
        t = next(c for c, _ in choice.candidates if any(c.block))
    if (chooser.target == "gpu" and not t.config.row_outputs and
            any(r == "written" and info.op(m).kind == "elementwise" for m, r in roles)):
        t = next((c for c, _ in choice.candidates if c.config.row_outputs), None)   # split_rows stores it
        if t is None:
            raise CompilerInternalError("plan", f"kernel {gid} writes an elementwise second output but has no "
                                        "row-kernel tiling")
    return Group(id=gid, root=root, ops=ops, roles=roles, block_tiles=t.block, thread_tiles=t.thread, mapped=t.mapped,
                 config=resolved(info, members, root, t, chooser.hw, chooser.target),
                 recomputed=tuple(sorted(unwritten)), siblings=siblings(info, members),
                 whole_calls=_whole_calls(info, members, root, t, chooser.hw) if chooser.target == "cpu" else ())


def _whole_calls(info: ChainInfo, members, root: int, t: Tiling, hw: HardwareProfile) -> tuple[int, ...]:
    """The matmuls a cpu kernel calls whole before its chunk loop at tiling t (cost.hoisted_matmuls)."""
    chunks = cpu_chunks(info, root, t.block, t.mapped)
    return tuple(hoisted_matmuls(info, members, root, t.mapped, chunks, hw.units))


def _role(info: ChainInfo, op: int, root: int, members=(), unwritten=frozenset()) -> str:
    o = info.op(op)
    if op == root:
        return "root"
    if op in sinks(info, members):
        return "sibling"                      # another result, tiled with the root (horizontal fusion)
    if op in unwritten:
        return "recomputed"                   # computed here for this kernel only
    if o.is_compute and o.kind not in CHEAP and any(u == -1 or u not in members for u in o.users):
        return "written"                      # a producer whose result the kernel also writes
    return {"fill": "init", "pad": "pad"}.get(o.kind, "producer")


def with_eager_transfers(plan: FusionPlan, linalg_text: str | None, context) -> FusionPlan:
    """The plan with the intermediate-sized global reads and writes of op-by-op execution (one
    kernel per linalg op as lowered, before the graph passes merge elementwise ops): the
    baseline an eager framework has."""
    if not linalg_text:
        return plan
    try:
        module = ir.Module.parse(linalg_text, context=context)
        with context:
            tag_ops(module)
            eager = analyze(module)[plan.chain]
    except (CompilerInternalError, KeyError, ValueError):
        return plan
    kernels = unfused_kernels(eager, [o.id for o in eager.ops])
    return replace(plan, transfers=(("eager", big_transfers(eager, kernels)),) + plan.transfers)


def signatures(plan: FusionPlan) -> list[str]:
    """Each group's signature (the autotuning cache key, with shapes, without op numbering)."""
    return [group_signature(plan.info, g.ops) for g in plan.groups]


# ---- plans given by hand ---------------------------------------------------------------------

class PlanError(ValueError):
    """A hand-written plan that does not fit the chain (handplan.py reads them)."""
