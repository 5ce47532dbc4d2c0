"""The compiler, top to bottom: the stages as data (`STAGES`, the one ordered list --emit,
--dump-dir and the tests loop over), `compile_source` (from `ast`), `compile_typed` (resume
after `typed`) and `build_chain`, which makes a chain's builds. Each stage updates one
ChainStages and records its deterministic text and seconds. See docs/ARCHITECTURE.md, "Stages
and what each hands on".
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable

from fusec.dsl import ast as A
from fusec.dsl.ast_format import format_ast
from fusec.dsl.checker import check_module
from fusec.dsl.diagnostics import Diagnostic, FdslError
from fusec.dsl.parser import parse_text
from fusec.dsl.typed import TypedChain, TypedModule

from .emit import EmittedModule, emit
from .errors import CompilerInternalError
from .lowering.lower import lower_chain
from .mlir import ir, print_ir, verify
from .options import CompileOptions
from .plan import autotune
from .dynamic import chain_dynamic, taken_at_run_time
from .plan.analysis import analyze, payload_ops, tag_ops
from .plan.hardware import DEFAULT_GPU, GPUS, HardwareProfile, cache_dir
from .plan.handplan import plan_from_dict
from .plan.kernels import FusionPlan
from .plan.planner import plan_chain, with_eager_transfers, with_measured
from .marks import NOTE
from .report import report_kernels
from .transforms.graph import check_pass_names, run_graph_passes
from .transforms.tile_and_fuse import tile_and_fuse
from .transforms.to_target import to_cpu, to_gpu


@dataclass(frozen=True)
class Job:
    chain: str                                   # the chain's name
    binding: tuple[tuple[str, int], ...]
    options: CompileOptions
    text: str = ""                               # the FDSL source (stages ast and typed)
    path: str = "<string>"


@dataclass
class ChainStages:
    """One chain's trip through the stages: the text after each stage and what the last stages
    made (AST, typed chain, module, fusion plan, emitted kernels)."""
    chain: str
    texts: dict[str, str] = field(default_factory=dict)
    ast: A.Module | None = None
    typed: TypedChain | None = None
    module: ir.Module | None = None
    plan: FusionPlan | None = None
    emitted: EmittedModule | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    layout: "LayoutChoice | None" = None         # the 16-bit convs' priced layout (_conv_layout)


@dataclass(frozen=True)
class LayoutChoice:
    """The layout `_conv_layout` kept for a chain's 16-bit convs, the plan made for it (the
    plan stage keeps it: the module it was made on is the one the stages go on with) and the
    decision line naming both forms' prices."""
    form: str                                    # "channels-last" | "nchw"
    plan: FusionPlan | None
    graph_text: str                              # the trial's graph-stage text (the plan's module)
    line: str


@dataclass(frozen=True)
class Stage:
    name: str
    why: str
    run: Callable[[Job, ChainStages], None]
    text: Callable[[ChainStages, CompileOptions], str] = lambda st, o: print_ir(st.module, o.locations)
    suffix: str = ".mlir"
    verifies: bool = True                        # the stage leaves a module to verify


def _ast(job: Job, st: ChainStages) -> None:
    st.ast = parse_text(job.text, job.path)


def _typed(job: Job, st: ChainStages) -> None:
    st.typed = check_module(st.ast).chain(job.chain)


def _linalg(job: Job, st: ChainStages) -> None:
    o = job.options
    dynamic = chain_dynamic(st.typed.symbols, o.dynamic)
    form = "channels-last" if o.conv_layout == "auto" else o.conv_layout
    st.module = lower_chain(st.typed, dict(job.binding), verify_ir=False, dynamic=dynamic, conv_layout=form)
    st.layout = None
    if o.conv_layout == "auto" and _layout_copies(st.module):
        st.layout = _conv_layout(job, st, dynamic)
        if st.layout.form != form:
            st.module = lower_chain(st.typed, dict(job.binding), verify_ir=False, dynamic=dynamic,
                                    conv_layout=st.layout.form)


