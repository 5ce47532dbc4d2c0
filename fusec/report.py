"""Run a compiled chain against the reference and describe the result (text and JSON)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fusec.runtime import reference
from fusec.runtime.compare import Comparison, compare
from fusec.runtime.executable import Timing

from .program import CompiledChain


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

    def as_dict(self) -> dict:
        return {
            "chain": self.chain, "target": self.target, "binding": self.binding, "build": self.running,
            "plan": self.plan, "unfused_kernels": self.unfused_kernels,
            "time": {"fused": self.fused.as_dict() if self.fused else None,
                     "unfused": self.unfused.as_dict() if self.unfused else None,
                     "speedup": self.speedup},
            "numerics": [{"output": i, "type": t, "ok": c.ok, "max_abs_err": c.max_abs, "max_rel_err": c.max_rel,
                          "worst_index": list(c.worst_index), "rtol": c.rtol, "atol": c.atol}
                         for i, (c, t) in enumerate(zip(self.comparisons, self.output_types))],
            "compile_seconds": self.compile_seconds,
        }

    def format(self) -> str:
        bound = ", ".join(f"{k}={v}" for k, v in self.binding.items())
        p = self.plan
        k = p["kernels"]
        lines = [f"chain {self.chain}{f' [{bound}]' if bound else ''} on {self.target}"
                 f"{' (unfused build: --no-fuse)' if self.running == 'unfused' else ''}",
                 f"  {p['ops']} ops -> {k} kernel{'s' if k != 1 else ''}"
                 + (f" (unfused: {self.unfused_kernels})" if self.unfused_kernels is not None else "")]
        for g in p["groups"]:
            ops = ", ".join(f"%{o['id']} {o['label']}" + (" [root]" if o["role"] == "root" else "")
                            for o in g["ops"] if o["role"] != "init")
            tiles = "one thread" if g["serial"] else f"block tile {g['block_tiles']}" + (
                f", threads {g['threads']}" if g["thread_tiles"] else "")
            lines.append(f"    kernel {g['kernel']}: {ops}; {tiles}")
        if self.fused:
            t = f"  time: fused {self.fused.median_s * 1e3:.3f} ms"
            if self.unfused:
                t += (f", unfused {self.unfused.median_s * 1e3:.3f} ms, speedup {self.speedup:.2f}x"
                      f" (median of {self.fused.runs}/{self.unfused.runs} runs; min {self.fused.min_s * 1e3:.3f}"
                      f" / {self.unfused.min_s * 1e3:.3f} ms)")
            else:
                t += f" (median of {self.fused.runs} runs; min {self.fused.min_s * 1e3:.3f} ms)"
            lines.append(t)
        for i, (c, t) in enumerate(zip(self.comparisons, self.output_types)):
            verdict = "ok" if c.ok else "MISMATCH"
            lines.append(f"  out {i} {t}: max abs err {c.max_abs:.3g}, max rel err {c.max_rel:.3g} -> {verdict}")
        return "\n".join(lines)


def run_and_check(compiled: CompiledChain, inputs: list[np.ndarray], timing: bool = True,
                  running: str = "fused") -> ChainReport:
    """Run the chain's build, time it and its unfused baseline, compare with the reference."""
    chain = compiled.chain
    outs = compiled.fused(*inputs)
    want = reference.run_chain(chain, inputs, compiled.binding)
    comps = [compare(g, w, t.dtype.name) for g, w, t in zip(outs, want, chain.output_types)]
    types = [str(t.with_shape(t.concrete(compiled.binding))) for t in chain.output_types]
    rep = ChainReport(chain.name, compiled.target.name, dict(compiled.binding), compiled.plan, outs, comps, types,
                      compile_seconds=dict(compiled.compile_seconds), running=running)
    if compiled.unfused is not None:
        rep.unfused_kernels = compiled.kernel_counts.get("unfused")
    if timing:
        rep.fused = compiled.fused.time(inputs)
        if compiled.unfused is not None:
            rep.unfused = compiled.unfused.time(inputs)
    return rep
