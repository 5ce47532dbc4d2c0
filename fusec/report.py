"""Run a compiled chain against the reference and describe the result (text and JSON), with the
cost model's predictions beside the measurements (the plan itself is printed by
fusec.compiler.plan.describe) and, when asked for, the GPU kernel report (fusec.compiler.report)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fusec.compiler.plan.describe import ms as _ms
from fusec.compiler.plan.describe import dynamic_text, tiles_text, transfers_line
from fusec.compiler.report import KernelReport, format_report
from fusec.runtime import reference
from fusec.runtime.compare import Comparison, compare, compare_to_truth
from fusec.runtime.executable import Timing, unreliable
from fusec.runtime.memory import format_bytes

from .compiled import CompiledChain


@dataclass
class ChainReport:
    chain: str
    target: str
    binding: dict[str, int]
    plan: dict
    outputs: list[np.ndarray]
    comparisons: list[Comparison]
    output_types: list[str]
    fused: Timing | None = None
    unfused: Timing | None = None
    unfused_kernels: int | None = None
    compile_seconds: dict[str, float] = field(default_factory=dict)
    running: str = "fused"          # which build produced `outputs`
    untimed: str | None = None      # why the builds were not timed (cuda-sim)
    kernel_report: list[KernelReport] | None = None   # of the build that ran (--kernel-report)
    cache: str = "off"              # the compile cache: hit, miss or off
    fallback: object = None         # fusec.fallback.Fallback: the fused kernel replaced before these outputs
    memory: dict = field(default_factory=dict)   # build -> its memory plan's figures (compiler/emit/memplan.py)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.comparisons)

    @property
    def speedup(self) -> float | None:
        if self.fused and self.unfused:
            return self.unfused.median_s / self.fused.median_s
        return None

    def failures(self) -> list[str]:
        return [f"chain {self.chain} output {i} ({t}): {c.describe()}"
                for i, (c, t) in enumerate(zip(self.comparisons, self.output_types)) if not c.ok]

    def failed_outputs(self) -> dict[int, str]:
        """Output index -> why it failed the numerics check (the saved npz records these)."""
        return {i: c.describe() for i, c in enumerate(self.comparisons) if not c.ok}

    @property
    def unreliable(self) -> str | None:
        """Why the measured times cannot be trusted (a busy machine, widely spread runs)."""
        return unreliable([self.fused, self.unfused])

    def predicted(self) -> dict | None:
        """Predicted against measured: per build and per kernel (a kernel's measured time is the
        chain's when the build is that one kernel; the CPU runs a chain as one function)."""
        model = self.plan.get("model")
        if not model:
            return None
        fused_key = "predicted_s" if self.running == "fused" else "unfused_predicted_s"
        out = {"hardware": model["hardware"], "fused_s": model[fused_key],
               "unfused_s": model["unfused_predicted_s"], "speedup": model["predicted_speedup"],
               "measured": "minimum of the timed runs (this machine's timings are noisy; the median is in 'time')",
               "kernels": []}
        if self.fused:
            out["fused_measured_s"] = self.fused.min_s
            out["fused_ratio"] = self.fused.min_s / max(out["fused_s"], 1e-30)
        if self.unfused:
            out["unfused_measured_s"] = self.unfused.min_s
            out["unfused_ratio"] = self.unfused.min_s / max(out["unfused_s"], 1e-30)
            out["measured_speedup"] = self.unfused.min_s / self.fused.min_s
        single = len(self.plan["groups"]) == 1
        for g in self.plan["groups"]:
            c = g.get("cost", {})
            k = {"kernel": g["kernel"], "predicted_s": c.get("time_s"), "bound": c.get("bound")}
            if single and self.fused:
                k["measured_s"] = self.fused.min_s
                k["ratio"] = self.fused.min_s / max(c.get("time_s") or 1e-30, 1e-30)
                k["measured_as"] = "the whole chain (one kernel)"
            out["kernels"].append(k)
        return out

    def as_dict(self) -> dict:
        return {
            "chain": self.chain, "target": self.target, "binding": self.binding, "build": self.running,
            "plan": self.plan, "unfused_kernels": self.unfused_kernels,
            "time": {"fused": self.fused.as_dict() if self.fused else None,
                     "unfused": self.unfused.as_dict() if self.unfused else None,
                     "speedup": self.speedup, "note": self.untimed},
            "timing_unreliable": self.unreliable,
            "model": self.predicted(),
            "numerics": numerics_dicts(self.comparisons, self.output_types),
            "compile_seconds": self.compile_seconds,
            "cache": self.cache,
            "fallback": self.fallback.as_dict() if self.fallback is not None else None,
            "kernel_report": _kernel_dicts(self.kernel_report),
            "memory": self.memory,
        }

    def format(self) -> str:
        lines = plan_lines(self.chain, self.binding, self.target, self.plan,
                           " (unfused build: --no-fuse)" if self.running == "unfused" else "", self.unfused_kernels)
        if self.fallback is not None:
            lines += self.fallback.lines()
        if self.untimed:
            lines.append(f"  time: {self.untimed}")
        elif self.fused:
            t = f"  time: fused {self.fused.median_s * 1e3:.3f} ms"
            if self.unfused:
                t += (f", unfused {self.unfused.median_s * 1e3:.3f} ms, speedup {self.speedup:.2f}x"
                      f" (median of {self.fused.runs}/{self.unfused.runs} runs; min {self.fused.min_s * 1e3:.3f}"
                      f" / {self.unfused.min_s * 1e3:.3f} ms)")
            else:
                t += f" (median of {self.fused.runs} runs; min {self.fused.min_s * 1e3:.3f} ms)"
            lines.append(t)
            if self.unreliable:
                lines.append(f"  timing not reliable: {self.unreliable}; rerun on a quiet machine for figures "
                             "to trust")
        lines += self._model_lines()
        for i, (c, t) in enumerate(zip(self.comparisons, self.output_types)):
            verdict = "ok" if c.ok else "MISMATCH"
            lines.append(f"  out {i} {t}: {c.summary()} -> {verdict}" + (f" ({c.note})" if c.note else ""))
        if self.kernel_report is not None:
            lines += kernel_lines(self.kernel_report, self.plan, self.running)
        return "\n".join(lines)


    def _model_lines(self) -> list[str]:
        m = self.predicted()
        if not m:
            return []
        line = (f"  model ({m['hardware']}): predicted fused {_ms(m['fused_s'])}"
                + (f", unfused {_ms(m['unfused_s'])}, speedup {m['speedup']:.2f}x" if self.running == "fused" else ""))
        if "fused_measured_s" in m:
            line += f"; measured (min) fused {_ms(m['fused_measured_s'])} (x{m['fused_ratio']:.2f})"
            if "unfused_measured_s" in m:
                line += (f", unfused {_ms(m['unfused_measured_s'])} (x{m['unfused_ratio']:.2f}), "
                         f"speedup {m['measured_speedup']:.2f}x")
        out = [line]
        if len(m["kernels"]) > 1:
            out.append("    per kernel (predicted; measured per chain only): " + ", ".join(
                f"k{k['kernel']} {_ms(k['predicted_s'])} {k['bound']}" for k in m["kernels"]))
        big = self.plan.get("model", {}).get("big_transfers", {})
        if big.get("fused") is not None:
            out.append("  " + transfers_line(big))
        if self.memory:
            out.append("  " + memory_line(self.memory, self.running))
        return out


def memory_line(memory: dict, running: str) -> str:
    """Peak intermediate memory per build: planned (buffers whose lifetimes do not overlap share
    an arena) and what the build's intermediates add up to."""
    parts = []
    for build in sorted(memory, key=lambda b: b != running):
        m = memory[build]
        parts.append(f"{build} {format_bytes(m['planned_bytes'])} ({m['intermediates']} buffer"
                     f"{'s' if m['intermediates'] != 1 else ''}, {format_bytes(m['intermediate_bytes'])} unplanned"
                     + (f"; {m['runtime_sized']} more sized at run time, allocated per call" if m.get("runtime_sized")
                        else "") + ")")
    return "peak intermediate memory: " + ", ".join(parts)


@dataclass
class UnrunReport:
    """A chain compiled for a target it cannot run on here, with its kernel report
    (--kernel-report on cuda without a GPU)."""
    chain: str
    target: str
    binding: dict[str, int]
    plan: dict
    kernel_report: list[KernelReport]
    why: str                        # why it did not run
    running: str = "fused"          # the build reported

    def failures(self) -> list[str]:
        return []

    def failed_outputs(self) -> dict[int, str]:
        return {}

    def as_dict(self) -> dict:
        return {"chain": self.chain, "target": self.target, "binding": self.binding, "build": self.running,
                "plan": self.plan, "ran": False, "why": self.why, "kernel_report": _kernel_dicts(self.kernel_report)}

    def format(self) -> str:
        return "\n".join(plan_lines(self.chain, self.binding, self.target, self.plan)
                         + [f"  not run: {self.why}"] + kernel_lines(self.kernel_report, self.plan, self.running))


@dataclass
class RunReport:
    """A chain run on a reference target (`reference`, the NumPy oracle itself, or `mlir-jit`,
    compared with it): no plan, no timing; each output's checksum and, on mlir-jit, its
    numerics against the reference."""
    chain: str
    target: str
    binding: dict[str, int]
    outputs: list[np.ndarray]
    output_types: list[str]
    comparisons: list[Comparison] | None      # None on `reference`: nothing to compare with

    def failures(self) -> list[str]:
        return [f"chain {self.chain} output {i}: {c.describe()}"
                for i, c in enumerate(self.comparisons or ()) if not c.ok]

    def failed_outputs(self) -> dict[int, str]:
        return {i: c.describe() for i, c in enumerate(self.comparisons or ()) if not c.ok}

    def _sums(self) -> list[tuple[float, float]]:
        out = []
        for x in self.outputs:
            xf = np.asarray(x).astype(np.float64)
            out.append((float(xf.sum()), float(np.abs(xf).mean()) if xf.size else 0.0))
        return out

    def format(self) -> str:
        bound = ", ".join(f"{k}={v}" for k, v in self.binding.items())
        lines = [f"chain {self.chain}{f' [{bound}]' if bound else ''}: target {self.target}"]
        for i, ((total, mean_abs), t) in enumerate(zip(self._sums(), self.output_types)):
            line = f"  out {i}: {t}  sum={total:.6g}  mean|x|={mean_abs:.6g}"
            if self.comparisons is not None:
                c = self.comparisons[i]
                line += f"  vs reference: {'ok' if c.ok else 'MISMATCH'} (max abs err {c.max_abs:.3g})"
            lines.append(line)
        return "\n".join(lines)

    def as_dict(self) -> dict:
        return {"chain": self.chain, "target": self.target, "binding": self.binding,
                "outputs": [{"output": i, "type": t, "sum": total, "mean_abs": mean_abs}
                            for i, ((total, mean_abs), t) in enumerate(zip(self._sums(), self.output_types))],
                "numerics": (numerics_dicts(self.comparisons, self.output_types)
                             if self.comparisons is not None else None)}


def run_reference(chain, binding: dict[str, int], outs, inputs, target: str) -> RunReport:
    """A RunReport of outputs `outs` of `chain` on a reference target (mlir-jit: compared with
    the NumPy reference)."""
    types = []
    for out, t in zip(outs, chain.output_types):
        x = np.asarray(out)
        types.append(t.dtype.name + (f"[{', '.join(map(str, x.shape))}]" if x.ndim else ""))
    comparisons = None
    if target != "reference":
        expected = reference.run_chain(chain, inputs, binding)
        comparisons = [compare(np.asarray(x), e, t.dtype.name) for x, e, t in zip(outs, expected, chain.output_types)]
    return RunReport(chain.name, target, dict(binding), list(outs), types, comparisons)


def numerics_dicts(comparisons: list[Comparison], types: list[str]) -> list[dict]:
    return [{"output": i, "type": t, "ok": c.ok, "max_abs_err": c.max_abs, "max_rel_err": c.max_rel,
             "max_rel_err_where_abs_ref_at_least": c.rel_floor,
             "worst_index": list(c.worst_index), "rtol": c.rtol, "atol": c.atol,
             "nan": {"reference": c.specials.ref_nan, "build": c.specials.got_nan},
             "inf": {"reference": c.specials.ref_inf, "build": c.specials.got_inf},
             "special_mismatches": [m.describe() for m in c.specials.mismatches]}
            for i, (c, t) in enumerate(zip(comparisons, types))]


def plan_lines(chain: str, binding: dict[str, int], target: str, plan: dict, build_note: str = "",
               unfused_kernels: int | None = None) -> list[str]:
    """The heading of a chain's report: the chain, the target, and the kernels it became."""
    bound = ", ".join(f"{k}={v}" for k, v in binding.items())
    k = plan["kernels"]
    lines = [f"chain {chain}{f' [{bound}]' if bound else ''} on {target}{build_note}",
             f"  {plan['ops']} ops -> {k} kernel{'s' if k != 1 else ''}"
             + (f" (unfused: {unfused_kernels})" if unfused_kernels is not None else "")]
    for g in plan["groups"]:
        ops = ", ".join(f"%{o['id']} {o['label']}" + (" [root]" if o["role"] == "root" else "")
                        for o in g["ops"] if o["role"] != "init")
        lines.append(f"    kernel {g['kernel']}: {ops}; {tiles_text(g)}")
    if plan.get("dynamic"):
        lines.append("  " + dynamic_text(plan["dynamic"]))
    return lines


def kernel_lines(reports: list[KernelReport], plan: dict, running: str) -> list[str]:
    """The kernel report of a build, indented under its chain."""
    hw = (plan.get("model") or {}).get("hardware", "the planned GPU")
    head = f"  kernel report of the {running} build for {hw} (ptxas -v, occupancy, coalescing traced on the simulator):"
    return [head] + ["    " + line for line in format_report(reports).splitlines()]


def _kernel_dicts(reports: list[KernelReport] | None) -> list[dict] | None:
    return None if reports is None else [r.as_dict() for r in reports]


def run_and_check(compiled: CompiledChain, inputs: list[np.ndarray], timing: bool = True,
                  running: str = "fused") -> ChainReport:
    """Run the chain's build, time it and its unfused baseline, compare with the reference.
    On a target whose times mean nothing (cuda-sim) each build runs once, untimed."""
    chain = compiled.chain
    # a build with run-time extents (--dynamic) was planned for a size class: the run's own
    # extents come from its inputs
    binding = (reference.bind_symbols(chain, inputs) if (compiled.plan or {}).get("dynamic")
               else compiled.binding)
    outs = compiled.fused(*inputs)
    want = reference.run_chain(chain, inputs, binding)
    comps = [compare(g, w, t.dtype.name) for g, w, t in zip(outs, want, chain.output_types)]
    if not all(c.ok for c in comps):          # let the float64 truth decide (runtime/compare.py)
        truth = reference.run_chain(chain, inputs, binding, compute_f64=True)
        comps = [compare_to_truth(g, w, t64, t.dtype.name)
                 for g, w, t64, t in zip(outs, want, truth, chain.output_types)]
    types = [str(t.with_shape(t.concrete(binding))) for t in chain.output_types]
    unfused = compiled.unfused        # made now when it is made lazily: its memory and kernel counts too
    rep = ChainReport(chain.name, compiled.target.name, dict(binding), compiled.plan, outs, comps, types,
                      compile_seconds=dict(compiled.compile_seconds), running=running)
    rep.memory = dict(compiled.memory)
    if running == "unfused" and "unfused" not in rep.memory and "fused" in rep.memory:   # --no-fuse: the one build
        rep.memory = {"unfused": rep.memory.pop("fused")}
    if unfused is not None:
        rep.unfused_kernels = compiled.kernel_counts.get("unfused")
    if timing and compiled.target.untimed:
        rep.untimed = compiled.target.untimed
        if unfused is not None:
            unfused(*inputs)
    elif timing:
        rep.fused = compiled.fused.time(inputs)
        if unfused is not None:
            rep.unfused = unfused.time(inputs)
    rep.compile_seconds = compiled.timed_seconds()     # with Numba's compile of what ran
    rep.cache = compiled.cache
    return rep
