"""The golden/npz layout of FDSL.md: `CHAIN/in/ARG` inputs, `CHAIN/out/K` outputs, and
`CHAIN/failed/K` (why output K failed the numerics check). Loading never trusts the file
(anything outside the layout or the caller's size limit is an NpzError naming the file and
key); saving is atomic. See docs/FDSL.md (the npz layout) and docs/GUIDE.md, "Input checks".
"""
from __future__ import annotations

import os
import zipfile
import zlib

import numpy as np

from .files import atomic_write

PARTS = ("in", "out", "failed")


class NpzError(Exception):
    """An npz file that cannot be read or written, or does not hold the golden layout."""


def _key_error(path: str, key: str) -> str | None:
    parts = key.split("/")
    if len(parts) != 3 or parts[1] not in PARTS:
        return f"{path}: key '{key}' is not CHAIN/in/ARG, CHAIN/out/K or CHAIN/failed/K"
    chain, part, name = parts
    if not chain.isidentifier() or not chain.isascii():
        return f"{path}: key '{key}': '{chain}' is not a chain name"
    if part == "in" and not (name.isidentifier() and name.isascii()):
        return f"{path}: key '{key}': '{name}' is not a parameter name"
    if part != "in" and not (name.isascii() and name.isdigit()):
        return f"{path}: key '{key}': '{name}' is not an output number"
    return None


def _headers(path: str) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Every array's shape and dtype, from the .npy headers alone (nothing is allocated)."""
    out = {}
    try:
        with zipfile.ZipFile(path) as z:
            for name in z.namelist():
                if not name.endswith(".npy"):
                    raise NpzError(f"{path}: member '{name}' is not an array (.npy)")
                with z.open(name) as f:
                    version = np.lib.format.read_magic(f)
                    if version == (1, 0):
                        shape, _fortran, dtype = np.lib.format.read_array_header_1_0(f)
                    elif version == (2, 0):
                        shape, _fortran, dtype = np.lib.format.read_array_header_2_0(f)
                    else:
                        shape, _fortran, dtype = np.lib.format._read_array_header(f, version)
                out[name[:-4]] = (tuple(shape), dtype)
    except NpzError:
        raise
    except zipfile.BadZipFile as e:
        with open(path, "rb") as f:
            zipped = f.read(4) == b"PK\x03\x04"
        if zipped:
            raise NpzError(f"{path} is truncated or damaged (a zip archive without its directory: {e})") from None
        raise NpzError(f"{path} is not an npz file (not a zip archive)") from None
    except (ValueError, EOFError, OSError, zlib.error, RuntimeError, NotImplementedError, AttributeError) as e:
        raise NpzError(f"{path} is truncated or damaged ({type(e).__name__}: {e})") from None
    return out


def load_npz(path: str, max_bytes: int | None = None) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    """{chain: {"in": {arg: array}, "out": {"0": array, ...}, "failed": {"0": why, ...}}}."""
    if os.path.isdir(path):
        raise NpzError(f"{path} is a directory, not an npz file")
    if not os.path.exists(path):
        raise NpzError(f"{path}: no such file")
    if not os.access(path, os.R_OK):
        raise NpzError(f"{path}: permission denied")
    headers = _headers(path)
    total = 0
    for key, (shape, dtype) in headers.items():
        problem = _key_error(path, key)
        if problem:
            raise NpzError(problem)
        kind = key.split("/")[1]
        if dtype.hasobject:
            raise NpzError(f"{path}: '{key}' holds Python objects (dtype object); fusec loads only numeric "
                           "and bool arrays")
        if kind != "failed" and dtype.kind not in "biufc":
            raise NpzError(f"{path}: '{key}' has dtype {dtype}, not a numeric or bool array")
        count = 1
        for d in shape:
            count *= d
        total += count * dtype.itemsize
    if max_bytes is not None and total > max_bytes:
        from .memory import format_bytes
        raise NpzError(f"{path} holds {format_bytes(total)} of arrays, over the memory limit of "
                       f"{format_bytes(max_bytes)}")
    out: dict[str, dict[str, dict[str, np.ndarray]]] = {}
    try:
        with np.load(path, allow_pickle=False) as z:
            for key in z.files:
                chain, part, name = key.split("/")
                x = z[key]
                if part == "failed":
                    x = str(x)
                elif not x.dtype.isnative:
                    x = x.astype(x.dtype.newbyteorder("="))
                out.setdefault(chain, {p: {} for p in PARTS})[part][name] = x
    except (ValueError, EOFError, OSError, zipfile.BadZipFile, zlib.error, RuntimeError) as e:
        raise NpzError(f"{path} is truncated or damaged ({type(e).__name__}: {e})") from None
    return out


def portable(x) -> np.ndarray:
    """bf16 has no npz representation (it would load back as raw bytes): store it as f32, which
    holds every bf16 value exactly; readers convert back where the chain declares bf16."""
    x = np.asarray(x)
    return x.astype(np.float32) if x.dtype.name == "bfloat16" else x


def save(path: str, chains: dict[str, tuple[dict[str, np.ndarray], list[np.ndarray]]],
         failed: dict[str, dict[int, str]] | None = None) -> None:
    """Write {chain: (inputs by arg name, outputs in order)} in the golden layout, and for each
    output that failed the numerics check (`failed`: {chain: {k: why}}) `CHAIN/failed/K`.
    Atomic; raises NpzError naming the file when it cannot be written."""
    arrays = {}
    for name, (inputs, outputs) in chains.items():
        arrays.update({f"{name}/in/{k}": portable(v) for k, v in inputs.items()})
        arrays.update({f"{name}/out/{i}": portable(v) for i, v in enumerate(outputs)})
    for name, whys in (failed or {}).items():
        arrays.update({f"{name}/failed/{k}": np.array(why) for k, why in whys.items()})
    try:
        atomic_write(path, lambda f: np.savez(f, **arrays))
    except OSError as e:
        raise NpzError(f"cannot write {path}: {e.strerror or e}") from None
