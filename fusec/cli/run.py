"""`fusec run DIR`: run a compiled artifact on its target (or --target), check it against the
NumPy reference and report, like the main job; needs no MLIR. --bind gives the extents of
symbols compiled --dynamic. Exit 0, or 3 on a numerics failure.
"""
from __future__ import annotations

import argparse

from fusec.dsl.typed import TypedModule
from fusec.runtime import reference
from fusec.runtime.artifact import ArtifactError

from .. import api
from ..errors import UsageError
from .args import Parser, check_kernel_report, kernel_report_flag, memory_flag, seed_arg
from .exits import finish
from .inputs import bind_flag, load_inputs, npz_entry, plan_run, read_inputs
from .options import NOT_RUN, no_gpu


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="fusec run", description="Run a compiled artifact on its target, check it against the "
                "NumPy reference and report, like `fusec FILE` does.")
    p.add_argument("artifact", metavar="DIR")
    p.add_argument("--inputs", action="append", default=[], metavar="NPZ",
                   help="an npz with CHAIN/in/ARG arrays (else seeded random inputs); repeatable: the files are "
                        "merged (a key in two files must hold the same array)")
    p.add_argument("--save", help="write inputs and outputs to this npz")
    p.add_argument("--report", metavar="JSON", help="write the report as JSON")
    p.add_argument("--seed", type=seed_arg, default=0, help="seed for random inputs (default 0)")
    p.add_argument("--bind", action="append", default=[],
                   help="extents of the symbols compiled --dynamic, for the random inputs (e.g. M=700; the others "
                        "are the artifact's)")
    p.add_argument("--target", choices=("cuda", "cuda-sim", "cpu"),
                   help="override the artifact's target (cuda artifacts also run on cuda-sim)")
    kernel_report_flag(p)
    memory_flag(p)
    return p


def run(args: argparse.Namespace) -> int:
    from fusec.artifacts import artifact_kernel_report, load_chain
    from fusec.runtime import artifact as art
    from fusec.runtime.targets import select
    from ..report import run_and_check
    a = art.load(args.artifact)
    name = args.target or a.target
    if a.target == "cpu" and name != "cpu" or a.target != "cpu" and name == "cpu":
        raise UsageError(f"{args.artifact} was compiled for {a.target}; it cannot run on {name}")
    check_kernel_report(args, name)
    typed = api.check(api.parse_text(a.source(), str(a.source_file)))
    chains = []
    for cname, meta in a.chains.items():
        if cname not in {c.name for c in typed.chains}:
            raise ArtifactError(f"{a.directory / 'manifest.json'} names chain '{cname}', which {a.source_file} "
                                "does not define; recompile the artifact")
        chain = typed.chain(cname)
        missing = [s for s in chain.symbols if s not in meta.binding]
        if missing:
            raise ArtifactError(f"{a.directory / 'manifest.json'}: chain '{cname}' has no size for {missing[0]}; "
                                "recompile the artifact")
        chains.append(chain)
    if args.kernel_report and no_gpu(name):
        return _report_artifact_without_running(args, a, typed)
    if no_gpu(name):
        raise UsageError(f"no CUDA GPU is available to run {args.artifact}, compiled for cuda; run it on Numba's "
                         "simulator with --target cuda-sim, or compile it again with fusec compile --target cpu")
    given = None
    if args.inputs:
        merged, files = read_inputs("--inputs", args.inputs, args.max_memory)
        given = load_inputs("--inputs", files, chains, str(a.directory), args.max_memory, given=merged)
    runtime = {c.name: set((a.chains[c.name].plan or {}).get("dynamic", {})) for c in chains}
    bind = bind_flag(args.bind, chains, str(a.directory)) if args.bind else {}
    fixed = sorted(s for s in bind if not any(s in runtime[c.name] for c in chains))
    if fixed:
        raise UsageError(f"--bind {fixed[0]}: {args.artifact} was compiled for one extent of {fixed[0]} (only symbols "
                         "compiled with --dynamic take another)")
    plans = []
    for chain in chains:
        binding = {s: bind.get(s, a.chains[chain.name].binding[s]) if s in runtime[chain.name]
                   else a.chains[chain.name].binding[s] for s in chain.symbols}
        if given is not None:        # the run-time extents come from the inputs
            binding = {s: v for s, v in binding.items() if s not in runtime[chain.name]}
        plans.append(plan_run(chain, given, binding, args.max_memory, name))
    target = select(name)
    reports, saved = [], {}
    for chain, inputs, binding in plans:
        inputs = inputs if inputs is not None else reference.random_inputs(chain, binding, args.seed)
        rep = run_and_check(load_chain(a, chain, target, numba_cache=True), inputs)
        if args.kernel_report:
            rep.kernel_report = artifact_kernel_report(a, chain)
        print(rep.format())
        reports.append(rep)
        saved[chain.name] = npz_entry(chain, inputs, rep.outputs)
    return finish(args, reports, saved)


def _report_artifact_without_running(args, a, typed: TypedModule) -> int:
    """fusec run DIR --kernel-report on cuda without a GPU: report each chain's kernels."""
    from fusec.artifacts import artifact_kernel_report
    from ..report import UnrunReport
    build = "fused" if a.options.get("fuse", True) else "unfused"
    reports = []
    for name, meta in a.chains.items():
        binding = {s: meta.binding[s] for s in typed.chain(name).symbols}
        reports.append(UnrunReport(name, "cuda", binding, meta.plan, artifact_kernel_report(a, typed.chain(name)),
                                   NOT_RUN, build))
        print(reports[-1].format())
    return finish(args, reports, {})


# ---- fusec cache -----------------------------------------------------------------------------
