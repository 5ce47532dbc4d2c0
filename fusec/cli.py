"""`fusec` command line: compile, run and check FDSL chains.

    fusec FILE [--target T] [--emit STAGE] [--inputs in.npz] [--save out.npz] [--bind M=64,...]
               [--report r.json] [--no-fuse] [--dump-dir DIR] [--explain] [--hw NAME]
               [--autotune] [--plot DIR] [--kernel-report] [--quiet]
    fusec compile FILE -o DIR [--target T] [--bind ...]     write a compiled artifact
    fusec run DIR [--inputs in.npz] [--save out.npz] [--kernel-report]
                                                            run one (no MLIR needed)
    fusec test PATH... [--update] [--target T]              golden tests
    fusec cache list|info|clear                             the compile cache

On a terminal, long work shows a progress line on stderr (fusec/progress.py); --quiet: none.

Exit status: 0 ok, 1 a mistake in the input (printed as file:line:col diagnostics),
2 an internal error (with a reproduction hint), 3 a numerics mismatch, 4 a fallback: a fused
kernel failed the numerics check and the unfused kernels of its ops ran instead (right outputs).
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import shlex
import sys
import traceback

import numpy as np

from fusec.compiler.errors import CacheError
from fusec.dsl.binding import check_binding
from fusec.dsl.diagnostics import FdslError
from fusec.dsl.typed import TypedChain, TypedModule
from fusec.runtime import npz, reference
from fusec.runtime.artifact import ArtifactError
from fusec.runtime.cache import CacheError as CompileCacheError
from fusec.runtime.compare import compare
from fusec.runtime.files import atomic_write
from fusec.runtime.memory import check_memory, parse_size
from fusec.runtime.npz import NpzError
from fusec.runtime.targets import COMPILED, TARGETS, Target, TargetError, select

from . import api
from .errors import NumericsError, UsageError

DEFAULT_SIZE = 64
FALLBACK_EXIT = 4           # the outputs are right, but only because a fused kernel was replaced (--fallback)
MEMORY_FLAG = "--max-memory SIZE"


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


def _seed(text: str) -> int:
    if not re.fullmatch(r"[0-9]{1,30}", text.strip()):
        raise argparse.ArgumentTypeError(f"'{text}' is not a seed (a non-negative integer)")
    return int(text)


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _quiet_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress line on stderr (it is only drawn on a terminal anyway)")


def _progress(args) -> "Progress":
    from .progress import Progress
    return Progress(quiet=getattr(args, "quiet", False))


def _memory_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-memory", type=_size, metavar="SIZE",
                   help="refuse, before allocating anything, a chain whose buffers would need more than SIZE "
                        "(8G, 512M, bytes; default: a quarter of this machine's memory)")


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
    p.add_argument("--seed", type=_seed, default=0, help="seed for random inputs (default 0)")
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
    p.add_argument("--fallback", action=argparse.BooleanOptionalAction, default=True,
                   help="a fused kernel whose outputs fail the numerics check is replaced by the unfused kernels "
                        "of its ops and the run goes on; the report names it and fusec exits 4 (default: on; "
                        "--no-fallback: exit 3 on the failure)")
    p.add_argument("--no-cache", action="store_true",
                   help="compile every chain again rather than load it from the compile cache "
                        "($FUSEC_CACHE_DIR/compiled; also FUSEC_NO_CACHE=1), and store nothing there")
    _dynamic_flag(p)
    _kernel_report_flag(p)
    _memory_flag(p)
    _quiet_flag(p)
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
    p.add_argument("--bind", action="append", default=[],
                   help="symbol sizes: for --update (default 64); when testing, a check of the golden inputs' sizes")
    p.add_argument("--seed", type=_seed, default=0, help="seed for --update's random inputs (default 0)")
    _memory_flag(p)
    _quiet_flag(p)
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
        if argv and argv[0] == "cache":
            return _cmd_cache(_cache_parser().parse_args(argv[1:]))
        return _cmd_main(_main_parser().parse_args(argv))
    except FdslError as e:
        print(e.render(), file=sys.stderr)
        return 1
    except UsageError as e:
        print(f"fusec: error: {e}", file=sys.stderr)
        return 1
    except (TargetError, ArtifactError, NpzError, CacheError, CompileCacheError) as e:
        print(f"fusec: error: {e}", file=sys.stderr)
        return 1
    except MemoryError:
        print("fusec: error: out of memory; bind smaller sizes (--bind), or lower --max-memory so that fusec "
              "refuses such a run before it starts", file=sys.stderr)
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
    text = str(e).splitlines()
    first = text[0] if text else ""
    print(f"fusec: internal error{f' in stage {stage}' if stage else ''}: {type(e).__name__}: {first}", file=sys.stderr)
    for line in text[1:]:
        if not (dump and dump in line):          # the dump is named once, below
            print(f"  {line.strip()}", file=sys.stderr)
    if dump:
        print(f"  the IR at that point is in {dump}", file=sys.stderr)
    print(f"  reproduce with: fusec {_reproduction(argv)}", file=sys.stderr)
    from fusec.compiler.plan.hardware import cache_dir
    print(f"  (fusec caches what it measured in {cache_dir()}; setting FUSEC_CACHE_DIR to an empty directory "
          "rules the cache out)", file=sys.stderr)
    print("  this is a bug in fusec, not in your program; please report it with the file above", file=sys.stderr)
    if os.environ.get("FUSEC_TRACEBACK"):
        traceback.print_exc()
    return 2


def _reproduction(argv: list[str]) -> str:
    """The command again; for the main command with --dump-dir (the only one that takes it),
    so that every stage's IR is written."""
    sub = argv[0] if argv and argv[0] in ("test", "compile", "run") else None
    if sub is None and "--dump-dir" not in argv and not any(a.startswith("--dump-dir=") for a in argv):
        return f"{shlex.join(argv)} --dump-dir /tmp/fusec-dump"
    return shlex.join(argv)


