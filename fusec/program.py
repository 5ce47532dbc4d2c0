"""`fusec.compile`: FDSL in, callable compiled chains out.

Wiring only: `compile_options` makes a compile's one options object (compiler/options.py) for a
runtime target, the compiler (fusec.compiler.pipeline.build_chain) builds each chain for a
symbol binding, and the result is written as an artifact (fusec.runtime.artifact) and loaded
back by the runtime, exactly as `fusec compile` / `fusec run` do across machines. Each binding
compiles once per process. The `reference` and `mlir-jit` targets run the NumPy oracle and
MLIR's CPU JIT instead of compiled kernels.
"""
from __future__ import annotations

import functools
import hashlib
import importlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Callable
from pathlib import Path

import numpy as np

from fusec.compiler.dynamic import chain_dynamic, planning_binding, unknown_symbols, wrong_target
from fusec.compiler.options import CompileOptions, OptionsError
from fusec.dsl.binding import check_binding
from fusec.dsl.diagnostics import Diagnostic, FdslError
from fusec.dsl.typed import TypedChain, TypedModule
from fusec.runtime import artifact as art
from fusec.runtime import cache as cache_mod
from fusec.runtime.cache import CompileCache, entry_name
from fusec.runtime import reference
from fusec.runtime.compare import Comparison, compare
from fusec.runtime.executable import Executable, as_input, input_shape
from fusec.runtime.memory import check_memory
from fusec.runtime.targets import Target, best_available, select

from . import api
from .progress import QUIET, Progress
from .version import __version__

Options = CompileOptions


def compile_options(target: Target, options: CompileOptions | dict | None = None, *,
                    plans: bool = True, quick: bool = False) -> CompileOptions:
    """The options of a compile for `target`: `options` (an object, or a dict of its fields where
    `hw` may name the hardware profile: h200, h100, a100, seed, cpu, device), FUSEC_NO_FUSE=1,
    the target's kind, and the profile resolved (the running device on `cuda`; this machine's
    measured profile on `cpu`, measured once with a notice). `plans=False`: nothing will be
    planned (stages before `plan` only), so no profile is needed. `quick`: on `cpu`, take the
    cached profile as it is on disk, without the calibration module (which imports the MLIR
    bindings); Program checks it before it compiles anything with it."""
    d = dict(options) if isinstance(options, dict) else None
    hw = d.pop("hw", None) if d is not None else None
    opts = CompileOptions.make(d if d is not None else options)
    if os.environ.get("FUSEC_NO_FUSE") == "1":
        opts = replace(opts, fuse=False)
    kind = target.kind if target.compiled else "cpu"
    opts = replace(opts, target=kind)
    if opts.dynamic and (why := wrong_target(target.name)) is not None:
        raise OptionsError(f"dynamic={list(opts.dynamic)}: {why}")
    if (quick and plans and kind == "cpu" and target.compiled and opts.hardware is None and hw is None
            and "fusec.compiler.calibrate" not in sys.modules):
        from fusec.compiler.plan.hardware import cached_cpu_profile
        profile = cached_cpu_profile()
        if profile is not None:
            return replace(opts, hardware=profile)
    if plans and target.compiled and (opts.hardware is None or hw is not None):
        from fusec.compiler.calibrate import hardware_profile
        name = hw or ("device" if target.name == "cuda" else None)
        opts = replace(opts, hardware=hardware_profile(name, kind, notice=_notice))
    return opts


def _notice(text: str) -> None:
    print(f"fusec: {text}", file=sys.stderr)


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
    cache: str = "off"                   # the compile cache: "hit", "miss" (built and stored) or "off"
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


