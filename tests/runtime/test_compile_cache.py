"""The persistent compile cache (runtime/cache.py, keyed in fusec/build_cache.py): a second process
loads the first's build without MLIR and without Numba compiling; a damaged entry is said in
one line and built again; concurrent processes share one entry; LRU eviction under a cap;
`fusec cache list|info|clear`; nothing left in the system temp directory. Every test uses a
fresh FUSEC_CACHE_DIR holding a fixed cpu profile (so nothing is measured)."""
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fusec.cli import main
from fusec.compiler.plan import hardware
from fusec.compiler.plan.hardware import GPUS
from fusec.runtime.cache import CompileCache, entry_name

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = str(ROOT / "examples" / "softmax.fdsl")
PROFILE = replace(GPUS["seed"], name="cpu", kind="cpu", units=2, bandwidth=9e9)
SOURCE = "chain f(x: f32[M, 8]) -> f32[M, 8] {\n    return exp(x) * 2\n}\n"
# a build that calls BLAS (CBLAS sgemm from compiled code: Numba caches it too)
BLAS_SOURCE = "chain f(x: f32[M, 8]) -> f32[M, M] {\n    return exp(x @ transpose(x) / 8.0) * 2\n}\n"

# runs the chain through the API, then says what this process did
API_RUN = textwrap.dedent("""
    import json, sys
    import numpy as np
    import fusec
    prog = fusec.compile(sys.argv[1], target="cpu")
    c = prog.f.compiled({"M": 4})
    y = prog.f(np.ones((4, 8), np.float32))
    stats = c.fused.jitted.stats
    print(json.dumps({"cache": c.cache, "ok": bool(np.allclose(y, 2 * np.e)),
                      "blas": "# cblas:" in prog.f.stages({"M": 4})["kernels"],
                      "mlir": any(m.startswith("fusec.compiler.mlir") or m == "fusec.compiler.pipeline"
                                  for m in sys.modules),
                      "numba_hits": sum(stats.cache_hits.values()), "numba_misses": sum(stats.cache_misses.values()),
                      "stages": sorted(prog.f.stages({"M": 4})), "seconds": c.timed_seconds()}))
""")


def seeded_cache(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "hardware-cpu.json").write_text(json.dumps({"key": hardware.profile_key(), "profile": PROFILE.as_dict()}))
    return root


def env_for(cache: Path, **more) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "FUSEC_NO_CACHE"}
    return dict(env, FUSEC_CACHE_DIR=str(cache), **more)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = seeded_cache(tmp_path / "cache")
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(root))
    monkeypatch.delenv("FUSEC_NO_CACHE", raising=False)
    return root