# ---- fusec FILE ------------------------------------------------------------------------------

def _cmd_main(args: argparse.Namespace) -> int:
    text, path = api.read_file(args.file)
    typed = api.check(api.parse_text(text, path))
    chains = _select(typed, args.chain)
    for flag, value in (("--dump-dir", args.dump_dir), ("--plot", args.plot)):
        _check_output_dir(flag, value)
    bind = _bind(args.bind, chains, path)
    given = (_load_inputs("--inputs", args.inputs, chains, path, args.max_memory, [c.name for c in typed.chains],
                          choose="; run only the chains it holds with --chain NAME")
             if args.inputs else None)
    name = args.target or _default_target()
    _check_dynamic(args.dynamic, typed, name)
    plans = [_plan(c, given, bind, args.max_memory, name) for c in chains]     # refused before anything else
    if (args.explain or args.plot or args.autotune) and name not in COMPILED:
        raise UsageError(f"--explain, --plot and --autotune need a compiled target (cuda, cuda-sim, cpu), "
                         f"not {name}")
    _check_kernel_report(args, name)
    if args.emit or args.dump_dir:
        # the simulator is chosen before anything imports numba.cuda (the kernels stage may)
        texts = _stage_texts(text, path, plans, args, select(name) if name == "cuda-sim" else Target(name))
        if args.emit:
            print(texts[args.emit], end="" if texts[args.emit].endswith("\n") else "\n")
            return 0
    if args.kernel_report and _no_gpu(name):
        return _report_without_running(args, plans)
    program = _program(text, path, name, args)
    if program.target.compiled:
        return _run_compiled(args, program, plans, args.seed)
    from .report import run_reference
    reports, saved = [], {}
    for chain, inputs, binding in plans:
        inputs = inputs if inputs is not None else reference.random_inputs(chain, binding, args.seed)
        outs = program.chains[chain.name].compiled(binding).fused(*inputs)
        rep = run_reference(chain, binding, outs, inputs, name)
        print(rep.format())
        reports.append(rep)
        saved[chain.name] = _entry(chain, inputs, outs)
    return _finish(args, reports, saved)


def _dynamic_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dynamic", metavar="SYMS", type=_symbols, default=(),
                   help="kernels (cpu, cuda, cuda-sim) that read these symbols' extents from their inputs at run "
                        "time (e.g. M,S), "
                        "so one build runs any extent; tiles are chosen for the bound extent's size class (its "
                        "power-of-two bucket) and the plan says which")


def _symbols(text: str) -> tuple[str, ...]:
    """--dynamic's value: symbol names separated by commas."""
    names = tuple(n.strip() for n in text.split(","))
    bad = [n for n in names if not n.isidentifier()]
    if bad:
        raise argparse.ArgumentTypeError(f"{', '.join(map(repr, bad))}: expected symbol names separated by commas, "
                                         "e.g. --dynamic M,S")
    return names


