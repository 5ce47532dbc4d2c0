"""`fusec` command line: compile, run and check FDSL chains.

    fusec FILE [--target T] [--emit STAGE] [--inputs in.npz] [--save out.npz] [--bind M=64,...]
               [--report r.json] [--no-fuse] [--dump-dir DIR] [--explain] [--hw NAME]
               [--autotune] [--plot DIR] [--kernel-report]
    fusec compile FILE -o DIR [--target T] [--bind ...]     write a compiled artifact
    fusec run DIR [--inputs in.npz] [--save out.npz] [--kernel-report]
                                                            run one (no MLIR needed)
    fusec test PATH... [--update] [--target T]              golden tests

Exit status: 0 ok, 1 a mistake in the input (printed as file:line:col diagnostics),
2 an internal error (with a reproduction hint), 3 a numerics mismatch.
"""
from __future__ import annotations

import argparse
import glob
import os
import shlex
import sys
import traceback

import numpy as np

from fusec.dsl.diagnostics import FdslError
from fusec.dsl.typed import TypedChain, TypedModule
from fusec.runtime import npz, reference
from fusec.runtime.artifact import ArtifactError
from fusec.runtime.compare import compare
from fusec.runtime.targets import COMPILED, TARGETS, Target, TargetError

from . import api
from .errors import NumericsError, UsageError

DEFAULT_SIZE = 64


def _stage_names() -> tuple[str, ...]:
    try:
        from fusec.compiler.pipeline import STAGE_NAMES
    except ImportError:          # no MLIR in this environment: only the reference can run
        return ()
    return tuple(STAGE_NAMES)


