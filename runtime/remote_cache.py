"""The compile cache's remote tier: one Redis server shared by a fleet
(`redis://[:PASSWORD@]HOST[:PORT][/DB][?timeout=0.5&ttl=30d&max_entry=64M]`). Values are signed
(runtime/signed.py) with FUSEC_CACHE_SECRET, which the tier cannot run without; a value whose
signature does not verify is refused in one line and treated as a miss. Redis failing (down,
slower than the per-call timeout, full, a connection dropped) is never the caller's problem:
the tier switches itself off for the rest of the process with one warning line, and every call
then answers as a miss. A value is published whole: written under a temporary key and renamed
onto its own in one MULTI/EXEC, so no reader ever sees half of one.
"""
from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from typing import Callable
from urllib.parse import parse_qs, unquote, urlsplit

from . import signed
from .memory import format_bytes, parse_size

URL_VAR = "FUSEC_REMOTE_CACHE"
SECRET_VAR = "FUSEC_CACHE_SECRET"
PREFIX = "fusec:"
DEFAULT_TIMEOUT_S = 0.5
DEFAULT_TTL_S = 30 * 86400
DEFAULT_MAX_ENTRY = 64 << 20
_TTL_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}

_down: str | None = None              # why the tier is off in this process (said once)


class RemoteCacheError(Exception):
    """The remote cache cannot be used as asked (no secret, a URL that is not one, no Redis client):
    a user error, exit 1, in one line saying why."""


@dataclass(frozen=True)
class RemoteConfig:
    url: str                          # as given, the password left out
    host: str
    port: int
    db: int
    username: str | None
    password: str | None
    secret: bytes
    timeout_s: float = DEFAULT_TIMEOUT_S
    ttl_s: int = DEFAULT_TTL_S
    max_entry: int = DEFAULT_MAX_ENTRY


def configured(url: str | None = None) -> RemoteConfig | None:
    """The remote tier asked for by `url`, else by $FUSEC_REMOTE_CACHE; None when neither asks.
    A RemoteCacheError when it is asked for without $FUSEC_CACHE_SECRET, or the URL is bad."""
    url = url or os.environ.get(URL_VAR) or None
    if url is None:
        return None
    secret = os.environ.get(SECRET_VAR, "")
    if not secret:
        raise RemoteCacheError(f"a remote compile cache ({_shown(url)}) needs {SECRET_VAR}: every remote entry is "
                               "signed with it, and an entry is code every machine that reads it runs; set "
                               f"{SECRET_VAR} to the fleet's secret (the same on every machine)")
    return parse_url(url, secret.encode("utf-8"))


def parse_url(url: str, secret: bytes) -> RemoteConfig:
    try:
        u = urlsplit(url)
        port = u.port or 6379
    except ValueError as e:
        raise RemoteCacheError(f"{_shown(url)}: not a Redis URL ({e}); expected redis://HOST:PORT/DB") from None
    if u.scheme != "redis" or not u.hostname:
        raise RemoteCacheError(f"{_shown(url)}: not a Redis URL; expected redis://HOST:PORT/DB")
    path = u.path.strip("/") or "0"
    if not path.isdigit():
        raise RemoteCacheError(f"{_shown(url)}: the database '{path}' is not a number (redis://HOST:PORT/DB)")
    query = {k: v[-1] for k, v in parse_qs(u.query).items()}
    unknown = sorted(set(query) - {"timeout", "ttl", "max_entry"})
    if unknown:
        raise RemoteCacheError(f"{_shown(url)}: unknown setting '{unknown[0]}' (timeout, ttl, max_entry)")
    try:
        timeout = float(query.get("timeout", DEFAULT_TIMEOUT_S))
        ttl = _seconds(query.get("ttl", str(DEFAULT_TTL_S)))
        max_entry = parse_size(query.get("max_entry", str(DEFAULT_MAX_ENTRY)))
    except ValueError as e:
        raise RemoteCacheError(f"{_shown(url)}: {e}") from None
    if not (0 < timeout <= 60) or ttl < 1 or max_entry < 1:
        raise RemoteCacheError(f"{_shown(url)}: timeout must lie in (0, 60] seconds, ttl and max_entry be positive")
    return RemoteConfig(_shown(url), u.hostname, port, int(path), unquote(u.username) if u.username else None,
                        unquote(u.password) if u.password else None, secret, timeout, ttl, max_entry)


def _seconds(text: str) -> int:
    t = text.strip().lower()
    unit = _TTL_UNITS.get(t[-1:], None)
    number = t[:-1] if unit else t
    if not number.isdigit():
        raise ValueError(f"ttl={text} is not a duration (seconds, or 90m, 12h, 30d)")
    return int(number) * (unit or 1)


def _shown(url: str) -> str:
    """The URL without its password (it is printed)."""
    try:
        u = urlsplit(url)
        if u.password:
            return url.replace(f":{u.password}@", ":***@", 1)
    except ValueError:
        pass
    return url