def _check_dynamic(dynamic: tuple[str, ...], typed, target: str) -> None:
    """--dynamic names symbols of the file's chains, on a compiled target (UsageError otherwise)."""
    from fusec.compiler.dynamic import unknown_symbols, wrong_target
    if not dynamic:
        return
    if (why := unknown_symbols(dynamic, typed.chains)) is not None:
        raise UsageError(f"--dynamic {','.join(dynamic)}: {why}")
    if (why := wrong_target(target)) is not None:
        raise UsageError(f"--dynamic {why}")


def _check_output_dir(flag: str, value: str | None) -> None:
    """A directory flag's directory, made now (before anything runs): a UsageError when it
    cannot be."""
    if not value:
        return
    if os.path.exists(value) and not os.path.isdir(value):
        raise UsageError(f"{flag} {value}: exists and is not a directory")
    try:
        os.makedirs(value, exist_ok=True)
    except OSError as e:
        raise UsageError(f"{flag} {value}: cannot create the directory: {e.strerror or e}") from None


def _bind(values: list[str], chains: list[TypedChain], path: str) -> dict[str, int]:
    """--bind, parsed; a symbol that no selected chain has is an error (with the ones they have)."""
    bind = api.parse_bind(",".join(values))
    known = list(dict.fromkeys(s for c in chains for s in c.symbols))
    for s in bind:
        if s not in known:
            close = [k for k in known if k.lower() == s.lower()]
            hint = f"; did you mean {close[0]}?" if close else ""
            have = f"their free symbols are {', '.join(known)}" if known else "they have no free symbols"
            fixed = [c.name for c in chains if s in _declared_symbols(c)]
            why = (f"the shapes of chain '{fixed[0]}' fix {s} (the checker unified it with another size)" if fixed
                   else f"no selected chain of {path} has a symbol {s}")
            raise UsageError(f"--bind {s}={bind[s]}: {why}; {have}{hint}")
    return bind


def _declared_symbols(chain: TypedChain) -> set[str]:
    """The symbols written in a chain's parameter types (some may have been unified away)."""
    out = set()
    for p in chain.param_nodes:
        if p.span is None:
            continue
        lines = [p.span.file.line(n) for n in range(p.span.line, p.span.end_line + 1)]
        lines[-1] = lines[-1][:p.span.end_col - 1]
        lines[0] = lines[0][p.span.col - 1:]
        m = re.search(r"\[(.*)\]", " ".join(lines), re.S)
        if m:
            out |= {d.strip() for d in m.group(1).split(",") if d.strip().isidentifier()}
    return out


def _plan(chain: TypedChain, given: dict | None, bind: dict[str, int], limit: int | None, target: str):
    """(chain, inputs or None (random ones are made when it runs), binding), its memory checked,
    and on a target that refuses them (cpu), the given index inputs out of range (a user error
    at the gather; random ones are drawn within the axis)."""
    if given is not None and chain.param_nodes:
        inputs = [_declared(given[chain.name]["in"][p.name], p.type.dtype) for p in chain.param_nodes]
        binding = reference.bind_symbols(chain, inputs, bind)
    else:
        inputs, binding = None, _binding(chain, bind)
    check_memory(chain, binding, limit, MEMORY_FLAG)
    if inputs is not None and Target(target).checks_index_inputs:
        reference.check_index_inputs(chain, inputs, binding)
    return chain, inputs, binding


def _binding(chain: TypedChain, bind: dict[str, int]) -> dict[str, int]:
    binding = {}
    for s in chain.symbols:
        if s not in bind:
            print(f"note: chain {chain.name}: {s} is not bound; using {s}={DEFAULT_SIZE} "
                  f"(set it with --bind {s}=...)", file=sys.stderr)
        binding[s] = bind.get(s, DEFAULT_SIZE)
    check_binding(chain, binding)           # a slice with a symbolic bound may not fit these sizes
    return binding