def _layout_copies(module: ir.Module) -> bool:
    """Whether a conv was lowered channels-last (its layout copies, noted "channels-last: ...")."""
    for f in module.body.operations:
        for op in f.regions[0].blocks[0].operations if f.operation.name == "func.func" else ():
            if NOTE in op.attributes and ir.StringAttr(op.attributes[NOTE]).value.startswith("channels-last"):
                return True
    return False


CONV_FORMS = ("channels-last", "nchw")


def _conv_layout(job: Job, st: ChainStages, dynamic: tuple[str, ...]) -> LayoutChoice:
    """The layout of the chain's 16-bit convs whose channels make 16-byte runs, priced: on the
    gpu target the chain is lowered and planned in both forms (channels-last inside, the layout
    copies kernels of their own or fused, against NCHW, its tiles fed by a 2-byte window
    gather) and the plan with the smaller predicted total is kept (channels-last on a tie),
    with a decision line naming both. One form for all of a chain's convs. Not priced
    (channels-last, as lowered, and a line saying why): the cpu target, a hand plan (its op
    ids are the channels-last form's), run-time extents (the static twin must match the
    dynamic module op for op), and an NCHW form the stages could not plan."""
    o = job.options
    why = ("the cpu target does not price it (the form is chosen for the GPU's 16-byte window gather)"
           if o.target != "gpu" else "a hand plan names the channels-last form's ops" if o.plan_for(job.chain)
           else f"not priced, {taken_at_run_time(dynamic)}" if dynamic else "")
    if why:
        return LayoutChoice("channels-last", None, "", f"conv layout: channels-last, fixed: {why}")
    plans, graphs = {}, {}
    for form in CONV_FORMS:
        try:
            trial = _run(replace(job, options=replace(o, conv_layout=form)), ChainStages(job.chain, typed=st.typed),
                         "plan", None)
        except CompilerInternalError as e:
            if form == "channels-last":
                raise
            return LayoutChoice("channels-last", plans["channels-last"], graphs["channels-last"],
                                f"conv layout: channels-last, fixed: the NCHW form was not planned ({_diagnostic(e)})")
        plans[form], graphs[form] = trial.plan, trial.texts["graph"]
    keep = min(CONV_FORMS, key=lambda f: (plans[f].predicted_s, CONV_FORMS.index(f)))
    convs = ", ".join(f"%{i}" for i in _conv_ops(plans[keep], keep))
    cl, nchw = plans["channels-last"], plans["nchw"]
    copies = sum(c.time_s for g, c in zip(cl.kernels, cl.costs)
                 if cl.info.op(g.root).note.startswith("channels-last"))
    own = (f"layout copies {_us(copies)} included" if copies else "its layout copies fused into the conv's kernel")
    line = (f"conv {convs}: channels-last {_us(cl.predicted_s)} ({own}) "
            f"vs NCHW {_us(nchw.predicted_s)}: {'channels-last' if keep == 'channels-last' else 'NCHW'}")
    return LayoutChoice(keep, plans[keep], graphs[keep], line)


def _conv_ops(plan: FusionPlan, form: str) -> list[int]:
    """The ids of a plan's 16-bit convs: NCHW, the named conv ops; channels-last, the
    contractions that read a layout copy."""
    ops = plan.info.ops
    if form == "nchw":
        return [o.id for o in ops if o.name == "linalg.conv_2d_nchw_fchw"]
    copies = {o.id for o in ops if o.note.startswith("channels-last")}
    return [o.id for o in ops if o.kind == "contraction" and copies & {p for p in o.producers if p is not None}]


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.4g} us"          # 4 digits: close prices stay apart


def _graph(job: Job, st: ChainStages) -> None:
    o = job.options
    run_graph_passes(st.module, _disabled(job, st), planning_profile(o) if o.target == "gpu" else None)


def _disabled(job: Job, st: ChainStages) -> tuple[str, ...]:
    """The graph passes a build leaves out: the options', and with run-time extents on a GPU
    split-reductions (it counts a reduction's chunks at compile time, and the dynamic module and
    its static twin must keep the same ops), and on the cpu matmul-rows (it takes static shapes
    only: the twin's contraction would become a matmul on rows, the dynamic module's not)."""
    o = job.options
    if o.target in STATIC_ONLY_PASSES and chain_dynamic(st.typed.symbols, o.dynamic):
        return tuple(o.disabled_passes) + (STATIC_ONLY_PASSES[o.target][0],)
    return tuple(o.disabled_passes)


