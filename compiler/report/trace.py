"""Coalescing, measured: `trace(source, host, arg_types, blocks, warp_size)` runs a few real blocks
of each launch of an emitted module under Numba's CUDA simulator, every global-array access
traced and counted as 32-byte sectors per warp request (in a child process unless this one runs
the simulator), checked where cheap against an untraced rerun. See docs/GPU.md, "The kernel report".
"""
from __future__ import annotations

import inspect
import linecache
import operator
import re
import sys
import threading
from typing import Any, Sequence

import numpy as np

from .child import MeasureError, run, simulator_mode
from .loader import exec_module

SECTOR_BYTES = 32
VERIFY_MAX_ACCESSES = 250_000          # the untraced re-run costs about as much as the traced one
_SEED = 0


def trace(source: str, host: str, arg_types: Sequence[str], blocks: Sequence, warp_size: int) -> list[dict]:
    """`trace_here`, in a child process unless this one runs the CUDA simulator."""
    return run(trace_here, {"source": source, "host": host, "arg_types": list(arg_types),
                         "blocks": list(blocks), "warp_size": warp_size}, simulator=True)


def make_inputs(arg_types: Sequence[str]) -> list[np.ndarray]:
    """Seeded inputs for argument types such as "f32[64,256]" or "f32[]": floats in [0.5, 1.5)
    (positive, so logs, divisions and square roots of them are defined), small non-negative
    integers, random booleans."""
    rng = np.random.default_rng(_SEED)
    out = []
    for t in arg_types:
        m = re.fullmatch(r"(\w+)\[([\d,]*)\]", t)
        if m is None:
            raise MeasureError(f"cannot make an input of type {t!r} (a static shape is needed)")
        dtype = _dtype(m.group(1))
        shape = tuple(int(d) for d in m.group(2).split(",")) if m.group(2) else ()
        if dtype == np.bool_:
            out.append(rng.random(shape) < 0.5)
        elif np.issubdtype(dtype, np.integer):
            out.append(rng.integers(0, 8, shape).astype(dtype))
        else:
            out.append(rng.uniform(0.5, 1.5, shape).astype(dtype))
    return out


def _dtype(name: str) -> np.dtype:
    if name == "i1":
        return np.dtype(np.bool_)
    if name == "index":
        return np.dtype(np.int64)
    if name == "bf16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    if re.fullmatch(r"[fi](16|32|64)|i8", name):
        return np.dtype(("float" if name[0] == "f" else "int") + name[1:])
    raise MeasureError(f"cannot make an input of element type {name!r}")


# ---- running a host function with its launches traced ----------------------------------------

def trace_here(source: str, host: str, arg_types: Sequence[str], blocks: Sequence, warp_size: int) -> list[dict]:
    """Run `host` of the emitted module under the simulator (this process must be running it),
    every launch restricted to `blocks` and traced. One record per launch, in launch order:
    {"kernel", "grid", "block", "blocks_traced", "sites", "summary", "verified", "note"} or,
    when the simulator raised, {"kernel", "grid", "block", "error"}."""
    from numba import cuda
    from numba.cuda.errors import normalize_kernel_dimensions
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    if not simulator_mode():
        raise MeasureError("tracing needs the CUDA simulator (NUMBA_ENABLE_CUDASIM=1 before numba.cuda is imported)")
    mod = exec_module(source, "trace")
    entry = getattr(mod, host, None)
    if entry is None:
        raise MeasureError(f"the module defines no {host!r}")
    # every kernel, the module's own helpers too (emit/bf16.py's conversions, recorded under their
    # names, which no launch of the plan has), each restricted to the traced blocks
    kernels = {k: v for k, v in vars(mod).items() if isinstance(v, FakeCUDAKernel) and not v._device}
    space = _AddressSpace()
    records: list[dict] = []

    class Launcher:
        """Stands in for kernel `name` in the module's globals: `k[grid, block](*args)`."""

        def __init__(self, name, kernel):
            self.name, self.kernel = name, kernel

        def __getitem__(self, config):
            def launch(*args):
                grid, block = normalize_kernel_dimensions(*config[:2])
                dynshared = config[3] if len(config) == 4 else 0
                records.append(_trace_launch(self.name, self.kernel, tuple(grid), tuple(block), dynshared,
                                             args, blocks, mod.__file__, space, warp_size))
            return launch

    real_device_array = cuda.device_array

    def zeroed_device_array(*a, **kw):
        # the simulator's device_array is np.ndarray(...), uninitialised: blocks that never run
        # would leave garbage (NaNs, or values math.exp overflows on in Python) for later kernels
        arr = real_device_array(*a, **kw)
        arr._ary[...] = 0
        return arr

    for name, kernel in kernels.items():
        setattr(mod, name, Launcher(name, kernel))
    cuda.device_array = zeroed_device_array          # process-wide: undone below
    try:
        entry(*[cuda.to_device(x) for x in make_inputs(arg_types)])
    except MeasureError:
        raise
    except Exception as e:   # outside a launch (each launch catches its own)
        raise MeasureError(f"the host function {host} raised {type(e).__name__}: {e}"
                           f"{_line_in(e, mod.__file__)}") from None
    finally:
        cuda.device_array = real_device_array
    return records


