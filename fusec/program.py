"""`fusec.compile`: FDSL in, callable compiled chains out. Wiring only: options from
target_options.py, a Chain built through fusec.compiler.pipeline.build_chain once per binding
(per size class with dynamic symbols), written as an artifact and loaded back by the runtime,
or loaded from the compile cache (build_cache.py, runtime/cache.py). See docs/ARCHITECTURE.md,
"Stages and what each hands on" (last paragraph).
"""
from __future__ import annotations

import importlib
import json
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from fusec.compiler.dynamic import chain_dynamic, planning_binding, unknown_symbols
from fusec.compiler.options import CompileOptions, OptionsError
from fusec.dsl.binding import check_binding
from fusec.dsl.typed import TypedChain, TypedModule
from fusec.runtime import artifact as art
from fusec.runtime import reference
from fusec.runtime.cache import CompileCache, CompileCacheError, entry_name
from fusec.runtime.compare import Comparison, compare
from fusec.runtime.executable import Executable, as_input, input_shape
from fusec.runtime.memory import check_memory
from fusec.runtime.remote_cache import RemoteCache
from fusec.runtime.targets import Target, best_available, select

from . import api
from .artifacts import artifact_kernel_report, load_chain, set_aside_if_not_an_artifact, stage_texts, write_artifact
from .build_cache import (RemoteTuning, build_key, cache_enabled, compile_cache_dir, fetch_entry, publish_entry,
                          remote_cache, share_profile)
from .compiled import CompiledChain
from .progress import QUIET, Progress
from .target_options import compile_options, notice

Options = CompileOptions
BOUND_KEPT = 64          # input shapes a chain keeps the binding of (Chain.binding_for)
STORE_TRIES = 3          # stores of one build a cache that evicts it before it loads gets, then an error