def _listing(keys: list[str], limit: int = 8) -> str:
    keys = sorted(keys)
    if not keys:
        return "nothing"
    shown = ", ".join(keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def _read_npz(flag: str, path: str, limit: int | None) -> dict:
    try:
        return npz.load(path, max_bytes=limit)
    except NpzError as e:
        raise UsageError(f"{flag} {e}") from None


def _load_inputs(flag: str, path: str, chains: list[TypedChain], source: str, limit: int | None,
                 known: list[str] | None = None, given: dict | None = None, choose: str = "") -> dict:
    """An npz of inputs (the golden layout; `given`: already read) that matches the chains
    exactly: every chain it holds is one of the file's (`known`, default: the selected ones),
    every selected chain with parameters has all of them and nothing else, and its outputs are
    numbered within the chain's. Anything else is an error that lists what the file holds and
    what is expected."""
    given = _read_npz(flag, path, limit) if given is None else given
    known = set(known if known is not None else [c.name for c in chains])
    held = [f"{c}/{part}/{k}" for c, e in given.items() for part in ("in", "out", "failed") for k in e[part]]
    for cname in given:
        if cname not in known:
            raise UsageError(f"{flag} {path} holds chain '{cname}', which {source} does not define (its chains: "
                             f"{', '.join(sorted(known))}); the file holds {_listing(held)}")
    for c in chains:
        entry = given.get(c.name, {"in": {}, "out": {}, "failed": {}})
        params = [p.name for p in c.param_nodes]
        want = [f"{c.name}/in/{p}" for p in params]
        missing = [w for w, p in zip(want, params) if p not in entry["in"]]
        if missing and c.name not in given and len(chains) > 1:     # a file for some of the chains
            raise UsageError(f"{flag} {path} holds no inputs for chain '{c.name}' (it takes {_listing(want)}; the "
                             f"file holds {_listing(held)}){choose}")
        if missing:
            raise UsageError(f"{flag} {path} has no {missing[0]} for chain '{c.name}' (the chain takes "
                             f"{_listing(want)}; the file holds {_listing(held)})")
        extra = sorted(set(entry["in"]) - set(params))
        if extra:
            raise UsageError(f"{flag} {path} holds {c.name}/in/{extra[0]}, which is not a parameter of chain "
                             f"'{c.name}' (it takes {_listing(want)})")
        n = len(c.outputs)
        for part in ("out", "failed"):
            bad = sorted(k for k in entry[part] if int(k) >= n)
            if bad:
                raise UsageError(f"{flag} {path} holds {c.name}/{part}/{bad[0]}, but chain '{c.name}' has "
                                 f"{n} output{'s' if n != 1 else ''} (0 to {n - 1})")
    return given


def _default_target() -> str:
    from fusec.runtime.targets import best_available
    return best_available()


def _user_options(args, baseline: bool = True) -> dict:
    """The command line's compile options (fusec.compiler.options.CompileOptions fields; `hw` names
    the hardware profile)."""
    return {"fuse": not getattr(args, "no_fuse", False), "baseline": baseline,
            "disabled_passes": tuple(getattr(args, "disable_pass", ())), "hw": getattr(args, "hw", None),
            "autotune": getattr(args, "autotune", False), "locations": getattr(args, "locations", False),
            "kernel_report": getattr(args, "kernel_report", False), "dynamic": tuple(getattr(args, "dynamic", ()))}


def _program(text: str, path: str, target: str | None, args, baseline: bool = True):
    from fusec.program import compile_source
    program = compile_source(text, path, target, _user_options(args, baseline),
                             max_memory=getattr(args, "max_memory", None),
                             cache=False if getattr(args, "no_cache", False) else None)
    program.progress = _progress(args)
    return program


def _run_compiled(args, program, plans, seed: int) -> int:
    """The main job: compile each chain, run it fused and unfused, check it, report."""
    from fusec.compiler.plan.describe import format_plan
    from .report import run_and_check
    reports, saved = [], {}
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
            from .fallback import repair
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
        saved[chain.name] = _entry(chain, inputs, rep.outputs)
    if args.plot:
        from .plots import write_plots
        try:
            for path in write_plots(reports, args.plot):
                print(f"wrote {path}")
        except OSError as e:
            raise UsageError(f"--plot {args.plot}: cannot write the plots: {e.strerror or e}") from None
    return _finish(args, reports, saved)


_NOT_RUN = "no CUDA GPU here (the kernel report needs none)"


def _report_without_running(args, plans) -> int:
    """--kernel-report on cuda without a GPU: compile each chain and report its kernels."""
    from fusec.compiler.pipeline import build_chain
    from fusec.program import compile_options
    from .report import UnrunReport
    from fusec.program import check_supported
    options = compile_options(Target("cuda"), _user_options(args, baseline=False))
    reports = []
    progress = _progress(args)
    for chain, _inputs, binding in plans:
        check_supported(chain, Target("cuda"))
        try:
            built = build_chain(chain, binding, options, progress=progress.stage(f"{chain.name}: compiling"))
        finally:
            progress.clear()
        rep = UnrunReport(chain.name, "cuda", dict(binding), built.plan.summary(), list(built.kernel_report),
                          _NOT_RUN, "fused" if options.fuse else "unfused")
        print(rep.format())
        reports.append(rep)
    return _finish(args, reports, {})


def _finish(args, reports, saved) -> int:
    """Write --save and --report (atomically; on a numerics failure both say which outputs
    failed), then exit 0, or 3 when an output failed."""
    failures = [f for r in reports for f in r.failures()]
    failed = {r.chain: r.failed_outputs() for r in reports if r.failed_outputs()}
    fallbacks = [r for r in reports if getattr(r, "fallback", None) is not None]
    if getattr(args, "save", None):
        try:
            npz.save(args.save, saved, failed)
        except NpzError as e:
            raise UsageError(f"--save: {e}") from None
    if getattr(args, "report", None):
        import json
        data = {"fusec": fusec_version(),
                "status": "numerics mismatch" if failures else "fallback" if fallbacks else "ok",
                "exit_status": 3 if failures else FALLBACK_EXIT if fallbacks else 0, "failed": failures,
                "fallbacks": [dict(r.fallback.as_dict(), chain=r.chain) for r in fallbacks],
                "chains": [r.as_dict() for r in reports]}
        try:
            atomic_write(args.report, json.dumps(data, indent=2) + "\n")
        except OSError as e:
            raise UsageError(f"--report {args.report}: cannot write it: {e.strerror or e}") from None
    if failures:
        raise NumericsError("; ".join(failures))
    if fallbacks:
        print(f"fusec: fallback: {len(fallbacks)} chain{'s' if len(fallbacks) != 1 else ''} ran with a fused kernel "
              f"replaced by unfused ones ({', '.join(r.chain for r in fallbacks)}); exit status {FALLBACK_EXIT}",
              file=sys.stderr)
        return FALLBACK_EXIT
    return 0


def fusec_version() -> str:
    from .version import __version__
    return __version__


def _entry(chain: TypedChain, inputs, outputs) -> tuple[dict, list]:
    """One chain's npz entry: inputs by parameter name, outputs in order (runtime/npz.py)."""
    return {p.name: x for p, x in zip(chain.param_nodes, inputs)}, list(outputs)


def _select(typed: TypedModule, names: list[str]) -> list[TypedChain]:
    if not typed.chains:
        raise UsageError(f"{typed.file.path} defines no chain; there is nothing to run")
    if not names:
        return list(typed.chains)
    known = {c.name for c in typed.chains}
    for n in names:
        if n not in known:
            raise UsageError(f"no chain named '{n}' in {typed.file.path} (chains: {', '.join(sorted(known))})")
    return [c for c in typed.chains if c.name in names]


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
    if args.emit is None or args.emit == "kernels":        # the Numba emitter: what it cannot write
        from fusec.program import check_supported
        for chain, _, _ in plans:
            check_supported(chain, target)
    options = compile_options(target, _user_options(args), plans=planned)
    from fusec.compiler.dynamic import chain_dynamic, planning_binding, size_class
    bindings = {c.name: planning_binding(b, chain_dynamic(c.symbols, options.dynamic)) for c, _, b in plans}
    return run_source_stages(text, path, [c.name for c, _, _ in plans], bindings,
                             options=options, until=args.emit, dump_dir=args.dump_dir)


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
    files = [(path, *api.read_file(path)) for path in _fdsl_files(args.paths)]
    modules = [(path, text, api.check(api.parse_text(text, path))) for path, text, _ in files]
    every = [c for _, _, typed in modules for c in typed.chains]
    bind = _bind(args.bind, every, ", ".join(p for p, _, _ in modules) or "the files")
    passed = failed = 0
    progress = _progress(args)
    for n, (path, text, typed) in enumerate(modules, 1):
        gpath = golden_path(path)
        where = f"[{n}/{len(modules)}] {os.path.basename(path)}"
        if args.update:
            chains = {}
            for c in typed.chains:
                binding = _binding(c, bind)
                check_memory(c, binding, args.max_memory, MEMORY_FLAG)
                progress.show(f"{where}::{c.name}: running the reference")
                inputs = reference.random_inputs(c, binding, args.seed)
                chains[c.name] = _entry(c, inputs, reference.run_chain(c, inputs, binding))
            progress.clear()
            npz.save(gpath, chains)
            print(f"wrote {gpath} ({len(chains)} chains)")
            continue
        if not os.path.exists(gpath):
            print(f"{path}: no golden file ({gpath}); skipped")
            continue
        names = [c.name for c in typed.chains]
        held = _read_npz("golden file", gpath, args.max_memory)
        tested = [c for c in typed.chains if c.name in held]
        golden = _load_inputs("golden file", gpath, tested, path, args.max_memory, known=names, given=held)
        if not tested:
            print(f"{path}: the golden file {gpath} holds no chain; skipped")
            continue
        program = _program(text, path, args.target, args, baseline=False)
        program.progress, program.progress_label = progress, f"{where}::"
        for c in tested:
            entry = golden[c.name]
            chain, inputs, binding = _plan(c, golden, bind, args.max_memory, program.target.name)
            inputs = inputs if inputs is not None else []
            compiled = program.chains[c.name].compiled(binding)
            progress.show(f"{where}::{c.name}: running")
            try:
                outs = compiled.fused(*inputs)
            finally:
                progress.clear()
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
    _dynamic_flag(p)
    _memory_flag(p)
    _quiet_flag(p)
    return p


def _run_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="fusec run", description="Run a compiled artifact on its target, check it against the "
                "NumPy reference and report, like `fusec FILE` does.")
    p.add_argument("artifact", metavar="DIR")
    p.add_argument("--inputs", help="an npz with CHAIN/in/ARG arrays (else seeded random inputs)")
    p.add_argument("--save", help="write inputs and outputs to this npz")
    p.add_argument("--report", metavar="JSON", help="write the report as JSON")
    p.add_argument("--seed", type=_seed, default=0, help="seed for random inputs (default 0)")
    p.add_argument("--bind", action="append", default=[],
                   help="extents of the symbols compiled --dynamic, for the random inputs (e.g. M=700; the others "
                        "are the artifact's)")
    p.add_argument("--target", choices=("cuda", "cuda-sim", "cpu"),
                   help="override the artifact's target (cuda artifacts also run on cuda-sim)")
    _kernel_report_flag(p)
    _memory_flag(p)
    return p