class Chain:
    """A chain of a compiled program: call it on arrays; symbols bind from their shapes."""

    def __init__(self, program: "Program", typed: TypedChain):
        self.program = program
        self.typed = typed
        self._builds: dict[tuple, CompiledChain] = {}
        self._checked: set[tuple] = set()       # bindings already checked (a dynamic build serves many)

    @property
    def name(self) -> str:
        return self.typed.name

    def binding_for(self, arrays) -> dict[str, int]:
        """The symbols' sizes from the inputs' shapes (inputs as as_input takes them)."""
        shaped = []
        for i, x in enumerate(arrays):
            shape, dtype = input_shape(as_input(x, self._param(i)))
            shaped.append(np.lib.stride_tricks.as_strided(np.zeros((), dtype), shape, [0] * len(shape)))
        return reference.bind_symbols(self.typed, shaped)

    def _param(self, i: int) -> str:
        params = self.typed.param_nodes
        return f"input '{params[i].name}' of chain '{self.name}'" if i < len(params) else f"input {i}"

    @property
    def dynamic(self) -> tuple[str, ...]:
        """The chain's symbols its builds take at run time (options.dynamic on a compiled target)."""
        if not self.program.target.compiled:
            return ()
        return chain_dynamic(self.typed.symbols, self.program.options.dynamic)

    def build_binding(self, binding: dict[str, int]) -> dict[str, int]:
        """The binding a build for `binding` is made for: itself, with each dynamic symbol at its
        size class (one build serves every extent of the class: compiler/dynamic.py)."""
        return planning_binding(binding, self.dynamic)

    def compiled(self, binding: dict[str, int]) -> CompiledChain:
        """The chain built for `binding` (once per binding; with dynamic symbols, once per size
        class of them). A binding that makes a slice misfit, or whose buffers would not fit the
        program's memory limit, is refused first (an FdslError at the slice, or at the largest
        tensor)."""
        given = tuple(sorted(binding.items()))
        if given not in self._checked:
            check_binding(self.typed, dict(binding))
            check_memory(self.typed, dict(binding), self.program.max_memory, "max_memory=BYTES")
            self._checked.add(given)
        planned = self.build_binding(binding)
        key = tuple(sorted(planned.items()))
        if key not in self._builds:
            self._builds[key] = self.program._build(self.typed, planned)
        return self._builds[key]

    def __call__(self, *arrays):
        """Run on NumPy arrays, anything with __array__ or __dlpack__ (NumPy arrays back), or on
        `cuda` device arrays (__cuda_array_interface__; Numba device arrays back). On `cpu` an
        index input outside the axis it indexes is refused first (an FdslError at the gather)."""
        arrays = [as_input(x, self._param(i)) for i, x in enumerate(arrays)]
        binding = self.binding_for(arrays)
        self._check_index_inputs(arrays, binding)
        return self.compiled(binding)(*arrays)

    def _check_index_inputs(self, arrays, binding: dict[str, int]) -> None:
        if self.program.target.checks_index_inputs:
            reference.check_index_inputs(self.typed, list(arrays), binding)

    def plan(self, binding: dict[str, int]) -> dict | None:
        return self.compiled(binding).plan

    def stages(self, binding: dict[str, int]) -> dict[str, str]:
        return self.compiled(binding).texts

    def check(self, inputs=None, binding: dict[str, int] | None = None, seed: int = 0) -> list[Comparison]:
        """Run the compiled chain and the NumPy reference on the same inputs; compare outputs."""
        if inputs is None:
            binding = {s: (binding or {}).get(s, 64) for s in self.typed.symbols}
            check_binding(self.typed, binding)
            check_memory(self.typed, binding, self.program.max_memory, "max_memory=BYTES")
            inputs = reference.random_inputs(self.typed, binding, seed)
        binding = reference.bind_symbols(self.typed, inputs, binding)
        self._check_index_inputs(inputs, binding)
        got = self.compiled(binding).fused(*inputs)
        want = reference.run_chain(self.typed, inputs, binding)
        return [compare(g, w, t.dtype.name) for g, w, t in zip(got, want, self.typed.output_types)]


