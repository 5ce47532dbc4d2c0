"""`fusec.compile`: FDSL in, callable compiled chains out.

Wiring only: the compiler (fusec.compiler.pipeline) builds each chain for a symbol binding
and a target, the result is written as an artifact (fusec.runtime.artifact) and loaded back
by the runtime, exactly as `fusec compile` / `fusec run` do across machines. Each binding
compiles once per process.
"""
from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fusec.dsl.typed import TypedChain, TypedModule
from fusec.runtime import artifact as art
from fusec.runtime import reference
from fusec.runtime.compare import Comparison, compare
from fusec.runtime.executable import Executable
from fusec.runtime.targets import Target, best_available, select

from . import __version__, api


@dataclass(frozen=True)
class Options:
    """How to compile. `fuse=False` (or FUSEC_NO_FUSE=1) runs the unfused build instead;
    `plans` gives plans by hand per chain name ({"groups": [{"ops": [...], "block_tiles": [...]}]});
    `baseline=False` skips building the unfused comparison build; `hw` names the hardware profile
    the cost model plans for (h200, h100, a100, seed, cpu, device; default: the real device on
    `cuda`, h200 for other GPU targets, the measured cpu profile on `cpu`); `autotune` times the
    model's best tile candidates on the target and keeps the fastest (cached on disk)."""
    fuse: bool = True
    baseline: bool = True
    disabled_passes: tuple[str, ...] = ()
    plans: tuple[tuple[str, str], ...] = ()       # (chain, plan JSON)
    hw: str | None = None
    autotune: bool = False

    @staticmethod
    def make(options=None, **kw) -> "Options":
        if isinstance(options, Options):
            return options
        d = dict(options or {}, **kw)
        if "plans" in d and isinstance(d["plans"], dict):
            import json
            d["plans"] = tuple(sorted((k, v if isinstance(v, str) else json.dumps(v)) for k, v in d["plans"].items()))
        if "disabled_passes" in d:
            d["disabled_passes"] = tuple(d["disabled_passes"])
        if os.environ.get("FUSEC_NO_FUSE") == "1":
            d["fuse"] = False
        return Options(**d)


@dataclass
class CompiledChain:
    """One chain built for one binding and target: its plan, stage texts, and the builds."""
    chain: TypedChain
    binding: dict[str, int]
    target: Target
    fused: Executable            # the build `fuse` selects (unfused when fuse=False)
    unfused: Executable | None   # the comparison build (None when baseline=False or fuse=False)
    plan: dict                   # FusionPlan.summary() of the build that runs
    texts: dict[str, str]        # stage name -> text (of the running build)
    compile_seconds: dict[str, float]
    artifact_dir: Path
    kernel_counts: dict[str, int] = field(default_factory=dict)   # build -> kernels in its plan

    def __call__(self, *arrays):
        outs = self.fused(*arrays)
        return outs[0] if len(outs) == 1 else tuple(outs)


class Chain:
    """A chain of a compiled program: call it on arrays; symbols bind from their shapes."""

    def __init__(self, program: "Program", typed: TypedChain):
        self.program = program
        self.typed = typed
        self._builds: dict[tuple, CompiledChain] = {}

    @property
    def name(self) -> str:
        return self.typed.name

    def binding_for(self, arrays) -> dict[str, int]:
        shaped = [np.empty(getattr(x, "shape", ()), dtype=getattr(x, "dtype", np.float32)) for x in arrays]
        return reference.bind_symbols(self.typed, shaped)

    def compiled(self, binding: dict[str, int]) -> CompiledChain:
        key = tuple(sorted(binding.items()))
        if key not in self._builds:
            self._builds[key] = self.program._build(self.typed, dict(binding))
        return self._builds[key]

    def __call__(self, *arrays):
        return self.compiled(self.binding_for(arrays))(*arrays)

    def plan(self, binding: dict[str, int]) -> dict:
        return self.compiled(binding).plan

    def stages(self, binding: dict[str, int]) -> dict[str, str]:
        return self.compiled(binding).texts

    def check(self, inputs=None, binding: dict[str, int] | None = None, seed: int = 0) -> list[Comparison]:
        """Run the compiled chain and the NumPy reference on the same inputs; compare outputs."""
        if inputs is None:
            binding = {s: (binding or {}).get(s, 64) for s in self.typed.symbols}
            inputs = reference.random_inputs(self.typed, binding, seed)
        binding = reference.bind_symbols(self.typed, inputs, binding)
        got = self.compiled(binding).fused(*inputs)
        want = reference.run_chain(self.typed, inputs, binding)
        return [compare(g, w, t.dtype.name) for g, w, t in zip(got, want, self.typed.output_types)]


