"""`fusec compile FILE -o DIR`: compile every chain of an .fdsl file for one target and symbol
binding into an artifact directory (manifest, source, each build's module, the plan) that
`fusec run` executes without MLIR. Compiling needs no GPU. `-j N`: the chains in N worker
processes (fusec/parallel.py); the artifact is the same bytes for any N. Exit 0.
"""
from __future__ import annotations

import argparse

from fusec.runtime.memory import check_memory
from fusec.runtime.targets import Target

from .args import Parser, check_dynamic, dynamic_flag, hw_names, math_flag, memory_flag, pass_names, quiet_flag
from .inputs import MEMORY_FLAG, bind_flag, chain_binding, read_chains
from .options import progress_for, user_options


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="fusec compile", description="Compile every chain of FILE for one target and symbol "
                "binding into an artifact directory that `fusec run` executes without MLIR.")
    p.add_argument("file")
    p.add_argument("-o", "--output", required=True, metavar="DIR")
    p.add_argument("--target", choices=("cuda", "cuda-sim", "cpu"), default="cuda",
                   help="what the artifact runs on (default cuda; compiling needs no GPU)")
    p.add_argument("--bind", action="append", default=[], help="symbol sizes, e.g. M=64,N=128 (default 64)")
    p.add_argument("--chain", action="append", default=[], help="only this chain (repeatable)")
    p.add_argument("--no-fuse", action="store_true", help="the fused build is the unfused one")
    p.add_argument("--disable-pass", action="append", default=[], metavar="NAME", choices=pass_names())
    p.add_argument("--hw", choices=hw_names(), type=str.lower,
                   help="the hardware profile the cost model plans for (default: h200 for cuda, measured cpu)")
    p.add_argument("-j", "--jobs", type=jobs_arg, metavar="N",
                   help="compile the chains in N worker processes (default: this machine's cores); the artifact is "
                        "the same bytes for any N")
    dynamic_flag(p)
    math_flag(p)
    memory_flag(p)
    quiet_flag(p)
    return p


def jobs_arg(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number of worker processes (1 or more)")
    return int(text)


def run(args: argparse.Namespace) -> int:
    from fusec.artifacts import write_artifact
    from fusec.parallel import ChainJob, ChainResult, compile_chain, default_jobs, run_jobs
    from fusec.target_options import compile_options
    text, path, typed, chains = read_chains(args.file, args.chain)
    check_dynamic(args.dynamic, typed, args.target)
    bind = bind_flag(args.bind, chains, path)
    bindings = {c.name: chain_binding(c, bind) for c in chains}
    target = Target(args.target)          # compiling needs no device: nothing is imported here
    from fusec.compiler.dynamic import chain_dynamic, planning_binding, size_class
    bindings = {c.name: planning_binding(b, chain_dynamic(c.symbols, args.dynamic)) for c, b in
                ((c, bindings[c.name]) for c in chains)}
    for c in chains:
        check_memory(c, bindings[c.name], args.max_memory, MEMORY_FLAG)
    from pathlib import Path
    from fusec.runtime.artifact import check_replaceable
    check_replaceable(Path(args.output))      # before compiling (which may measure the cpu first)
    options = compile_options(target, user_options(args))
    jobs = [ChainJob(text, path, c.name, bindings[c.name], options, target.name) for c in chains]
    progress = progress_for(args)
    n = min(args.jobs or default_jobs(), len(jobs))
    printed, results = [0], [None] * len(jobs)

    def said(c, result) -> str:
        binding, dyn = bindings[c.name], chain_dynamic(c.symbols, args.dynamic)
        k = result.kernels
        return (f"compiled {c.name} [{', '.join(f'{k}={v}' for k, v in binding.items())}]: "
                f"{k} kernel{'s' if k != 1 else ''}"
                + (f"; {', '.join(dyn)} taken at run time (planned for the size class "
                   f"{', '.join(f'{d} in {size_class(binding[d])}' for d in dyn)})" if dyn else ""))

    def done(i: int, result) -> None:           # lines in the file's order, as soon as they can be
        results[i] = result
        progress.clear()
        while printed[0] < len(jobs) and results[printed[0]] is not None:
            if not isinstance(results[printed[0]], ChainResult):
                return                           # a failed job: its error is raised after the others
            print(said(chains[printed[0]], results[printed[0]]))
            printed[0] += 1
        left = [c.name for c, r in zip(chains, results) if r is None]
        if left and n > 1:
            progress.show(f"[{len(jobs) - len(left)}/{len(jobs)}] compiling in {n} workers: {', '.join(left[:3])}"
                          + (" ..." if len(left) > 3 else ""))

    try:
        if n > 1:
            progress.show(f"[0/{len(jobs)}] starting {n} workers")
            run_jobs(compile_chain, jobs, n, done)
        else:
            for i, (c, job) in enumerate(zip(chains, jobs)):
                done(i, compile_chain(job, progress.stage(f"[{i + 1}/{len(chains)}] {c.name}: compiling")))
    finally:
        progress.clear()
    out = write_artifact(args.output, target, path, text, options, [r.record for r in results])
    print(f"wrote {out}")
    return 0