def api_run(cache: Path, tmp_path: Path, source: str = SOURCE, **env) -> dict:
    src = tmp_path / "f.fdsl"
    if not src.exists():
        src.write_text(source)
    r = subprocess.run([sys.executable, "-c", API_RUN, str(src)], env=env_for(cache, **env), capture_output=True,
                       text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return {**json.loads(r.stdout.splitlines()[-1]), "stderr": r.stderr}


def entries(cache: Path) -> list[Path]:
    return sorted(p for p in (cache / "compiled").iterdir() if not p.name.startswith("."))


@pytest.mark.slow
@pytest.mark.parametrize("source", [SOURCE, BLAS_SOURCE], ids=["loops", "blas"])
def test_a_second_process_loads_the_build_without_mlir_or_numba_compiling(cache, tmp_path, source):
    first = api_run(cache, tmp_path, source)
    assert first["cache"] == "miss" and first["ok"] and first["mlir"] and first["numba_misses"] == 1
    assert first["blas"] == (source == BLAS_SOURCE)
    assert "fused.linalg" in first["seconds"]
    second = api_run(cache, tmp_path, source)
    assert second["cache"] == "hit" and second["ok"]
    assert not second["mlir"], "a cache hit imported the MLIR pipeline"
    assert second["numba_hits"] == 1 and second["numba_misses"] == 0, "Numba compiled again"
    assert set(second["seconds"]) >= {"load", "numba.fused", "total"} and "fused.linalg" not in second["seconds"]
    assert second["stages"] == first["stages"] and "kernels" in second["stages"]      # stage texts kept
    assert second["stderr"] == ""
    (entry,) = entries(cache)
    assert entry.name.startswith("f.M4.") and (entry / "__pycache__").is_dir()


def test_the_unfused_build_is_made_only_when_asked_for(cache):
    # issue 14: a library call compiles the build that runs; the comparison build (one kernel per
    # op) is compiled, and cached as an entry of its own, when the speedup line or a test asks
    import fusec
    prog = fusec.compile(SOURCE, target="cpu")
    c = prog.f.compiled({"M": 4})
    np.testing.assert_allclose(prog.f(np.ones((4, 8), np.float32)), 2 * np.e, rtol=1e-6)
    assert len(entries(cache)) == 1 and c.unfused_build is None and c.make_unfused is not None
    assert not any(k.startswith("unfused") for k in c.timed_seconds()) and "unfused" not in c.kernel_counts
    assert c.unfused is not None                       # made now
    assert len(entries(cache)) == 2 and c.make_unfused is None
    assert c.kernel_counts["unfused"] == 1 and "unfused" in c.memory
    assert {"unfused.compile", "unfused.kernels"} <= set(c.timed_seconds())
    np.testing.assert_allclose(c.unfused(np.ones((4, 8), np.float32))[0], 2 * np.e, rtol=1e-6)
    again = fusec.compile(SOURCE, target="cpu").f.compiled({"M": 4})
    assert again.cache == "hit" and again.unfused is not None and len(entries(cache)) == 2
    plain = fusec.compile(SOURCE, target="cpu", options={"baseline": False}).f.compiled({"M": 4})
    assert plain.unfused is None and plain.make_unfused is None


def test_the_key_holds_the_source_binding_and_options(cache, tmp_path):
    import fusec
    prog = fusec.compile(SOURCE, target="cpu")
    names = {prog.cache_entry(prog.f.typed, {"M": 4}), prog.cache_entry(prog.f.typed, {"M": 5})}
    other = fusec.compile(SOURCE.replace("* 2", "* 3"), target="cpu")
    names.add(other.cache_entry(other.f.typed, {"M": 4}))
    unfused = fusec.compile(SOURCE, target="cpu", options={"fuse": False})
    names.add(unfused.cache_entry(unfused.f.typed, {"M": 4}))
    assert len(names) == 4
    again = fusec.compile(SOURCE, target="cpu")
    assert again.cache_entry(again.f.typed, {"M": 4}) == prog.cache_entry(prog.f.typed, {"M": 4})


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["truncate module", "edit manifest", "delete plan"])
def test_a_damaged_entry_is_said_in_one_line_and_built_again(cache, tmp_path, damage):
    assert api_run(cache, tmp_path)["cache"] == "miss"
    (entry,) = entries(cache)
    if damage == "truncate module":
        module = entry / "f.fused.py"
        module.write_bytes(module.read_bytes()[:100])
    elif damage == "edit manifest":
        text = (entry / "manifest.json").read_text()
        assert '"f32[4,8]"' in text
        (entry / "manifest.json").write_text(text.replace('"f32[4,8]"', '"f32[5,8]"'))
    else:
        (entry / "f.plan.txt").unlink()
    again = api_run(cache, tmp_path)
    assert again["cache"] == "miss" and again["ok"]
    lines = again["stderr"].splitlines()
    assert len(lines) == 1, again["stderr"]
    assert lines[0].startswith(f"fusec: the cached build {entry} is damaged (")
    assert lines[0].endswith("; removed it and compiling again")
    assert api_run(cache, tmp_path)["cache"] == "hit"


