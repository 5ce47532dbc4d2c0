"""Kernel templates: one frozen config per template, and the one registry of what each does.

A kernel (kernels.Kernel) and a candidate tiling (cost.Tiling) carry one `config`: which
template writes the kernel and that template's own levels (ElementwiseConfig, RowConfig,
ContractionConfig, AttentionConfig, ScanConfig, ConvConfig). `TEMPLATES` maps each template's
name to its config type and its stages, named `module:function` and resolved on first use;
the stages ask it and never branch on the kind of kernel (tests/compiler/test_templates.py).
See docs/ARCHITECTURE.md, "GPU kernels: how a plan becomes CUDA".
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field, replace
from typing import Callable, ClassVar

from ..marks import ATTENTION_MARKS, BLOCK_ATTENTION, BLOCK_GEMM, BLOCK_REDUCE, GEMM_MARKS, SCAN
from .attention import THREADS_X, THREADS_Y


@dataclass(frozen=True, kw_only=True)
class Config:
    """What every template's config answers (the defaults are the elementwise template's)."""
    name: ClassVar[str] = ""
    parallel: ClassVar[bool] = False       # splits its work without block tiles (never serial)
    one_root: ClassVar[bool] = False       # takes no sibling (horizontal fusion) and writes its root only
    whole: ClassVar[bool] = False          # its ops are matched whole: recomputation adds none to it
    row_outputs: ClassVar[bool] = False    # on the gpu stores elementwise second outputs (split_rows' writer phase)
    in_place: ClassVar[bool] = True        # its root may write over a dead input (transforms/in_place.py)
    mlir_threads: ClassVar[bool] = True    # MLIR tiles its thread level from the thread tiles
    splits_rows: ClassVar[bool] = False    # split_rows rewrites its thread level (transforms/split_rows.py)
    drops_init: ClassVar[bool] = False     # its template writes every output element: its init fill goes
    at_root: ClassVar[bool] = False        # its template reads its ops at its root: they move there before bufferization

    def mapped_threads(self, block: tuple[int, ...], thread: tuple[int, ...], mapped: tuple[int, ...]) -> tuple[int, ...]:
        """Threads per mapped loop, outermost first (1 each when there is no thread level)."""
        out = []
        for loop in mapped:
            b, t = block[loop], thread[loop] if thread else 0
            out.append(b // t if t else 1)
        return tuple(out)

    def block_dims(self, threads: tuple[int, ...], mapped: tuple[int, ...]) -> list[int]:
        """Threads per block (x, y, z) from `mapped_threads()`: the innermost mapped loop is x."""
        return list(reversed(threads)) if mapped else [1]

    def searched(self) -> "Config":
        """The config as a tile search gives it (without what the planner derives from the shape)."""
        return self

    def fields(self) -> dict:
        """This config's fields of the plan JSON (plan/handplan.py); the others keep their defaults."""
        return {}


@dataclass(frozen=True, kw_only=True)
class ElementwiseConfig(Config):
    """A loop nest MLIR tiles (elementwise ops, reductions, a contraction as a dot per output)."""
    name: ClassVar[str] = "elementwise"


@dataclass(frozen=True, kw_only=True)
class RowConfig(Config):
    name: ClassVar[str] = "row"
    parallel: ClassVar[bool] = True
    row_outputs: ClassVar[bool] = True
    in_place: ClassVar[bool] = False
    mlir_threads: ClassVar[bool] = False
    splits_rows: ClassVar[bool] = True
    threads: int
    # columns: the reduced axis is not the contiguous one (a reduction over axis 0 of [M, N]): its
    # T threads go on thread y and the block's rows (the columns, contiguous) on thread x, so a
    # warp's loads are consecutive columns; the combine goes through shared memory over y
    columns: bool = False
    # runs: elements a thread reads at a time along the row. 1: cyclic (thread t holds t + T*j);
    # 4: blocked-cyclic (runs 4t + {0..3} + 4T*q, each run one 16-byte access where it is aligned
    # at run time); 0: not decided yet (a search's config), the resolve stage derives it from the
    # kernel (plan/rows.py: row_layout; a hand plan may force 1 or 4: "row_runs")
    runs: int = 0

    def mapped_threads(self, block, thread, mapped):
        return super().mapped_threads(block, thread, mapped) + (self.threads,)

    def searched(self):
        return replace(self, runs=0)

    def block_dims(self, threads, mapped):
        if self.columns:
            return [threads[-2] if len(threads) > 1 else 1, self.threads] + list(reversed(threads[:-2]))
        return [self.threads] + list(reversed(threads[:-1]))

    def fields(self):
        return {"row_threads": self.threads, **({"row_columns": True} if self.columns else {}),
                **({"row_runs": self.runs} if self.runs > 1 else {})}