def _cmd_compile(args: argparse.Namespace) -> int:
    from fusec.compiler.pipeline import build_chain
    from fusec.program import check_supported, compile_options, write_artifact
    text, path = api.read_file(args.file)
    typed = api.check(api.parse_text(text, path))
    chains = _select(typed, args.chain)
    _check_dynamic(args.dynamic, typed, args.target)
    bind = _bind(args.bind, chains, path)
    bindings = {c.name: _binding(c, bind) for c in chains}
    target = Target(args.target)          # compiling needs no device: nothing is imported here
    from fusec.compiler.dynamic import chain_dynamic, planning_binding, size_class
    bindings = {c.name: planning_binding(b, chain_dynamic(c.symbols, args.dynamic)) for c, b in
                ((c, bindings[c.name]) for c in chains)}
    for c in chains:
        check_memory(c, bindings[c.name], args.max_memory, MEMORY_FLAG)
        check_supported(c, target)
    from pathlib import Path
    from fusec.runtime.artifact import check_replaceable
    check_replaceable(Path(args.output))      # before compiling (which may measure the cpu first)
    options = compile_options(target, _user_options(args))
    builds = []
    progress = _progress(args)
    for i, c in enumerate(chains):
        binding = bindings[c.name]
        try:
            built = build_chain(c, binding, options,
                                progress=progress.stage(f"[{i + 1}/{len(chains)}] {c.name}: compiling"))
        finally:
            progress.clear()
        builds.append(built)
        n = built.plan.kernel_count
        dyn = chain_dynamic(c.symbols, args.dynamic)
        print(f"compiled {c.name} [{', '.join(f'{k}={v}' for k, v in binding.items())}]: "
              f"{n} kernel{'s' if n != 1 else ''}"
              + (f"; {', '.join(dyn)} taken at run time (planned for the size class "
                 f"{', '.join(f'{d} in {size_class(binding[d])}' for d in dyn)})" if dyn else ""))
    out = write_artifact(args.output, target, path, text, options, builds)
    print(f"wrote {out}")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from fusec.program import artifact_kernel_report, load_chain
    from fusec.runtime import artifact as art
    from fusec.runtime.targets import select
    from .report import run_and_check
    a = art.load(args.artifact)
    name = args.target or a.target
    if a.target == "cpu" and name != "cpu" or a.target != "cpu" and name == "cpu":
        raise UsageError(f"{args.artifact} was compiled for {a.target}; it cannot run on {name}")
    _check_kernel_report(args, name)
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
    if args.kernel_report and _no_gpu(name):
        return _report_artifact_without_running(args, a, typed)
    if _no_gpu(name):
        raise UsageError(f"no CUDA GPU is available to run {args.artifact}, compiled for cuda; run it on Numba's "
                         "simulator with --target cuda-sim, or compile it again with fusec compile --target cpu")
    given = (_load_inputs("--inputs", args.inputs, chains, str(a.directory), args.max_memory)
             if args.inputs else None)
    runtime = {c.name: set((a.chains[c.name].plan or {}).get("dynamic", {})) for c in chains}
    bind = _bind(args.bind, chains, str(a.directory)) if args.bind else {}
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
        plans.append(_plan(chain, given, binding, args.max_memory, name))
    target = select(name)
    reports, saved = [], {}
    for chain, inputs, binding in plans:
        inputs = inputs if inputs is not None else reference.random_inputs(chain, binding, args.seed)
        rep = run_and_check(load_chain(a, chain, target, numba_cache=True), inputs)
        if args.kernel_report:
            rep.kernel_report = artifact_kernel_report(a, chain)
        print(rep.format())
        reports.append(rep)
        saved[chain.name] = _entry(chain, inputs, rep.outputs)
    return _finish(args, reports, saved)