class Chain:
    """A chain of a compiled program: call it on arrays; symbols bind from their shapes."""

    def __init__(self, program: "Program", typed: TypedChain):
        self.program = program
        self.typed = typed
        self._builds: dict[tuple, CompiledChain] = {}
        self._checked: set[tuple] = set()       # bindings already checked (a dynamic build serves many)
        self._params = typed.param_nodes
        self._bound: dict[tuple, dict[str, int]] = {}     # inputs' (shape, dtype)s -> their binding

    @property
    def name(self) -> str:
        return self.typed.name

    def binding_for(self, arrays) -> dict[str, int]:
        """The symbols' sizes from the inputs' shapes (inputs as as_input takes them). A binding
        is kept by the inputs' shapes and dtypes (the last BOUND_KEPT of them): a model called
        again with the same shapes binds once (a torch region's call binds twice, ~0.3 ms each
        at GPT-2's 31 inputs)."""
        shapes = tuple(input_shape(as_input(x, self._param(i))) for i, x in enumerate(arrays))
        bound = self._bound.get(shapes)
        if bound is None:
            shaped = [np.lib.stride_tricks.as_strided(np.zeros((), dtype), shape, [0] * len(shape))
                      for shape, dtype in shapes]
            bound = reference.bind_symbols(self.typed, shaped)
            if len(self._bound) >= BOUND_KEPT:
                self._bound.clear()
            self._bound[shapes] = bound
        return dict(bound)

    def _param(self, i: int) -> str:
        params = self._params
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
                 requested: CompileOptions | dict | None = None, remote: RemoteCache | None = None,
                 jobs: int | None = None):
        self.typed = typed
        self.target = target
        self.options = options
        self.source = source
        self.max_memory = max_memory       # bytes a run may need (None: a quarter of this machine's memory)
        self._cache = cache
        self._scratch: tempfile.TemporaryDirectory | None = None   # removed with the program
        self._own: tempfile.TemporaryDirectory | None = None       # builds the compile cache evicted before they loaded
        self.persistent = persistent       # builds go through the compile cache (runtime/cache.py)
        self.remote = remote if persistent else None    # and its remote tier (runtime/remote_cache.py)
        self.jobs = jobs                   # worker processes of `prepare` (None: this machine's cores)
        self._compiled_here: dict[str, Path] = {}       # cache entries this program compiled
        self._prepared: dict[tuple, tuple[Path, float]] = {}   # (chain, binding) -> built by `prepare`'s workers
        self._remote_url: str | None = None                  # as given to compile (else $FUSEC_REMOTE_CACHE)
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
        return CompileCache(self.cache, warn=notice)

    def cache_entry(self, chain: TypedChain, binding: dict[str, int], options: CompileOptions | None = None) -> str:
        """The compile cache's entry name of `chain` built for `binding` with these options."""
        digest = build_key(self.source, chain.name, binding, options or self.options, self.target)
        return entry_name(chain.name, binding, digest)

    def check(self, bindings: dict[str, dict[str, int]] | None = None, seed: int = 0) -> dict[str, list[Comparison]]:
        """Every chain against the reference on seeded inputs."""
        return {n: c.check(binding=(bindings or {}).get(n), seed=seed) for n, c in self.chains.items()}

    def html(self, path, bindings: dict | None = None, *, chains: list[str] | None = None, run: bool = True,
             seed: int = 0, layout: str = "auto") -> Path:
        """Write the HTML report of the chains (all, or `chains`), each built for its binding
        ({chain: {symbol: size}}, or one {symbol: size} for all; 64 where not given) and, with
        `run`, run and checked on seeded inputs; returns the path (fusec/html)."""
        from .html import program_html
        return program_html(self, path, bindings, chains=chains, run=run, seed=seed, layout=layout)

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
        imported = _import_numba(self.target)
        t0 = time.perf_counter()
        made = self._prepared.pop((chain.name, tuple(sorted(binding.items()))), None) if options is None else None
        if made is not None:                                # built by `prepare`'s workers
            if self.remote is not None:
                self._compiled_here[made[0].name] = made[0]
            try:
                return self._loaded(art.load(made[0]), chain, self.options, "miss" if self.persistent else "off",
                                    {"compile": made[1], "numba.import": imported})
            except (OSError, art.ArtifactError):
                if not self.persistent or (made[0] / art.MANIFEST).is_file():
                    raise
                # evicted by another process before this one loaded it: looked up and built as any other
        if self.persistent:
            found, tier = self._cached(chain, binding, options or self.options), "hit"
            if found is None and self.remote is not None:
                found, tier = self._fetched(chain, binding, options or self.options), "remote"
            if found is not None:
                try:
                    return self._loaded(found, chain, options or self.options, tier,
                                        {"load": time.perf_counter() - t0, "numba.import": imported})
                except (OSError, art.ArtifactError):
                    if (found.directory / art.MANIFEST).is_file():
                        raise
                    # evicted by another process between the lookup and the load: a miss
            if options is None and self._check_profile():
                return self._build_one(chain, binding)      # the checked profile is another one
        options = options or self.options
        told = self.progress.stage(f"{self.progress_label}{chain.name}: compiling") if self.progress.enabled else None
        try:
            built, directory = self._compile_into_cache(chain, binding, options, told)
        finally:
            self.progress.clear()
        compiled = self._load_stored(built, directory, chain, binding, options)
        if built.options.kernel_report:
            compiled.kernel_report = list(built.kernel_report)
        compiled.compile_seconds = dict(compiled.compile_seconds, compile=time.perf_counter() - t0,
                                        **{"numba.import": imported})
        compiled.cache = "miss" if self.persistent else "off"
        return compiled

    def _loaded(self, found: art.Artifact, chain: TypedChain, options: CompileOptions, tier: str,
                seconds: dict) -> CompiledChain:
        """A build written before (a cache entry, or a `prepare` worker's artifact), loaded."""
        compiled = load_chain(found, chain, self.target, stage_texts(found, chain.name), numba_cache=self.persistent)
        if options.kernel_report:
            compiled.kernel_report = artifact_kernel_report(found, chain)
        compiled.compile_seconds = seconds
        compiled.cache = tier
        return compiled

    def _load_stored(self, built, directory: Path, chain: TypedChain, binding: dict[str, int],
                     options: CompileOptions) -> CompiledChain:
        """The build just written to `directory`, loaded. In the compile cache another process's
        (or thread's) store may evict it before it loads: it is stored again, a few times, and
        then, with a notice that the cache is too small, loaded from a copy of this program's own."""
        for tried in range(1, STORE_TRIES + 1):
            try:
                return load_chain(art.load(directory), chain, self.target, built.main.texts,
                                  numba_cache=self.persistent)
            except (OSError, art.ArtifactError):
                if not self.persistent or (directory / art.MANIFEST).is_file():
                    raise
            if tried < STORE_TRIES:
                directory = self._store(built, chain, binding, options)
        notice(f"the compile cache {self.cache} is too small for the builds in use: the build of {chain.name} was "
               f"evicted {STORE_TRIES} times before it loaded; it runs from a copy of this program's own "
               f"(raise FUSEC_CACHE_MAX_SIZE)")
        if self._own is None:
            self._own = tempfile.TemporaryDirectory(prefix="fusec-evicted-")
        directory = Path(self._own.name) / f"{chain.name}.{uuid.uuid4().hex[:8]}"
        self._write(built, chain, directory)
        return load_chain(art.load(directory), chain, self.target, built.main.texts, numba_cache=False)

    def _compile_into_cache(self, chain: TypedChain, binding: dict[str, int], options: CompileOptions, told=None):
        """Compile the chain and write its artifact: into the compile cache (and its remote tier),
        else into the program's directory. The build and the directory."""
        from fusec.compiler.pipeline import build_chain
        shared = RemoteTuning(self.remote) if self.remote is not None else None
        built = build_chain(chain, binding, options, timer=_timer(chain, binding, self.target), progress=told,
                            unfused=False, shared_tuning=shared)
        return built, self._store(built, chain, binding, options)

    def _store(self, built, chain: TypedChain, binding: dict[str, int], options: CompileOptions) -> Path:
        """The build's artifact written: into the compile cache (and its remote tier), else into
        the program's directory."""
        def write(directory: Path) -> Path:
            return self._write(built, chain, directory)
        if self.persistent:
            name = self.cache_entry(chain, binding, options)
            directory = self.compile_cache().store(name, write)
            if self.remote is not None:
                publish_entry(self.remote, directory, name)
                share_profile(self.remote, options.hardware)
                self._compiled_here[name] = directory
        else:
            tag = "_".join(f"{k}{v}" for k, v in sorted(binding.items())) or "static"
            directory = self.cache / f"{chain.name}.{tag}"
            if options is not self.options:
                directory = directory.with_name(directory.name + "." + options.key())
            set_aside_if_not_an_artifact(directory)
            write(directory)
        return directory

    def _write(self, built, chain: TypedChain, directory: Path) -> Path:
        texts = json.dumps(built.main.texts, sort_keys=True).encode()
        return write_artifact(directory, self.target, self.typed.file.path, self.source, built.options, [built],
                              extra={f"{chain.name}.stages.json": texts})

    def _cached(self, chain: TypedChain, binding: dict[str, int], options: CompileOptions) -> art.Artifact | None:
        """The chain's checked artifact from the compile cache, when one was stored."""
        def accept(found: art.Artifact) -> str | None:
            if found.options_key != options.key() or found.target != self.target.name:
                return "was compiled with other options"
            if found.source() != self.source or chain.name not in found.chains:
                return "was compiled from another source"
            return None
        return self.compile_cache().lookup(self.cache_entry(chain, binding, options), accept)

    def _fetched(self, chain: TypedChain, binding: dict[str, int], options: CompileOptions) -> art.Artifact | None:
        """The chain's entry from the remote tier, stored in the local cache and checked there."""
        name = self.cache_entry(chain, binding, options)
        if not fetch_entry(self.remote, self.compile_cache(), name):
            return None
        return self._cached(chain, binding, options)

    def prepare(self, bindings: dict[str, dict[str, int]] | None = None) -> None:
        """Build every chain before its first call (at `bindings[chain]`, each symbol 64 unless
        given), the builds no cache holds in `jobs` processes (fusec/parallel.py; default: this
        machine's cores). A script that calls it with jobs > 1 needs the `if __name__ ==
        "__main__":` guard of Python's multiprocessing."""
        from .parallel import ChainJob, default_jobs, run_jobs
        todo = []
        for name, c in self.chains.items():
            binding = {s: (bindings or {}).get(name, {}).get(s, 64) for s in c.typed.symbols}
            planned = c.build_binding(binding)
            if not self.target.compiled or tuple(sorted(planned.items())) in c._builds:
                continue
            check_binding(c.typed, dict(binding))
            if self.persistent and (self._cached(c.typed, planned, self.options) is not None
                                    or self.remote is not None and self._fetched(c.typed, planned, self.options)):
                continue
            todo.append((c, binding, planned))
        n = min(self.jobs or default_jobs(), len(todo))
        if n > 1:
            self._check_profile()
            url = self._remote_url if self.remote is not None else None
            jobs = [_BuildJob(ChainJob(self.source, self.typed.file.path, c.name, planned, self.options,
                                       self.target.name), str(self.cache), self.persistent, url)
                    for c, _, planned in todo]
            for (c, _, planned), (directory, seconds) in zip(todo, run_jobs(_build_job, jobs, n)):
                self._prepared[(c.name, tuple(sorted(planned.items())))] = (Path(directory), seconds)
        for c, binding, _ in todo:
            c.compiled(binding)

    def share(self) -> int:
        """Publish again the cache entries this program compiled, now with Numba's cache of what
        ran (machine code other machines of this kind load instead of compiling); how many."""
        if self.remote is None:
            return 0
        return sum(publish_entry(self.remote, d, name) == "stored" for name, d in self._compiled_here.items()
                   if any((d / "__pycache__").glob("*.nbi")))

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


