"""The flags the subcommands share, their value types, and the checks of flags against each other.

`Parser` turns a bad flag into a `UsageError` (exit 1). The choices of --emit, --disable-pass
and --hw come from the compiler; without MLIR they are empty (only the reference runs).
"""
from __future__ import annotations

import argparse
import os
import re

from fusec.runtime.memory import parse_size

from ..errors import UsageError


def stage_names() -> tuple[str, ...]:
    try:
        from fusec.compiler.pipeline import STAGE_NAMES
    except ImportError:          # no MLIR in this environment: only the reference can run
        return ()
    return tuple(STAGE_NAMES)


def pass_names() -> tuple[str, ...]:
    try:
        from fusec.compiler.transforms.graph import PASS_NAMES
    except ImportError:
        return ()
    return tuple(PASS_NAMES)


class Parser(argparse.ArgumentParser):
    """argparse, but a bad flag is a user error like any other: message, exit 1."""

    def error(self, message: str):
        raise UsageError(f"{message} (see {self.prog} --help)")


def seed_arg(text: str) -> int:
    if not re.fullmatch(r"[0-9]{1,30}", text.strip()):
        raise argparse.ArgumentTypeError(f"'{text}' is not a seed (a non-negative integer)")
    return int(text)


def size_arg(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def quiet_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress line on stderr (it is only drawn on a terminal anyway)")


def memory_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-memory", type=size_arg, metavar="SIZE",
                   help="refuse, before allocating anything, a chain whose buffers would need more than SIZE "
                        "(8G, 512M, bytes; default: a quarter of this machine's memory)")


def kernel_report_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kernel-report", action="store_true",
                   help="cuda, cuda-sim: also print each chain's GPU kernels as measured without a GPU (registers, "
                        "local memory, spills, shared memory from ptxas -v; occupancy and waves; coalescing traced "
                        "on the simulator); on cuda without a GPU the chains are compiled and reported, not run")


def check_kernel_report(args, target: str) -> None:
    if getattr(args, "kernel_report", False) and target not in ("cuda", "cuda-sim"):
        raise UsageError(f"--kernel-report needs --target cuda or cuda-sim, not {target}")


def hw_names() -> tuple[str, ...]:
    try:
        from fusec.compiler.plan.hardware import NAMES
    except ImportError:
        return ()
    return tuple(NAMES)


def dynamic_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dynamic", metavar="SYMS", type=symbols_arg, default=(),
                   help="kernels (cpu, cuda, cuda-sim) that read these symbols' extents from their inputs at run "
                        "time (e.g. M,S), "
                        "so one build runs any extent; tiles are chosen for the bound extent's size class (its "
                        "power-of-two bucket) and the plan says which")


def math_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--math", choices=("fast", "accurate"), default="fast",
                   help="cpu: f32 exp and tanh as f32 polynomials (fast, the default: within 3 and 5 ulp) or "
                        "as f64 forms rounded once (accurate: within 1 ulp, slower on exp/tanh-bound chains); "
                        "cuda calls libdevice either way")


def symbols_arg(text: str) -> tuple[str, ...]:
    """--dynamic's value: symbol names separated by commas."""
    names = tuple(n.strip() for n in text.split(","))
    bad = [n for n in names if not n.isidentifier()]
    if bad:
        raise argparse.ArgumentTypeError(f"{', '.join(map(repr, bad))}: expected symbol names separated by commas, "
                                         "e.g. --dynamic M,S")
    return names


def check_dynamic(dynamic: tuple[str, ...], typed, target: str) -> None:
    """--dynamic names symbols of the file's chains, on a compiled target (UsageError otherwise)."""
    from fusec.compiler.dynamic import unknown_symbols, wrong_target
    if not dynamic:
        return
    if (why := unknown_symbols(dynamic, typed.chains)) is not None:
        raise UsageError(f"--dynamic {','.join(dynamic)}: {why}")
    if (why := wrong_target(target)) is not None:
        raise UsageError(f"--dynamic {why}")


def check_output_dir(flag: str, value: str | None) -> None:
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


def check_output_file(flag: str, value: str | None) -> None:
    """A file flag's path, checked before anything runs: not a directory, in a directory that
    exists (or can be made) and can be written (a UsageError otherwise)."""
    if not value:
        return
    if os.path.isdir(value):
        raise UsageError(f"{flag} {value}: is a directory")
    parent = os.path.dirname(os.path.abspath(value))
    probe = parent
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise UsageError(f"{flag} {value}: cannot write it: {probe} is not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {value}: cannot write it: permission denied in {probe}")
