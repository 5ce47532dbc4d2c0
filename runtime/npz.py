"""The golden/npz layout of FDSL.md: `CHAIN/in/ARG` inputs and `CHAIN/out/K` outputs."""
from __future__ import annotations

import os

import numpy as np


def load(path: str) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    """{chain: {"in": {arg: array}, "out": {"0": array, ...}}} from an npz file."""
    out: dict[str, dict[str, dict[str, np.ndarray]]] = {}
    with np.load(path, allow_pickle=False) as z:
        for key in z.files:
            parts = key.split("/")
            if len(parts) != 3 or parts[1] not in ("in", "out"):
                raise ValueError(f"{path}: key '{key}' is not CHAIN/in/ARG or CHAIN/out/K")
            out.setdefault(parts[0], {"in": {}, "out": {}})[parts[1]][parts[2]] = z[key]
    return out


def portable(x) -> np.ndarray:
    """bf16 has no npz representation (it would load back as raw bytes): store it as f32, which
    holds every bf16 value exactly; readers convert back where the chain declares bf16."""
    x = np.asarray(x)
    return x.astype(np.float32) if x.dtype.name == "bfloat16" else x


def save(path: str, chains: dict[str, tuple[dict[str, np.ndarray], list[np.ndarray]]]) -> None:
    """Write {chain: (inputs by arg name, outputs in order)} in the golden layout."""
    arrays = {}
    for name, (inputs, outputs) in chains.items():
        arrays.update({f"{name}/in/{k}": portable(v) for k, v in inputs.items()})
        arrays.update({f"{name}/out/{i}": portable(v) for i, v in enumerate(outputs)})
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "wb") as f:
        np.savez(f, **arrays)