class Program:
    """The result of fusec.compile: `program.chains[name]` (or `program.name`) are callables."""

    def __init__(self, typed: TypedModule, target: Target, options: CompileOptions, source: str,
                 cache: Path | None, max_memory: int | None = None, persistent: bool = False,
                 requested: CompileOptions | dict | None = None):
        self.typed = typed
        self.target = target
        self.options = options
        self.source = source
        self.max_memory = max_memory       # bytes a run may need (None: a quarter of this machine's memory)
        self._cache = cache
        self._scratch: tempfile.TemporaryDirectory | None = None   # removed with the program
        self.persistent = persistent       # builds go through the compile cache (runtime/cache.py)
        self._requested = requested        # the options as given (a quick cpu profile is checked from them)
        self._profile_checked = not (target.kind == "cpu" and "fusec.compiler.calibrate" not in sys.modules)
        self.progress: Progress = QUIET    # the command line's status line (fusec/progress.py); none by default
        self.progress_label = ""           # what the status line says before "CHAIN: compiling"
        self.chains = {c.name: Chain(self, c) for c in typed.chains}

    def __getitem__(self, name: str) -> Chain:
        return self.chains[name]

    def __getattr__(self, name: str) -> Chain:
        chains = self.__dict__.get("chains", {})
        if name in chains:
            return chains[name]
        raise AttributeError(name)

    @property
    def cache(self) -> Path:
        """Where this program's artifacts are written: the compile cache (persistent), else the
        given directory, else a temporary directory removed when the program is."""
        if self._cache is None:
            self._scratch = tempfile.TemporaryDirectory(prefix="fusec-")
            self._cache = Path(self._scratch.name)
        return self._cache

    def compile_cache(self) -> CompileCache:
        return CompileCache(self.cache, warn=_notice)

    def cache_entry(self, chain: TypedChain, binding: dict[str, int], options: CompileOptions | None = None) -> str:
        """The compile cache's entry name of `chain` built for `binding` with these options."""
        digest = cache_key(self.source, chain.name, binding, options or self.options, self.target)
        return entry_name(chain.name, binding, digest)

    def check(self, bindings: dict[str, dict[str, int]] | None = None, seed: int = 0) -> dict[str, list[Comparison]]:
        """Every chain against the reference on seeded inputs."""
        return {n: c.check(binding=(bindings or {}).get(n), seed=seed) for n, c in self.chains.items()}

    # ---- building ------------------------------------------------------------------------
    def _build(self, chain: TypedChain, binding: dict[str, int], options: CompileOptions | None = None) -> CompiledChain:
        """The chain built for `binding`, with the program's options (or `options`: a fallback's
        hand plan), from the compile cache when it holds the build; with options.baseline, its
        unfused build is made when first asked for (CompiledChain.unfused), a build of its own."""
        compiled = self._build_one(chain, binding, options)
        opts = options or self.options
        if self.target.compiled and opts.baseline and opts.fuse:
            unfused = replace(opts, fuse=False, baseline=False, plans=(), tuned=None, autotune=False,
                              kernel_report=False)
            compiled.make_unfused = lambda: self._build_one(chain, binding, unfused)
        return compiled

    def _build_one(self, chain: TypedChain, binding: dict[str, int], options: CompileOptions | None = None
                   ) -> CompiledChain:
        """One build of the chain (the fused one, or with options.fuse off the unfused one)."""
        if not self.target.compiled:
            return _reference_chain(chain, binding, self.target, self.options)
        check_supported(chain, self.target)
        imported = _import_numba(self.target)
        t0 = time.perf_counter()
        if self.persistent:
            found = self._cached(chain, binding, options or self.options)
            if found is not None:
                compiled = load_chain(found, chain, self.target, _stage_texts(found, chain.name), numba_cache=True)
                if (options or self.options).kernel_report:
                    compiled.kernel_report = artifact_kernel_report(found, chain)
                compiled.compile_seconds = {"load": time.perf_counter() - t0, "numba.import": imported}
                compiled.cache = "hit"
                return compiled
            if options is None and self._check_profile():
                return self._build_one(chain, binding)      # the checked profile is another one
        options = options or self.options
        from fusec.compiler.pipeline import build_chain
        told = self.progress.stage(f"{self.progress_label}{chain.name}: compiling") if self.progress.enabled else None
        try:
            built = build_chain(chain, binding, options, timer=_timer(chain, binding, self.target), progress=told,
                                unfused=False)
        finally:
            self.progress.clear()

        def write(directory: Path) -> Path:
            texts = json.dumps(built.main.texts, sort_keys=True).encode()
            return write_artifact(directory, self.target, self.typed.file.path, self.source, built.options, [built],
                                  extra={f"{chain.name}.stages.json": texts})
        if self.persistent:
            directory = self.compile_cache().store(self.cache_entry(chain, binding, options), write)
        else:
            tag = "_".join(f"{k}{v}" for k, v in sorted(binding.items())) or "static"
            directory = self.cache / f"{chain.name}.{tag}"
            if options is not self.options:
                directory = directory.with_name(directory.name + "." + options.key())
            _set_aside_if_not_an_artifact(directory)
            write(directory)
        compiled = load_chain(art.load(directory), chain, self.target, built.main.texts, numba_cache=self.persistent)
        if built.options.kernel_report:
            compiled.kernel_report = list(built.kernel_report)
        compiled.compile_seconds = dict(compiled.compile_seconds, compile=time.perf_counter() - t0,
                                        **{"numba.import": imported})
        compiled.cache = "miss" if self.persistent else "off"
        return compiled

    def _cached(self, chain: TypedChain, binding: dict[str, int], options: CompileOptions) -> art.Artifact | None:
        """The chain's checked artifact from the compile cache, when one was stored."""
        def accept(found: art.Artifact) -> str | None:
            if found.options_key != options.key() or found.target != self.target.name:
                return "was compiled with other options"
            if found.source() != self.source or chain.name not in found.chains:
                return "was compiled from another source"
            return None
        return self.compile_cache().lookup(self.cache_entry(chain, binding, options), accept)

    def _check_profile(self) -> bool:
        """Before compiling with a cpu profile read quickly from disk: the calibration module's
        check of it (which moves an invalid one aside and measures again). True when the
        checked profile is another one (the options change with it)."""
        if self._profile_checked:
            return False
        self._profile_checked = True
        checked = compile_options(self.target, self._requested)
        if checked == self.options:
            return False
        self.options = checked
        return True


