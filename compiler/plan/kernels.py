"""The plan as data: `FusionPlan` (a chain's kernels, their tiles, the model's numbers and the
decisions, as printed) and `Kernel` (one kernel: its ops and roles, its tiles, its template's
config). Plans are frozen values: they print (`--emit plan`, describe.py), compare, and travel
in artifacts as their summary. `PlanError`: a hand plan that does not fit its chain. The
planner (planner.py) makes them; see docs/ARCHITECTURE.md, "plan".
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .analysis import ChainInfo, OpInfo
from .cost import KernelCost, Tiling, total_time
from .describe import format_plan
from .measured import Measured
from .templates import Config, ElementwiseConfig, candidate_fields, summary_fields


@dataclass(frozen=True, kw_only=True)
class Kernel:
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
    kernels: tuple[Kernel, ...]
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
        return len(self.kernels)

    @property
    def predicted_s(self) -> float:
        return total_time(self.costs)

    @property
    def predicted_unfused_s(self) -> float:
        return total_time(self.baseline)

    def group_of(self, op: int) -> Kernel:
        for g in self.kernels:
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
                "scan_axis": self.info.op(g.root).scan_axis, "conv": f["conv"], "template": g.template,
                **({"row_columns": True} if f.get("row_columns") else {}),
                **({"row_runs": f["row_runs"]} if f.get("row_runs") else {}),
                **({"stages": f["stages"]} if f.get("stages") else {}),
                "ops": [{"id": op, "label": self.info.op(op).label, "role": role,
                         "loc": loc_text(self.info.op(op).loc)} for op, role in g.roles],
            } for g, f in ((g, summary_fields(g.config)) for g in self.kernels)],
            "decisions": list(self.decisions),
            "graph": [graph_entry(o) for o in self.info.ops],
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


def graph_entry(o: OpInfo) -> dict:
    """One op of the chain's graph as plain data (the HTML report draws it, fusec/html): its
    result (shape, element type, bytes), its place, and per operand where it comes from (op id
    or None for an argument), its bytes and whether it is an init (an out operand)."""
    dtypes = o.operand_dtypes
    dtype = dtypes[o.n_inputs] if o.n_inputs < len(dtypes) else (dtypes[0] if dtypes else "")
    shape = o.result_shape
    return {"id": o.id, "kind": o.kind, "name": o.name, "label": o.label, "shape": list(shape), "dtype": dtype,
            "bytes": o.result_bytes, "loc": loc_text(o.loc), "note": o.note, "users": list(o.users),
            "operands": [[key, prod, o.operand_bytes(k) if k < len(o.operand_shapes) else 0, k >= o.n_inputs]
                         for k, (key, prod) in enumerate(zip(o.operand_keys, o.producers))],
            "indirect": [[key, n, behind] for key, n, behind in o.indirect]}


def loc_text(loc: str) -> str:
    return loc.replace("loc(", "").rstrip(")").replace('"', "")



class PlanError(ValueError):
    """A hand-written plan that does not fit the chain (handplan.py reads them)."""
