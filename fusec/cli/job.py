"""`fusec FILE`, the main job: compile each chain of an .fdsl file for a target, run it fused
and unfused on seeded random inputs (or --inputs), check every output against the NumPy
reference and report (plan, times, errors); --emit STAGE prints one stage's text and stops,
--dump-dir writes every stage, --plot and --html draw the run (fusec/plots.py, fusec/html). Exit
0, 3 on a numerics failure, 4 after a fallback.
"""
from __future__ import annotations

import argparse

from fusec.runtime import reference
from fusec.runtime.targets import COMPILED, TARGETS, Target, select

from ..errors import UsageError
from .args import (Parser, check_dynamic, check_kernel_report, check_output_dir, check_output_file, dynamic_flag,
                   hw_names, kernel_report_flag, math_flag, memory_flag, pass_names, quiet_flag, seed_arg, stage_names)
from .exits import finish
from .inputs import bind_flag, load_inputs, npz_entry, plan_run, read_chains, read_inputs
from .options import NOT_RUN, default_target, make_program, no_gpu, progress_for, user_options


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="fusec", description="Compile, run and check FDSL chains. "
                                "Subcommand: `fusec test PATH...` runs golden tests; "
                                "`fusec import MODEL.onnx` writes an ONNX model as FDSL.")
    p.add_argument("file", help="an .fdsl file")
    p.add_argument("--emit", choices=stage_names(), help="print the program after this stage and stop")
    p.add_argument("--target", choices=TARGETS,
                   help="where to run each chain: cuda, cuda-sim (Numba's simulator), cpu, reference (NumPy "
                        "only) or mlir-jit (MLIR's CPU JIT); default: cuda when a GPU is present, else cpu")
    p.add_argument("--no-fuse", action="store_true",
                   help="run the unfused build (one kernel per linalg op); also FUSEC_NO_FUSE=1")
    p.add_argument("--report", metavar="JSON", help="write plan, timings, errors and compile times as JSON")
    p.add_argument("--chain", action="append", default=[], help="only this chain (repeatable)")
    p.add_argument("--bind", action="append", default=[], help="symbol sizes, e.g. M=64,N=128")
    p.add_argument("--inputs", action="append", default=[], metavar="NPZ",
                   help="an npz with CHAIN/in/ARG arrays (else seeded random inputs); repeatable: the files are "
                        "merged (a key in two files must hold the same array)")
    p.add_argument("--save", help="write inputs and outputs to this npz (CHAIN/in/ARG, CHAIN/out/K)")
    p.add_argument("--seed", type=seed_arg, default=0, help="seed for random inputs (default 0)")
    p.add_argument("--dump-dir", help="write every stage of every chain to this directory")
    p.add_argument("--disable-pass", action="append", default=[], metavar="NAME", choices=pass_names(),
                   help="switch off a graph pass by name (repeatable): " + ", ".join(pass_names()))
    p.add_argument("--locations", action="store_true", help="show source locations in printed IR")
    p.add_argument("--explain", action="store_true",
                   help="print the cost model's view of every kernel (ops, tiles, FLOPs, bytes unfused -> fused, "
                        "intensity, bound, predicted time) and every rejected fusion with its reason")
    p.add_argument("--hw", choices=hw_names(), type=str.lower,
                   help="the hardware profile the cost model plans for (default: the real device on cuda, "
                        "h200 on other GPU targets, this machine's measured profile on cpu)")
    p.add_argument("--autotune", action="store_true",
                   help="time the model's best tile candidates on the target and keep the fastest "
                        "(cached on disk by kernel, shapes, dtype and hardware)")
    p.add_argument("--plot", metavar="DIR", help="write roofline.png, traffic.png and breakdown.png to DIR")
    p.add_argument("--html", metavar="FILE",
                   help="write one self-contained HTML report (no network): every chain's fused graph, the "
                        "roofline, memory traffic and time views, and each kernel with its emitted source")
    p.add_argument("--fallback", action=argparse.BooleanOptionalAction, default=True,
                   help="a fused kernel whose outputs fail the numerics check is replaced by the unfused kernels "
                        "of its ops and the run goes on; the report names it and fusec exits 4 (default: on; "
                        "--no-fallback: exit 3 on the failure)")
    p.add_argument("--no-cache", action="store_true",
                   help="compile every chain again rather than load it from the compile cache "
                        "($FUSEC_CACHE_DIR/compiled; also FUSEC_NO_CACHE=1), and store nothing there")
    p.add_argument("--remote-cache", metavar="URL",
                   help="redis://HOST:PORT/DB: the compile cache's tier shared by a fleet (also $FUSEC_REMOTE_CACHE; "
                        "needs $FUSEC_CACHE_SECRET): looked up after the local cache, given every build compiled here")
    dynamic_flag(p)
    math_flag(p)
    kernel_report_flag(p)
    memory_flag(p)
    quiet_flag(p)
    return p