@dataclass(frozen=True, kw_only=True)
class ContractionConfig(Config):
    """M: the output's side only the first operand indexes, N: the side of its contiguous dim, K:
    the reduction. The block tile is the group's; threads_m/threads_n and mma follow from it
    (plan/gemm.py: gemm_shape, mma_kind) and are 0/"" in a tile search's candidates."""
    name: ClassVar[str] = "contraction"
    parallel: ClassVar[bool] = True       # its threads_m x threads_n threads share even one block
    one_root: ClassVar[bool] = True
    in_place: ClassVar[bool] = False
    bk: int                               # K step through shared memory
    tm: int                               # register tile per thread, M side
    tn: int                               # ... N side
    threads_m: int = 0
    threads_n: int = 0
    mma: str = ""                         # on tensor cores: the operands' type (f16, bf16)
    prefetch: bool = False                # the K loop double-buffered through registers
    stages: int = 0                       # cp.async: a ring of this many K steps in shared memory (0: none)

    @property
    def steps(self) -> tuple[int, int, int]:
        """(bk, tm, tn), as plan/gemm.py takes them."""
        return (self.bk, self.tm, self.tn)

    def mapped_threads(self, block, thread, mapped):
        return (self.threads_m, self.threads_n)

    def block_dims(self, threads, mapped):
        return [self.threads_n, self.threads_m]

    def searched(self):
        return replace(self, threads_m=0, threads_n=0, mma="")

    def fields(self):
        out = {"gemm": list(self.steps), "tensor_cores": self.mma, "double_buffered": self.prefetch}
        if self.stages:
            out["stages"] = self.stages
        return out


@dataclass(frozen=True, kw_only=True)
class AttentionConfig(Config):
    name: ClassVar[str] = "attention"
    parallel: ClassVar[bool] = True
    one_root: ClassVar[bool] = True
    whole: ClassVar[bool] = True
    in_place: ClassVar[bool] = False
    at_root: ClassVar[bool] = True
    block_q: int                          # queries per block
    block_kv: int                         # keys (and values) per step
    mma: str = ""                         # gpu: "f16" | "bf16" on tensor cores (plan/attention_mma.py), "": FMAs

    def mapped_threads(self, block, thread, mapped):
        return (THREADS_Y, THREADS_X) if thread else ()     # gpu kernels have thread tiles (zeros), cpu ones none

    def block_dims(self, threads, mapped):
        return list(reversed(threads))

    def fields(self):
        return {"attention": [self.block_q, self.block_kv], **({"tensor_cores": self.mma} if self.mma else {})}


@dataclass(frozen=True, kw_only=True)
class ScanConfig(Config):
    name: ClassVar[str] = "scan"
    parallel: ClassVar[bool] = True
    one_root: ClassVar[bool] = True
    whole: ClassVar[bool] = True
    drops_init: ClassVar[bool] = True
    threads: int                  # gpu: a row's threads (or a block's, a thread per row); cpu: 1

    def block_dims(self, threads, mapped):
        return [self.threads]

    def fields(self):
        return {"scan": self.threads}


@dataclass(frozen=True, kw_only=True)
class ConvConfig(Config):
    """A cpu kernel whose conv runs as `algorithm` (plan/conv.py); the rest is an elementwise kernel's."""
    name: ClassVar[str] = "conv"
    algorithm: str

    def fields(self):
        return {"conv": self.algorithm}


# ---- the registry ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Template:
    """One kernel template's stages, each `module:function` under fusec.compiler ("" when it has
    none): `search(chooser, members, root, tile) -> Choice | None` (a TileChooser method);
    `cost(info, members, root, tiling, hw, common, footprint, reads, corr, measured)`;
    `grid(plan, group) -> blocks` when MLIR does not tile the kernel; `mark(module, plans,
    target)`, run before the kernels are lowered to loops; `emit`: (the root's mark, the
    emitter's function(body, op)); `note(info, group, hw, given) -> str`: the plan's line on how
    the kernel runs (`given`: the roots of kernels whose config a hand plan gave)."""
    config: type
    search: str = ""
    claims: bool = False        # when its search finds the kernel, the kernel is this template's
    valid: str = ""             # (chooser, members, tiling, tileable loops) -> whether a tiling fits the kernel
    resolve: str = ""           # (info, members, root, tiling, hw, target) -> the group's config from the search's
    cost: str = ""
    grid: str = ""
    mark: str = ""
    emit: tuple[str, str] = ("", "")
    note: str = ""
    owns: tuple[str, ...] = ()  # the marks of the ops its emitter writes or absorbs: not lowered to loops
    _resolved: dict = field(default_factory=dict, compare=False, repr=False)

    def stage(self, which: str) -> Callable | None:
        """The function a stage field names (None when it names none)."""
        if which not in self._resolved:
            ref = self.emit[1] if which == "emit" else getattr(self, which)
            fn = None
            if ref:
                module, _, path = ref.partition(":")
                fn = importlib.import_module(f"{_COMPILER}.{module}")
                for part in path.split("."):
                    fn = getattr(fn, part)
            self._resolved[which] = fn
        return self._resolved[which]