# per target, the graph pass a dynamic build leaves out: (its name, the ops it would change, why)
STATIC_ONLY_PASSES = {
    "gpu": ("split-reductions", "reduction", "a reduction's split into chunks is counted at compile time"),
    "cpu": ("matmul-rows", "contraction", "it makes a matmul on rows of static shapes only"),
}


def planning_profile(options: CompileOptions) -> HardwareProfile:
    """The profile a plan is made for: the options', else the default GPU's."""
    if options.hardware is not None:
        return options.hardware
    if options.target == "gpu":
        return GPUS[DEFAULT_GPU]
    raise CompilerInternalError("plan", "a cpu compile needs the measured cpu profile in its options "
                                        "(fusec.compiler.calibrate.hardware_profile('cpu', 'cpu'))")


def _plan(job: Job, st: ChainStages) -> None:
    o = job.options
    if st.layout is not None and st.layout.plan is not None and st.layout.graph_text == st.texts.get("graph"):
        with st.module.context:            # the plan made on this very module by _conv_layout
            tag_ops(st.module)
        st.plan = replace(st.layout.plan, decisions=st.layout.plan.decisions + (st.layout.line,))
        return
    dynamic = chain_dynamic(st.typed.symbols, o.dynamic)
    with st.module.context:
        tag_ops(st.module)
        planned_module, planned_at, lowered = (_static_twin(job, st, dynamic) if dynamic
                                               else (st.module, dict(job.binding), st.texts.get("linalg")))
        info = analyze(planned_module, o.target)[job.chain]
        # each op's loops whose extent is taken at run time (the dynamic module's are `?`)
        run_time = ({op.id: frozenset(k for k, n in enumerate(op.loops) if n == ir.ShapedType.get_dynamic_size())
                     for op in analyze(st.module, o.target)[job.chain].ops} if dynamic else None)
    hw = planning_profile(o)
    hand = o.plan_for(job.chain) if o.fuse else None

    def planned(horizontal: str = "") -> FusionPlan:
        plan = (plan_from_dict(info, o.target, hand, hw=hw) if hand is not None
                else plan_chain(info, o.target, fuse=o.fuse, hw=hw, tuned=json.loads(o.tuned) if o.tuned else None,
                                dynamic=dynamic, run_time_loops=run_time, horizontal=horizontal))
        return replace(plan, dynamic=tuple((d, planned_at[d]) for d in dynamic)) if dynamic else plan
    plan = planned()
    if dynamic and hand is None and any(g.siblings for g in plan.kernels):
        # fuse_sibling needs the kernels' tile loops to take one trip count; over a run-time
        # extent tiling reads it from each op's own input (q's S and k's S): tried on a copy
        why = _tiles_apart(st.module, job.chain, plan)
        if why:
            plan = planned(f"{taken_at_run_time(dynamic)}, and the kernels' tile loops would not take one trip "
                           f"count ({why})")
    left_out, kind, why = STATIC_ONLY_PASSES.get(o.target, ("", "", ""))
    if dynamic and left_out and left_out not in o.disabled_passes and any(op.kind == kind for op in info.ops):
        plan = replace(plan, decisions=plan.decisions + (
            f"{left_out} not run: {taken_at_run_time(dynamic)}, and {why}",))
    if st.layout is not None:
        plan = replace(plan, decisions=plan.decisions + (st.layout.line,))
    st.plan = _with_eager(plan, lowered, st.module.context)


