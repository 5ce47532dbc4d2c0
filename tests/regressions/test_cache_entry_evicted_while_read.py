"""Regression (issue 42, the soak): a compile cache entry evicted by another process while this one
read it. Three windows raised out of the call: between the lookup's checksums and its check
of the source (FileNotFoundError from `accept`), between the lookup and the load of the emitted
module (FileNotFoundError from `Artifact.module`), and after the load, when Numba saved its
machine code into the entry: Numba makes the folder again, so a directory holding only
`__pycache__` stood where the entry was, and the next store of that entry kept it ("stored by
another process first") and failed to load it (ArtifactError). Each is now a miss, built again."""
import numpy as np
import pytest

import fusec
from fusec.runtime import artifact as art
from fusec.runtime import cache as cache_mod
from fusec.runtime.cache import CompileCache

X = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)


def source(k: int) -> str:
    # a constant of its own per test: a module this process has not loaded before
    return f"chain f(x: f32[M, 8]) -> f32[M, 8] {{\n    return exp(x) * {k}.0\n}}\n"


def program(root, k):
    return fusec.compile(source(k), target="cpu", cache_dir=str(root), cache=True)


def entry_dirs(root):
    return [p for p in root.iterdir() if not p.name.startswith(".")]


def test_evicted_between_the_checksums_and_the_source_check_is_a_miss(tmp_path, monkeypatch, capsys):
    root = tmp_path / "compiled"
    np.testing.assert_allclose(program(root, 3).f(X), np.exp(X) * 3, rtol=1e-6)
    load = art.load
    evicted = []

    def load_then_evicted(d):
        found = load(d)
        if not evicted:                           # the lookup's load: another process evicts it now
            evicted.append(d)
            CompileCache(root).remove(d)
        return found
    monkeypatch.setattr(cache_mod.art, "load", load_then_evicted)
    again = program(root, 3)
    c = again.f.compiled({"M": 4})
    monkeypatch.setattr(cache_mod.art, "load", load)
    assert evicted and c.cache == "miss"
    np.testing.assert_allclose(again.f(X), np.exp(X) * 3, rtol=1e-6)
    assert "damaged" not in capsys.readouterr().err
    (entry,) = entry_dirs(root)
    assert (entry / art.MANIFEST).is_file()


def test_evicted_between_the_lookup_and_the_load_is_a_miss(tmp_path, monkeypatch):
    root = tmp_path / "compiled"
    lookup = CompileCache.lookup

    def found_then_evicted(self, name, accept=None):
        found = lookup(self, name, accept)
        if found is not None:
            self.remove(found.directory)
        return found
    monkeypatch.setattr(CompileCache, "lookup", found_then_evicted)
    program(root, 7).f.compiled({"M": 4})         # built and stored (nothing to look up yet)
    third = program(root, 7)
    c = third.f.compiled({"M": 4})
    monkeypatch.setattr(CompileCache, "lookup", lookup)
    assert c.cache == "miss"
    np.testing.assert_allclose(third.f(X), np.exp(X) * 7, rtol=1e-6)


def test_numba_does_not_bring_back_an_evicted_entry(tmp_path):
    root = tmp_path / "compiled"
    prog = program(root, 11)
    c = prog.f.compiled({"M": 4})                 # loaded, Numba's cache on; nothing compiled yet
    CompileCache(root).remove(c.artifact_dir)     # evicted before the first call
    np.testing.assert_allclose(prog.f(X), np.exp(X) * 11, rtol=1e-6)   # Numba compiles, saves nothing
    assert entry_dirs(root) == []


def test_a_store_replaces_a_directory_that_is_no_entry(tmp_path):
    root = tmp_path / "compiled"
    name = "f.M4.0123456789abcdef01234567"
    stray = root / name / "__pycache__"
    stray.mkdir(parents=True)
    (stray / "f.fused.run_f-1.py311.nbi").write_bytes(b"numba")

    def write(d):
        d.mkdir()
        (d / art.MANIFEST).write_text("{}")
    d = CompileCache(root, cap=1 << 30).store(name, write)
    assert (d / art.MANIFEST).is_file() and not (d / "__pycache__").exists()


@pytest.mark.parametrize("whole", [True, False])
def test_a_lookup_of_a_directory_that_is_no_entry_is_a_plain_miss(tmp_path, whole):
    root = tmp_path / "compiled"
    d = root / "f.M4.0123456789abcdef01234567"
    (d / "__pycache__").mkdir(parents=True)
    told = []
    if whole:
        (d / art.MANIFEST).write_text("{not json")   # a damaged entry is still said, and removed
    assert CompileCache(root, warn=told.append).lookup(d.name) is None
    assert bool(told) == whole and d.exists() != whole