_COMPILER = __name__.rsplit(".", 2)[0]

# The order is the tile search's: a claiming template's search first (it takes the kernel whole
# when it finds it); the others' best tilings compete, each later one preferred unless the
# earlier choice is 2% faster (tilechoice._prefer).
TEMPLATES: dict[str, Template] = {t.config.name: t for t in (
    Template(AttentionConfig, "plan.tilechoice:TileChooser.attention_search", claims=True,
             cost="plan.attention_time:attention_time", grid="transforms.attention_kernels:grid",
             mark="transforms.attention_kernels:mark_attention_kernels",
             emit=(BLOCK_ATTENTION, "emit.attention:block_attention"), owns=ATTENTION_MARKS),
    Template(ScanConfig, "plan.tilechoice:TileChooser.scan_search", claims=True, cost="plan.scan:scan_time",
             grid="transforms.to_target:scan_grid", emit=(SCAN, "emit.scan:block_scan"),
             owns=(SCAN,)),
    Template(ElementwiseConfig, "plan.tilechoice:TileChooser.loop_search", cost="plan.loops:loop_time",
             resolve="plan.conv:resolve_conv"),
    Template(ContractionConfig, "plan.tilechoice:TileChooser.gemm_search", valid="plan.tilechoice:gemm_valid",
             cost="plan.gemm:gemm_time", resolve="plan.gemm:resolve_contraction",
             mark="transforms.gemm_kernels:mark_gemm_kernels",
             emit=(BLOCK_GEMM, "emit.gemm:block_gemm"), owns=GEMM_MARKS),
    Template(RowConfig, "plan.tilechoice:TileChooser.row_search", valid="plan.tilechoice:row_valid",
             cost="plan.rows:row_time", resolve="plan.rows:resolve_rows",
             emit=(BLOCK_REDUCE, "emit.reduce:block_reduce"), owns=(BLOCK_REDUCE,)),
    Template(ConvConfig, cost="plan.cost_cpu:conv_time", resolve="plan.conv:resolve_conv", mark="transforms.cpu_library_calls:mark_conv_algorithms",
             note="plan.decisions:conv_note"),
)}


def template(config: Config) -> Template:
    return TEMPLATES[config.name]


def resolved(info, members, root: int, tiling, hw, target: str) -> Config:
    """The config a group holds for a search's (or a hand plan's) tiling: what its template's
    `resolve` derives from the kernel's shape (a contraction's threads and tensor cores, a cpu
    conv's algorithm), else the tiling's own."""
    resolve = template(tiling.config).stage("resolve")
    return resolve(info, members, root, tiling, hw, target) if resolve else tiling.config


def groups_of(plans: dict, config: type) -> list:
    """(plan, group) of every kernel of `plans` that `config`'s template writes: how a
    template's own transform finds its kernels."""
    return [(plan, g) for plan in plans.values() for g in plan.kernels if isinstance(g.config, config)]


def searched_config(row_threads: int = 0, gemm=(), row_columns: bool = False) -> Config:
    """A tile search's config from the plan JSON's candidate fields (the autotuning cache's):
    a row kernel's threads (and whether it is a column kernel), or a contraction's (bk, tm, tn[,
    double-buffered])."""
    if gemm:
        return ContractionConfig(bk=gemm[0], tm=gemm[1], tn=gemm[2], prefetch=len(gemm) > 3 and bool(gemm[3]),
                                 stages=gemm[4] if len(gemm) > 4 else 0)
    if row_threads:
        return RowConfig(threads=row_threads, columns=row_columns)
    return ElementwiseConfig()


def candidate_fields(config: Config) -> dict:
    """A candidate tiling's config in the plan JSON (and the autotuning cache): row_threads, gemm."""
    f = config.fields()
    gemm = f.get("gemm", [])
    extra = [int(bool(f.get("double_buffered"))), f["stages"]] if f.get("stages") else [1] if f.get("double_buffered") else []
    out = {"row_threads": f.get("row_threads", 0), "gemm": gemm + extra}
    return dict(out, row_columns=True) if f.get("row_columns") else out


# the plan JSON's template fields and their values for a kernel whose template sets none of them
FIELDS = {"row_threads": 0, "gemm": [], "tensor_cores": "", "double_buffered": False, "attention": [], "scan": 0,
          "conv": ""}


def summary_fields(config: Config) -> dict:
    return dict(FIELDS, **config.fields())