def _report_artifact_without_running(args, a, typed: TypedModule) -> int:
    """fusec run DIR --kernel-report on cuda without a GPU: report each chain's kernels."""
    from fusec.program import artifact_kernel_report
    from .report import UnrunReport
    build = "fused" if a.options.get("fuse", True) else "unfused"
    reports = []
    for name, meta in a.chains.items():
        binding = {s: meta.binding[s] for s in typed.chain(name).symbols}
        reports.append(UnrunReport(name, "cuda", binding, meta.plan, artifact_kernel_report(a, typed.chain(name)),
                                   _NOT_RUN, build))
        print(reports[-1].format())
    return _finish(args, reports, {})


# ---- fusec cache -----------------------------------------------------------------------------

def _cache_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="fusec cache", description="Show or empty the compile cache ($FUSEC_CACHE_DIR/compiled, "
                "default ~/.cache/fusec/compiled): one compiled artifact per chain, binding, options, hardware "
                "profile and target, least recently used evicted past $FUSEC_CACHE_MAX_SIZE (default 1G).")
    p.add_argument("action", choices=("list", "info", "clear"),
                   help="list: every entry, least recently used first; info: where, how many, how big; "
                        "clear: remove every entry")
    return p


def _cmd_cache(args: argparse.Namespace) -> int:
    from fusec.program import compile_cache_dir
    from fusec.runtime.cache import CompileCache, age
    from fusec.runtime.memory import format_bytes
    cache = CompileCache(compile_cache_dir())
    cache.check()
    if args.action == "info":
        info = cache.info()
        cap = ("$FUSEC_CACHE_MAX_SIZE" if info["max_size_from"] != "default"
               else "the default; set FUSEC_CACHE_MAX_SIZE to change it")
        print(f"compile cache: {info['directory']}")
        print(f"  {info['entries']} entr{'y' if info['entries'] == 1 else 'ies'}, {info['size']} of at most "
              f"{info['max_size']} ({cap})")
        return 0
    if args.action == "list":
        entries = cache.entries()
        if not entries:
            print(f"the compile cache {cache.root} is empty")
        for e in entries:
            print(f"{e.name}  {format_bytes(e.bytes)}  used {age(e.last_used)}")
        return 0
    gone = cache.clear()
    print(f"removed {len(gone)} entr{'y' if len(gone) == 1 else 'ies'} ({format_bytes(sum(e.bytes for e in gone))}) "
          f"from {cache.root}")
    return 0
