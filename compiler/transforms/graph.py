"""Graph passes: a named, ordered pipeline on the linalg-on-tensors module.

Each pass is a small frozen dataclass with a kebab-case `name` (the switch for
`disabled`/`--disable-pass NAME`) and an `apply(module)`. The IR is verified after every pass;
a failure raises CompilerInternalError naming the stage and the pass. Dead code goes by
`canonicalize` (unused side-effect-free ops) and `symbol-dce` (private functions nobody calls).
See docs/ARCHITECTURE.md, "Stages and what each hands on" (graph).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Protocol

from ..errors import CompilerInternalError
from ..mlir import verify
from ..mlir import MLIRError, PassManager, ir
from .fold_batchnorm import fold_batchnorm
from .fold_unit_reshapes import fold_unit_reshapes
from .hoist_reshapes import hoist_reshapes
from .matmul_rows import flatten_rows, matmul_rows
from .indexed_reads import inline_indexed_reads
from .mark_scans import mark_scans
from .split_reductions import split_reductions

STAGE = "graph"


class GraphPass(Protocol):
    name: str
    why: str

    def apply(self, module: ir.Module, hw=None) -> None: ...


@dataclass(frozen=True)
class MlirPass:
    """One upstream MLIR pass (or nested pipeline element), run by MLIR's pass manager."""
    name: str
    pipeline: str          # textual pipeline element inside builtin.module(...)
    why: str

    def apply(self, module: ir.Module, hw=None) -> None:
        PassManager.parse(f"builtin.module({self.pipeline})", context=module.context).run(module.operation)


@dataclass(frozen=True)
class FoldBatchnorm:
    name: str = "fold-batchnorm"
    why: str = "inference batchnorm becomes x * scale + shift with scale/shift computed per channel"

    def apply(self, module: ir.Module, hw=None) -> None:
        with module.context, ir.Location.unknown():
            fold_batchnorm(module)


@dataclass(frozen=True)
class SplitReductions:
    name: str = "split-reductions"
    why: str = ("on a GPU, a reduction with too few outputs to fill the device becomes partials over "
                "chunks of its axis and their combine (two kernels)")

    def apply(self, module: ir.Module, hw=None) -> None:
        split_reductions(module, hw)


@dataclass(frozen=True)
class HoistReshapes:
    name: str = "hoist-reshapes"
    why: str = ("a reshape of an elementwise op's result moves onto its inputs (reshape(exp(x)) = "
                "exp(reshape(x))), so it is a view of the chain's inputs and the ops around it fuse")

    def apply(self, module: ir.Module, hw=None) -> None:
        hoist_reshapes(module)


@dataclass(frozen=True)
class FoldUnitReshapes:
    name: str = "fold-unit-reshapes"
    why: str = ("a reshape that only inserts or drops unit dims (keepdims) folds into the index maps of the "
                "generics reading it, so it does not stand between two ops")

    def apply(self, module: ir.Module, hw=None) -> None:
        fold_unit_reshapes(module)


@dataclass(frozen=True)
class InlineIndexedReads:
    name: str = "inline-indexed-reads"
    why: str = ("an elementwise value that concat, gather or a reversed slice reads at a computed index is "
                "computed there, so those ops fuse with what produces their inputs")

    def apply(self, module: ir.Module, hw=None) -> None:
        inline_indexed_reads(module)


@dataclass(frozen=True)
class MarkScans:
    name: str = "mark-scans"
    why: str = ("a running sum or product keeps its scan mark after elementwise fusion rebuilt it, so it is "
                "compiled as one pass along its axis (without the mark: as the N x N reduction it also is)")

    def apply(self, module: ir.Module, hw=None) -> None:
        with module.context:
            mark_scans(module)


@dataclass(frozen=True)
class MatmulRows:
    name: str = "matmul-rows"
    why: str = ("on the cpu, a contraction that elementwise fusion made of a matmul with batch dims on its "
                "left operand (its result split into heads or not) is a matmul on rows again (BLAS), each "
                "operand's fused work its own generic, computed once per element instead of once per "
                "output column or row")

    def apply(self, module: ir.Module, hw=None) -> None:
        # the cpu's problem: its emitter calls BLAS for named matmuls only, and loops over a
        # contraction generic recompute the fused producer for every n; the GPU GEMM template
        # computes such a producer once per tile element as it loads A, in the one kernel
        if hw is None or hw.kind == "cpu":
            if matmul_rows(module):
                flatten_rows(module)


GRAPH_PASSES: tuple[GraphPass, ...] = (
    FoldBatchnorm(),
    MlirPass("canonicalize", "canonicalize",
             "fold constants and no-op reshapes, erase dead ops, so fusion sees the real graph"),
    MlirPass("cse", "cse", "merge duplicate constants and tensor.empty ops"),
    MlirPass("linalg-fuse-elementwise-ops", "func.func(linalg-fuse-elementwise-ops)",
             "merge each single-use elementwise producer into its consumer: one generic per chain of"
             " elementwise ops"),
    MlirPass("canonicalize", "canonicalize", "clean up after fusion (dead inits, unused operands)"),
    InlineIndexedReads(),
    MlirPass("canonicalize", "canonicalize", "erase the producers whose every read was inlined"),
    HoistReshapes(),
    MlirPass("linalg-fuse-elementwise-ops", "func.func(linalg-fuse-elementwise-ops),canonicalize",
             "merge the elementwise ops the moved reshapes no longer separate"),
    FoldUnitReshapes(),
    MatmulRows(),
    MlirPass("canonicalize", "canonicalize", "erase the reshapes nothing reads any more"),
    SplitReductions(),
    MlirPass("cse", "cse", "merge what fusion duplicated"),
    MarkScans(),
    MlirPass("symbol-dce", "symbol-dce", "erase private functions nobody calls"),
)

PASS_NAMES: tuple[str, ...] = tuple(dict.fromkeys(p.name for p in GRAPH_PASSES))


def check_pass_names(names: Iterable[str]) -> frozenset[str]:
    """The names as a set; an unknown name is a ValueError listing the known ones."""
    names = frozenset(names)
    unknown = sorted(names - set(PASS_NAMES))
    if unknown:
        raise ValueError(f"unknown pass {', '.join(repr(n) for n in unknown)}; the graph passes are: "
                         f"{', '.join(PASS_NAMES)}")
    return names


def run_graph_passes(module: ir.Module, disabled: Iterable[str] = (), hw=None) -> list[str]:
    """Run the enabled passes in order, verifying after each; returns the names run. `hw` is the
    hardware profile the module is compiled for (the passes that depend on it need it)."""
    disabled = check_pass_names(disabled)
    ran = []
    for p in GRAPH_PASSES:
        if p.name in disabled:
            continue
        try:
            p.apply(module, hw)
        except MLIRError as e:
            raise CompilerInternalError(STAGE, f"pass '{p.name}' failed:\n{e}") from None
        try:
            verify(module, STAGE)
        except CompilerInternalError as e:
            raise CompilerInternalError(STAGE, f"after pass '{p.name}': {e.message}") from None
        ran.append(p.name)
    return ran