def run(args: argparse.Namespace) -> int:
    text, path, typed, chains = read_chains(args.file, args.chain)
    for flag, value in (("--dump-dir", args.dump_dir), ("--plot", args.plot)):
        check_output_dir(flag, value)
    check_output_file("--html", args.html)
    bind = bind_flag(args.bind, chains, path)
    given = None
    if args.inputs:
        merged, files = read_inputs("--inputs", args.inputs, args.max_memory)
        given = load_inputs("--inputs", files, chains, path, args.max_memory, [c.name for c in typed.chains],
                            given=merged, choose="; run only the chains it holds with --chain NAME")
    name = args.target or default_target()
    check_dynamic(args.dynamic, typed, name)
    plans = [plan_run(c, given, bind, args.max_memory, name) for c in chains]     # refused before anything else
    if (args.explain or args.plot or args.autotune) and name not in COMPILED:
        raise UsageError(f"--explain, --plot and --autotune need a compiled target (cuda, cuda-sim, cpu), "
                         f"not {name}")
    if args.html and name not in COMPILED:
        raise UsageError(f"--html needs a compiled target (cuda, cuda-sim, cpu), not {name}")
    check_kernel_report(args, name)
    if args.emit or args.dump_dir:
        # the simulator is chosen before anything imports numba.cuda (the kernels stage may)
        texts = _stage_texts(text, path, plans, args, select(name) if name == "cuda-sim" else Target(name))
        if args.emit:
            print(texts[args.emit], end="" if texts[args.emit].endswith("\n") else "\n")
            return 0
    if args.kernel_report and no_gpu(name):
        return _report_without_running(args, plans)
    program = make_program(text, path, name, args)
    if program.target.compiled:
        return _run_compiled(args, program, plans, args.seed)
    from ..report import run_reference
    reports, saved = [], {}
    for chain, inputs, binding in plans:
        inputs = inputs if inputs is not None else reference.random_inputs(chain, binding, args.seed)
        outs = program.chains[chain.name].compiled(binding).fused(*inputs)
        rep = run_reference(chain, binding, outs, inputs, name)
        print(rep.format())
        reports.append(rep)
        saved[chain.name] = npz_entry(chain, inputs, outs)
    return finish(args, reports, saved)


def _run_compiled(args, program, plans, seed: int) -> int:
    """The main job: compile each chain, run it fused and unfused, check it, report."""
    from fusec.compiler.plan.describe import format_plan
    from ..report import run_and_check
    reports, saved, pages = [], {}, []
    for chain, inputs, binding in plans:
        compiled = program.chains[chain.name].compiled(binding)
        inputs = inputs if inputs is not None else reference.random_inputs(chain, binding, seed)
        if args.explain:
            print(format_plan(compiled.plan, explain=True, binding=binding))
        program.progress.show(f"{chain.name}: running and checking (Numba compiles on the first call)")
        try:
            rep = run_and_check(compiled, inputs, running="fused" if program.options.fuse else "unfused")
        finally:
            program.progress.clear()
        if not rep.ok and args.fallback and program.options.fuse:
            from ..fallback import repair
            program.progress.show(f"{chain.name}: numerics check failed; looking for the kernel at fault")
            try:
                fb = repair(program, compiled, inputs, "; ".join(f"out {i}: {why}"
                                                                  for i, why in rep.failed_outputs().items()))
                if fb is not None:
                    compiled = fb.compiled
                    program.progress.show(f"{chain.name}: running the fallback build")
                    rep = run_and_check(compiled, inputs)
                    rep.fallback = fb
            finally:
                program.progress.clear()
        rep.kernel_report = compiled.kernel_report
        print(rep.format())
        reports.append(rep)
        pages.append((rep, chain, compiled.texts.get("kernels")))
        saved[chain.name] = npz_entry(chain, inputs, rep.outputs)
    program.share()                  # the builds compiled here, now with Numba's cache of what ran
    if args.plot:
        from ..plots import write_plots
        try:
            for path in write_plots(reports, args.plot):
                print(f"wrote {path}")
        except OSError as e:
            raise UsageError(f"--plot {args.plot}: cannot write the plots: {e.strerror or e}") from None
    _write_html(args, pages)
    return finish(args, reports, saved)


def _report_without_running(args, plans) -> int:
    """--kernel-report on cuda without a GPU: compile each chain and report its kernels."""
    from fusec.compiler.pipeline import build_chain
    from fusec.target_options import compile_options
    from ..report import UnrunReport
    options = compile_options(Target("cuda"), user_options(args, baseline=False))
    reports, pages = [], []
    progress = progress_for(args)
    for chain, _inputs, binding in plans:
        try:
            built = build_chain(chain, binding, options, progress=progress.stage(f"{chain.name}: compiling"))
        finally:
            progress.clear()
        rep = UnrunReport(chain.name, "cuda", dict(binding), built.plan.summary(), list(built.kernel_report),
                          NOT_RUN, "fused" if options.fuse else "unfused")
        print(rep.format())
        reports.append(rep)
        pages.append((rep, chain, built.main.texts.get("kernels")))
    _write_html(args, pages)
    return finish(args, reports, {})


def _write_html(args, pages) -> None:
    """--html FILE: the report page of these (report, typed chain, emitted module)s."""
    if not args.html:
        return
    from ..html import ChainInput, write_html
    try:
        write_html(args.html, [ChainInput(*p) for p in pages], title=f"fusec report: {args.file}")
    except OSError as e:
        raise UsageError(f"--html {args.html}: cannot write it: {e.strerror or e}") from None
    print(f"wrote {args.html}")


def _stage_texts(text: str, path: str, plans, args, target: Target) -> dict[str, str]:
    """--emit / --dump-dir: the stages' texts for the selected chains, compiled for `target`."""
    from fusec.compiler.pipeline import STAGE_NAMES, run_source_stages
    from fusec.target_options import compile_options
    planned = args.emit is None or STAGE_NAMES.index(args.emit) >= STAGE_NAMES.index("plan")
    if planned and not target.compiled:
        raise UsageError(f"--emit {args.emit or 'all stages'} needs a compiled target (cuda, cuda-sim, cpu), "
                         f"not {target.name}")
    options = compile_options(target, user_options(args), plans=planned)
    from fusec.compiler.dynamic import chain_dynamic, planning_binding
    bindings = {c.name: planning_binding(b, chain_dynamic(c.symbols, options.dynamic)) for c, _, b in plans}
    return run_source_stages(text, path, [c.name for c, _, _ in plans], bindings,
                             options=options, until=args.emit, dump_dir=args.dump_dir)
