"""Plans given by hand, both ways: a plan's groups as the plan JSON's groups (`to_spec`, what a
fallback build or a user's `--plan` file gives) and a plan from them (`plan_from_dict`), so that
`plan_from_dict(info, target, to_spec(plan), hw=hw).kernels == plan.kernels` for every template.
A group's template is written as the JSON fields it has always had ("row_threads", "gemm" with
"double_buffered", "attention", "conv"; a scan's threads are the model's), as is a plan
summary's group (templates.py: summary_fields). See docs/ARCHITECTURE.md, "GPU kernels: how a
plan becomes CUDA".
"""
from __future__ import annotations

from dataclasses import replace

from .analysis import ChainInfo, siblings, tileable_loops
from .attention import THREADS_X, THREADS_Y, NotAttention, attention_kernel
from .attention_mma import mma_attention_error
from .conv import library_conv, not_applicable as conv_not_applicable, op_shape as conv_op_shape
from .cost import CHEAP, Tiling
from .decisions import library_notes, template_notes
from .gemm import gemm_tiling_error
from .grower import second_output_error
from .hardware import HardwareProfile
from .kernels import FusionPlan, Kernel, PlanError
from .planner import role, whole_calls, with_costs
from .rows import RUN, row_layout, row_tiling_error
from .templates import (AttentionConfig, Config, ContractionConfig, ConvConfig, ElementwiseConfig, RowConfig,
                        resolved)
from .tilechoice import TileChooser

__all__ = ["PlanError", "group_spec", "plan_from_dict", "to_spec"]


def group_spec(group: dict, ops: list[int] | None = None) -> dict:
    """A hand plan's group from a plan summary's group (`FusionPlan.summary()`): its ops (all
    but the inits, or `ops`), its tiles and its template's fields."""
    spec = {"ops": ops if ops is not None else [o["id"] for o in group["ops"] if o["role"] != "init"],
            "block_tiles": list(group["block_tiles"]), "thread_tiles": list(group["thread_tiles"])}
    if group.get("row_threads"):
        spec["row_threads"] = group["row_threads"]
        if group.get("row_columns"):
            spec["row_columns"] = True
    if group.get("gemm"):
        spec["gemm"] = list(group["gemm"])
        if group.get("double_buffered"):
            spec["double_buffered"] = True      # (tensor cores follow from the dtypes and the profile)
        if group.get("stages"):
            spec["stages"] = group["stages"]
    if group.get("attention"):
        spec["attention"] = list(group["attention"])
        spec["tensor_cores"] = group.get("tensor_cores", "")     # "": on FMAs where tensor cores would apply
    if group.get("conv"):
        spec["conv"] = group["conv"]
    if group.get("recomputed"):
        spec["recomputed"] = list(group["recomputed"])
    return spec                                 # (a scan's threads are the model's: they are not given)


def to_spec(plan: FusionPlan | dict) -> dict:
    """A plan (or its summary) as a hand plan: {"groups": [...]}, one group_spec per kernel."""
    summary = plan.summary() if isinstance(plan, FusionPlan) else plan
    return {"groups": [group_spec(g) for g in summary["groups"]]}


def _config(row_threads: int, gemm: tuple[int, ...], att: tuple[int, ...], scan: Config | None, conv: str,
            columns: bool = False, runs: int = 0, att_mma: str = "") -> Config:
    """A checked hand plan group's template fields as its config (plan/templates.py)."""
    if scan is not None:
        return scan
    if att:
        return AttentionConfig(block_q=att[0], block_kv=att[1], mma=att_mma)
    if gemm:
        return ContractionConfig(bk=gemm[0], tm=gemm[1], tn=gemm[2], prefetch=len(gemm) > 3 and bool(gemm[3]),
                                 stages=gemm[4] if len(gemm) > 4 else 0)
    if row_threads:
        return RowConfig(threads=row_threads, columns=columns, runs=runs)
    if conv:
        return ConvConfig(algorithm=conv)
    return ElementwiseConfig()


