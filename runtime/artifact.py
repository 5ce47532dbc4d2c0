"""Compiled artifacts: what the runtime loads, with no MLIR involved. An artifact is a directory
for one FDSL file, one target and one binding per chain (manifest.json, source.fdsl, each
chain's fused and unfused modules and plan). `write` stores one whole or not at all; `load`
checks the manifest and every file's checksum before anything is imported (else an
ArtifactError naming the file). See docs/GUIDE.md, "Compile here, run there".
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

FORMAT = 2
MANIFEST = "manifest.json"
ARTIFACT_TARGETS = ("cuda", "cuda-sim", "cpu")


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
    source_path: str                   # the path the FDSL file was compiled from
    chains: dict[str, ChainArtifact]
    version: str
    options: dict = field(default_factory=dict)      # the compile options (as data)
    options_key: str = ""                            # their stable hash
    hardware: dict | None = None                     # the profile the plans were made for

    @property
    def source_file(self) -> Path:
        """The artifact's copy of the FDSL source (diagnostics point here)."""
        return self.directory / "source.fdsl"

    def source(self) -> str:
        return self.source_file.read_text(encoding="utf-8")

    def module(self, chain: str, build: str, numba_cache: bool = False):
        """Import (once) the emitted module of a chain's build; returns its host function.
        `numba_cache`: Numba caches what it compiles of the module on disk, in the artifact's
        __pycache__, so a later process loads the machine code instead of compiling it again.
        cpu: not for a module with an object-mode block, which Numba cannot reload from its
        cache (an older artifact, whose cpu contractions were NumPy calls).
        cuda: the kernels compile when the module runs, so the module is given NUMBA_CACHE
        first (an older artifact without that flag compiles afresh);
        should Numba fail to cache a kernel, the module is run again without its cache and
        that is said in one line on stderr. The simulator caches nothing."""
        b = self.chains[chain].builds[build]
        path = self.directory / b["module"]
        source = path.read_bytes()
        # one module per file, named by its source alone: Numba's cache records the module's name, so
        # the same module loaded from another directory (another machine's cache entry) finds its
        # cached machine code under that name
        key = "fusec_kernels_" + hashlib.sha1(str(path.resolve()).encode() + source).hexdigest()[:16]
        name = "fusec_kernels_" + hashlib.sha1(source).hexdigest()[:16]
        mod = sys.modules.get(key)
        if mod is None:
            gpu_cache = numba_cache and self.target != "cpu" and b"cache=NUMBA_CACHE" in source
            try:
                mod = _import(key, name, path, {"NUMBA_CACHE": True} if gpu_cache else {})
            except Exception as e:
                if not gpu_cache:
                    raise
                mod = _import(key, name, path, {})   # the same error again when it was not the cache's
                print(f"fusec: Numba could not cache the CUDA kernels of {path} ({type(e).__name__}: "
                      f"{_first_line(e)}); they were compiled without its cache", file=sys.stderr)
            if numba_cache and self.target == "cpu" and b"numba.objmode(" not in source:
                _enable_numba_cache(mod, path)
        sys.modules.setdefault(name, mod)     # (the first of its source; an older fusec's caches name `key`)
        host = getattr(mod, b["host"], None)
        if host is None:
            raise ArtifactError(f"{path} has no function {b['host']}, which manifest.json names; recompile it")
        return host


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [""])[0]