def _static_twin(job: Job, st: ChainStages, dynamic: tuple[str, ...]) -> tuple[ir.Module, dict[str, int], str]:
    """The chain lowered and graph-passed with every extent a number, tagged like the dynamic
    module, whose ops it must match one for one (the plan made on it is applied to the dynamic
    module); the binding it was made at; and its text as lowered (the op-by-op baseline of the
    plan's transfers counts sizes, which the dynamic module's `?` hide). The binding is the
    job's (the dynamic symbols at their size class: compiler/dynamic.py), else, when a static
    extent let the graph passes merge ops that stay apart with a run-time one (CSE of two fills
    alike only at that extent), one less, which is in the same class."""
    o = job.options
    ours = [op.name for op in payload_ops(_func(st.module, job.chain))]
    binding = dict(job.binding)
    tries = [binding] + [{s: v - 1 if s in dynamic else v for s, v in binding.items()}] * (
        all(binding[d] > 2 for d in dynamic))
    for at in tries:
        twin = lower_chain(st.typed, at, st.module.context, verify_ir=False,
                           conv_layout="channels-last" if o.conv_layout == "auto" else o.conv_layout)
        lowered = print_ir(twin, False)
        run_graph_passes(twin, _disabled(job, st), planning_profile(o) if o.target == "gpu" else None)
        tag_ops(twin)
        theirs = [op.name for op in payload_ops(_func(twin, job.chain))]
        if ours == theirs:
            return twin, at, lowered
    raise CompilerInternalError("plan", f"the chain lowered with run-time extents has other ops than with static "
                                        f"ones ({len(ours)} ops against {len(theirs)}), so the plan made for the "
                                        "static extents does not apply to it")


def _tiles_apart(module: ir.Module, chain: str, plan: FusionPlan) -> str:
    """Why `plan`'s kernels cannot be tiled and fused on `module` ("": they can), tried on a copy."""
    copy = ir.Module.parse(module.operation.get_asm(enable_debug_info=True), context=module.context)
    try:
        tile_and_fuse(copy, {chain: plan})
    except CompilerInternalError as e:
        return _diagnostic(e)
    return ""


def _diagnostic(e: CompilerInternalError) -> str:
    """What MLIR said stopped a stage (its first diagnostic), else the error's first line."""
    lines = e.message.splitlines()
    return next((line.split("): ", 1)[-1] for line in lines if line.startswith("Diagnostic message")), lines[0])


def _func(module: ir.Module, name: str):
    return next(op for op in module.body.operations
                if op.operation.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == name)


_EAGER: dict[tuple[str, str], tuple] = {}       # (chain, hash of its linalg text) -> the "eager" transfers
_EAGER_KEPT = 16


def _with_eager(plan: FusionPlan, linalg_text: str | None, context) -> FusionPlan:
    """with_eager_transfers, once per linalg text: its eager baseline parses and analyses the
    lowered module again (superlinear in the chain's length), and the builds of one chain (fused
    and unfused, autotuning's candidates, a fallback's plans) all lower to the same text."""
    if not linalg_text:
        return plan
    key = (plan.chain, hashlib.sha256(linalg_text.encode()).hexdigest())
    entry = _EAGER.get(key)
    if entry is None:
        eager = with_eager_transfers(plan, linalg_text, context)
        if len(eager.transfers) != len(plan.transfers) + 1 or eager.transfers[0][0] != "eager":
            return eager                            # no eager baseline for this module
        entry = eager.transfers[0]
        if len(_EAGER) >= _EAGER_KEPT:
            _EAGER.pop(next(iter(_EAGER)))
        _EAGER[key] = entry
    return replace(plan, transfers=(entry,) + plan.transfers)


def _tiled(job: Job, st: ChainStages) -> None:
    tile_and_fuse(st.module, {job.chain: st.plan})


def _gpu(job: Job, st: ChainStages) -> None:
    if job.options.target == "gpu":
        to_gpu(st.module, {job.chain: st.plan})
    else:
        to_cpu(st.module, {job.chain: st.plan})


def _kernels(job: Job, st: ChainStages) -> None:
    if job.options.target == "gpu":
        st.emitted = emit(st.module, "cuda")
    else:
        hw = planning_profile(job.options)
        st.emitted = emit(st.module, "cpu", vector_bits=hw.vector_bits, math=job.options.math, cores=max(1, hw.units))


def _ast_text(st: ChainStages, o: CompileOptions) -> str:
    """This chain's part of the file: the consts declared before it, and the chain."""
    items = []
    for item in st.ast.items:
        if isinstance(item, A.ChainDef):
            if item.name == st.chain:
                items.append(item)
                break
        else:
            items.append(item)
    return format_ast(A.Module(st.ast.file, tuple(items))) + "\n"