def _pass_names() -> tuple[str, ...]:
    try:
        from fusec.compiler.transforms.graph import PASS_NAMES
    except ImportError:
        return ()
    return tuple(PASS_NAMES)


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad flag is a user error like any other: message, exit 1."""

    def error(self, message: str):
        raise UsageError(f"{message} (see {self.prog} --help)")


def _main_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="fusec", description="Compile, run and check FDSL chains. "
                                "Subcommand: `fusec test PATH...` runs golden tests.")
    p.add_argument("file", help="an .fdsl file")
    p.add_argument("--emit", choices=_stage_names(), help="print the program after this stage and stop")
    p.add_argument("--target", choices=TARGETS,
                   help="where to run each chain: cuda, cuda-sim (Numba's simulator), cpu, reference (NumPy "
                        "only) or mlir-jit (MLIR's CPU JIT); default: cuda when a GPU is present, else cpu")
    p.add_argument("--no-fuse", action="store_true",
                   help="run the unfused build (one kernel per linalg op); also FUSEC_NO_FUSE=1")
    p.add_argument("--report", metavar="JSON", help="write plan, timings, errors and compile times as JSON")
    p.add_argument("--chain", action="append", default=[], help="only this chain (repeatable)")
    p.add_argument("--bind", action="append", default=[], help="symbol sizes, e.g. M=64,N=128")
    p.add_argument("--inputs", help="an npz with CHAIN/in/ARG arrays (else seeded random inputs)")
    p.add_argument("--save", help="write inputs and outputs to this npz (CHAIN/in/ARG, CHAIN/out/K)")
    p.add_argument("--seed", type=int, default=0, help="seed for random inputs (default 0)")
    p.add_argument("--dump-dir", help="write every stage of every chain to this directory")
    p.add_argument("--disable-pass", action="append", default=[], metavar="NAME", choices=_pass_names(),
                   help="switch off a graph pass by name (repeatable): " + ", ".join(_pass_names()))
    p.add_argument("--locations", action="store_true", help="show source locations in printed IR")
    p.add_argument("--explain", action="store_true",
                   help="print the cost model's view of every kernel (ops, tiles, FLOPs, bytes unfused -> fused, "
                        "intensity, bound, predicted time) and every rejected fusion with its reason")
    p.add_argument("--hw", choices=_hw_names(), type=str.lower,
                   help="the hardware profile the cost model plans for (default: the real device on cuda, "
                        "h200 on other GPU targets, this machine's measured profile on cpu)")
    p.add_argument("--autotune", action="store_true",
                   help="time the model's best tile candidates on the target and keep the fastest "
                        "(cached on disk by kernel, shapes, dtype and hardware)")
    p.add_argument("--plot", metavar="DIR", help="write roofline.png, traffic.png and breakdown.png to DIR")
    _kernel_report_flag(p)
    return p


def _kernel_report_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kernel-report", action="store_true",
                   help="cuda, cuda-sim: also print each chain's GPU kernels as measured without a GPU (registers, "
                        "local memory, spills, shared memory from ptxas -v; occupancy and waves; coalescing traced "
                        "on the simulator); on cuda without a GPU the chains are compiled and reported, not run")


def _check_kernel_report(args, target: str) -> None:
    if getattr(args, "kernel_report", False) and target not in ("cuda", "cuda-sim"):
        raise UsageError(f"--kernel-report needs --target cuda or cuda-sim, not {target}")


def _no_gpu(target: str) -> bool:
    """--target cuda, and no CUDA GPU this process can use."""
    from fusec.runtime.targets import best_available
    return target == "cuda" and best_available() != "cuda"


def _hw_names() -> tuple[str, ...]:
    try:
        from fusec.compiler.plan.hardware import NAMES
    except ImportError:
        return ()
    return tuple(NAMES)


def _test_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="fusec test", description="Run every chain that has a golden entry "
                                "(NAME.golden.npz beside NAME.fdsl) and compare with the golden outputs.")
    p.add_argument("paths", nargs="+", help=".fdsl files or directories")
    p.add_argument("--update", action="store_true", help="(re)write golden files from the reference")
    p.add_argument("--target", choices=TARGETS, default="reference",
                   help="what to test against the golden outputs (default: the reference itself)")
    p.add_argument("--bind", action="append", default=[], help="symbol sizes for --update (default 64)")
    p.add_argument("--seed", type=int, default=0)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] == "test":
            return _cmd_test(_test_parser().parse_args(argv[1:]))
        if argv and argv[0] == "compile":
            return _cmd_compile(_compile_parser().parse_args(argv[1:]))
        if argv and argv[0] == "run":
            return _cmd_run(_run_parser().parse_args(argv[1:]))
        return _cmd_main(_main_parser().parse_args(argv))
    except FdslError as e:
        print(e.render(), file=sys.stderr)
        return 1
    except UsageError as e:
        print(f"fusec: error: {e}", file=sys.stderr)
        return 1
    except (TargetError, ArtifactError) as e:
        print(f"fusec: error: {e}", file=sys.stderr)
        return 1
    except NumericsError as e:
        print(f"fusec: numerics failure: {e}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # an internal error: never the user's fault
        return _internal_error(e, argv)


def _internal_error(e: BaseException, argv: list[str]) -> int:
    stage = getattr(e, "stage", None)
    dump = getattr(e, "dump_path", None)
    print(f"fusec: internal error{f' in stage {stage}' if stage else ''}: {type(e).__name__}: {e}", file=sys.stderr)
    if dump:
        print(f"  the IR at that point is in {dump}", file=sys.stderr)
    print(f"  reproduce with: fusec {shlex.join(argv)} --dump-dir /tmp/fusec-dump", file=sys.stderr)
    print("  this is a bug in fusec, not in your program; please report it with the file above", file=sys.stderr)
    if os.environ.get("FUSEC_TRACEBACK"):
        traceback.print_exc()
    return 2


# ---- fusec FILE ------------------------------------------------------------------------------

def _cmd_main(args: argparse.Namespace) -> int:
    text, path = api.read_source(args.file)
    typed = api.check(api.parse(args.file))
    chains = _select(typed, args.chain)
    name = args.target or _default_target()
    if (args.explain or args.plot or args.autotune) and name not in COMPILED:
        raise UsageError(f"--explain, --plot and --autotune need a compiled target (cuda, cuda-sim, cpu), "
                         f"not {name}")
    _check_kernel_report(args, name)
    given = npz.load(args.inputs) if args.inputs else {}
    bind = api.parse_bind(",".join(args.bind))
    plans = [(c, *_inputs_for(c, given.get(c.name, {}).get("in"), bind, args.seed)) for c in chains]
    if args.emit or args.dump_dir:
        texts = _stage_texts(text, path, plans, args, Target(name))
        if args.emit:
            print(texts[args.emit], end="" if texts[args.emit].endswith("\n") else "\n")
            return 0
    if args.kernel_report and _no_gpu(name):
        return _report_without_running(args, plans)
    program = _program(args.file, name, args)
    if program.target.compiled:
        return _run_compiled(args, program, plans)
    saved, failures = {}, []
    for chain, inputs, binding in plans:
        outs = program.chains[chain.name].compiled(binding).fused(*inputs)
        failures += _report(chain, binding, outs, inputs, name)
        saved[chain.name] = _entry(chain, inputs, outs)
    if args.save:
        npz.save(args.save, saved)
    if failures:
        raise NumericsError("; ".join(failures))
    return 0


def _default_target() -> str:
    from fusec.runtime.targets import best_available
    return best_available()


def _user_options(args, baseline: bool = True) -> dict:
    """The command line's compile options (fusec.compiler.options.CompileOptions fields; `hw` names
    the hardware profile)."""
    return {"fuse": not getattr(args, "no_fuse", False), "baseline": baseline,
            "disabled_passes": tuple(getattr(args, "disable_pass", ())), "hw": getattr(args, "hw", None),
            "autotune": getattr(args, "autotune", False), "locations": getattr(args, "locations", False),
            "kernel_report": getattr(args, "kernel_report", False)}


def _program(path_or_source: str, target: str | None, args, baseline: bool = True):
    from fusec.program import compile as compile_program
    return compile_program(path_or_source, target, _user_options(args, baseline))


def _run_compiled(args, program, plans) -> int:
    """The main job: compile each chain, run it fused and unfused, check it, report."""
    from fusec.compiler.plan.describe import format_plan
    from .report import run_and_check
    reports, saved = [], {}
    for chain, inputs, binding in plans:
        compiled = program.chains[chain.name].compiled(binding)
        if args.explain:
            print(format_plan(compiled.plan, explain=True, binding=binding))
        rep = run_and_check(compiled, inputs, running="fused" if program.options.fuse else "unfused")
        rep.kernel_report = compiled.kernel_report
        print(rep.format())
        reports.append(rep)
        saved[chain.name] = _entry(chain, inputs, rep.outputs)
    if args.plot:
        from .plots import write_plots
        for path in write_plots(reports, args.plot):
            print(f"wrote {path}")
    return _finish(args, reports, saved)


_NOT_RUN = "no CUDA GPU here (the kernel report needs none)"


def _report_without_running(args, plans) -> int:
    """--kernel-report on cuda without a GPU: compile each chain and report its kernels."""
    from fusec.compiler.pipeline import build_chain
    from fusec.program import compile_options
    from .report import UnrunReport
    options = compile_options(Target("cuda"), _user_options(args, baseline=False))
    reports = []
    for chain, _inputs, binding in plans:
        built = build_chain(chain, binding, options)
        rep = UnrunReport(chain.name, "cuda", dict(binding), built.plan.summary(), list(built.kernel_report),
                          _NOT_RUN, "fused" if options.fuse else "unfused")
        print(rep.format())
        reports.append(rep)
    return _finish(args, reports, {})


def _finish(args, reports, saved) -> int:
    if getattr(args, "save", None):
        npz.save(args.save, saved)
    if getattr(args, "report", None):
        import json
        with open(args.report, "w") as f:
            json.dump({"fusec": fusec_version(), "chains": [r.as_dict() for r in reports]}, f, indent=2)
    failures = [f for r in reports for f in r.failures()]
    if failures:
        raise NumericsError("; ".join(failures))
    return 0


def fusec_version() -> str:
    from .version import __version__
    return __version__


def _entry(chain: TypedChain, inputs, outputs) -> tuple[dict, list]:
    """One chain's npz entry: inputs by parameter name, outputs in order (runtime/npz.py)."""
    return {p.name: x for p, x in zip(chain.param_nodes, inputs)}, list(outputs)