def _import_numba(target: Target) -> float:
    """Import what the emitted modules import (Numba, and its CUDA part on cuda targets), so
    that a build's times are not its imports'; returns the seconds that took (0 once done)."""
    t0 = time.perf_counter()
    for name in ("numba", "numba.extending") + (("numba.cuda",) if target.is_cuda else ()):
        importlib.import_module(name)
    return time.perf_counter() - t0


def _set_aside_if_not_an_artifact(directory: Path) -> None:
    """A program's cache entry that is not an artifact (a partial one without its manifest, or a
    file) is reported in one line and moved aside to NAME.invalid, and the chain built again;
    write_artifact replaces an artifact whole."""
    if not directory.parent.is_dir():
        return                           # write_artifact says why it cannot write there
    try:
        art.check_replaceable(directory)
        return
    except art.ArtifactError as e:
        why = str(e).split("; ")[0]
    aside = directory.with_name(directory.name + ".invalid")
    try:
        if aside.is_dir() and not aside.is_symlink():
            shutil.rmtree(aside)
        elif aside.exists() or aside.is_symlink():
            aside.unlink()
        os.replace(directory, aside)
    except OSError as e:
        raise art.ArtifactError(f"{why}; fusec could not move it aside ({e.strerror or e}): remove it") from None
    print(f"fusec: the cached build {why}; moved it to {aside.name} and compiling again", file=sys.stderr)


def check_supported(chain: TypedChain, target: Target) -> None:
    """User errors for what the Numba targets cannot run, at the place in the user's file."""
    for n in chain.nodes:
        if n.type.dtype.name == "bf16":
            raise FdslError([Diagnostic(n.span, f"bf16 is not supported on the {target.name} target (Numba has no "
                                        "bf16 arithmetic); use --target reference or mlir-jit, or cast to f32")])


def write_artifact(directory: str | Path, target: Target, source_path: str, source: str,
                   options: CompileOptions, builds, extra: dict[str, bytes] | None = None) -> Path:
    """An artifact of chain builds (fusec.compiler.pipeline.ChainBuild), all with `options`;
    `extra`: more files for it (a compile cache entry's stage texts)."""
    chains = {}
    for b in builds:
        main = b.main
        entry = main.emitted.entries[b.chain.name]
        metas = {name: {"host": st.emitted.entries[b.chain.name].host,
                        "kernels": list(st.emitted.entries[b.chain.name].kernels),
                        "launches": [asdict(x) for x in st.emitted.entries[b.chain.name].launches],
                        "plan_kernels": st.plan.kernel_count,
                        "memory": dict(st.emitted.entries[b.chain.name].memory)} for name, st in b.builds.items()}
        meta = art.ChainArtifact(b.chain.name, dict(b.binding), list(entry.arg_types), list(entry.result_types),
                                 metas, main.plan.summary(), b.seconds())
        chains[b.chain.name] = (meta, b.sources(), main.texts["plan"])
    hardware = options.hardware.as_dict() if options.hardware else None
    as_data = dict(options.as_dict(), hardware=options.hardware.name if options.hardware else None)
    return art.write(directory, target=target.name, source_path=source_path, source=source, version=__version__,
                     chains=chains, options=as_data, options_key=options.key(), hardware=hardware, extra=extra)