@pytest.mark.slow
def test_the_main_job_reports_the_cache_and_a_second_run_skips_the_stages(cache, tmp_path):
    argv = [sys.executable, "-m", "fusec", SOFTMAX, "--chain", "softmax_rows", "--target", "cpu", "--bind", "M=4,N=8"]
    reports = []
    for i in range(2):
        report = tmp_path / f"r{i}.json"
        subprocess.run(argv + ["--report", str(report)], env=env_for(cache), check=True, capture_output=True)
        reports.append(json.loads(report.read_text())["chains"][0])
    assert [r["cache"] for r in reports] == ["miss", "hit"]
    assert "fused.plan" in reports[0]["compile_seconds"] and "fused.plan" not in reports[1]["compile_seconds"]
    assert reports[0]["numerics"] == reports[1]["numerics"]
    report = tmp_path / "r2.json"
    subprocess.run(argv + ["--report", str(report), "--no-cache"], env=env_for(cache), check=True, capture_output=True)
    assert json.loads(report.read_text())["chains"][0]["cache"] == "off"


@pytest.mark.slow
def test_processes_at_once_share_one_entry(cache, tmp_path):
    src = tmp_path / "f.fdsl"
    src.write_text(SOURCE)
    procs = [subprocess.Popen([sys.executable, "-c", API_RUN, str(src)], env=env_for(cache), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    results = [p.communicate() for p in procs]
    assert all(p.returncode == 0 for p in procs), results
    assert all(json.loads(out.splitlines()[-1])["ok"] for out, _ in results)
    assert len(entries(cache)) == 1
    assert list((cache / "compiled" / ".staging").iterdir()) == []
    assert api_run(cache, tmp_path)["cache"] == "hit"


@pytest.mark.slow
def test_nothing_is_left_in_the_system_temp_directory(cache, tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    assert api_run(cache, tmp_path, TMPDIR=str(tmp))["cache"] == "miss"
    assert api_run(cache, tmp_path, TMPDIR=str(tmp))["cache"] == "hit"
    assert sorted(os.listdir(tmp)) == []
    assert len(entries(cache)) == 1


def fake_entry(c: CompileCache, name: str, size: int, used: float) -> None:
    def write(d: Path):
        d.mkdir()
        (d / "manifest.json").write_bytes(b"x" * size)
    c.store(name, write)
    os.utime(c.root / name, (used, used))


def test_least_recently_used_entries_are_evicted_past_the_cap(tmp_path):
    c = CompileCache(tmp_path, cap=10_000)
    for i, name in enumerate(["a", "b", "c"]):
        fake_entry(c, name, 4000, 1000 + i)
    assert [e.name for e in c.entries()] == ["b", "c"]          # a, the oldest, made room for c
    os.utime(tmp_path / "b", (5000, 5000))                     # b used since
    fake_entry(c, "d", 4000, 6000)
    assert [e.name for e in c.entries()] == ["b", "d"]
    fake_entry(c, "huge", 20_000, 7000)                         # the entry just stored is kept
    assert [e.name for e in c.entries()] == ["huge"]


def test_a_second_store_of_an_entry_keeps_the_first(tmp_path):
    c = CompileCache(tmp_path, cap=1 << 20)
    fake_entry(c, "a", 10, 1000)
    fake_entry(c, "a", 20, 1000)
    assert (tmp_path / "a" / "manifest.json").read_bytes() == b"x" * 10
    assert list((tmp_path / ".staging").iterdir()) == []


def test_fusec_cache_list_info_and_clear(cache, capsys, monkeypatch):
    import fusec
    prog = fusec.compile(SOURCE, target="cpu")
    y = prog.f(np.ones((2, 8), np.float32))
    assert np.allclose(y, 2 * np.e)
    name = entry_name("f", {"M": 2}, "")
    assert main(["cache", "list"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(name) and "KiB" in out and "used" in out
    monkeypatch.setenv("FUSEC_CACHE_MAX_SIZE", "64M")
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"compile cache: {cache / 'compiled'}\n  1 entry, ") and "of at most 64 MiB" in out
    assert main(["cache", "clear"]) == 0
    assert capsys.readouterr().out.startswith("removed 1 entry (")
    assert main(["cache", "list"]) == 0
    assert capsys.readouterr().out == f"the compile cache {cache / 'compiled'} is empty\n"
    assert (cache / "hardware-cpu.json").exists()               # clear removes compiled builds only


def test_a_bad_cap_or_a_cache_that_is_a_file_is_a_user_error(cache, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FUSEC_CACHE_MAX_SIZE", "lots")
    argv = [SOFTMAX, "--chain", "softmax_rows", "--target", "cpu", "--bind", "M=4,N=8"]
    assert main(argv) == 1
    assert capsys.readouterr().err == ("fusec: error: FUSEC_CACHE_MAX_SIZE=lots: 'lots' is not a size; write bytes "
                                       "or a number with K, M, G or T, such as 8G or 512M\n")
    monkeypatch.delenv("FUSEC_CACHE_MAX_SIZE")
    (cache / "compiled").write_text("")
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"fusec: error: the compile cache {cache / 'compiled'} cannot be a directory") and \
        err.count("\n") == 1
    assert main(["cache", "list"]) == 1


def test_where_numba_cannot_cache_the_functions_compile_afresh_said_in_a_line(tmp_path, monkeypatch, capsys):
    """Numba finds no writable cache directory (its RuntimeError from enable_caching): the
    module's functions compile in this process, the loader says so once, and the chain runs."""
    from numba.core.dispatcher import Dispatcher

    from fusec.runtime import artifact as art

    def refuse(self):
        raise RuntimeError("cannot cache function 'f': no locator available for file '/x.py'")
    monkeypatch.setattr(Dispatcher, "enable_caching", refuse)
    (tmp_path / "f.fdsl").write_text(SOURCE)
    assert main(["compile", str(tmp_path / "f.fdsl"), "--target", "cpu", "--bind", "M=4", "-o",
                 str(tmp_path / "art")]) == 0
    capsys.readouterr()
    host = art.load(tmp_path / "art").module("f", "fused", numba_cache=True)
    assert capsys.readouterr().err.strip().splitlines() == [
        f"fusec: Numba cannot cache the functions of {tmp_path / 'art' / 'f.fused.py'} (cannot cache function 'f': "
        "no locator available for file '/x.py'); they compile in each process"]
    (y,) = host(np.ones((4, 8), np.float32))
    np.testing.assert_allclose(y, np.full((4, 8), 2 * np.e, np.float32), rtol=1e-6)


@pytest.mark.parametrize("evictions", [1, 3])
def test_a_build_evicted_before_it_loads_is_stored_again_or_run_from_a_copy(cache, tmp_path, capsys,
                                                                          monkeypatch, evictions):
    # another process's (or thread's) store evicts this build between its store and its load:
    # stored again; evicted every time, it runs from the program's own copy, with a notice
    import fusec
    from fusec import program as program_mod
    from fusec.runtime import cache as cache_mod
    stored = []
    real_store = cache_mod.CompileCache.store

    def store_then_evict(self, name, write):
        d = real_store(self, name, write)
        stored.append(d)
        if len(stored) <= evictions:
            self.remove(d)
        return d
    monkeypatch.setattr(cache_mod.CompileCache, "store", store_then_evict)
    src = tmp_path / "f.fdsl"
    src.write_text(SOURCE)
    prog = fusec.compile(str(src), target="cpu")
    y = prog.f(np.ones((4, 8), np.float32))
    np.testing.assert_allclose(y, 2 * np.e, rtol=1e-6)
    err = capsys.readouterr().err
    if evictions < program_mod.STORE_TRIES:
        assert len(stored) == evictions + 1 and "too small" not in err
        assert [e.name for e in CompileCache(cache / "compiled").entries()] == [stored[-1].name]
    else:
        assert len(stored) == program_mod.STORE_TRIES
        assert "is too small for the builds in use: the build of f was evicted 3 times" in err
        assert entries(cache) == []
