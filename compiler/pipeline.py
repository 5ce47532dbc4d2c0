"""The compiler's stages as data: an ordered list the CLI's --emit/--dump-dir and the tests loop over.

    linalg  the typed chain lowered to linalg on tensors (compiler/lower.py), verified
    graph   after the graph passes (compiler/passes.py), verified after every pass

Each stage maps (job, module-so-far) to a module and every stage's text is deterministic. Later
stages (plan, tiled, gpu, kernels) append to STAGES. Chains compile independently (one module
per chain and binding); dumps are DIR/<chain>.<NN>-<stage>.mlir, NN counting from the front end's
stages (ast=00, typed=01) so a whole --dump-dir lists in pipeline order.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from fusec.dsl.typed import TypedChain, TypedModule

from .errors import CompilerInternalError
from .lower import lower_chain, print_ir, verify
from .mlir import ir
from .passes import check_pass_names, run_graph_passes

FRONT_END_STAGES: tuple[str, ...] = ("ast", "typed")


@dataclass(frozen=True)
class CompileOptions:
    """Everything that changes what the stages produce (hashable: part of a cache key)."""
    disabled_passes: frozenset[str] = frozenset()
    locations: bool = False


@dataclass(frozen=True)
class Job:
    chain: TypedChain
    binding: tuple[tuple[str, int], ...]
    options: CompileOptions


@dataclass(frozen=True)
class Stage:
    name: str
    why: str
    run: Callable[[Job, "ir.Module | None"], ir.Module]


def _linalg(job: Job, _prev: ir.Module | None) -> ir.Module:
    return lower_chain(job.chain, dict(job.binding), verify_ir=False)


def _graph(job: Job, module: ir.Module) -> ir.Module:
    run_graph_passes(module, job.options.disabled_passes)
    return module


STAGES: tuple[Stage, ...] = (
    Stage("linalg", "lowering: one func.func on tensors, linalg named ops and generics", _linalg),
    Stage("graph", "graph passes: batchnorm folding, canonicalize, CSE, elementwise fusion, DCE", _graph),
)
STAGE_NAMES: tuple[str, ...] = tuple(s.name for s in STAGES)


def stage_number(name: str) -> int:
    return (FRONT_END_STAGES + STAGE_NAMES).index(name)


def dump_path(dump_dir: str | Path, chain: str, stage: str, suffix: str = "") -> Path:
    return Path(dump_dir) / f"{chain}.{stage_number(stage):02d}-{stage}{suffix}.mlir"


@dataclass
class ChainStages:
    """One chain's trip through the stages: the text after each stage and the last module."""
    chain: str
    texts: dict[str, str] = field(default_factory=dict)
    module: ir.Module | None = None


def compile_chain(chain: TypedChain, binding: dict[str, int] | None = None, *,
                  options: CompileOptions = CompileOptions(), until: str | None = None,
                  dump_dir: str | Path | None = None) -> ChainStages:
    """Run the stages in order (through `until`, default all) on one chain, verifying each."""
    check_pass_names(options.disabled_passes)
    if until is not None and until not in STAGE_NAMES:
        raise ValueError(f"unknown stage {until!r}; the compiler stages are: {', '.join(STAGE_NAMES)}")
    job = Job(chain, tuple(sorted((binding or {}).items())), options)
    out = ChainStages(chain.name)
    for stage in STAGES:
        out.module = _run_stage(stage, job, out.module, dump_dir)
        out.texts[stage.name] = print_ir(out.module, options.locations)
        if dump_dir is not None:
            path = dump_path(dump_dir, chain.name, stage.name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(out.texts[stage.name])
        if stage.name == until:
            break
    return out


def _run_stage(stage: Stage, job: Job, module: ir.Module | None, dump_dir) -> ir.Module:
    try:
        module = stage.run(job, module)
        verify(module, stage.name)
        return module
    except CompilerInternalError as e:
        if module is None or e.dump_path:
            raise
        raise e.with_dump(str(_dump_failure(module, job.chain.name, stage.name, dump_dir))) from None


def _dump_failure(module: ir.Module, chain: str, stage: str, dump_dir) -> Path:
    """The IR as the failing stage left it (generic form when it does not verify)."""
    directory = Path(dump_dir) if dump_dir is not None else Path(tempfile.mkdtemp(prefix="fusec-ice-"))
    path = dump_path(directory, chain, stage, ".failed")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(print_ir(module, locations=True))
    return path


def run_stages(typed_module: TypedModule, bindings: dict[str, dict[str, int]] | None = None,
               disabled_passes: Iterable[str] = (), dump_dir: str | Path | None = None,
               locations: bool = False, until: str | None = None) -> dict[str, str]:
    """Every stage's text for every chain: {stage: text}. With several chains a stage's text is
    the per-chain modules in chain order, separated by `// -----` (mlir-opt's split marker)."""
    options = CompileOptions(frozenset(disabled_passes), locations)
    bindings = bindings or {}
    per_chain = [compile_chain(c, bindings.get(c.name, {}), options=options, until=until, dump_dir=dump_dir)
                 for c in typed_module.chains]
    names = [s for s in STAGE_NAMES if all(s in r.texts for r in per_chain)] if per_chain else []
    return {s: "\n// -----\n\n".join(r.texts[s] for r in per_chain) for s in names}