def _trace_launch(name, kernel, grid, block, dynshared, args, blocks, filename, space, warp_size) -> dict:
    points = _grid_points(blocks, grid)
    rec: dict[str, Any] = {"kernel": name, "grid": grid, "block": block, "blocks_traced": points}
    arrays = [_as_ndarray(a) for a in args]
    present = [a for a in arrays if a is not None]
    before = _snapshot(present)
    tracer = _Tracer(filename)
    try:
        _run_blocks(kernel, grid, block, dynshared, args, points, tracer, space)
    except Exception as e:   # the simulator runs kernels as Python: e.g. math.log(0.0) raises
        rec["error"] = f"the simulator raised {type(e).__name__}: {e}{_line_in(e, filename)}"
        return rec
    if before is None:
        rec["verified"], rec["note"] = None, "arrays alias one another: not re-run"
    elif tracer.accesses > VERIFY_MAX_ACCESSES:
        rec["verified"], rec["note"] = None, f"{tracer.accesses} accesses: too many to re-run"
    else:
        copies = iter(before)
        _run_blocks(kernel, grid, block, dynshared, [next(copies) if a is not None else x
                                                      for a, x in zip(arrays, args)], points)
        same = [_same_bytes(b, a) for b, a in zip(before, present)]
        rec["verified"] = all(same)
        params = [p for p, a in zip(inspect.signature(kernel.fn).parameters, arrays) if a is not None]
        rec["note"] = None if all(same) else "traced and untraced runs differ in " + ", ".join(
            p for p, s in zip(params, same) if not s)
    rec["sites"], rec["summary"] = _summarise(tracer, warp_size)
    return rec


def _line_in(e: BaseException, filename: str) -> str:
    tb, line = e.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return f" (line {line}: {linecache.getline(filename, line).strip()})" if line else ""


def _grid_points(spec: Sequence, grid: tuple[int, int, int]) -> list[tuple[int, int, int]]:
    """'first' | 'middle' | 'last' | (x[, y[, z]]) -> distinct block indices of `grid`."""
    gx, gy, gz = grid
    out = []
    for s in spec:
        if s == "first":
            p = (0, 0, 0)
        elif s == "middle":
            p = (gx // 2, gy // 2, gz // 2)
        elif s == "last":
            p = (gx - 1, gy - 1, gz - 1)
        elif isinstance(s, (tuple, list)) and all(isinstance(v, int) for v in s):
            p = tuple(s) + (0,) * (3 - len(s))
        else:
            raise MeasureError(f"unknown block {s!r}: 'first', 'middle', 'last' or (x, y, z)")
        if not all(0 <= v < n for v, n in zip(p, grid)):
            raise MeasureError(f"block {p} is outside the grid {grid}")
        if p not in out:
            out.append(p)
    return out


def _run_blocks(kernel, grid, block, dynshared, args, points, tracer=None, space=None) -> None:
    """Run the chosen blocks of one launch the way FakeCUDAKernel.__call__ (simulator/kernel.py)
    runs all of them: a FakeCUDAModule (simulator/kernelapi.py) pushed as the kernel context and
    swapped into the kernel's globals, then BlockManager(...).run(block index, *args) per block.
    Arrays go in as the simulator passes them (FakeWithinKernelCUDAArray) or, with a tracer, as
    TracedArray proxies over the same memory (so results land in the caller's arrays)."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray, FakeWithinKernelCUDAArray
    from numba.cuda.simulator.kernel import BlockManager, _push_kernel_context
    from numba.cuda.simulator.kernelapi import FakeCUDAModule, swapped_cuda_module

    params = list(inspect.signature(kernel.fn).parameters)
    kargs = []
    for i, a in enumerate(args):
        nd = _as_ndarray(a)
        if nd is None:
            kargs.append(a)
        elif tracer is not None:
            kargs.append(TracedArray(nd, params[i] if i < len(params) else f"arg{i}", tracer, space.addr_of(nd)))
        else:
            kargs.append(FakeWithinKernelCUDAArray(FakeCUDAArray(nd)))
    fake = FakeCUDAModule(grid, block, dynshared)
    with _push_kernel_context(fake), swapped_cuda_module(kernel.fn, fake):
        for p in points:
            BlockManager(kernel.fn, grid, block, kernel._debug).run(p, *kargs)


def _as_ndarray(x) -> np.ndarray | None:
    """The NumPy array behind a simulator device array (or a host array); None for scalars."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray, FakeWithinKernelCUDAArray
    if isinstance(x, FakeWithinKernelCUDAArray):
        x = x._item
    if isinstance(x, FakeCUDAArray):
        return x._ary
    if isinstance(x, np.ndarray) and x.ndim > 0:
        return x
    return None


def _snapshot(arrays: list[np.ndarray]) -> list[np.ndarray] | None:
    """Copies of a launch's arrays for the untraced re-run; None when two share memory (copies
    would not reproduce the aliasing)."""
    for i in range(len(arrays)):
        for j in range(i):
            if np.shares_memory(arrays[i], arrays[j]):
                return None
    return [a.copy() for a in arrays]


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """Bytewise equality, NaN payloads included."""
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(
        np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8))


