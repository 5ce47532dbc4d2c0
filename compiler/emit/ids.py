"""Thread and block ids as a CUDA engineer writes them: proven non-negative and bounded.

Numba types `cuda.threadIdx.x` and `cuda.blockIdx.x` as unsigned 32-bit values with no range, and
every array index it lowers is signed: `i < 0 ? i + dim : i` (a `setp.lt.s64` + `selp.b64` per
index) plus floor-semantics `//` and `%`. Masking an id with its hardware bound (threads < 1024;
grid x < 2^31, grid y and z <= 65535) gives LLVM the known bits to drop the wraparound, to turn
`//` and `%` by powers of two into shifts and masks, and to keep addresses narrow. The mask is
an int64 literal, so the id becomes int64 (uint32 & int64): never the uint64 + int64 -> float64
trap. On a GPU the masks change nothing: a launch keeps every id inside them (the planner's grids
stay within (2^31-1, 65535, 65535) and blocks within 1024 threads).

A grid axis whose block count is not a number within its limit (a run-time extent, or a static
one above it) is walked by a grid-stride loop (emit/module.py): inside it `block_id` is the
loop's variable and `grid_dim` the axis's block count (`grid_stride`).
"""
from __future__ import annotations

import contextlib
import contextvars

GRID_LIMITS = {"x": 2**31 - 1, "y": 65535, "z": 65535}      # CUDA's gridDim limits (cc 3.0 and later)
_BLOCK_MASK = {"x": "0x7fffffff", "y": "0xffff", "z": "0xffff"}
_THREAD_MASK = "1023"
# per grid-strided axis of the kernel being emitted: (the loop's variable, the axis's block count)
_STRIDED: contextvars.ContextVar[dict] = contextvars.ContextVar("fusec_grid_stride", default={})


@contextlib.contextmanager
def grid_stride(axes: dict[str, tuple[str, str]]):
    """While a kernel's body is emitted inside grid-stride loops: {axis: (loop variable, count)}."""
    token = _STRIDED.set(dict(axes))
    try:
        yield
    finally:
        _STRIDED.reset(token)


def thread_id(dim: str) -> str:
    """`cuda.threadIdx.<dim>`, known to lie in [0, 1024)."""
    return f"(cuda.threadIdx.{dim} & {_THREAD_MASK})"


def block_id(dim: str) -> str:
    """`cuda.blockIdx.<dim>`, known to lie within the grid limit of its axis (the grid-stride
    loop's variable on a strided axis)."""
    if dim in _STRIDED.get():
        return _STRIDED.get()[dim][0]
    return hardware_block_id(dim)


def block_dim(dim: str) -> str:
    """`cuda.blockDim.<dim>`, known to lie in [1, 1024]."""
    return f"(cuda.blockDim.{dim} & 2047)"


def grid_dim(dim: str) -> str:
    """`cuda.gridDim.<dim>`, known to lie within the grid limit of its axis (the axis's block
    count on a strided axis: what the kernel's blocks cover, not what was launched)."""
    if dim in _STRIDED.get():
        return _STRIDED.get()[dim][1]
    return hardware_grid_dim(dim)


def hardware_block_id(dim: str) -> str:
    """`cuda.blockIdx.<dim>` as launched (a grid-stride loop's start)."""
    return f"(cuda.blockIdx.{dim} & {_BLOCK_MASK[dim]})"


def hardware_grid_dim(dim: str) -> str:
    """`cuda.gridDim.<dim>` as launched (a grid-stride loop's step)."""
    return f"(cuda.gridDim.{dim} & {_BLOCK_MASK[dim]})"


def global_id(dim: str) -> str:
    """The thread's index across the grid along `dim`."""
    return f"{block_id(dim)} * {block_dim(dim)} + {thread_id(dim)}"