def artifact_kernel_report(artifact: art.Artifact, typed: TypedChain) -> list:
    """The GPU kernel report of a chain's running build in an artifact (the launches its
    manifest records), for the profile it was planned for; a build with run-time extents
    (--dynamic) is measured at the binding it was planned at, as the compile measured it."""
    from fusec.compiler.emitted import Entry, Launch
    from fusec.compiler.plan.hardware import DEFAULT_GPU, GPUS, profile_from_dict
    from fusec.compiler.report import report_kernels
    meta = artifact.chains[typed.name]
    build = meta.builds["fused"]
    if "launches" not in build:
        raise art.ArtifactError(f"{artifact.directory} records no kernel launches (an older fusec wrote it); "
                                "recompile it")
    launches = tuple(Launch(x["kernel"], x["kind"], x["group"], tuple(x["grid"]), tuple(x["block"]))
                     for x in build["launches"])
    entry = Entry(build["host"], tuple(build["kernels"]), tuple(meta.inputs), tuple(meta.outputs), launches)
    if (meta.plan or {}).get("dynamic"):
        binding = {**{s: meta.binding[s] for s in typed.symbols}, **meta.plan["dynamic"]}    # planned at
        entry = entry.with_arg_shapes([p.type.concrete(binding) for p in typed.param_nodes])
    hw = profile_from_dict(artifact.hardware) if artifact.hardware else GPUS[DEFAULT_GPU]
    return report_kernels((artifact.directory / build["module"]).read_text(), entry, hw)


def _timer(chain: TypedChain, binding: dict[str, int], target: Target):
    """Times an emitted module's host function on `target` (autotuning's measurements)."""
    inputs = reference.random_inputs(chain, binding, 0)
    dtypes = [p.type.dtype.np for p in chain.param_nodes]

    def time_source(source: str, host: str) -> float:
        fn = art.function_from_source(source, host, f"{chain.name} tuning candidate")
        return Executable(fn, target, dtypes, f"{chain.name}/tune").time(inputs, min_runs=5).min_s
    return time_source


def _reference_chain(chain: TypedChain, binding: dict[str, int], target: Target,
                     options: CompileOptions) -> CompiledChain:
    """The `reference` (NumPy) or `mlir-jit` target's callable: no plan, no kernels."""
    dtypes = [p.type.dtype.np for p in chain.param_nodes]
    if target.name == "mlir-jit":
        from fusec.compiler.jit import jit_compile
        jitted = jit_compile(chain, chain.name, binding, sorted(options.disabled_passes))

        def host(*arrays):
            return tuple(jitted(list(arrays)))
    else:
        def host(*arrays):
            return tuple(reference.run_chain(chain, list(arrays), binding))
    run = Executable(host, target, dtypes, f"{chain.name}/{target.name}")
    return CompiledChain(chain, binding, target, run, None, None, {}, {}, None)


def _stage_texts(artifact: art.Artifact, chain: str) -> dict | None:
    """The stage texts a compile cache entry keeps beside its chain (None when it has none)."""
    path = artifact.directory / f"{chain}.stages.json"
    try:
        texts = json.loads(path.read_text(encoding="utf-8"))      # checked with the entry
    except (OSError, ValueError):
        return None
    return texts if isinstance(texts, dict) and all(isinstance(v, str) for v in texts.values()) else None


def cache_key(source: str, chain: str, binding: dict[str, int], options: CompileOptions, target: Target) -> str:
    """What a compile cache entry is the build of: the compiler (its version and its code),
    the FDSL source, the chain, the binding, the options (their hash holds the hardware
    profile) and the runtime target."""
    return cache_mod.key(fusec=__version__, format=art.FORMAT, compiler=compiler_digest(),
                         source=hashlib.sha256(source.encode("utf-8")).hexdigest(), chain=chain,
                         binding=sorted(binding.items()), options=options.key(),
                         hardware=options.hardware.as_dict() if options.hardware else None, target=target.name)