@dataclass(frozen=True)
class _BuildJob:
    """One build of `Program.prepare`, for a worker process."""
    chain: object                 # fusec.parallel.ChainJob
    root: str
    persistent: bool
    remote_url: str | None


def _build_job(job: _BuildJob) -> tuple[str, float]:
    """A worker's build: written where the program would write it; the directory and seconds."""
    from .parallel import typed_module
    t0 = time.perf_counter()
    c = job.chain
    typed = typed_module(c)
    program = Program(typed, select(c.target), c.options, c.text, Path(job.root), persistent=job.persistent,
                      remote=remote_cache(job.remote_url) if job.persistent else None)
    chain = next(x for x in typed.chains if x.name == c.chain)
    _built, directory = program._compile_into_cache(chain, c.binding, c.options)
    return str(directory), time.perf_counter() - t0


def _import_numba(target: Target) -> float:
    """Import what the emitted modules import (Numba, and its CUDA part on cuda targets), so
    that a build's times are not its imports'; returns the seconds that took (0 once done)."""
    t0 = time.perf_counter()
    for name in ("numba", "numba.extending") + (("numba.cuda",) if target.is_cuda else ()):
        importlib.import_module(name)
    return time.perf_counter() - t0


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


def compile(path_or_source: str, target: str | None = None, options=None, cache_dir: str | None = None,
            max_memory: int | None = None, cache: bool | None = None, remote_cache: str | None = None,
            jobs: int | None = None) -> Program:
    """Compile FDSL (a path or source text) for `target` ('cuda', 'cuda-sim', 'cpu', or the
    references 'reference' and 'mlir-jit'; default: cuda when a GPU is present, else cpu).
    Chains compile lazily, once per symbol binding; a binding whose buffers would need more
    than `max_memory` bytes (default: a quarter of this machine's memory) is refused before
    anything is allocated. `cache` (default: on unless FUSEC_NO_CACHE=1): builds go through the
    persistent compile cache in `cache_dir` (default $FUSEC_CACHE_DIR/compiled); without it
    artifacts go to `cache_dir`, else to a temporary directory removed with the program.
    `remote_cache` (default $FUSEC_REMOTE_CACHE): redis://HOST:PORT/DB, the cache's shared tier
    (needs $FUSEC_CACHE_SECRET; docs/CACHE.md). `jobs`: worker processes of `Program.prepare`."""
    text, path = api.read_source(path_or_source)
    return compile_text(text, path, target, options, cache_dir, max_memory, cache, remote_cache, jobs)


def compile_text(text: str, path: str, target: str | None = None, options=None, cache_dir: str | None = None,
                 max_memory: int | None = None, cache: bool | None = None, remote_cache_url: str | None = None,
                 jobs: int | None = None) -> Program:
    """`compile` of FDSL source `text` read from `path` (what the command line calls)."""
    typed = api.check(api.parse_text(text, path))
    tgt = select(target or best_available())
    persistent = (cache_enabled() if cache is None else bool(cache)) and tgt.compiled
    remote = remote_cache(remote_cache_url) if persistent else None
    opts = compile_options(tgt, options, quick=persistent, remote=remote)
    if (why := unknown_symbols(opts.dynamic, typed.chains, path)) is not None:
        raise OptionsError(f"dynamic={list(opts.dynamic)}: {why}")
    root = Path(cache_dir) if cache_dir else (compile_cache_dir() if persistent else None)
    if persistent:
        CompileCache(root).check()
    program = Program(typed, tgt, opts, text, root, max_memory, persistent, options, remote, jobs)
    program._remote_url = remote_cache_url
    return program