STAGES: tuple[Stage, ...] = (
    Stage("ast", "parse the FDSL file (Lark); every node keeps its span", _ast, _ast_text, ".txt", False),
    Stage("typed", "check names, dtypes, shapes and symbols; constant-fold the scalars", _typed,
          lambda st, o: st.typed.format() + "\n", ".txt", False),
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
FRONT_END = ("ast", "typed")           # the stages a compile from a typed chain has already passed


def dump_path(dump_dir: str | Path, chain: str, stage: str, suffix: str = "") -> Path:
    ext = next(s.suffix for s in STAGES if s.name == stage)
    return Path(dump_dir) / f"{chain}.{STAGE_NAMES.index(stage):02d}-{stage}{suffix}{ext}"


def compile_source(text: str, path: str, chain: str, binding: dict[str, int] | None = None, *,
                   options: CompileOptions = CompileOptions(), until: str | None = None,
                   dump_dir: str | Path | None = None) -> ChainStages:
    """Every stage from `ast`, on chain `chain` of the FDSL source `text` (read from `path`)."""
    job = Job(chain, tuple(sorted((binding or {}).items())), options, text, path)
    return _run(job, ChainStages(chain), until, dump_dir)


StageProgress = Callable[[str], None]        # told each stage's name before it runs


def compile_typed(chain: TypedChain, binding: dict[str, int] | None = None, *,
                  options: CompileOptions = CompileOptions(), until: str | None = None,
                  dump_dir: str | Path | None = None, progress: StageProgress | None = None) -> ChainStages:
    """The stages from `linalg` on, for a chain already parsed and checked."""
    job = Job(chain.name, tuple(sorted((binding or {}).items())), options)
    return _run(job, ChainStages(chain.name, typed=chain), until, dump_dir, progress=progress)


def _run(job: Job, st: ChainStages, until: str | None, dump_dir, done: dict[str, float] | None = None,
         progress: StageProgress | None = None) -> ChainStages:
    """The stages in order, from `ast` or, for a chain already parsed and checked, from
    `linalg`. `done`: front-end stages run once for the whole file (stage -> its seconds): their
    texts are recorded and dumped here, their work is not done again. `progress`: told the
    name of each stage as it starts."""
    check_pass_names(job.options.disabled_passes)
    if until is not None and until not in STAGE_NAMES:
        raise ValueError(f"unknown stage {until!r}; the stages are: {', '.join(STAGE_NAMES)}")
    for stage in STAGES:
        if stage.name in FRONT_END and st.typed is not None and st.ast is None:
            continue                                     # resumed from a typed chain
        if progress is not None:
            progress(stage.name)
        t0 = time.perf_counter()
        if done is None or stage.name not in done:
            _run_stage(stage, job, st, dump_dir)
        st.seconds[stage.name] = time.perf_counter() - t0 if done is None or stage.name not in done else done[stage.name]
        st.texts[stage.name] = stage.text(st, job.options)
        if dump_dir is not None:
            path = dump_path(dump_dir, job.chain, stage.name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(st.texts[stage.name])
        if stage.name == until:
            break
    return st


def _run_stage(stage: Stage, job: Job, st: ChainStages, dump_dir) -> None:
    try:
        stage.run(job, st)
        if stage.verifies:
            verify(st.module, stage.name)
    except CompilerInternalError as e:
        dynamic = chain_dynamic(st.typed.symbols, job.options.dynamic) if st.typed is not None else ()
        if dynamic and stage.name in DYNAMIC_LIMITED:
            raise _not_dynamic(st.typed, dynamic, stage.name, e) from None
        if st.module is None or e.dump_path:
            raise
        raise e.with_dump(str(_dump_failure(st.module, job.chain, stage.name, dump_dir))) from None


# the stages past lowering that handle run-time extents only for some kernels: the GPU mapping
# (a thread loop's run-time count must be a clamped tile's), the attention template (a static number of queries), tile-and-fuse of some
# producers, and graph passes that fold a static chain into fewer ops than a dynamic one
DYNAMIC_LIMITED = ("plan", "tiled", "gpu", "kernels")


def _not_dynamic(chain: TypedChain, dynamic: tuple[str, ...], stage: str, e: CompilerInternalError) -> FdslError:
    """A build with run-time extents that a stage could not make: a user error at the chain,
    saying what stopped it, so the user binds the symbols statically instead."""
    names = ",".join(dynamic)
    return FdslError([Diagnostic(chain.span, f"chain '{chain.name}' cannot be built with {names} taken at run time "
                                             f"(--dynamic {names}): stage '{stage}': {_diagnostic(e)}; "
                                             f"bind {names} statically (leave {'it' if len(dynamic) == 1 else 'them'} "
                                             "out of --dynamic)")])


def _dump_failure(module: ir.Module, chain: str, stage: str, dump_dir) -> Path:
    """The IR as the failing stage left it (generic form when it does not verify); without a
    dump directory, under the fusec cache directory (never the system temp directory)."""
    directory = Path(dump_dir) if dump_dir is not None else cache_dir() / "internal-errors" / f"{chain}-{os.getpid()}"
    path = dump_path(directory, chain, stage, ".failed").with_suffix(".mlir")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(print_ir(module, locations=True))
    return path


def run_source_stages(text: str, path: str, chains: Iterable[str], bindings: dict[str, dict[str, int]] | None = None,
                      *, options: CompileOptions = CompileOptions(), until: str | None = None,
                      dump_dir: str | Path | None = None) -> dict[str, str]:
    """Every stage's text from `ast` (through `until`) for the named chains of a source:
    {stage: text}. With several chains a stage's text is the per-chain texts in order, separated
    by `// -----` (mlir-opt's split marker). The file is parsed and checked once, and each
    chain goes on from its typed chain; what a chain's later stages made is dropped once its
    texts are kept."""
    bindings = bindings or {}
    t0 = time.perf_counter()
    module = parse_text(text, path)
    t1 = time.perf_counter()
    typed = check_module(module)
    done = {"ast": t1 - t0, "typed": time.perf_counter() - t1}
    by_name = {c.name: c for c in typed.chains}
    per_chain = []
    for c in chains:
        if c not in by_name:
            raise KeyError(c)
        job = Job(c, tuple(sorted(bindings.get(c, {}).items())), options, text, path)
        st = _run(job, ChainStages(c, ast=module, typed=by_name[c]), until, dump_dir, done)
        per_chain.append(ChainStages(c, texts=st.texts, seconds=st.seconds))
    return _joined(per_chain)


def run_stages(typed: TypedModule, bindings: dict[str, dict[str, int]] | None = None, *,
               options: CompileOptions = CompileOptions(), until: str | None = None,
               dump_dir: str | Path | None = None) -> dict[str, str]:
    """Like run_source_stages, from `linalg` on, for every chain of a checked module."""
    bindings = bindings or {}
    return _joined([compile_typed(c, bindings.get(c.name, {}), options=options, until=until, dump_dir=dump_dir)
                    for c in typed.chains])


def _joined(per_chain: list[ChainStages]) -> dict[str, str]:
    names = [s for s in STAGE_NAMES if all(s in r.texts for r in per_chain)] if per_chain else []
    return {s: "\n// -----\n\n".join(r.texts[s] for r in per_chain) for s in names}


# ---- a chain's builds ------------------------------------------------------------------------

Timer = Callable[[str, str], float]          # (emitted module source, host function) -> seconds


@dataclass(frozen=True)
class ChainBuild:
    """What `build_chain` made of one chain and binding: the build that runs (`fused`; the
    unfused one when options.fuse is False) and, when asked for, the unfused baseline."""
    chain: TypedChain
    binding: dict[str, int]
    options: CompileOptions                      # as built (autotuned tiles filled in)
    builds: dict[str, ChainStages]               # "fused", and "unfused" when built
    kernel_report: tuple = ()                    # options.kernel_report: the running build's KernelReports

    @property
    def main(self) -> ChainStages:
        return self.builds["fused"]

    @property
    def plan(self) -> FusionPlan:
        return self.main.plan

    def sources(self) -> dict[str, str]:
        return {b: st.emitted.source for b, st in self.builds.items()}

    def seconds(self) -> dict[str, float]:
        return {f"{b}.{k}": v for b, st in self.builds.items() for k, v in st.seconds.items()}


def build_chain(chain: TypedChain, binding: dict[str, int], options: CompileOptions,
                timer: Timer | None = None, progress: StageProgress | None = None, unfused: bool = True,
                shared_tuning: autotune.SharedTuning | None = None) -> ChainBuild:
    """Compile one chain: the build that runs and (options.baseline, fusing, `unfused`) the unfused
    one (a Program makes it apart, when first asked for: fusec/compiled.py CompiledChain.unfused).
    With options.autotune, `timer` times candidate builds on the target (compiler/plan/autotune.py;
    `shared_tuning`: results shared beyond this machine). `progress`: told what is being done ("fused: tiled", "autotune: candidate 3", ...)."""
    def told(prefix: str) -> StageProgress | None:
        return None if progress is None else (lambda what: progress(f"{prefix}: {what}"))
    if options.autotune and options.fuse and options.tuned is None and options.plan_for(chain.name) is None:
        if timer is None:
            raise ValueError("autotuning needs a timer for the target")
        options = replace(options, tuned=_autotuned(chain, binding, options, timer, progress, shared_tuning))
    builds = {"fused": compile_typed(chain, binding, options=options,
                                     progress=told("fused" if options.fuse else "unfused"))}
    if unfused and options.baseline and options.fuse:
        plain = replace(options, fuse=False, plans=(), tuned=None, autotune=False, kernel_report=False)
        builds["unfused"] = compile_typed(chain, binding, options=plain, progress=told("unfused"))
    if progress is not None and options.kernel_report and options.target == "gpu":
        progress("kernel report")
    reports = (_measured(builds["fused"], options, binding) if options.kernel_report and options.target == "gpu"
               else ())
    return ChainBuild(chain, dict(binding), options, builds, reports)


def _measured(st: ChainStages, options: CompileOptions, binding: dict[str, int]) -> tuple:
    """The kernel report of a build, and its plan priced again with the measured resources. A
    build with run-time extents is measured at `binding` (its size class's top)."""
    hw = planning_profile(options)
    entry = st.emitted.entries[st.chain]
    if st.plan.dynamic:
        try:
            entry = entry.with_arg_shapes([p.type.concrete(binding) for p in st.typed.param_nodes])
        except ValueError as e:
            raise CompilerInternalError("kernels", str(e)) from None
    reports = tuple(report_kernels(st.emitted.source, entry, hw))
    measured = {r.group: m for r in reports if r.kind == "launch" and (m := r.measured()) is not None}
    st.plan = with_measured(st.plan, hw, measured)
    st.texts["plan"] = st.plan.format() + "\n"
    return reports


def _autotuned(chain: TypedChain, binding: dict[str, int], options: CompileOptions, timer: Timer,
               progress: StageProgress | None = None, shared: autotune.SharedTuning | None = None) -> str:
    """Measured tiles for the chain's kernels: the model's best candidates of each, timed."""
    base = replace(options, autotune=False, tuned=None, baseline=False)
    if progress is not None:
        progress("autotune: planning")
    planned = compile_typed(chain, binding, options=base, until="plan")
    plan = planned.plan
    if planned.layout is not None and planned.layout.plan is not None:
        base = replace(base, conv_layout=planned.layout.form)    # the candidates in the form the model kept
    timed = [0]

    def measure(tuned: dict) -> float:
        timed[0] += 1
        if progress is not None:
            progress(f"autotune: candidate {timed[0]} (compile)")
        st = compile_typed(chain, binding, options=replace(base, tuned=json.dumps(tuned, sort_keys=True)))
        if progress is not None:
            progress(f"autotune: candidate {timed[0]} (timing)")
        return timer(st.emitted.source, st.emitted.entries[chain.name].host)

    tuned, _ = autotune.tune(plan, measure, shared=shared)
    return json.dumps(tuned, sort_keys=True)