@functools.lru_cache(maxsize=1)
def compiler_digest() -> str:
    """A hash of the compiler's and the language's code: a cached build is never reused by a
    compiler that has changed since, version bump or not."""
    import fusec.compiler as compiler_pkg
    import fusec.dsl as dsl_pkg
    h = hashlib.sha256()
    for pkg in (compiler_pkg, dsl_pkg):
        root = Path(pkg.__file__).resolve().parent
        for f in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".lark") and "__pycache__" not in p.parts):
            h.update(f.relative_to(root).as_posix().encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def load_chain(artifact: art.Artifact, chain: TypedChain, target: Target, texts: dict | None = None,
               numba_cache: bool = False) -> CompiledChain:
    """The runtime half: executables from an artifact's emitted modules (no MLIR needed);
    `numba_cache`: Numba caches its compile of them in the artifact (Artifact.module)."""
    meta = artifact.chains[chain.name]
    dtypes = [p.type.dtype.np for p in chain.param_nodes]
    fused = Executable(artifact.module(chain.name, "fused", numba_cache), target, dtypes, f"{chain.name}/fused")
    unfused = (Executable(artifact.module(chain.name, "unfused", numba_cache), target, dtypes,
                          f"{chain.name}/unfused")
               if "unfused" in meta.builds else None)
    if texts is None:
        texts = {"plan": (artifact.directory / f"{chain.name}.plan.txt").read_text()}
    binding = {s: meta.binding[s] for s in chain.symbols}     # the chain's order, not the manifest's
    return CompiledChain(chain, binding, target, fused, unfused, meta.plan, texts,
                         meta.compile_seconds, artifact.directory,
                         {b: m.get("plan_kernels", 0) for b, m in meta.builds.items()},
                         memory={b: m["memory"] for b, m in meta.builds.items() if "memory" in m})


def compile(path_or_source: str, target: str | None = None, options=None, cache_dir: str | None = None,
            max_memory: int | None = None, cache: bool | None = None) -> Program:
    """Compile FDSL (a path or source text) for `target` ('cuda', 'cuda-sim', 'cpu', or the
    references 'reference' and 'mlir-jit'; default: cuda when a GPU is present, else cpu).
    Chains compile lazily, once per symbol binding; a binding whose buffers would need more
    than `max_memory` bytes (default: a quarter of this machine's memory) is refused before
    anything is allocated. `cache` (default: on unless FUSEC_NO_CACHE=1): builds go through the
    persistent compile cache in `cache_dir` (default $FUSEC_CACHE_DIR/compiled); without it
    artifacts go to `cache_dir`, else to a temporary directory removed with the program."""
    text, path = api.read_source(path_or_source)
    return compile_source(text, path, target, options, cache_dir, max_memory, cache)


def compile_source(text: str, path: str, target: str | None = None, options=None, cache_dir: str | None = None,
                   max_memory: int | None = None, cache: bool | None = None) -> Program:
    """`compile` of FDSL source `text` read from `path` (what the command line calls)."""
    typed = api.check(api.parse_text(text, path))
    tgt = select(target or best_available())
    persistent = (cache_enabled() if cache is None else bool(cache)) and tgt.compiled
    opts = compile_options(tgt, options, quick=persistent)
    if (why := unknown_symbols(opts.dynamic, typed.chains, path)) is not None:
        raise OptionsError(f"dynamic={list(opts.dynamic)}: {why}")
    root = Path(cache_dir) if cache_dir else (compile_cache_dir() if persistent else None)
    if persistent:
        CompileCache(root).check()
    return Program(typed, tgt, opts, text, root, max_memory, persistent, options)


def cache_enabled() -> bool:
    """The persistent compile cache is on unless FUSEC_NO_CACHE=1."""
    return os.environ.get("FUSEC_NO_CACHE") != "1"


def compile_cache_dir() -> Path:
    """$FUSEC_CACHE_DIR/compiled (default ~/.cache/fusec/compiled)."""
    from fusec.compiler.plan.hardware import cache_dir
    return cache_dir() / "compiled"
