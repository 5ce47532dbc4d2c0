"""Fallback per kernel: a fused build whose outputs fail the numerics check is rebuilt from a hand
plan (compiler/options.py `plans`) with the kernel at fault replaced by the unfused kernels of
its ops, found by trying each fused kernel in plan order; when none alone passes, every fused
kernel is replaced; when that fails too there is no fallback. See docs/GUIDE.md, "Fallback per
kernel".
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace

from fusec.compiler.errors import CompilerInternalError

from .compiled import CompiledChain
from .program import Program


@dataclass
class Fallback:
    compiled: CompiledChain          # the repaired build (it runs instead of the fused one)
    kernels: list[dict]              # {"kernel": k, "ops": ["%1 map(exp)", ...]} of each kernel replaced
    error: str                       # why the fused build failed (its outputs' numerics)
    narrowed: bool                   # True: these kernels alone; False: no single kernel was found

    def as_dict(self) -> dict:
        return {"kernels": self.kernels, "error": self.error, "narrowed": self.narrowed,
                "replacement": "the unfused kernels of each kernel's ops"}

    def lines(self) -> list[str]:
        which = "; ".join(f"kernel {k['kernel']} ({', '.join(k['ops'])})" for k in self.kernels)
        head = ("  fallback: " + which + " failed the numerics check" if self.narrowed else
                "  fallback: no single fused kernel could be blamed; every fused kernel (" + which + ") failed "
                "the numerics check")
        return [head + f" ({self.error}); replaced by the unfused kernels of its ops, and the outputs below are "
                "that build's"]


def _compute_ops(group: dict) -> list[dict]:
    return [o for o in group["ops"] if o["role"] != "init"]


def _spec(group: dict, ops: list[int] | None = None) -> dict:
    """A hand plan's group from a plan summary's group: its ops, tiles and template (plan/handplan.py)."""
    from fusec.compiler.plan.handplan import group_spec       # (the compiler loads MLIR: only when repairing)
    return group_spec(group, ops)


def repair(program: Program, compiled: CompiledChain, inputs, error: str) -> Fallback | None:
    """The fused build of `compiled` with the kernel at fault replaced (see the module
    docstring), checked on `inputs`; None when no replacement passes."""
    from fusec.compiler.pipeline import compile_typed
    from .report import run_and_check
    chain, binding, plan = compiled.chain, compiled.binding, compiled.plan
    if plan is None or not program.options.fuse:
        return None
    fused = [g for g in plan["groups"] if len(_compute_ops(g)) > 1]
    if not fused:
        return None
    base = replace(program.options, baseline=False, autotune=False, tuned=None, kernel_report=False)
    unfused_plan = compile_typed(chain, binding, options=replace(base, fuse=False, plans=()), until="plan").plan
    by_kernel = {g["kernel"]: g for g in unfused_plan.summary()["groups"]}
    unfused_of = {o["id"]: g for g in by_kernel.values() for o in _compute_ops(g)}

    def replaced(groups: list[dict]) -> list[dict] | None:
        out = []
        for g in plan["groups"]:
            if g not in groups:
                out.append(_spec(g))
                continue
            if any(o["id"] not in unfused_of for o in _compute_ops(g)):
                return None                  # the unfused build numbers its ops otherwise
            for u in dict.fromkeys(unfused_of[o["id"]]["kernel"] for o in _compute_ops(g)):
                out.append(_spec(by_kernel[u]))
        return out

    def attempt(groups: list[dict]) -> CompiledChain | None:
        groups_spec = replaced(groups)
        if groups_spec is None:
            return None
        spec = json.dumps({"groups": groups_spec}, sort_keys=True)
        options = replace(base, plans=((chain.name, spec),))
        try:
            candidate = program._build(chain, dict(binding), options)
        except (CompilerInternalError, ValueError):
            return None                      # this replacement does not build: try the next
        return candidate if run_and_check(candidate, inputs, timing=False).ok else None

    def described(groups: list[dict]) -> list[dict]:
        return [{"kernel": g["kernel"], "ops": [f"%{o['id']} {o['label']}" for o in _compute_ops(g)]}
                for g in groups]

    for g in fused:
        candidate = attempt([g])
        if candidate is not None:
            return Fallback(_with_baseline(candidate, compiled), described([g]), error, True)
    if len(fused) > 1:
        candidate = attempt(fused)
        if candidate is not None:
            return Fallback(_with_baseline(candidate, compiled), described(fused), error, False)
    return None


def _with_baseline(candidate: CompiledChain, original: CompiledChain) -> CompiledChain:
    """The repaired build, timed against the original's unfused build (the speedup line)."""
    candidate.unfused = original.unfused
    candidate.kernel_counts = dict(candidate.kernel_counts, unfused=original.kernel_counts.get("unfused", 0))
    return candidate
