"""`fusec test PATH...`: golden tests. Every chain with an entry in NAME.golden.npz beside
NAME.fdsl runs on the golden inputs (on --target, default the reference) and its outputs are
compared with the golden ones; --update (re)writes the golden files from the reference.
Exit 0, or 3 when a chain failed.
"""
from __future__ import annotations

import argparse
import glob
import os

from fusec.runtime import npz, reference
from fusec.runtime.compare import compare
from fusec.runtime.memory import check_memory
from fusec.runtime.targets import TARGETS

from .. import api
from ..errors import UsageError
from .args import Parser, memory_flag, quiet_flag, seed_arg
from .inputs import MEMORY_FLAG, bind_flag, chain_binding, load_inputs, npz_entry, plan_run, read_npz
from .options import make_program, progress_for


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="fusec test", description="Run every chain that has a golden entry "
                                "(NAME.golden.npz beside NAME.fdsl) and compare with the golden outputs.")
    p.add_argument("paths", nargs="+", help=".fdsl files or directories")
    p.add_argument("--update", action="store_true", help="(re)write golden files from the reference")
    p.add_argument("--target", choices=TARGETS, default="reference",
                   help="what to test against the golden outputs (default: the reference itself)")
    p.add_argument("--bind", action="append", default=[],
                   help="symbol sizes: for --update (default 64); when testing, a check of the golden inputs' sizes")
    p.add_argument("--seed", type=seed_arg, default=0, help="seed for --update's random inputs (default 0)")
    memory_flag(p)
    quiet_flag(p)
    return p


def _fdsl_files(paths: list[str]) -> list[str]:
    """The .fdsl files named, and those under each directory named (recursively, sorted)."""
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
    """NAME.fdsl's golden file: NAME.golden.npz beside it."""
    return fdsl[: -len(".fdsl")] + ".golden.npz" if fdsl.endswith(".fdsl") else fdsl + ".golden.npz"


def run(args: argparse.Namespace) -> int:
    files = [(path, *api.read_file(path)) for path in _fdsl_files(args.paths)]
    modules = [(path, text, api.check(api.parse_text(text, path))) for path, text, _ in files]
    every = [c for _, _, typed in modules for c in typed.chains]
    bind = bind_flag(args.bind, every, ", ".join(p for p, _, _ in modules) or "the files")
    passed = failed = 0
    progress = progress_for(args)
    for n, (path, text, typed) in enumerate(modules, 1):
        gpath = golden_path(path)
        where = f"[{n}/{len(modules)}] {os.path.basename(path)}"
        if args.update:
            chains = {}
            for c in typed.chains:
                binding = chain_binding(c, bind)
                check_memory(c, binding, args.max_memory, MEMORY_FLAG)
                progress.show(f"{where}::{c.name}: running the reference")
                inputs = reference.random_inputs(c, binding, args.seed)
                chains[c.name] = npz_entry(c, inputs, reference.run_chain(c, inputs, binding))
            progress.clear()
            npz.save(gpath, chains)
            print(f"wrote {gpath} ({len(chains)} chains)")
            continue
        if not os.path.exists(gpath):
            print(f"{path}: no golden file ({gpath}); skipped")
            continue
        names = [c.name for c in typed.chains]
        held = read_npz("golden file", gpath, args.max_memory)
        tested = [c for c in typed.chains if c.name in held]
        golden = load_inputs("golden file", gpath, tested, path, args.max_memory, known=names, given=held)
        if not tested:
            print(f"{path}: the golden file {gpath} holds no chain; skipped")
            continue
        program = make_program(text, path, args.target, args, baseline=False)
        program.progress, program.progress_label = progress, f"{where}::"
        for c in tested:
            entry = golden[c.name]
            chain, inputs, binding = plan_run(c, golden, bind, args.max_memory, program.target.name)
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