class Program:
    """The result of fusec.compile: `program.chains[name]` (or `program.name`) are callables."""

    def __init__(self, typed: TypedModule, target: Target, options: Options, source: str, cache: Path):
        self.typed = typed
        self.target = target
        self.options = options
        self.source = source
        self.cache = cache
        self.chains = {c.name: Chain(self, c) for c in typed.chains}

    def __getitem__(self, name: str) -> Chain:
        return self.chains[name]

    def __getattr__(self, name: str) -> Chain:
        chains = self.__dict__.get("chains", {})
        if name in chains:
            return chains[name]
        raise AttributeError(name)

    def check(self, bindings: dict[str, dict[str, int]] | None = None, seed: int = 0) -> dict[str, list[Comparison]]:
        """Every chain against the reference on seeded inputs."""
        return {n: c.check(binding=(bindings or {}).get(n), seed=seed) for n, c in self.chains.items()}

    # ---- building ------------------------------------------------------------------------
    def _build(self, chain: TypedChain, binding: dict[str, int]) -> CompiledChain:
        meta, sources, plan_text, plan, texts = build_chain(chain, binding, self.target, self.options)
        tag = "_".join(f"{k}{v}" for k, v in sorted(binding.items())) or "static"
        directory = self.cache / f"{chain.name}.{tag}"
        art.write(directory, target=self.target.name, source_path=self.typed.file.path, source=self.source,
                  version=__version__, chains={chain.name: (meta, sources, plan_text)})
        return load_chain(art.load(directory), chain, self.target, texts)


def check_supported(chain: TypedChain, target: Target) -> None:
    """User errors for what the Numba targets cannot run, at the place in the user's file."""
    from fusec.dsl.diagnostics import Diagnostic, FdslError
    for n in chain.nodes:
        if n.type.dtype.name == "bf16":
            raise FdslError([Diagnostic(n.span, f"bf16 is not supported on the {target.name} target (Numba has no "
                                        "bf16 arithmetic); use --target reference or mlir-jit, or cast to f32")])


def build_chain(chain: TypedChain, binding: dict[str, int], target: Target, options: Options):
    """Compile one chain (the running build and, if asked, the unfused baseline)."""
    from fusec.compiler.pipeline import CompileOptions, compile_chain
    check_supported(chain, target)
    hand = dict(options.plans).get(chain.name)
    hw = options.hw or ("device" if target.name == "cuda" else None)
    tuned = None
    if options.autotune and options.fuse and not hand:
        tuned = _autotune(chain, binding, target, options, hw)
    builds = {"fused": options.fuse}
    if options.baseline and options.fuse:
        builds["unfused"] = False
    sources, metas, seconds = {}, {}, {}
    main = None
    for build, fuse in builds.items():
        opts = CompileOptions(frozenset(options.disabled_passes), False, target.kind, fuse,
                              hand if (fuse and build == "fused") else None, hw=hw,
                              tuned=tuned if build == "fused" else None)
        st = compile_chain(chain, binding, options=opts)
        entry = st.emitted.entries[chain.name]
        sources[build] = st.emitted.source
        metas[build] = {"host": entry.host, "kernels": list(entry.kernels), "plan_kernels": st.plan.kernel_count}
        seconds.update({f"{build}.{k}": v for k, v in st.seconds.items()})
        if build == "fused":
            main = st
    meta = art.ChainArtifact(chain.name, dict(binding), list(main.emitted.entries[chain.name].arg_types),
                             list(main.emitted.entries[chain.name].result_types), metas,
                             main.plan.summary(), seconds)
    return meta, sources, main.texts["plan"], main.plan, main.texts


