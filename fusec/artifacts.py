"""Chain builds as artifacts (fusec.runtime.artifact) and back: `write_artifact` writes builds of
the compiler, `load_chain` makes a CompiledChain of an artifact's emitted modules (no MLIR
needed), `artifact_kernel_report` measures the kernels an artifact records; a directory in the
way that is not an artifact is moved aside (`set_aside_if_not_an_artifact`).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import asdict
from pathlib import Path

from fusec.compiler.options import CompileOptions
from fusec.dsl.typed import TypedChain
from fusec.runtime import artifact as art
from fusec.runtime.executable import Executable
from fusec.runtime.targets import Target

from .compiled import CompiledChain
from .version import __version__


ChainRecord = tuple    # (ChainArtifact, {build: module source}, plan text): a chain's part of an artifact


def chain_record(b, times: bool = True) -> ChainRecord:
    """A chain build's part of an artifact, as plain data (what a compile worker hands back);
    `times=False` leaves the compile times out, so the artifact is the same bytes every time."""
    main = b.main
    entry = main.emitted.entries[b.chain.name]
    metas = {name: {"host": st.emitted.entries[b.chain.name].host,
                    "kernels": list(st.emitted.entries[b.chain.name].kernels),
                    "launches": [asdict(x) for x in st.emitted.entries[b.chain.name].launches],
                    "plan_kernels": st.plan.kernel_count,
                    "memory": dict(st.emitted.entries[b.chain.name].memory)} for name, st in b.builds.items()}
    meta = art.ChainArtifact(b.chain.name, dict(b.binding), list(entry.arg_types), list(entry.result_types),
                             metas, main.plan.summary(), b.seconds() if times else {})
    return meta, b.sources(), main.texts["plan"]


def write_artifact(directory: str | Path, target: Target, source_path: str, source: str,
                   options: CompileOptions, builds, extra: dict[str, bytes] | None = None) -> Path:
    """An artifact of chain builds (fusec.compiler.pipeline.ChainBuild, or their `chain_record`s),
    all with `options`; `extra`: more files for it (a compile cache entry's stage texts)."""
    records = [b if isinstance(b, tuple) else chain_record(b) for b in builds]
    chains = {meta.name: (meta, sources, plan) for meta, sources, plan in records}
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


def stage_texts(artifact: art.Artifact, chain: str) -> dict | None:
    """The stage texts a compile cache entry keeps beside its chain (None when it has none)."""
    path = artifact.directory / f"{chain}.stages.json"
    try:
        texts = json.loads(path.read_text(encoding="utf-8"))      # checked with the entry
    except (OSError, ValueError):
        return None
    return texts if isinstance(texts, dict) and all(isinstance(v, str) for v in texts.values()) else None


def set_aside_if_not_an_artifact(directory: Path) -> None:
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
