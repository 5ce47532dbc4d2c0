"""What the remote compile cache stores, as bytes: a compile cache entry packed (`pack_dir`: its
files and the portable part of Numba's cache of them) and signed (`seal`: HMAC-SHA256 with the
fleet's secret over the Redis key and the packed bytes). `unseal` gives the packed bytes back
only when the signature holds (else a BadEntry naming why); nothing is unpacked, let alone
imported, before that. `unpack_into` writes only plain file names, never a path out of the entry.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import zlib
from pathlib import Path

MAGIC = b"FUSEC-R1"                     # the value's format; another one is refused, not read
_MAC_BYTES = 32
_NAME = re.compile(r"(__pycache__/)?[A-Za-z0-9_][A-Za-z0-9_.=-]*")
NUMBA_CACHE_SUFFIXES = (".nbi", ".nbc")  # Numba's index and machine code: keyed by the module's content
                                         # and the CPU (or GPU) it was compiled for, so portable between
                                         # machines of one kind; .pyc files are not shared


class BadEntry(Exception):
    """A remote value that must not be used: its signature does not verify, or it is not a packed
    entry at all. The message is the reason, in words."""


def seal(secret: bytes, key: str, payload: bytes) -> bytes:
    """The value stored under `key`: MAGIC, the HMAC of key and payload, the payload."""
    return MAGIC + _mac(secret, key, payload) + payload


def unseal(secret: bytes, key: str, value: bytes) -> bytes:
    """The payload of a value read under `key`, when its HMAC verifies with `secret`."""
    if not value.startswith(MAGIC) or len(value) < len(MAGIC) + _MAC_BYTES:
        raise BadEntry("is not a signed fusec entry")
    mac = value[len(MAGIC):len(MAGIC) + _MAC_BYTES]
    payload = value[len(MAGIC) + _MAC_BYTES:]
    if not hmac.compare_digest(mac, _mac(secret, key, payload)):
        raise BadEntry("has a signature that does not verify with FUSEC_CACHE_SECRET (changed, truncated, or "
                       "written without the secret)")
    return payload


def _mac(secret: bytes, key: str, payload: bytes) -> bytes:
    return hmac.new(secret, key.encode("utf-8") + b"\0" + payload, hashlib.sha256).digest()


def pack(files: dict[str, bytes]) -> bytes:
    """Files by name, as one compressed byte string (deterministic: sorted, no times)."""
    names = sorted(files)
    header = json.dumps([[n, len(files[n])] for n in names], separators=(",", ":")).encode()
    body = b"".join(files[n] for n in names)
    return zlib.compress(b"%d\n" % len(header) + header + body, 6)


def unpack(payload: bytes, limit: int) -> dict[str, bytes]:
    """The files of a packed (and verified) payload; a BadEntry when it is not one, or would
    unpack to more than `limit` bytes."""
    try:
        d = zlib.decompressobj()
        raw = d.decompress(payload, limit + 1)
        if len(raw) > limit or d.unconsumed_tail:
            raise BadEntry(f"unpacks to more than {limit} bytes")
        size, rest = raw.split(b"\n", 1)
        header = json.loads(rest[:int(size)])
        body = memoryview(rest)[int(size):]
    except (zlib.error, ValueError) as e:
        raise BadEntry(f"is not a packed entry ({e})") from None
    files, at = {}, 0
    for item in header if isinstance(header, list) else [None]:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], int)
                and _NAME.fullmatch(item[0]) and ".." not in item[0] and 0 <= item[1] <= len(body) - at):
            raise BadEntry(f"is not a packed entry (a bad file entry {json.dumps(item)[:60]})")
        files[item[0]] = bytes(body[at:at + item[1]])
        at += item[1]
    if at != len(body) or not files:
        raise BadEntry("is not a packed entry (its files do not add up)")
    return files


def entry_files(directory: Path) -> dict[str, bytes]:
    """A compile cache entry's files to share: its own, and Numba's cache of its modules."""
    files = {}
    for p in sorted(directory.iterdir()):
        if p.is_file() and not p.is_symlink() and _NAME.fullmatch(p.name):
            files[p.name] = p.read_bytes()
    cache = directory / "__pycache__"
    if cache.is_dir() and not cache.is_symlink():
        for p in sorted(cache.iterdir()):
            if p.suffix in NUMBA_CACHE_SUFFIXES and p.is_file() and not p.is_symlink() and _NAME.fullmatch(p.name):
                files[f"__pycache__/{p.name}"] = p.read_bytes()
    return files


def pack_dir(directory: Path) -> bytes:
    return pack(entry_files(directory))


def unpack_into(files: dict[str, bytes], directory: Path) -> None:
    """Write unpacked files (names checked by `unpack`) into the new directory `directory`."""
    directory.mkdir(parents=True)
    for name, data in files.items():
        path = directory / name
        if name.startswith("__pycache__/"):
            path.parent.mkdir(exist_ok=True)
        with open(path, "xb") as f:
            f.write(data)
    os.utime(directory)