def degraded() -> str | None:
    """Why the remote tier is off in this process (None while it works)."""
    return _down


class RemoteCache:
    """One Redis server as a cache of signed values. `warn(text)` is told one line: once when
    Redis fails (then the tier is off), and for each value refused."""

    def __init__(self, config: RemoteConfig, warn: Callable[[str], None] | None = None):
        self.config = config
        self.warn = warn or (lambda text: None)
        self._client = None
        self.refused: list[str] = []            # keys whose values were refused in this process

    @property
    def up(self) -> bool:
        return _down is None

    def client(self):
        if self._client is None:
            try:
                import redis
                from redis.backoff import NoBackoff
                from redis.retry import Retry
            except ImportError:
                raise RemoteCacheError("a remote compile cache needs the Redis client: pip install "
                                       "'fusec[remote]' (or redis)") from None
            c = self.config
            self._client = redis.Redis(host=c.host, port=c.port, db=c.db, username=c.username, password=c.password,
                                       socket_timeout=c.timeout_s, socket_connect_timeout=c.timeout_s,
                                       retry=Retry(NoBackoff(), 0),
                                       health_check_interval=0, single_connection_client=True)
        return self._client

    def _call(self, what: str, fn):
        """fn(client), or None once Redis has failed (said once per process)."""
        global _down
        if _down is not None:
            return None
        try:
            return fn(self.client())
        except RemoteCacheError:
            raise
        except Exception as e:                  # redis errors, OSError, a reply we cannot read: all Redis's
            _down = f"{type(e).__name__}: {_first_line(e)}"
            self.warn(f"the remote compile cache {self.config.url} failed ({what}: {_down}); going on with the "
                      "local cache alone in this process")
            self.close()
            return None

    def close(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            except Exception:
                pass
            self._client = None

    # ---- values ----------------------------------------------------------------------------
    def get(self, key: str) -> bytes | None:
        """The verified payload under `key` (refreshing its TTL); None when there is none, when
        Redis fails, or when it does not verify (then said in one line naming the key)."""
        full = PREFIX + key

        def read(r):
            p = r.pipeline(transaction=False)
            p.get(full)
            p.expire(full, self.config.ttl_s)
            return p.execute()[0]
        value = self._call("get", read)
        if value is None:
            return None
        try:
            return signed.unseal(self.config.secret, full, value)
        except signed.BadEntry as e:
            self.refuse(key, str(e))
            return None

    def refuse(self, key: str, why: str) -> None:
        self.refused.append(key)
        self.warn(f"refused the remote cache entry {key}: it {why}; nothing of it runs (compiling here instead, "
                  "and the good entry replaces it)")

    def put(self, key: str, payload: bytes) -> str:
        """Sign and publish `payload` under `key`: 'stored', 'too large' (over max_entry), or 'off'."""
        value = signed.seal(self.config.secret, PREFIX + key, payload)
        if len(value) > self.config.max_entry:
            return "too large"
        full = PREFIX + key
        tmp = f"{PREFIX}tmp:{key}:{os.getpid()}.{uuid.uuid4().hex[:8]}"

        def publish(r):
            p = r.pipeline(transaction=True)
            p.set(tmp, value, ex=self.config.ttl_s)
            p.rename(tmp, full)
            p.execute()
            return "stored"
        return self._call("put", publish) or "off"

    def keys(self, kind: str) -> list[str]:
        """The keys of one kind (`entry`, `profile`, `autotune`) the server holds, without PREFIX."""
        found = self._call("scan", lambda r: sorted(k.decode() for k in r.scan_iter(f"{PREFIX}{kind}:*", count=500)))
        return [k[len(PREFIX):] for k in found or []]

    def stats(self) -> dict | None:
        """What `fusec cache stats` prints: the server's memory and limits, and what fusec keeps there."""
        def read(r):
            info = r.info()
            out = {"server": f"redis {info.get('redis_version', '?')}", "used_memory": info.get("used_memory", 0),
                   "maxmemory": info.get("maxmemory", 0), "policy": info.get("maxmemory_policy", "?"),
                   "evicted_keys": info.get("evicted_keys", 0)}
            for kind in ("entry", "profile", "autotune"):
                keys = list(r.scan_iter(f"{PREFIX}{kind}:*", count=500))
                p = r.pipeline(transaction=False)
                for k in keys:
                    p.strlen(k)
                out[kind] = {"keys": len(keys), "bytes": sum(p.execute()) if keys else 0}
            return out
        return self._call("stats", read)

    def describe(self) -> str:
        c = self.config
        return (f"{c.url} (timeout {c.timeout_s:g} s, entries kept {c.ttl_s // 86400 if c.ttl_s >= 86400 else c.ttl_s}"
                f"{' days' if c.ttl_s >= 86400 else ' s'} after last use, at most {format_bytes(c.max_entry)} each)")


def _first_line(e: BaseException) -> str:
    text = (str(e).strip().splitlines() or [""])[0]
    return text.split(" caused error: ", 1)[-1][:160]      # a pipeline's error: the command's own