def _import(key: str, name: str, path: Path, namespace: dict) -> types.ModuleType:
    """Run the module file at `path`, named `name`, as sys.modules[key], `namespace` set in it first."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    vars(mod).update(namespace)
    sys.modules[key] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[key]
        raise
    return mod


def _enable_numba_cache(mod: types.ModuleType, path: Path) -> None:
    """Numba's on-disk cache for every njit function the module defines (their source is a
    real file: the cache is keyed by its path and modification time). Where Numba finds no
    place to write it (neither beside the file nor in its user-wide cache directory), the
    functions compile in each process, and that is said in one line."""
    for value in list(vars(mod).values()):
        py = getattr(value, "py_func", None)
        if getattr(py, "__module__", None) == mod.__name__ and hasattr(value, "enable_caching"):
            try:
                value.enable_caching()
            except RuntimeError as e:
                print(f"fusec: Numba cannot cache the functions of {path} ({_first_line(e)}); they compile in "
                      "each process", file=sys.stderr)
                return
            cache = getattr(value, "_cache", None)
            if callable(getattr(cache, "save_overload", None)):
                cache.save_overload = _saved_while_whole(cache.save_overload, path.parent)


def _saved_while_whole(save, entry: Path):
    """Numba's save of what it compiled into the artifact's __pycache__, skipped once the artifact
    is gone (a compile cache entry evicted since this process loaded it): Numba would make the
    folder again, and leave in the cache a directory that is no entry, in the way of the next
    store of it. Numba's own save is not guarded against the folder going away (an OSError
    out of the first call)."""
    def saving(sig, data):
        if not (entry / MANIFEST).is_file():
            return
        try:
            save(sig, data)
        except OSError:
            if (entry / MANIFEST).is_file():
                raise
    return saving


def function_from_source(source: str, name: str, label: str = "fusec"):
    """Function `name` of an emitted module given as text (no file: candidates timed once)."""
    mod = types.ModuleType(f"fusec_source_{hashlib.sha1(source.encode()).hexdigest()[:16]}")
    exec(compile(source, f"<{label}>", "exec"), mod.__dict__)
    return getattr(mod, name)


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _manifest_checksum(manifest: dict) -> str:
    body = {k: v for k, v in manifest.items() if k != "checksum"}
    return _sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


def write(directory: str | Path, *, target: str, source_path: str, source: str, version: str,
          chains: dict[str, tuple[ChainArtifact, dict[str, str], str]], options: dict | None = None,
          options_key: str = "", hardware: dict | None = None, extra: dict[str, bytes] | None = None) -> Path:
    """chains: name -> (metadata, {build: python source}, plan text); `extra`: more files by
    name (checksummed like the others). Replaces `directory` when it holds an artifact (or is
    empty); refuses any other directory, and a file."""
    d = Path(directory)
    check_replaceable(d)
    files: dict[str, bytes] = {"source.fdsl": source.encode("utf-8"), **(extra or {})}
    manifest = {"format": FORMAT, "fusec": version, "target": target, "source": source_path,
                "options": options or {}, "options_key": options_key, "hardware": hardware, "chains": {}}
    for name, (meta, sources, plan_text) in chains.items():
        for build, text in sources.items():
            fname = f"{name}.{build}.py"
            files[fname] = text.encode("utf-8")
            meta.builds[build]["module"] = fname
        files[f"{name}.plan.txt"] = plan_text.encode("utf-8")
        manifest["chains"][name] = {
            "binding": meta.binding, "inputs": meta.inputs, "outputs": meta.outputs,
            "builds": meta.builds, "plan": meta.plan, "compile_seconds": meta.compile_seconds,
        }
    manifest["files"] = {n: _sha256(data) for n, data in sorted(files.items())}
    manifest["checksum"] = _manifest_checksum(manifest)
    files["manifest.json"] = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
    staging = d.parent / f".{d.name}.new-{os.getpid()}"
    try:
        d.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        for n, data in files.items():
            (staging / n).write_bytes(data)
        old = d.parent / f".{d.name}.old-{os.getpid()}"
        if d.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.rename(d, old)
            try:
                os.rename(staging, d)
            except OSError:
                os.rename(old, d)            # put the previous artifact back
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(staging, d)
    except OSError as e:
        shutil.rmtree(staging, ignore_errors=True)
        raise ArtifactError(f"cannot write the artifact {d}: {e.strerror or e}") from None
    return d


def check_replaceable(d: Path) -> None:
    """An ArtifactError unless `d` can become an artifact: absent, empty or an artifact, below
    directories (not files)."""
    above = next((p for p in d.parents if p.exists()), None)
    if above is not None and not above.is_dir():
        raise ArtifactError(f"cannot write the artifact {d}: {above} is a file, not a directory")
    if d.is_symlink() or (d.exists() and not d.is_dir()):
        raise ArtifactError(f"{d} exists and is not a directory; choose another output directory")
    if d.is_dir():
        try:
            entries = os.listdir(d)
        except OSError as e:
            raise ArtifactError(f"cannot read {d}: {e.strerror}") from None
        if entries and "manifest.json" not in entries:
            raise ArtifactError(f"{d} exists and is not a fusec artifact (no manifest.json); fusec replaces only "
                                "an artifact or an empty directory: choose another output directory or remove it")


class ArtifactError(Exception):
    """Not a fusec artifact, a damaged or edited one, or one from an incompatible version."""


def _fail(d: Path, what: str):
    raise ArtifactError(f"{d / 'manifest.json'}: {what}; recompile the artifact")


def _expect(d: Path, obj, key: str, kind, where: str = ""):
    if not isinstance(obj, dict) or key not in obj:
        _fail(d, f"{where}'{key}' is missing")
    v = obj[key]
    if not isinstance(v, kind) or isinstance(v, bool) and kind is not bool:
        names = {dict: "an object", list: "a list", str: "a string", int: "an integer"}
        _fail(d, f"{where}'{key}' is {json.dumps(v)[:40]}, not {names.get(kind, kind.__name__)}")
    return v


def _check_chain(d: Path, name: str, c, files: dict) -> ChainArtifact:
    where = f"chain '{name}': "
    if not isinstance(c, dict):
        _fail(d, f"{where}not an object")
    binding = _expect(d, c, "binding", dict, where)
    for s, n in binding.items():
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            _fail(d, f"{where}binding {s} is {json.dumps(n)[:40]}, not a positive integer")
    for key in ("inputs", "outputs"):
        if not all(isinstance(t, str) for t in _expect(d, c, key, list, where)):
            _fail(d, f"{where}'{key}' is not a list of types")
    builds = _expect(d, c, "builds", dict, where)
    if "fused" not in builds or set(builds) - {"fused", "unfused"}:
        _fail(d, f"{where}'builds' must be 'fused' and optionally 'unfused', not {sorted(builds)}")
    for bname, b in builds.items():
        bw = f"{where}build '{bname}': "
        module = _expect(d, b, "module", str, bw)
        if module not in files or not module.endswith(".py"):
            _fail(d, f"{bw}module '{module}' is not one of the artifact's files")
        host = _expect(d, b, "host", str, bw)
        if not host.isidentifier():
            _fail(d, f"{bw}host '{host}' is not a function name")
        if not all(isinstance(k, str) for k in _expect(d, b, "kernels", list, bw)):
            _fail(d, f"{bw}'kernels' is not a list of names")
    plan = _expect(d, c, "plan", dict, where)
    seconds = c.get("compile_seconds", {})
    if not isinstance(seconds, dict):
        _fail(d, f"{where}'compile_seconds' is not an object")
    return ChainArtifact(name, dict(binding), list(c["inputs"]), list(c["outputs"]), builds, plan, seconds)


def load(directory: str | Path) -> Artifact:
    """An artifact, checked: a wrong layout or value in manifest.json, a missing file or one
    whose checksum differs is an ArtifactError naming the file."""
    d = Path(directory)
    if not d.is_dir():
        raise ArtifactError(f"{d} is not a fusec artifact (not a directory)")
    path = d / "manifest.json"
    try:
        m = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ArtifactError(f"{d} is not a fusec artifact (no readable manifest.json: {e})") from None
    if not isinstance(m, dict):
        _fail(d, "not a JSON object")
    if m.get("format") != FORMAT:
        raise ArtifactError(f"{d}: artifact format {json.dumps(m.get('format'))[:20]} is not {FORMAT}; recompile it")
    target = _expect(d, m, "target", str)
    if target not in ARTIFACT_TARGETS:
        _fail(d, f"target '{target}' is not one of {', '.join(ARTIFACT_TARGETS)}")
    for key, kind in (("fusec", str), ("source", str), ("options", dict), ("options_key", str), ("chains", dict),
                      ("files", dict), ("checksum", str)):
        _expect(d, m, key, kind)
    if m.get("hardware") is not None and not isinstance(m["hardware"], dict):
        _fail(d, "'hardware' is not an object")
    files = m["files"]
    if "source.fdsl" not in files:
        _fail(d, "'files' does not list source.fdsl")
    chains = {n: _check_chain(d, n, c, files) for n, c in m["chains"].items()}
    if not chains:
        _fail(d, "it holds no chain")
    if m["checksum"] != _manifest_checksum(m):
        raise ArtifactError(f"{path} does not match its checksum: it was changed after compiling; recompile the "
                            "artifact")
    for name, digest in files.items():
        if not isinstance(name, str) or "/" in name or "\\" in name or name in ("", ".", "..", "manifest.json"):
            _fail(d, f"'files' names '{name}', which is not a file of the artifact")
        f = d / name
        try:
            data = f.read_bytes()
        except FileNotFoundError:
            raise ArtifactError(f"{f} is missing; the artifact is incomplete: recompile it") from None
        except OSError as e:
            raise ArtifactError(f"cannot read {f}: {e.strerror}") from None
        if _sha256(data) != digest:
            raise ArtifactError(f"{f} does not match its checksum in manifest.json: it was changed or damaged "
                                "after compiling; recompile the artifact")
    return Artifact(d, target, m["source"], chains, m["fusec"], m["options"], m["options_key"], m.get("hardware"))
