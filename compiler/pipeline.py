"""The compiler's stages as data: an ordered list the CLI's --emit/--dump-dir and the tests loop over.

    linalg   the typed chain lowered to linalg on tensors (compiler/lower.py), verified
    graph    after the graph passes (compiler/passes.py), verified after every pass
    plan     the FusionPlan (compiler/plan.py): kernels, roles, tiles, decisions (text)
    tiled    tile-and-fuse by transform script, bufferized (compiler/tiling.py)
    gpu      one gpu.launch per kernel (cpu target: scf.parallel loops), loops only
    kernels  the emitted Python module (compiler/emit.py)

Each stage updates one chain's ChainStages (module, plan, emitted) and every stage's text is
deterministic. Chains compile independently (one module per chain and binding); dumps are
DIR/<chain>.<NN>-<stage>.<ext>, NN counting from the front end's stages (ast=00, typed=01) so
a whole --dump-dir lists in pipeline order.
"""
from __future__ import annotations

import json
import tempfile
import time
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
    """Everything that changes what the stages produce (hashable: part of a cache key).

    target: 'gpu' (kernels for cuda / cuda-sim) or 'cpu' (numba parallel loops);
    fuse: False gives the unfused build (one kernel per linalg op);
    plan: a hand-given plan as JSON text ({"groups": [{"ops": [...], "block_tiles": [...]}]});
    hw: the hardware profile the cost model plans for (compiler/hardware.py; None: the target's
    default); tuned: measured tiles by group signature as JSON (compiler/autotune.py).
    """
    disabled_passes: frozenset[str] = frozenset()
    locations: bool = False
    target: str = "gpu"
    fuse: bool = True
    plan: str | None = None
    hw: str | None = None
    tuned: str | None = None


@dataclass(frozen=True)
class Job:
    chain: TypedChain
    binding: tuple[tuple[str, int], ...]
    options: CompileOptions


@dataclass
class ChainStages:
    """One chain's trip through the stages: the text after each stage, the last module, the
    fusion plan and the emitted kernels once those stages have run."""
    chain: str
    texts: dict[str, str] = field(default_factory=dict)
    module: ir.Module | None = None
    plan: object | None = None
    emitted: object | None = None
    seconds: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Stage:
    name: str
    why: str
    run: Callable[[Job, ChainStages], None]
    text: Callable[[ChainStages, CompileOptions], str] = lambda st, o: print_ir(st.module, o.locations)
    suffix: str = ".mlir"


def _linalg(job: Job, st: ChainStages) -> None:
    st.module = lower_chain(job.chain, dict(job.binding), verify_ir=False)


def _graph(job: Job, st: ChainStages) -> None:
    run_graph_passes(st.module, job.options.disabled_passes)


def _plan(job: Job, st: ChainStages) -> None:
    from .analysis import analyze, tag_ops
    from .hardware import get
    from .plan import plan_chain, plan_from_dict, with_eager_transfers
    with st.module.context:
        tag_ops(st.module)
        info = analyze(st.module)[job.chain.name]
    o = job.options
    hw = get(o.hw, o.target)
    plan = (plan_from_dict(info, o.target, json.loads(o.plan), hw=hw) if o.plan
            else plan_chain(info, o.target, fuse=o.fuse, hw=hw, tuned=json.loads(o.tuned) if o.tuned else None))
    st.plan = with_eager_transfers(plan, st.texts.get("linalg"), st.module.context)


def _tiled(job: Job, st: ChainStages) -> None:
    from .tiling import tile_and_fuse
    tile_and_fuse(st.module, {job.chain.name: st.plan})


def _gpu(job: Job, st: ChainStages) -> None:
    from .tiling import to_cpu, to_gpu
    if job.options.target == "gpu":
        to_gpu(st.module, {job.chain.name: st.plan})
    else:
        to_cpu(st.module)


def _kernels(job: Job, st: ChainStages) -> None:
    from .emit import emit
    st.emitted = emit(st.module, "cuda" if job.options.target == "gpu" else "cpu")


STAGES: tuple[Stage, ...] = (
    Stage("linalg", "lowering: one func.func on tensors, linalg named ops and generics", _linalg),
    Stage("graph", "graph passes: batchnorm folding, canonicalize, CSE, elementwise fusion, DCE", _graph),
    Stage("plan", "partition the linalg ops into kernels and pick tiles (FusionPlan)", _plan,
          lambda st, o: st.plan.format() + "\n", ".txt"),
    Stage("tiled", "tile each kernel's root, fuse its producers into the forall, bufferize", _tiled),
    Stage("gpu", "one gpu.launch per kernel, blocks and threads mapped (cpu target: scf.parallel), "
          "linalg lowered to loops", _gpu),
    Stage("kernels", "translate to Python source: Numba CUDA kernels or njit(parallel) loops", _kernels,
          lambda st, o: st.emitted.source, ".py"),
)
STAGE_NAMES: tuple[str, ...] = tuple(s.name for s in STAGES)


def stage_number(name: str) -> int:
    return (FRONT_END_STAGES + STAGE_NAMES).index(name)


def dump_path(dump_dir: str | Path, chain: str, stage: str, suffix: str = "") -> Path:
    ext = next((s.suffix for s in STAGES if s.name == stage), ".mlir")
    return Path(dump_dir) / f"{chain}.{stage_number(stage):02d}-{stage}{suffix}{ext}"


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
        t0 = time.perf_counter()
        _run_stage(stage, job, out, dump_dir)
        out.seconds[stage.name] = time.perf_counter() - t0
        out.texts[stage.name] = stage.text(out, options)
        if dump_dir is not None:
            path = dump_path(dump_dir, chain.name, stage.name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(out.texts[stage.name])
        if stage.name == until:
            break
    return out


def _run_stage(stage: Stage, job: Job, st: ChainStages, dump_dir) -> None:
    try:
        stage.run(job, st)
        verify(st.module, stage.name)
    except CompilerInternalError as e:
        if st.module is None or e.dump_path:
            raise
        raise e.with_dump(str(_dump_failure(st.module, job.chain.name, stage.name, dump_dir))) from None


def _dump_failure(module: ir.Module, chain: str, stage: str, dump_dir) -> Path:
    """The IR as the failing stage left it (generic form when it does not verify)."""
    directory = Path(dump_dir) if dump_dir is not None else Path(tempfile.mkdtemp(prefix="fusec-ice-"))
    path = dump_path(directory, chain, stage, ".failed").with_suffix(".mlir")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(print_ir(module, locations=True))
    return path


def run_stages(typed_module: TypedModule, bindings: dict[str, dict[str, int]] | None = None,
               disabled_passes: Iterable[str] = (), dump_dir: str | Path | None = None,
               locations: bool = False, until: str | None = None, target: str = "gpu",
               fuse: bool = True, hw: str | None = None) -> dict[str, str]:
    """Every stage's text for every chain: {stage: text}. With several chains a stage's text is
    the per-chain modules in chain order, separated by `// -----` (mlir-opt's split marker)."""
    options = CompileOptions(frozenset(disabled_passes), locations, target, fuse, hw=hw)
    bindings = bindings or {}
    per_chain = [compile_chain(c, bindings.get(c.name, {}), options=options, until=until, dump_dir=dump_dir)
                 for c in typed_module.chains]
    names = [s for s in STAGE_NAMES if all(s in r.texts for r in per_chain)] if per_chain else []
    return {s: "\n// -----\n\n".join(r.texts[s] for r in per_chain) for s in names}