def plan_from_dict(info: ChainInfo, target: str, spec: dict, *, hw: HardwareProfile) -> FusionPlan:
    """A plan from {"groups": [{"ops": [...], "block_tiles": [...], "thread_tiles": [...],
    "row_threads": T, "gemm": [bk, tm, tn], "double_buffered": false}]} (row_threads: a gpu row
    kernel's threads per row, plan/rows.py, with "row_runs" 1 or 4 to force its layout, else
    derived: plan/rows.py: row_layout; gemm: a gpu contraction kernel's K step and register
    tile, plan/gemm.py; double_buffered: its K loop prefetches the next step into registers).
    Fills and pads may be omitted: they join the group of their consumer. A group whose ops are
    not all read by its root has siblings (ops no member reads, tiled with the root's tiles:
    horizontal fusion); it needs block tiles. The model prices it (predicted times) but decides
    nothing. On the cpu, "conv" names a kernel's conv algorithm (plan/conv.py: gemm, im2col,
    winograd, winograd4, direct); without it the model picks one."""
    groups = []
    seen: set[int] = set()
    roots: dict[int, int] = {}
    given_conv: set[int] = set()          # roots of groups whose conv algorithm the plan gives
    for gid, g in enumerate(spec["groups"]):
        members = set(g["ops"])
        unknown = sorted((m for m in members if isinstance(m, bool) or not isinstance(m, int) or not 0 <= m < len(info.ops)),
                         key=repr)
        if unknown:
            raise PlanError(f"group {gid}: ops {unknown} are not ops of {info.func} (its ops are 0 to "
                            f"{len(info.ops) - 1}; --emit plan numbers them)")
        for m in list(members):
            members |= {p for p in info.op(m).producers if p is not None and info.op(p).kind in CHEAP}
        compute = [m for m in members if info.op(m).is_compute]
        if not compute:
            raise PlanError(f"group {gid} has no compute op")
        seen |= set(compute)
        root = max(compute)
        if root in roots:
            raise PlanError(f"op {root} is the root of groups {roots[root]} and {gid} (one kernel writes it)")
        roots[root] = gid
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
        row_threads = int(g.get("row_threads", 0))
        columns = bool(g.get("row_columns", False))
        if row_threads:
            why = row_tiling_error(info, members, root, Tiling(block, thread, mapped,
                                                               RowConfig(threads=row_threads, columns=columns)), target)
            if why:
                raise PlanError(f"group {gid}: row_threads {row_threads}: {why}")
        runs = g.get("row_runs", 0)
        if runs not in (0, 1, RUN) or isinstance(runs, bool) or (runs and not row_threads):
            raise PlanError(f"group {gid}: row_runs {runs!r}: 1 (cyclic) or {RUN} (blocked-cyclic) for a row kernel "
                            "(row_threads); without it the planner derives it")
        if runs == RUN:
            fits, why = row_layout(info, members, root, row_threads, columns)
            if fits != RUN:
                raise PlanError(f"group {gid}: row_runs {RUN}: {why}")
        gemm = tuple(int(x) for x in g.get("gemm", ()))
        if gemm:
            if target != "gpu" or row_threads or any(thread):
                raise PlanError(f"group {gid}: gemm is a gpu contraction kernel, without thread tiles or row threads")
            if len(gemm) > 3:
                raise PlanError(f"group {gid}: gemm {list(gemm)}: needs [bk, tm, tn] (double buffering is "
                                "\"double_buffered\": true)")
            cp_stages = g.get("stages", 0)
            if not isinstance(cp_stages, int) or isinstance(cp_stages, bool):
                raise PlanError(f"group {gid}: stages must be a number of cp.async stages (2 to 4), not {cp_stages!r}")
            why = gemm_tiling_error(info, members, root, block, gemm, hw.max_threads_per_block, cp_stages, hw)
            if why:
                raise PlanError(f"group {gid}: gemm {list(gemm)}" + (f", stages {cp_stages}" if cp_stages else "")
                                + f": {why}")
        prefetch = g.get("double_buffered", False)
        if not isinstance(prefetch, bool):
            raise PlanError(f"group {gid}: double_buffered must be true or false, not {prefetch!r}")
        if prefetch and not gemm:
            raise PlanError(f"group {gid}: double_buffered is for a contraction kernel (gemm)")
        if g.get("stages") and not gemm:
            raise PlanError(f"group {gid}: stages is for a contraction kernel (gemm)")
        gemm = gemm[:3] + ((1, g.get("stages", 0)) if prefetch else (0, g.get("stages", 0))) if gemm else ()
        att = tuple(int(x) for x in g.get("attention", ()))
        if att:
            kernel = attention_kernel(info, members, target)
            if isinstance(kernel, NotAttention):
                raise PlanError(f"group {gid}: attention {list(att)}: not an attention kernel: {kernel}")
            if len(att) != 2 or any(block) or gemm or row_threads or min(att) < 1:
                raise PlanError(f"group {gid}: attention needs [queries per block, keys per step] and no block "
                                "tiles, gemm or row threads")
            if target == "gpu" and (att[0] % THREADS_Y or att[1] % THREADS_X):
                raise PlanError(f"group {gid}: attention {list(att)}: on the gpu the queries per block are a "
                                f"multiple of {THREADS_Y} and the keys per step of {THREADS_X}")
        att_mma = ""
        if att and target == "gpu":        # the tensor-core form where it applies (plan/attention_mma.py)
            want = g.get("tensor_cores", None)
            why = mma_attention_error(info, kernel, att[0], hw)
            if want and why:
                raise PlanError(f"group {gid}: attention on tensor cores: {why}")
            att_mma = "" if why or want == "" else info.op(kernel.scores).operand_dtypes[0]
        scan = None
        if r.scan:                    # a scan's kernel is its template's: no tiles to give
            if any(block) or any(thread) or row_threads or gemm or att or len(compute) > 1:
                raise PlanError(f"group {gid}: %{root} is a scan ({r.scan}): its group holds it alone, "
                                "without tiles")
            scan = TileChooser(info, target, hw).best(frozenset(members)).tiling.config
        elif any(info.op(m).scan for m in compute):
            raise PlanError(f"group {gid}: a scan is the root of a group of its own")
        conv = g.get("conv", "")
        if conv:
            if target != "cpu":
                raise PlanError(f"group {gid}: conv {conv!r}: conv algorithms are the cpu target's (the gpu's "
                                "conv is a tiled contraction: \"gemm\")")
            convs = [m for m in compute if library_conv(info.op(m))]
            if len(convs) != 1:
                raise PlanError(f"group {gid}: conv {conv!r}: the group has no conv the cpu target computes "
                                "with BLAS (a float conv, f32 or f64)")
            shape = conv_op_shape(info.op(convs[0]))
            why = conv_not_applicable(shape, conv)
            if why:
                raise PlanError(f"group {gid}: conv {conv!r} {why} (%{convs[0]} is {shape.text()})")
            given_conv.add(root)
        t = Tiling(block, thread, mapped, _config(row_threads, gemm, att, scan, conv, columns, runs, att_mma))
        recomputed = frozenset(int(x) for x in g.get("recomputed", ()))
        if recomputed - (set(compute) - {root}):
            raise PlanError(f"group {gid}: recomputed {sorted(recomputed)}: only the group's compute ops other than "
                            f"its root %{root} can be")
        groups.append(Kernel(id=gid, root=root, ops=tuple(sorted(members)),
                            roles=tuple((m, role(info, m, root, members, recomputed)) for m in sorted(members)),
                            block_tiles=block, thread_tiles=thread, mapped=mapped,
                            config=resolved(info, members, root, t, hw, target),
                            recomputed=tuple(sorted(recomputed)), siblings=siblings(info, members),
                            whole_calls=whole_calls(info, members, root, t, hw) if target == "cpu" else ()))
    missing = [o.id for o in info.ops if o.is_compute and o.id not in seen]
    if missing:
        raise PlanError(f"ops {missing} are in no group")
    _check_writers(info, groups, target)
    groups.sort(key=lambda g: g.root)
    groups = [replace(g, id=i) for i, g in enumerate(groups)]
    plan = FusionPlan(info.func, target, True, tuple(groups), ("plan given by hand",) + tuple(template_notes(info, groups, hw, given_conv))
                      + tuple(library_notes(info, groups) if target == "cpu" else ()),
                      info)
    return with_costs(plan, TileChooser(info, target, hw))


def _needs_writing(info: ChainInfo, op: int, kernels: list[set[int]]) -> bool:
    """Whether some use of `op` reads it from memory: it is returned, or a kernel computes one of
    its users without computing it."""
    for u in info.op(op).users:
        holding = [k for k in kernels if u in k]
        if u == -1 or not holding or any(op not in k for k in holding):     # returned, read through a view, or read
            return True
    return False


def _check_writers(info: ChainInfo, groups: list[Kernel], target: str) -> None:
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
