"""A throwaway Redis server on a free loopback port, for the remote cache's tests and benchmark:
`with RedisServer() as r: r.url` starts `redis-server` (found on PATH; `.ci/run` installs
Debian's when it is missing) with no persistence and stops it on leaving. `stop()` kills it
early (a server gone down), `admin()` is a client for driving it (CLIENT PAUSE, CONFIG SET).
"""
from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time


def redis_server_path() -> str | None:
    """The redis-server executable, or None when there is none here."""
    return shutil.which("redis-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    def __init__(self, *extra: str):
        self.extra = extra
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self._dir: tempfile.TemporaryDirectory | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> "RedisServer":
        exe = redis_server_path()
        if exe is None:
            raise RuntimeError("no redis-server on PATH (apt-get install redis-server; .ci/run does)")
        self._dir = tempfile.TemporaryDirectory(prefix="fusec-redis-")
        for _attempt in range(5):              # another process may take the free port first
            self.port = free_port()
            self.proc = subprocess.Popen(
                [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--dir", self._dir.name, "--protected-mode", "yes", *self.extra],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if self._wait_ready():
                return self
            self.stop()
        raise RuntimeError("redis-server did not start")

    def _wait_ready(self, seconds: float = 10.0) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                if self.admin().ping():
                    return True
            except Exception:
                time.sleep(0.02)
        return False

    def admin(self):
        import redis
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    def stop(self) -> None:
        """Kill the server (as a crash would) and wait for it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def close(self) -> None:
        self.stop()
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def __enter__(self) -> "RedisServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
