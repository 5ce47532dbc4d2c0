"""Planning decisions and the kernel notes, as the plan prints them (docs/ARCHITECTURE.md, "Stages and what each hands on" (plan)).

A `Decision` is one choice of the planner or its refusal: the verdict, the ops and kernels it
names, the reason and the model's decisive numbers; kernels are named by their printed numbers
once, when the plan is made (`KernelNames`, `Decision.text`). The notes (`contraction_note`,
`template_notes`, `library_notes`) say how a planned kernel runs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .analysis import CONVS, ChainInfo
from .conv import choose as choose_conv
from .cost import cpu_chunks, hoistable_matmuls
from .describe import time_text
from .gemm import gemm_kernel, gemm_shape, mma_error
from .hardware import HardwareProfile
from .kernels import Kernel
from .templates import ContractionConfig, template
from .tilechoice import TileChooser


@dataclass(frozen=True)
class KernelRef:
    """A kernel named inside a decision's reason, by provisional id (KernelNames)."""
    id: int


@dataclass(frozen=True)
class Decision:
    """`{verdict}: {subject}{link} {kernels}{also}: {reason}` once printed; without a subject,
    `{verdict}: {reason}`."""
    verdict: str                    # fused | not fused | recomputed | not recomputed | fused horizontally |
                                    # not fused horizontally | attention | not attention
    subject: str                    # what it is about, as printed ("%3 map(exp)", "%1..%7")
    reason: str | tuple[str | KernelRef, ...]      # a tuple when it names a kernel
    ops: tuple[int, ...] = ()       # the ops it is about (the producer weighed first)
    kernels: tuple[int, ...] = ()   # the kernels it names, by provisional id (KernelNames)
    link: str = ""                  # before the kernels: " into kernel", " in kernels", ", into kernel"
    also: str = ""                  # after them: ", which also writes it for %7", ", never written"
    numbers: tuple[tuple[str, float], ...] = ()     # the model's decisive numbers (seconds, bytes)

    def named(self) -> tuple[int, ...]:
        """Every kernel it names, by provisional id."""
        refs = () if isinstance(self.reason, str) else tuple(r.id for r in self.reason if isinstance(r, KernelRef))
        return self.kernels + refs

    def text(self, number: Callable[[int], int] = lambda k: k) -> str:
        """The decision as printed, naming each kernel by `number(provisional id)`."""
        reason = self.reason if isinstance(self.reason, str) else \
            "".join(str(number(r.id)) if isinstance(r, KernelRef) else r for r in self.reason)
        if not self.subject:
            return f"{self.verdict}: {reason}"
        where = f"{self.link} {', '.join(str(number(k)) for k in self.kernels)}" if self.kernels else ""
        return f"{self.verdict}: {self.subject}{where}{self.also}: {reason}"


class KernelNames:
    """The kernels being planned, by provisional id (their position when grown), in the order the
    planner keeps them (last kernel first); a kernel merged into another goes by the other's id."""

    def __init__(self, n: int):
        self.ids = list(range(n))
        self.alias: dict[int, int] = {}

    def __getitem__(self, pos: int) -> int:
        return self.ids[pos]

    def merged(self, gone: int, into: int) -> None:
        """The kernel at position `gone` became part of the one at `into` (positions before)."""
        self.alias[self.ids[gone]] = self.ids[into]
        del self.ids[gone]

    def inserted(self, pos: int) -> int:
        """A new kernel at position `pos` (those from `pos` on move one later); its id."""
        kid = max(self.ids + list(self.alias), default=-1) + 1
        self.ids.insert(pos, kid)
        return kid

    def resolve(self, kid: int) -> int:
        while kid in self.alias:
            kid = self.alias[kid]
        return kid

    def number(self, kid: int) -> int:
        """The printed number of a kernel: its place in program order."""
        return len(self.ids) - 1 - self.ids.index(self.resolve(kid))


def mma_ceiling_text(hw: HardwareProfile) -> str:
    """The rate a tensor-core kernel was priced at (plan/gemm.py: `hw.mma_sync_flops()`), and the
    device's tensor peak beside it where that is another instruction's (wgmma on Hopper)."""
    rate = hw.mma_sync_flops()
    text = f", priced at mma.sync's {rate / 1e12:.0f} TFLOP/s ceiling on {hw.name}"
    if hw.tensor_flops_fp16 > rate:
        text += f" (wgmma's {hw.tensor_flops_fp16 / 1e12:.0f} not used)"
    return text


