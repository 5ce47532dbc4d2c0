"""The compile cache's remote tier against a real Redis server (tests/runtime/conftest.py): two
machines as two local cache directories sharing it; signed entries (a changed or forged one is
refused in one line, nothing of it runs, and the good entry replaces it); Redis stopped, paused
past the timeout, or full during a run: right results and one warning line."""
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import fusec
from fusec.cli import main
from fusec.runtime import artifact as art
from fusec.runtime import signed
from fusec.runtime.cache import CompileCacheError
from fusec.runtime.remote_cache import PREFIX, RemoteCacheError

ROOT = Path(__file__).resolve().parents[2]
SRC = """\
chain scale(x: f32[M, N]) -> f32[M, N] {
    return relu(x) * 2.0
}
chain shift(x: f32[M, N], b: f32[N]) -> f32[M, N] {
    return x + b
}
"""
B = {"M": 8, "N": 16}


def _program(tmp_path, name: str, url: str, src: str = SRC, **kw):
    return fusec.compile(src, target="cpu", cache=True, cache_dir=str(tmp_path / name), remote_cache=url, **kw)


def _url(server) -> str:
    """The server's URL with a per-call timeout that a loaded test machine cannot reach (the
    default, 0.5 s, is for a fleet; the timeout itself is tested with its own URL)."""
    return server.url + "?timeout=10"


def _remote_lines(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if "remote" in ln]