def _select(typed: TypedModule, names: list[str]) -> list[TypedChain]:
    if not names:
        return list(typed.chains)
    known = {c.name for c in typed.chains}
    for n in names:
        if n not in known:
            raise UsageError(f"no chain named '{n}' in {typed.file.path} (chains: {', '.join(sorted(known))})")
    return [c for c in typed.chains if c.name in names]


def _inputs_for(chain: TypedChain, given: dict | None, bind: dict[str, int], seed: int):
    """Inputs and symbol binding for a chain: given arrays (all of them) or seeded random ones."""
    if given:
        missing = [p.name for p in chain.param_nodes if p.name not in given]
        if missing:
            raise UsageError(f"--inputs has no {chain.name}/in/{missing[0]} for chain '{chain.name}'")
        inputs = [_declared(given[p.name], p.type.dtype) for p in chain.param_nodes]
        return inputs, reference.bind_symbols(chain, inputs, bind)
    binding = {}
    for s in chain.symbols:
        if s not in bind:
            print(f"note: chain {chain.name}: {s} is not bound; using {s}={DEFAULT_SIZE} "
                  f"(set it with --bind {s}=...)", file=sys.stderr)
        binding[s] = bind.get(s, DEFAULT_SIZE)
    return reference.random_inputs(chain, binding, seed), binding