def contraction_note(info: ChainInfo, g: Kernel, chooser: TileChooser) -> list[str]:
    """How a GPU kernel's contraction is computed and why: a tiled contraction (plan/gemm.py;
    for a conv, implicit GEMM) or a dot product per output (direct), with both predictions."""
    cs = [m for m in g.ops if info.op(m).kind == "contraction"]
    if len(cs) != 1:
        return []
    c = info.op(cs[0])
    conv = c.name in CONVS
    tiled_name = "implicit GEMM" if conv else "tiled contraction"
    direct_name = "direct convolution" if conv else "a dot product per output"
    choice = chooser.group_best(g)
    gk = gemm_kernel(info, g.ops, g.root)
    if isinstance(gk, str):
        return [f"kernel {g.id}: %{c.id} {c.label} as {direct_name} (not a {tiled_name}: {gk})"]
    tiled = [(t, s) for t, s in choice.candidates if isinstance(t.config, ContractionConfig)]
    direct = [(t, s) for t, s in choice.candidates if not isinstance(t.config, ContractionConfig)]
    if not tiled:
        return [f"kernel {g.id}: %{c.id} {c.label} as {direct_name} (no {tiled_name} shape fits the device)"]
    grouped = c.name == "linalg.conv_2d_ngchw_gfchw"
    k = f"K = {gk.k}" + (f" (channels per group x kernel window; {c.loops[1]} groups, one per grid slice)" if grouped
                         else " (channels x kernel window)" if conv else "")
    best_t = min(tiled, key=lambda x: x[1])[1]
    other = (f"; {direct_name} {time_text(min(s for _, s in direct))}" if direct else "")
    cfg = g.config
    if isinstance(cfg, ContractionConfig):
        if cfg.mma:
            how = f", on {cfg.mma} tensor cores (mma.sync){mma_ceiling_text(chooser.hw)}"
        elif c.operand_dtypes[:2] in (("f16", "f16"), ("bf16", "bf16")):
            why = mma_error(info, gk, gemm_shape(info, gk, g.root, g.block_tiles, cfg.steps), chooser.hw)
            how = f", on FMAs, not tensor cores: {why}"
        else:
            how = ""
        if cfg.prefetch:
            how += ", double-buffered (the next K step loaded into registers while this one computes)"
        if cfg.stages:
            how += f", {cfg.stages} cp.async stages (the steps ahead copied into shared memory while this one computes)"
        return [f"kernel {g.id}: %{c.id} {c.label} as {tiled_name}, {k} in steps of {cfg.bk} through "
                f"shared memory, {cfg.tm}x{cfg.tn} outputs per thread{how}: predicted "
                f"{time_text(choice.cost.time_s)}{other}"]
    return [f"kernel {g.id}: %{c.id} {c.label} as {direct_name}: predicted {time_text(choice.cost.time_s)}; "
            f"{tiled_name} {time_text(best_t)}"]


def template_notes(info: ChainInfo, groups, hw: HardwareProfile, given=frozenset()) -> list[str]:
    """Each kernel's line from its template's `note` stage (plan/templates.py), if it has one;
    `given`: the roots of kernels whose config a hand plan gave."""
    out = []
    for g in groups:
        note = template(g.config).stage("note")
        if note:
            out.append(note(info, g, hw, given))
    return out


def conv_note(info: ChainInfo, g: Kernel, hw: HardwareProfile, given=frozenset()) -> str:
    """How a cpu conv kernel's conv is computed and why (plan/conv.py), with every algorithm's
    prediction (the conv template's note)."""
    forced = g.config.algorithm if g.root in given else ""
    choice = choose_conv(info, g.ops, g.root, g.block_tiles, g.mapped, hw, forced)
    return f"kernel {g.id}: {choice.reason()}"


def library_notes(info: ChainInfo, groups) -> list[str]:
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
                           f"loop, split among every core's worker (one BLAS thread each), then the rest of the "
                           f"kernel on each chunk (the loop has {chunks} chunk{'s' if chunks != 1 else ''}, fewer "
                           "than the cores: calls per chunk would leave cores idle)")
            else:
                why = (" (not one whole call before the loop: the rest of the kernel would then read the "
                       "product back from memory, not from its chunk's rows in cache)") if m in hoistable else ""
                out.append(f"kernel {g.id}: %{m} {o.label}: one BLAS call per chunk ({chunks} chunks), on one "
                           f"thread per worker, then the rest of the kernel on that chunk while it is in cache{why}")
    return out
