"""A compile for a runtime target: its options (`compile_options`: the one CompileOptions object
of compiler/options.py, with the target's kind and a hardware profile resolved for it).
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace

from fusec.compiler.dynamic import wrong_target
from fusec.compiler.options import CompileOptions, OptionsError
from fusec.runtime.targets import Target


def compile_options(target: Target, options: CompileOptions | dict | None = None, *,
                    plans: bool = True, quick: bool = False, remote=None) -> CompileOptions:
    """The options of a compile for `target`: `options` (an object, or a dict of its fields where
    `hw` may name the hardware profile: h200, h100, a100, seed, cpu, device), FUSEC_NO_FUSE=1,
    the target's kind, and the profile resolved (the running device on `cuda`; this machine's
    measured profile on `cpu`, measured once with a notice). `plans=False`: nothing will be
    planned (stages before `plan` only), so no profile is needed. `quick`: on `cpu`, take the
    cached profile as it is on disk, without the calibration module (which imports the MLIR
    bindings); Program checks it before it compiles anything with it. `remote` (the compile cache's
    remote tier): on `cpu`, a profile measured on another machine of this kind stands in for
    measuring this one."""
    d = dict(options) if isinstance(options, dict) else None
    hw = d.pop("hw", None) if d is not None else None
    opts = CompileOptions.make(d if d is not None else options)
    if os.environ.get("FUSEC_NO_FUSE") == "1":
        opts = replace(opts, fuse=False)
    kind = target.kind if target.compiled else "cpu"
    opts = replace(opts, target=kind)
    if opts.dynamic and (why := wrong_target(target.name)) is not None:
        raise OptionsError(f"dynamic={list(opts.dynamic)}: {why}")
    if remote is not None and plans and kind == "cpu" and target.compiled and opts.hardware is None and hw in (None, "cpu"):
        from fusec.compiler.plan.hardware import cached_cpu_profile
        if cached_cpu_profile() is None:
            from .build_cache import fetch_profile
            fetch_profile(remote)
    if (quick and plans and kind == "cpu" and target.compiled and opts.hardware is None and hw is None
            and "fusec.compiler.calibrate" not in sys.modules):
        from fusec.compiler.plan.hardware import cached_cpu_profile
        profile = cached_cpu_profile()
        if profile is not None:
            return replace(opts, hardware=profile)
    if plans and target.compiled and (opts.hardware is None or hw is not None):
        from fusec.compiler.calibrate import hardware_profile
        name = hw or ("device" if target.name == "cuda" else None)
        opts = replace(opts, hardware=hardware_profile(name, kind, notice=notice))
    return opts


def notice(text: str) -> None:
    """One line on stderr, as fusec says things in passing."""
    print(f"fusec: {text}", file=sys.stderr)