def _declared(x: np.ndarray, dtype) -> np.ndarray:
    """npz stores bf16 as f32 (runtime/npz.py): convert back when the value is exactly bf16."""
    if dtype.name == "bf16" and x.dtype == np.float32:
        y = x.astype(dtype.np)
        if np.array_equal(y.astype(np.float32), x, equal_nan=True):
            return y
    return x


def _stage_texts(text: str, path: str, plans, args, target: Target) -> dict[str, str]:
    """--emit / --dump-dir: the stages' texts for the selected chains, compiled for `target`."""
    from fusec.compiler.pipeline import STAGE_NAMES, run_source_stages
    from fusec.program import compile_options
    planned = args.emit is None or STAGE_NAMES.index(args.emit) >= STAGE_NAMES.index("plan")
    if planned and not target.compiled:
        raise UsageError(f"--emit {args.emit or 'all stages'} needs a compiled target (cuda, cuda-sim, cpu), "
                         f"not {target.name}")
    options = compile_options(target, _user_options(args), plans=planned)
    return run_source_stages(text, path, [c.name for c, _, _ in plans], {c.name: b for c, _, b in plans},
                      options=options, until=args.emit, dump_dir=args.dump_dir)


def _report(chain: TypedChain, binding, outs, inputs, target: str) -> list[str]:
    bound = ", ".join(f"{k}={v}" for k, v in binding.items())
    print(f"chain {chain.name}{f' [{bound}]' if bound else ''}: target {target}")
    expected = reference.run_chain(chain, inputs, binding) if target != "reference" else None
    failures = []
    for i, (out, t) in enumerate(zip(outs, chain.output_types)):
        x = np.asarray(out)
        shown = t.dtype.name + (f"[{', '.join(map(str, x.shape))}]" if x.ndim else "")
        xf = x.astype(np.float64)
        line = f"  out {i}: {shown}  sum={xf.sum():.6g}  mean|x|={np.abs(xf).mean() if x.size else 0:.6g}"
        if expected is not None:
            c = compare(x, expected[i], t.dtype.name)
            line += f"  vs reference: {'ok' if c.ok else 'MISMATCH'} (max abs err {c.max_abs:.3g})"
            if not c.ok:
                failures.append(f"chain {chain.name} output {i}: {c.describe()}")
        print(line)
    return failures


# ---- fusec test ------------------------------------------------------------------------------

def _fdsl_files(paths: list[str]) -> list[str]:
    files = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(glob.glob(os.path.join(p, "**", "*.fdsl"), recursive=True))
        elif os.path.isfile(p):
            files.append(p)
        else:
            raise UsageError(f"no such file or directory: {p}")
    return files


def golden_path(fdsl: str) -> str:
    return fdsl[: -len(".fdsl")] + ".golden.npz" if fdsl.endswith(".fdsl") else fdsl + ".golden.npz"


def _cmd_test(args: argparse.Namespace) -> int:
    bind = api.parse_bind(",".join(args.bind))
    passed = failed = 0
    for path in _fdsl_files(args.paths):
        typed = api.check(path)
        gpath = golden_path(path)
        if args.update:
            chains = {}
            for c in typed.chains:
                inputs, binding = _inputs_for(c, None, bind, args.seed)
                chains[c.name] = _entry(c, inputs, reference.run_chain(c, inputs, binding))
            npz.save(gpath, chains)
            print(f"wrote {gpath} ({len(chains)} chains)")
            continue
        if not os.path.exists(gpath):
            print(f"{path}: no golden file ({gpath}); skipped")
            continue
        golden = npz.load(gpath)
        program = _program(path, args.target, args, baseline=False)
        for c in typed.chains:
            if c.name not in golden:
                continue
            entry = golden[c.name]
            inputs, binding = _inputs_for(c, entry["in"], bind, args.seed)
            outs = program.chains[c.name].compiled(binding).fused(*inputs)
            problems = []
            for i, t in enumerate(c.output_types):
                want = entry["out"].get(str(i))
                if want is None:
                    problems.append(f"golden file has no {c.name}/out/{i}")
                    continue
                cmp = compare(outs[i], want, t.dtype.name)
                if not cmp.ok:
                    problems.append(f"output {i}: {cmp.describe()}")
            status = "ok" if not problems else "FAIL"
            print(f"{path}::{c.name} [{args.target}] {status}" + "".join(f"\n    {p}" for p in problems))
            passed += not problems
            failed += bool(problems)
    if not args.update:
        print(f"{passed} passed, {failed} failed")
    return 3 if failed else 0


# ---- fusec compile / fusec run ---------------------------------------------------------------

