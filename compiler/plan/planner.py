"""The planner's driver: a chain's ops partitioned into kernels, with tiles and the decisions
that say why (docs/ARCHITECTURE.md, "plan"). `plan_chain` grows one kernel per root, consumers
first (grower.py), then merges attention patterns (attention_merge.py), recomputes cheap
elementwise kernels in their readers (recompute.py) and fuses kernels horizontally
(horizontal.py); tiles are the model's pick (tilechoice.py). The result is a FusionPlan
(kernels.py); `with_costs`, `with_measured` and `with_eager_transfers` price it.
"""
from __future__ import annotations

from dataclasses import replace

from .analysis import ChainInfo, analyze, siblings, sinks, tag_ops
from .attention_merge import merge_attention
from .cost import CHEAP, Tiling, big_transfers, cpu_chunks, hoisted_matmuls, unfused_kernels
from .decisions import Decision, KernelNames, contraction_note, library_notes, template_notes
from .grower import Grower
from .hardware import HardwareProfile
from .horizontal import fuse_horizontally
from .kernels import FusionPlan, Kernel
from .measured import Measured
from .recompute import recompute
from .templates import resolved
from .tilechoice import TileChooser, group_signature
from ..errors import CompilerInternalError
from ..mlir import ir


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
    decisions: list[Decision] = []
    members_list: list[set[int]] = []     # the kernels, last first
    claimed: set[int] = set()          # cheap ops (fills, pads) some kernel already carries
    for op in reversed(info.ops):
        if not op.is_compute or op.id in assigned or op.id in claimed:
            continue
        members = Grower(info, chooser, op, assigned, fuse, decisions, len(members_list)).grow()
        for m in members:
            if info.op(m).kind not in CHEAP:
                assigned[m] = len(members_list)
        claimed |= members
        members_list.append(members)
    names = KernelNames(len(members_list))
    unwritten: list[set[int]] = [set() for _ in members_list]     # per kernel: members it computes, never writes
    if fuse:
        members_list = merge_attention(info, chooser, members_list, names, decisions, dynamic, run_time_loops or {})
        members_list, unwritten = recompute(info, chooser, members_list, names, decisions)
        if not horizontal:
            members_list, unwritten = fuse_horizontally(info, chooser, target, members_list, unwritten, names,
                                                        decisions)
        else:
            decisions.append(Decision("not fused horizontally", "", horizontal))
    groups = [make_group(info, gid, m, chooser, frozenset(u))
              for gid, (m, u) in enumerate(zip(reversed(members_list), reversed(unwritten)))]
    lines = [f"%{o.id} {o.label}: {o.note}" for o in info.ops if o.note]
    lines += [d.text(names.number) for d in decisions]       # kernels by their numbers, program order
    lines += [f"tiles of kernel {g.id}: block {list(g.block_tiles)} measured fastest (--autotune)"
              for g in groups if chooser.group_best(g).tuned]
    if target == "gpu":
        lines += [d for g in groups for d in contraction_note(info, g, chooser)]
    lines += template_notes(info, groups, chooser.hw)
    if target == "cpu":
        lines += library_notes(info, groups)
    return with_costs(FusionPlan(info.func, target, fuse, tuple(groups), tuple(lines), info), chooser)


def with_costs(plan: FusionPlan, chooser: TileChooser) -> FusionPlan:
    """The plan with the model's numbers: each kernel's cost and candidates, the unfused
    baseline, the big transfers and the profile's roofline."""
    info = plan.info
    costs = tuple(chooser.group_cost(g) for g in plan.kernels)
    cands = tuple(chooser.group_best(g).candidates for g in plan.kernels)
    singles = list(dict.fromkeys(k for g in plan.kernels for k in unfused_kernels(info, g.ops)))  # an op recomputed: once
    baseline = tuple(chooser.best(k).cost for k in sorted(singles, key=max))
    transfers = (("unfused", big_transfers(info, singles)),
                 ("fused", big_transfers(info, [g.ops for g in plan.kernels], unwritten=[g.recomputed for g in plan.kernels])))
    hw = chooser.hw
    roof = (("bandwidth", hw.bandwidth), ("peak_flops", hw.peak_flops), ("cache_bandwidth", hw.cache_bandwidth),
            ("l2_bytes", hw.l2_bytes))
    return replace(plan, hardware=hw.name, roof=roof, costs=costs, baseline=baseline, candidates=cands,
                   transfers=transfers)


def with_measured(plan: FusionPlan, hw: HardwareProfile, measured: dict[int, Measured]) -> FusionPlan:
    """The plan priced again with the kernel report's measured resources for the groups in
    `measured` (group id -> Measured); the tiles and the decisions stay the model's."""
    chooser = TileChooser(plan.info, plan.target, hw)
    costs = tuple(chooser.group_cost(g, measured[g.id]) if g.id in measured else c
                  for g, c in zip(plan.kernels, plan.costs))
    return replace(plan, costs=costs, measured=tuple(sorted(measured.items())))


def make_group(info: ChainInfo, gid: int, members: set[int], chooser: TileChooser,
               unwritten: frozenset = frozenset()) -> Kernel:
    """Kernel `gid` of `members` at the model's tiling (`unwritten`: members it does not write)."""
    root = max(m for m in members if info.op(m).is_compute)
    ops = tuple(sorted(members))
    roles = tuple((m, role(info, m, root, members, unwritten)) for m in ops)
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
    return Kernel(id=gid, root=root, ops=ops, roles=roles, block_tiles=t.block, thread_tiles=t.thread, mapped=t.mapped,
                 config=resolved(info, members, root, t, chooser.hw, chooser.target),
                 recomputed=tuple(sorted(unwritten)), siblings=siblings(info, members),
                 whole_calls=whole_calls(info, members, root, t, chooser.hw) if chooser.target == "cpu" else ())


def whole_calls(info: ChainInfo, members, root: int, t: Tiling, hw: HardwareProfile) -> tuple[int, ...]:
    """The matmuls a cpu kernel calls whole before its chunk loop at tiling t (cost.hoisted_matmuls)."""
    chunks = cpu_chunks(info, root, t.block, t.mapped)
    return tuple(hoisted_matmuls(info, members, root, t.mapped, chunks, hw.units))


def role(info: ChainInfo, op: int, root: int, members=(), unwritten=frozenset()) -> str:
    """An op's role in the kernel of `members`: root, sibling, recomputed, written, producer, init, pad."""
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
            eager = analyze(module, plan.target)[plan.chain]
    except (CompilerInternalError, KeyError, ValueError):
        return plan
    kernels = unfused_kernels(eager, [o.id for o in eager.ops])
    return replace(plan, transfers=(("eager", big_transfers(eager, kernels)),) + plan.transfers)


def signatures(plan: FusionPlan) -> list[str]:
    """Each group's signature (the autotuning cache key, with shapes, without op numbering)."""
    return [group_signature(plan.info, g.ops) for g in plan.kernels]