class _AddressSpace:
    """Virtual device addresses: one 2 MiB-aligned region per root allocation (views inside it)."""

    def __init__(self):
        self.bases: dict[int, tuple[np.ndarray, int]] = {}
        self.next = 1 << 32

    def addr_of(self, a: np.ndarray) -> int:
        root = a
        while isinstance(root.base, np.ndarray):
            root = root.base
        delta = a.__array_interface__["data"][0] - root.__array_interface__["data"][0]
        if id(root) not in self.bases:
            self.bases[id(root)] = (root, self.next)        # holds root, so its id stays unique
            self.next += -(-max(root.nbytes, 1) // (1 << 21)) * (1 << 21)
        return self.bases[id(root)][1] + delta


# ---- recording accesses ------------------------------------------------------------------------

class _Tracer:
    """Collects (site, k, byte address) per simulated thread.

    Per-thread state hangs off the simulator's thread object (simulator/kernel.py BlockThread:
    its `blockIdx` and `thread_id` = x + bx * (y + by * z) are the CUDA identities), so the hot
    path takes no lock; the lock is taken the first time a thread or a site is seen.
    """

    def __init__(self, filename: str):
        self.filename = filename        # the traced module's code objects carry this file name
        self.lock = threading.Lock()
        self.sites: dict[tuple, int] = {}
        self.site_info: list[dict] = []
        self.positions: dict[Any, list] = {}     # code object -> its co_positions(), per code unit
        self.threads: list[tuple] = []           # (block, thread_id, log)

    @property
    def accesses(self) -> int:
        return sum(len(log) for _, _, log in self.threads)

    def record(self, arr: "TracedArray", offset: int, kind: str, width: int | None = None) -> None:
        """One access of `width` bytes (an element's by default) at `offset` in `arr`."""
        t = threading.current_thread()
        state = getattr(t, "_fusec_trace", None)
        if state is None:
            if not hasattr(t, "thread_id"):      # not a simulated CUDA thread
                return
            state = t._fusec_trace = ({}, [])
            with self.lock:
                b = t.blockIdx
                self.threads.append(((b.x, b.y, b.z), t.thread_id, state[1]))
        f = sys._getframe(2)                     # the frame that indexed the array
        while f is not None and f.f_code.co_filename != self.filename:
            f = f.f_back                         # e.g. an atomic in simulator/kernelapi.py
        if f is None:
            return
        # The site is the indexing expression's source position. (Not f_lasti itself: once
        # CPython specialises BINARY_SUBSCR into a Python-level __getitem__ call, the caller's
        # f_lasti points past the instruction's inline caches, so one expression would show up
        # as two sites. Cache entries share their instruction's position.)
        code = f.f_code
        positions = self.positions.get(code)
        if positions is None:
            positions = self.positions[code] = list(code.co_positions())
        pos = positions[f.f_lasti // 2]
        key = (code, pos, kind, arr._name)
        site = self.sites.get(key)
        if site is None:
            site = self._new_site(key, pos, f.f_lineno, arr, kind, width or arr._itemsize)
        counts, log = state
        k = counts.get(site, 0)
        counts[site] = k + 1
        log.append((site, k, arr._addr + offset))

    def _new_site(self, key, pos, lineno, arr, kind, width) -> int:
        with self.lock:
            if key not in self.sites:
                text = linecache.getline(self.filename, lineno).rstrip("\n")
                expr = text[pos[2]:pos[3]] if pos[0] == pos[1] == lineno and None not in pos[2:] else text
                self.sites[key] = len(self.site_info)
                self.site_info.append({"line": lineno, "col": pos[2] or 0, "expr": expr.strip(), "kind": kind,
                                       "array": arr._name, "itemsize": width})
            return self.sites[key]


class TracedArray:
    """Stands in for one global-array kernel argument inside the simulator.

    Indexing behaves like the simulator's FakeWithinKernelCUDAArray (a full integer index reads
    or writes one element; anything else gives a traced view of the same memory), and every
    element load and store is reported to the tracer with its virtual byte address.
    """
    __slots__ = ("_ary", "_name", "_tracer", "_addr", "_shape", "_strides", "_itemsize", "_ndim")

    def __init__(self, ary: np.ndarray, name: str, tracer: _Tracer, addr: int):
        self._ary, self._name, self._tracer, self._addr = ary, name, tracer, addr
        self._shape, self._strides = ary.shape, ary.strides
        self._itemsize, self._ndim = ary.itemsize, ary.ndim

    def _offset(self, idx) -> int | None:
        """Byte offset of element `idx` in this view; None unless idx is a full integer index."""
        if not isinstance(idx, tuple):
            idx = (idx,)
        if len(idx) != self._ndim:
            return None
        off = 0
        for i, n, s in zip(idx, self._shape, self._strides):
            try:
                i = operator.index(i)            # ints, NumPy ints, bools
            except TypeError:
                return None
            off += (i + n if i < 0 else i) * s
        return off

    def _run(self, idx) -> int | None:
        """Byte offset of `idx` when it is a run of consecutive elements along the last axis
        (integers, then a step-1 slice): emit/vector.py's 16-byte accesses, one access each."""
        if not isinstance(idx, tuple) or len(idx) != self._ndim or not isinstance(idx[-1], slice) \
                or idx[-1].step not in (None, 1) or self._strides[-1] != self._itemsize:
            return None
        start = idx[-1].start
        return self._offset(idx[:-1] + (start,)) if start is not None and self._ndim else None

    def __getitem__(self, idx):
        val = self._ary[idx]                     # raises IndexError exactly like the simulator
        run = self._run(idx)
        if run is not None and isinstance(val, np.ndarray) and val.size:
            self._tracer.record(self, run, "load", val.nbytes)
            return val.copy()
        if isinstance(val, np.ndarray):
            delta = val.__array_interface__["data"][0] - self._ary.__array_interface__["data"][0]
            return TracedArray(val, self._name, self._tracer, self._addr + delta)
        off = self._offset(idx)
        if off is not None:
            self._tracer.record(self, off, "load")
        return val

    def __setitem__(self, idx, val):
        self._ary[idx] = val
        run = self._run(idx)
        if run is not None:
            self._tracer.record(self, run, "store", self._ary[idx].nbytes)
            return
        off = self._offset(idx)
        if off is not None:
            self._tracer.record(self, off, "store")
            return
        # a slice assignment (fusec emits none): one store per element written
        offsets = sum(np.arange(n).reshape((-1,) + (1,) * (self._ndim - 1 - d)) * s
                      for d, (n, s) in enumerate(zip(self._shape, self._strides)))
        for o in np.asarray(offsets)[idx].ravel():
            self._tracer.record(self, int(o), "store")

    def reshape(self, *shape):
        """A traced view of the same memory in another shape (emit's `_flat`: a 1-D view)."""
        return TracedArray(self._ary.reshape(*shape), self._name, self._tracer, self._addr)

    def __len__(self):
        return len(self._ary)

    def __getattr__(self, attr):                 # shape, size, ndim, dtype, strides...
        return getattr(self._ary, attr)

    def __array__(self, dtype=None, copy=None):
        return self._ary if dtype is None else self._ary.astype(dtype)


# ---- counting sectors --------------------------------------------------------------------------

def _summarise(tracer: _Tracer, warp_size: int) -> tuple[list[dict], dict]:
    """Sites (each with its requests, and the sectors, ideal sectors and active lanes they sum
    to) and the kernel's summary: sector-weighted efficiency (ideal sectors / sectors
    moved, over all sites: the share of the traffic that was needed) and request-weighted (the
    mean of the sites' efficiencies, weighted by their requests)."""
    nsites = len(tracer.site_info)
    totals = {f: np.zeros(nsites, np.int64) for f in ("requests", "sectors", "ideal", "lanes")}
    logs = [(blk, tid, log) for blk, tid, log in tracer.threads if log]
    if logs:
        block_ids = {blk: i for i, blk in enumerate(sorted({blk for blk, _, _ in logs}))}
        cols = []
        for blk, tid, log in logs:
            a = np.asarray(log, dtype=np.int64)                  # rows: (site, k, address)
            cols.append(np.column_stack([np.full(len(a), block_ids[blk]), a[:, 0],
                                         np.full(len(a), tid // warp_size), a[:, 1], a[:, 2]]))
        blk, site, warp, k, addr = np.concatenate(cols).T
        itemsize = np.array([s["itemsize"] for s in tracer.site_info], np.int64)
        # one request per (block, site, warp, k), packed into one key
        nw, nk = int(warp.max()) + 1, int(k.max()) + 1
        keys, req = np.unique(((blk * nsites + site) * nw + warp) * nk + k, return_inverse=True)
        nreq = len(keys)
        req_site = (keys // (nw * nk)) % nsites
        sectors = _distinct_units(req, addr, itemsize[site], SECTOR_BYTES, nreq)
        # A site's accesses are itemsize-aligned (NumPy views are), so two lanes' elements
        # coincide or are disjoint: distinct bytes = distinct addresses x itemsize.
        distinct = _distinct_units(req, addr, np.ones_like(addr), 1, nreq) * itemsize[req_site]
        ideal = -(-distinct // SECTOR_BYTES)
        lanes = np.bincount(req, minlength=nreq)
        for f, v in (("requests", np.ones(nreq, np.int64)), ("sectors", sectors), ("ideal", ideal), ("lanes", lanes)):
            totals[f] = np.bincount(req_site, weights=v, minlength=nsites).astype(np.int64)
    sites = []
    for i, info in enumerate(tracer.site_info):
        r, s, ideal, lanes = (int(totals[f][i]) for f in ("requests", "sectors", "ideal", "lanes"))
        if r:
            sites.append({"line": info["line"], "col": info["col"], "expr": info["expr"], "kind": info["kind"],
                          "array": info["array"], "requests": r, "sectors": s, "ideal_sectors": ideal,
                          "lanes": lanes})
    sites.sort(key=lambda x: (x["line"], x["col"], x["kind"]))
    requests = sum(x["requests"] for x in sites)
    sectors = sum(x["sectors"] for x in sites)
    ideal = sum(x["ideal_sectors"] for x in sites)
    summary = {"requests": requests,
               "lanes_per_request": sum(x["lanes"] for x in sites) / requests if requests else None,
               "sectors_per_request": sectors / requests if requests else None,
               "ideal_sectors_per_request": ideal / requests if requests else None,
               "efficiency": ideal / sectors if sectors else None,
               "efficiency_by_requests": (sum(x["ideal_sectors"] / x["sectors"] * x["requests"] for x in sites)
                                          / requests if requests else None)}
    return sites, summary


def _distinct_units(req: np.ndarray, addr: np.ndarray, size: np.ndarray, unit: int, nreq: int) -> np.ndarray:
    """Per request, the distinct `unit`-byte aligned segments touched by its accesses
    [addr, addr + size) (an access may straddle two)."""
    first, last = addr // unit, (addr + size - 1) // unit
    span = last - first + 1
    if span.max() > 1:          # straddling accesses: one row per segment they touch
        rep = np.repeat(np.arange(len(addr)), span)
        first = first[rep] + (np.arange(len(rep)) - np.repeat(np.cumsum(span) - span, span))
        req = req[rep]
    order = np.lexsort((first, req))
    r, seg = req[order], first[order]
    new = np.ones(len(r), bool)
    new[1:] = (r[1:] != r[:-1]) | (seg[1:] != seg[:-1])
    return np.bincount(r[new], minlength=nreq)