def _compile_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="fusec compile", description="Compile every chain of FILE for one target and symbol "
                "binding into an artifact directory that `fusec run` executes without MLIR.")
    p.add_argument("file")
    p.add_argument("-o", "--output", required=True, metavar="DIR")
    p.add_argument("--target", choices=("cuda", "cuda-sim", "cpu"), default="cuda",
                   help="what the artifact runs on (default cuda; compiling needs no GPU)")
    p.add_argument("--bind", action="append", default=[], help="symbol sizes, e.g. M=64,N=128 (default 64)")
    p.add_argument("--chain", action="append", default=[], help="only this chain (repeatable)")
    p.add_argument("--no-fuse", action="store_true", help="the fused build is the unfused one")
    p.add_argument("--disable-pass", action="append", default=[], metavar="NAME", choices=_pass_names())
    p.add_argument("--hw", choices=_hw_names(), type=str.lower,
                   help="the hardware profile the cost model plans for (default: h200 for cuda, measured cpu)")
    return p


def _run_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="fusec run", description="Run a compiled artifact on its target, check it against the "
                "NumPy reference and report, like `fusec FILE` does.")
    p.add_argument("artifact", metavar="DIR")
    p.add_argument("--inputs", help="an npz with CHAIN/in/ARG arrays (else seeded random inputs)")
    p.add_argument("--save", help="write inputs and outputs to this npz")
    p.add_argument("--report", metavar="JSON", help="write the report as JSON")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", choices=("cuda", "cuda-sim", "cpu"),
                   help="override the artifact's target (cuda artifacts also run on cuda-sim)")
    _kernel_report_flag(p)
    return p


def _cmd_compile(args: argparse.Namespace) -> int:
    from fusec.compiler.pipeline import build_chain
    from fusec.program import compile_options, write_artifact
    text, path = api.read_source(args.file)
    typed = api.check(args.file)
    bind = api.parse_bind(",".join(args.bind))
    target = Target(args.target)          # compiling needs no device: nothing is imported here
    options = compile_options(target, _user_options(args))
    builds = []
    for c in _select(typed, args.chain):
        binding = {s: bind.get(s, DEFAULT_SIZE) for s in c.symbols}
        built = build_chain(c, binding, options)
        builds.append(built)
        n = built.plan.kernel_count
        print(f"compiled {c.name} [{', '.join(f'{k}={v}' for k, v in binding.items())}]: "
              f"{n} kernel{'s' if n != 1 else ''}")
    out = write_artifact(args.output, target, path, text, options, builds)
    print(f"wrote {out}")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from fusec.dsl.checker import check
    from fusec.dsl.parser import parse
    from fusec.program import artifact_kernel_report, load_chain
    from fusec.runtime import artifact as art
    from fusec.runtime.targets import select
    from .report import run_and_check
    a = art.load(args.artifact)
    name = args.target or a.target
    if a.target == "cpu" and name != "cpu" or a.target != "cpu" and name == "cpu":
        raise UsageError(f"{args.artifact} was compiled for {a.target}; it cannot run on {name}")
    _check_kernel_report(args, name)
    typed = check(parse(a.source(), a.source_path))
    if args.kernel_report and _no_gpu(name):
        return _report_artifact_without_running(args, a, typed)
    target = select(name)
    given = npz.load(args.inputs) if args.inputs else {}
    reports, saved = [], {}
    for cname, meta in a.chains.items():
        chain = typed.chain(cname)
        if given.get(cname):
            inputs = [given[cname]["in"][p.name] for p in chain.param_nodes]
            reference.bind_symbols(chain, inputs, meta.binding)
        else:
            inputs = reference.random_inputs(chain, meta.binding, args.seed)
        rep = run_and_check(load_chain(a, chain, target), inputs)
        if args.kernel_report:
            rep.kernel_report = artifact_kernel_report(a, cname)
        print(rep.format())
        reports.append(rep)
        saved[cname] = _entry(chain, inputs, rep.outputs)
    return _finish(args, reports, saved)


def _report_artifact_without_running(args, a, typed: TypedModule) -> int:
    """fusec run DIR --kernel-report on cuda without a GPU: report each chain's kernels."""
    from fusec.program import artifact_kernel_report
    from .report import UnrunReport
    build = "fused" if a.options.get("fuse", True) else "unfused"
    reports = []
    for name, meta in a.chains.items():
        binding = {s: meta.binding[s] for s in typed.chain(name).symbols}
        reports.append(UnrunReport(name, "cuda", binding, meta.plan, artifact_kernel_report(a, name), _NOT_RUN, build))
        print(reports[-1].format())
    return _finish(args, reports, {})
