"""A real Redis server for the remote compile cache's tests: one per module, emptied for each test
(`redis`), or one per test (`redis_own`, for a test that stops it); `remote_env` points fusec at it with a secret and
a fresh remote tier in this process."""
import pytest

from bench.redis_server import RedisServer, redis_server_path


def _server():
    if redis_server_path() is None:
        pytest.fail("no redis-server on PATH: `.ci/run` installs it (apt-get install -y redis-server)")
    return RedisServer().start()


@pytest.fixture(scope="module")
def _redis_module():
    server = _server()
    yield server
    server.close()


@pytest.fixture
def redis(_redis_module):
    """The module's server, emptied."""
    _redis_module.admin().flushall()
    return _redis_module


@pytest.fixture
def redis_own():
    server = _server()
    yield server
    server.close()


@pytest.fixture
def remote_env(monkeypatch):
    """FUSEC_CACHE_SECRET set, no FUSEC_REMOTE_CACHE, and the remote tier's per-process state fresh."""
    from fusec import build_cache
    from fusec.runtime import remote_cache
    monkeypatch.setenv("FUSEC_CACHE_SECRET", "test-secret")
    monkeypatch.delenv("FUSEC_REMOTE_CACHE", raising=False)
    monkeypatch.setattr(remote_cache, "_down", None)
    monkeypatch.setattr(build_cache, "_REMOTES", {})
    monkeypatch.setattr(build_cache, "_SHARED", set())
    yield monkeypatch
