"""Compiled artifacts: what the runtime loads, with no MLIR involved.

A directory holding, for one FDSL file, one target and one symbol binding per chain:

    manifest.json          compiler version, target, the compile options and their hash, the
                           hardware profile planned for; per chain: binding, input and output
                           types, entry points, kernel list and (cuda) launches, plan summary,
                           compile times
    source.fdsl            the FDSL text (the reference executor re-checks it with Lark)
    <chain>.fused.py       the emitted kernels + host function (fused plan)
    <chain>.unfused.py     the same chain, one kernel per linalg op (the baseline/fallback)
    <chain>.plan.txt       the fusion plan as `--emit plan` prints it

`write` stores one; `load` returns it with every module imported (and jitted lazily by Numba).
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

FORMAT = 1


@dataclass
class ChainArtifact:
    name: str
    binding: dict[str, int]
    inputs: list[str]                  # e.g. "f32[4,16]"
    outputs: list[str]
    builds: dict[str, dict]            # "fused"/"unfused" -> {"module": file, "host": name, "kernels": [...],
                                       #   "launches": [{"kernel", "kind", "group", "grid", "block"}, ...]}
    plan: dict                         # groups and decisions (plan_summary)
    compile_seconds: dict[str, float] = field(default_factory=dict)


@dataclass
class Artifact:
    directory: Path
    target: str
    source_path: str
    chains: dict[str, ChainArtifact]
    version: str
    options: dict = field(default_factory=dict)      # the compile options (as data)
    options_key: str = ""                            # their stable hash
    hardware: dict | None = None                     # the profile the plans were made for

    def source(self) -> str:
        return (self.directory / "source.fdsl").read_text()

    def module(self, chain: str, build: str):
        """Import (once) the emitted module of a chain's build; returns its host function."""
        b = self.chains[chain].builds[build]
        path = self.directory / b["module"]
        key = "fusec_kernels_" + hashlib.sha1(str(path.resolve()).encode() +
                                              path.read_bytes()).hexdigest()[:16]
        mod = sys.modules.get(key)
        if mod is None:
            spec = importlib.util.spec_from_file_location(key, path)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[key] = mod
            spec.loader.exec_module(mod)
        return getattr(mod, b["host"])


def function_from_source(source: str, name: str, label: str = "fusec"):
    """Function `name` of an emitted module given as text (no file: candidates timed once)."""
    mod = types.ModuleType(f"fusec_source_{hashlib.sha1(source.encode()).hexdigest()[:16]}")
    exec(compile(source, f"<{label}>", "exec"), mod.__dict__)
    return getattr(mod, name)


def write(directory: str | Path, *, target: str, source_path: str, source: str, version: str,
          chains: dict[str, tuple[ChainArtifact, dict[str, str], str]], options: dict | None = None,
          options_key: str = "", hardware: dict | None = None) -> Path:
    """chains: name -> (metadata, {build: python source}, plan text)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    (d / "source.fdsl").write_text(source)
    manifest = {"format": FORMAT, "fusec": version, "target": target, "source": source_path,
                "options": options or {}, "options_key": options_key, "hardware": hardware, "chains": {}}
    for name, (meta, sources, plan_text) in chains.items():
        for build, text in sources.items():
            fname = f"{name}.{build}.py"
            (d / fname).write_text(text)
            meta.builds[build]["module"] = fname
        (d / f"{name}.plan.txt").write_text(plan_text)
        manifest["chains"][name] = {
            "binding": meta.binding, "inputs": meta.inputs, "outputs": meta.outputs,
            "builds": meta.builds, "plan": meta.plan, "compile_seconds": meta.compile_seconds,
        }
    (d / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return d


class ArtifactError(Exception):
    """Not a fusec artifact, or one from an incompatible version."""


def load(directory: str | Path) -> Artifact:
    d = Path(directory)
    try:
        m = json.loads((d / "manifest.json").read_text())
    except (OSError, ValueError) as e:
        raise ArtifactError(f"{d} is not a fusec artifact (no readable manifest.json: {e})") from None
    if m.get("format") != FORMAT:
        raise ArtifactError(f"{d}: artifact format {m.get('format')} is not {FORMAT}; recompile it")
    chains = {n: ChainArtifact(n, c["binding"], c["inputs"], c["outputs"], c["builds"], c["plan"],
                               c.get("compile_seconds", {}))
              for n, c in m["chains"].items()}
    return Artifact(d, m["target"], m["source"], chains, m["fusec"], m.get("options", {}),
                    m.get("options_key", ""), m.get("hardware"))