def _x(*shape):
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def test_the_remote_tier_needs_the_secret(tmp_path, remote_env, capsys):
    remote_env.delenv("FUSEC_CACHE_SECRET")
    with pytest.raises(RemoteCacheError, match="FUSEC_CACHE_SECRET"):
        _program(tmp_path, "a", "redis://127.0.0.1:1/0")
    f = tmp_path / "f.fdsl"
    f.write_text(SRC)
    remote_env.setenv("FUSEC_REMOTE_CACHE", "redis://127.0.0.1:1/0")
    remote_env.delenv("FUSEC_NO_CACHE")
    assert main([str(f), "--target", "cpu", "--bind", "M=8,N=16"]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("fusec: error: a remote compile cache (redis://127.0.0.1:1/0) needs FUSEC_CACHE_SECRET")


def test_a_cache_directory_others_can_write_is_refused(tmp_path, remote_env, capsys):
    shared = tmp_path / "fusec"
    (shared / "compiled").mkdir(parents=True)
    os.chmod(shared / "compiled", 0o777)
    with pytest.raises(CompileCacheError, match=r"can be written by other users \(mode 777\).*chmod go-w"):
        fusec.compile(SRC, target="cpu", cache=True, cache_dir=str(shared / "compiled"))
    os.chmod(shared / "compiled", 0o755)
    os.chmod(shared, 0o775)
    remote_env.setenv("FUSEC_CACHE_DIR", str(shared))
    assert main(["cache", "info"]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"refusing the compile cache {shared / 'compiled'}: {shared} can be written by its group" in line
    os.chmod(shared, 0o755)
    assert main(["cache", "info"]) == 0


def test_signatures_cover_key_and_bytes():
    value = signed.seal(b"k", "fusec:entry:a", b"payload")
    assert signed.unseal(b"k", "fusec:entry:a", value) == b"payload"
    for secret, key, v in ((b"other", "fusec:entry:a", value), (b"k", "fusec:entry:b", value),
                           (b"k", "fusec:entry:a", value[:-1] + b"X"), (b"k", "fusec:entry:a", b"junk")):
        with pytest.raises(signed.BadEntry):
            signed.unseal(secret, key, v)
    files = {"a.py": b"x = 1\n", "__pycache__/a.f-3.py311.nbi": b"\0\1"}
    assert signed.unpack(signed.pack(files), 1 << 20) == files
    evil = signed.pack({"../x": b""})
    with pytest.raises(signed.BadEntry, match="bad file entry"):
        signed.unpack(evil, 1 << 20)


def test_a_second_machine_loads_from_redis_without_mlir(tmp_path, redis, remote_env):
    first = _program(tmp_path, "a", _url(redis))
    for c in first.chains.values():
        assert c.compiled(B).cache == "miss"
    # Numba's cache of what ran goes with the entries: published again once it exists
    x = _x(8, 16)
    np.testing.assert_allclose(first.scale(x), np.maximum(x, 0) * 2)
    assert first.share() == 1
    code = f"""
import sys, numpy as np, fusec
p = fusec.compile({SRC!r}, target="cpu", cache=True, cache_dir={str(tmp_path / 'b')!r})
built = p.scale.compiled({B!r})
shared = sorted(p.name for p in (built.artifact_dir / "__pycache__").glob("*.nbc"))
x = np.arange(128, dtype=np.float32).reshape(8, 16) - 64
assert np.allclose(p.scale(x), np.maximum(x, 0) * 2)
print(built.cache, p.shift.compiled({B!r}).cache,
      sorted(m for m in sys.modules if m.split(".")[0] in ("mlir", "torch_mlir")))
print(len(shared))
"""
    env = {**os.environ, "FUSEC_REMOTE_CACHE": _url(redis), "FUSEC_CACHE_DIR": str(tmp_path / "machine-b")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    # two functions of Numba's cache: the host function and its one parallel loop's (emit/cpu.py: split_loops)
    assert r.stdout.splitlines() == ["remote remote []", "2"], r.stdout + r.stderr
    assert r.stderr == ""
    # the measured cpu profile came from the remote too: machine b measured nothing
    assert (tmp_path / "machine-b" / "hardware-cpu.json").is_file()


def _entry_key(redis, chain: str) -> bytes:
    (key,) = [k for k in redis.admin().keys(f"{PREFIX}entry:{chain}.*")]
    return key


def _forge(files: dict[str, bytes], chain: str, module: str) -> dict[str, bytes]:
    """The entry with its module replaced, and every checksum made right again: an entry a local
    check would pass, stopped only by the signature."""
    files = dict(files, **{f"{chain}.fused.py": module.encode()})
    m = json.loads(files["manifest.json"])
    m["files"] = {n: art._sha256(d) for n, d in files.items() if n != "manifest.json" and "/" not in n}
    m["checksum"] = art._manifest_checksum(m)
    files["manifest.json"] = (json.dumps(m, indent=2, sort_keys=True) + "\n").encode()
    return files


def test_changed_and_forged_entries_are_refused_and_replaced(tmp_path, redis, remote_env, capsys):
    first = _program(tmp_path, "a", _url(redis))
    first.scale.compiled(B)
    admin = redis.admin()
    key = _entry_key(redis, "scale")
    good = admin.get(key)
    payload = signed.unseal(b"test-secret", key.decode(), good)
    files = signed.unpack(payload, 1 << 26)
    marker = tmp_path / "pwned"
    module = files["scale.fused.py"].decode()
    evil = _forge(files, "scale", f"open({str(marker)!r}, 'w').write('ran')\n" + module)
    at = module.index("def ")
    changed = dict(files, **{"scale.fused.py": (module[:at] + "#" + module[at + 1:]).encode()})
    cases = {"one byte of the module changed": good[:len(signed.MAGIC) + 32] + signed.pack(changed),
             "forged without the secret": signed.seal(b"guessed", key.decode(), signed.pack(evil)),
             "signed entry of another key": signed.seal(b"test-secret", key.decode() + "x", signed.pack(evil))}
    for i, (case, value) in enumerate(cases.items()):
        admin.set(key, value)
        capsys.readouterr()
        p = _program(tmp_path, f"b{i}", _url(redis))
        x = _x(8, 16)
        np.testing.assert_allclose(p.scale(x), np.maximum(x, 0) * 2, err_msg=case)
        assert p.scale.compiled(B).cache == "miss", case
        (line,) = _remote_lines(capsys.readouterr().err)
        assert f"refused the remote cache entry {key.decode()[len(PREFIX):]}: it " in line, case
        assert "does not verify" in line or "not a packed entry" in line, line
        assert not marker.exists(), case
        # the good entry is back under the key
        assert signed.unseal(b"test-secret", key.decode(), admin.get(key)) and admin.get(key) != value


def _fdsl(tmp_path) -> str:
    f = tmp_path / "two.fdsl"
    f.write_text(SRC)
    return str(f)


def test_redis_stopped_during_a_run(tmp_path, redis_own, remote_env, capsys):
    p = _program(tmp_path, "a", redis_own.url)
    assert p.scale.compiled(B).cache == "miss"
    redis_own.stop()
    x, b = _x(8, 16), _x(16)
    np.testing.assert_allclose(p.shift(x, b), x + b)
    np.testing.assert_allclose(_program(tmp_path, "c", redis_own.url).scale(x), np.maximum(x, 0) * 2)
    (line,) = _remote_lines(capsys.readouterr().err)
    assert f"the remote compile cache {redis_own.url} failed" in line and "local cache alone" in line
    # the command line too: a whole run, right results, one warning line
    remote_env.delenv("FUSEC_NO_CACHE")
    (tmp_path / "cli").mkdir(mode=0o700)
    (tmp_path / "cli" / "hardware-cpu.json").write_bytes((Path(os.environ["FUSEC_CACHE_DIR"]) /
                                                          "hardware-cpu.json").read_bytes())
    remote_env.setenv("FUSEC_CACHE_DIR", str(tmp_path / "cli"))
    remote_env.setattr("fusec.runtime.remote_cache._down", None)
    t0 = time.perf_counter()
    assert main([_fdsl(tmp_path), "--target", "cpu", "--bind", "M=8,N=16", "--remote-cache", redis_own.url]) == 0
    out, err = capsys.readouterr()
    assert out.count("-> ok") == 2 and len(_remote_lines(err)) == 1, err
    assert time.perf_counter() - t0 < 60


def test_redis_paused_past_the_timeout(tmp_path, redis, remote_env, capsys):
    """A server that stops answering (SIGSTOP: connections open, no replies) costs one 0.2 s
    timeout, then the run goes on with the local cache alone. A client that waited on it would
    wait until the watchdog resumes the server a minute later; one that gives up takes the two
    compiles' time (seconds under CI's load) and no more. (CLIENT PAUSE cannot stand in: its
    UNPAUSE waits out the pause.)"""
    url = redis.url + "?timeout=0.2"
    p = _program(tmp_path, "a", url)
    assert p.scale.compiled(B).cache == "miss"
    resume = threading.Timer(60, os.kill, (redis.proc.pid, signal.SIGCONT))
    os.kill(redis.proc.pid, signal.SIGSTOP)
    resume.start()
    try:
        t0 = time.perf_counter()
        x, b = _x(8, 16), _x(16)
        np.testing.assert_allclose(p.shift(x, b), x + b)
        q = _program(tmp_path, "b", url)
        np.testing.assert_allclose(q.scale(x), np.maximum(x, 0) * 2)
        assert q.scale.compiled(B).cache == "miss"
        waited = time.perf_counter() - t0
    finally:
        resume.cancel()
        os.kill(redis.proc.pid, signal.SIGCONT)
    (line,) = _remote_lines(capsys.readouterr().err)
    assert "failed" in line and "Timeout" in line, line
    assert waited < 30, f"waited {waited:.1f} s on a stopped Redis"


def test_redis_full_during_a_run(tmp_path, redis, remote_env, capsys):
    admin = redis.admin()
    admin.flushall()
    admin.config_set("maxmemory-policy", "noeviction")
    admin.config_set("maxmemory", "1mb")
    try:
        for i in range(10_000):
            admin.set(f"filler:{i}", b"x" * 4096)
    except Exception as e:                       # OutOfMemoryError: the server is full
        assert "maxmemory" in str(e)
    try:
        p = _program(tmp_path, "a", _url(redis))
        x, b = _x(8, 16), _x(16)
        np.testing.assert_allclose(p.scale(x), np.maximum(x, 0) * 2)
        np.testing.assert_allclose(p.shift(x, b), x + b)
    finally:
        admin.config_set("maxmemory", "0")
        admin.flushall()
    (line,) = _remote_lines(capsys.readouterr().err)
    assert "failed (put" in line and "maxmemory" in line, line
    assert not admin.keys(f"{PREFIX}*")


def test_cache_push_pull_stats(tmp_path, redis, remote_env, capsys):
    _program(tmp_path, "a", None).scale.compiled(B)                  # a local entry, no remote yet
    for d in ("m1", "m2"):
        (tmp_path / d).mkdir(mode=0o700)
    remote_env.setenv("FUSEC_CACHE_DIR", str(tmp_path / "m1"))
    import shutil
    shutil.copytree(tmp_path / "a", tmp_path / "m1" / "compiled")
    assert main(["cache", "push"]) == 1                               # no remote asked for
    assert "needs a remote compile cache" in capsys.readouterr().err
    assert main(["cache", "push", "--remote-cache", _url(redis)]) == 0
    assert capsys.readouterr().out.startswith(f"pushed 1 entry ")
    remote_env.setenv("FUSEC_CACHE_DIR", str(tmp_path / "m2"))
    assert main(["cache", "pull", "--remote-cache", _url(redis)]) == 0
    assert capsys.readouterr().out.startswith("pulled 1 entry")
    assert [p.name for p in (tmp_path / "m2" / "compiled").iterdir() if not p.name.startswith(".")] == \
        [p.name for p in (tmp_path / "a").iterdir() if not p.name.startswith(".")]
    assert main(["cache", "stats", "--remote-cache", _url(redis)]) == 0
    assert "1 entry" in capsys.readouterr().out
    redis_url_down = "redis://127.0.0.1:1/0"
    assert main(["cache", "stats", "--remote-cache", redis_url_down]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"fusec: error: the remote compile cache {redis_url_down} failed") and "did not finish" in line
