"""`CompiledChain`: one chain built for one binding and target, as a caller runs it (its running
build, the comparison build made when first asked for), with its plan, stage texts, compile
times, kernel counts and memory figures.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from fusec.dsl.typed import TypedChain
from fusec.runtime.executable import Executable
from fusec.runtime.targets import Target


@dataclass
class CompiledChain:
    """One chain built for one binding and target: its plan, stage texts, and the builds."""
    chain: TypedChain
    binding: dict[str, int]
    target: Target
    fused: Executable            # the build that runs (unfused when fuse=False; the oracle on a reference)
    unfused_build: Executable | None   # the comparison build, once made (see `unfused`)
    plan: dict | None            # FusionPlan.summary() of the build that runs (None on a reference)
    texts: dict[str, str]        # stage name -> text (of the running build)
    compile_seconds: dict[str, float]
    artifact_dir: Path | None
    kernel_counts: dict[str, int] = field(default_factory=dict)   # build -> kernels in its plan
    memory: dict[str, dict] = field(default_factory=dict)         # build -> its memory plan's figures
    # (a lazily made unfused build's kernel count and memory figures join these when it is made)
    kernel_report: list | None = None    # the running build's KernelReports (options.kernel_report)
    cache: str = "off"                   # the compile cache: "hit", "remote" (from its remote tier), "miss"
                                         # (built and stored) or "off"
    # makes the comparison build on first use (a Program's fused build with options.baseline): only
    # the speedup line, the memory and kernel counts of the report, and tests ask for it
    make_unfused: Callable[[], "CompiledChain"] | None = field(default=None, repr=False)

    @property
    def unfused(self) -> Executable | None:
        """The comparison build, one kernel per linalg op (None when baseline=False, fuse=False,
        on a reference), compiled when first asked for."""
        if self.unfused_build is None and self.make_unfused is not None:
            made, self.make_unfused = self.make_unfused(), None
            self.unfused_build = made.fused
            made.fused.name = f"{self.chain.name}/unfused"
            if "fused" in made.kernel_counts:
                self.kernel_counts["unfused"] = made.kernel_counts["fused"]
            if "fused" in made.memory:
                self.memory["unfused"] = made.memory["fused"]
            self.compile_seconds.update({f"unfused.{k.split('.', 1)[1]}": v for k, v in made.compile_seconds.items()
                                         if k.startswith("fused.")})
            self.compile_seconds["unfused.compile"] = made.compile_seconds.get("compile",
                                                                               made.compile_seconds.get("load", 0.0))
        return self.unfused_build

    @unfused.setter
    def unfused(self, build: Executable | None) -> None:
        self.unfused_build, self.make_unfused = build, None

    def timed_seconds(self) -> dict[str, float]:
        """This process's compile times: the stages (or the cache load), Numba's compile of each
        build that has run (`numba.fused`, `numba.unfused`), and `total`."""
        out = dict(self.compile_seconds)
        ran = [(name, exe) for name, exe in (("fused", self.fused), ("unfused", self.unfused_build))
               if exe is not None and exe.jit_s is not None]
        for name, exe in ran:
            out[f"numba.{name}"] = exe.jit_s
        if ran:
            out["numba.init"] = sum(exe.init_s for _, exe in ran)
        out["total"] = (out.get("compile", out.get("load", 0.0)) + out.get("unfused.compile", 0.0)
                        + sum(out.get(f"numba.{b}", 0.0) for b in ("fused", "unfused")))
        return out

    def __call__(self, *arrays):
        outs = self.fused(*arrays)
        return outs[0] if len(outs) == 1 else tuple(outs)