def _autotune(chain: TypedChain, binding: dict[str, int], target: Target, options: Options,
              hw: str | None) -> str:
    """Measured tiles for the chain's kernels (compiler/autotune.py), as CompileOptions.tuned."""
    import json
    from fusec.compiler import autotune
    from fusec.compiler.pipeline import CompileOptions, compile_chain
    base = CompileOptions(frozenset(options.disabled_passes), False, target.kind, True, None, hw=hw)
    plan = compile_chain(chain, binding, options=base, until="plan").plan
    inputs = reference.random_inputs(chain, binding, 0)
    scratch = Path(tempfile.mkdtemp(prefix="fusec-tune-"))

    def measure(tuned: dict) -> float:
        opts = CompileOptions(base.disabled_passes, False, target.kind, True, None, hw=hw, tuned=json.dumps(tuned))
        st = compile_chain(chain, binding, options=opts)
        entry = st.emitted.entries[chain.name]
        meta = art.ChainArtifact(chain.name, dict(binding), [], [], {"fused": {"host": entry.host,
                                 "kernels": list(entry.kernels)}}, st.plan.summary())
        directory = scratch / f"c{len(list(scratch.iterdir()))}"
        art.write(directory, target=target.name, source_path="<tune>", source="", version=__version__,
                  chains={chain.name: (meta, {"fused": st.emitted.source}, st.texts["plan"])})
        host = art.load(directory).module(chain.name, "fused")
        dtypes = [p.type.dtype.np for p in chain.param_nodes]
        return Executable(host, target, dtypes, f"{chain.name}/tune").time(inputs, min_runs=5).min_s

    tuned, _ = autotune.tune(plan, measure)
    return json.dumps(tuned, sort_keys=True)


def load_chain(artifact: art.Artifact, chain: TypedChain, target: Target, texts: dict | None = None) -> CompiledChain:
    """The runtime half: executables from an artifact's emitted modules (no MLIR needed)."""
    meta = artifact.chains[chain.name]
    dtypes = [p.type.dtype.np for p in chain.param_nodes]
    fused = Executable(artifact.module(chain.name, "fused"), target, dtypes, f"{chain.name}/fused")
    unfused = (Executable(artifact.module(chain.name, "unfused"), target, dtypes, f"{chain.name}/unfused")
               if "unfused" in meta.builds else None)
    if texts is None:
        texts = {"plan": (artifact.directory / f"{chain.name}.plan.txt").read_text()}
    binding = {s: meta.binding[s] for s in chain.symbols}     # the chain's order, not the manifest's
    return CompiledChain(chain, binding, target, fused, unfused, meta.plan, texts,
                         meta.compile_seconds, artifact.directory,
                         {b: m.get("plan_kernels", 0) for b, m in meta.builds.items()})


def compile(path_or_source: str, target: str | None = None, options=None, cache_dir: str | None = None) -> Program:
    """Compile FDSL (a path or source text) for `target` ('cuda', 'cuda-sim', 'cpu'; default:
    cuda when a GPU is present, else cpu). Chains compile lazily, once per symbol binding."""
    text, _path = api.read_source(path_or_source)
    typed = api.check(path_or_source)
    tgt = select(target or best_available())
    cache = Path(cache_dir or tempfile.mkdtemp(prefix="fusec-"))
    return Program(typed, tgt, Options.make(options), text, cache)
