"""The kernel report: `report_kernels(source, entry, hw)` gives one `KernelReport` per launch of an
emitted module's host function (ptx.py, occupancy.py, trace.py); nothing needs a GPU, and what
cannot be measured here is None with the reason in `unmeasured`. See docs/GPU.md, "The kernel
report".
"""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Sequence

from ..plan.measured import Measured
from ..plan.hardware import HardwareProfile
from . import occupancy as occ
from . import ptx as ptxmod
from . import sass as sassmod
from .banks import BankAccess, bank_conflicts
from .child import MeasureError
from .trace import trace as trace_launches

if TYPE_CHECKING:
    from ..emitted import Entry, Launch


@dataclass(frozen=True)
class AccessSite:
    """One load or store expression of a kernel's global array, over its traced warp requests."""
    line: int                           # in the emitted module (`--emit kernels`)
    expr: str                           # the indexing expression, e.g. arg0[v0 + thread_id_x, arg13]
    kind: str                           # "load" | "store"
    array: str                          # the kernel parameter
    requests: int                       # warp requests traced
    lanes_per_request: float            # active lanes of a request (32: the whole warp)
    sectors_per_request: float          # 32-byte sectors a request touches
    ideal_sectors_per_request: float    # the fewest sectors that hold the bytes it touches
    efficiency: float                   # ideal / actual sectors


@dataclass(frozen=True)
class Coalescing:
    """A kernel's traced accesses: per site, and summed over its sites."""
    sites: tuple[AccessSite, ...]
    requests: int
    lanes_per_request: float | None     # fewer than 32: lanes idle (or masked off) at these accesses
    sectors_per_request: float | None
    ideal_sectors_per_request: float | None
    efficiency: float | None            # sector-weighted: ideal sectors / sectors moved, all sites
    efficiency_by_requests: float | None   # the sites' efficiencies weighted by their requests
    blocks_traced: tuple[tuple[int, int, int], ...]
    verified: bool | None               # traced and untraced runs of the blocks agree byte for byte
    note: str | None = None             # why not verified, or where they differ


@dataclass(frozen=True)
class KernelReport:
    """One kernel launch, measured without a GPU. `unmeasured` gives the reason for each group
    of fields left None: "launch" (grid, block, threads_per_block, blocks), "resources"
    (registers to barriers), "occupancy" (blocks_per_sm to waves), "waves" (a block that does not
    fit on an SM: no resident blocks), "coalescing", "sass", "bank_conflicts"."""
    kernel: str
    kind: str                           # "launch": a plan group's kernel; "copy": a host-level copy
    group: int | None                   # the plan group ("launch" kernels)
    grid: tuple[int, ...] | None
    block: tuple[int, ...] | None
    threads_per_block: int | None
    blocks: int | None
    registers: int | None = None        # per thread (ptxas)
    stack_frame_bytes: int | None = None   # per thread: local arrays and spills
    local_bytes: int | None = None      # ptxas's lmem besides the stack frame
    spill_store_bytes: int | None = None
    spill_load_bytes: int | None = None
    smem_bytes: int | None = None       # static shared memory per block
    barriers: int | None = None
    shuffles: int | None = None         # warp shuffle instructions in its PTX (block combines on a GPU)
    mma: int | None = None              # tensor-core instructions (mma.sync) in its PTX
    blocks_per_sm: int | None = None    # resident blocks per SM
    occupancy: float | None = None      # resident warps / warp slots of an SM
    limited_by: tuple[str, ...] | None = None   # warps, registers, smem, blocks, barriers
    waves: float | None = None          # blocks / (blocks_per_sm x SMs); < 1: part of the device idles
    coalescing: Coalescing | None = None
    sass: sassmod.SassSummary | None = None     # its SASS: loops, math share, load widths, loads in flight
    bank_conflicts: tuple[BankAccess, ...] | None = None   # per shared-memory access site of its source
    unmeasured: tuple[tuple[str, str], ...] = ()
    errors: tuple[str, ...] = ()        # what a GPU would refuse: a block that fits no SM with its measured resources

    def as_dict(self) -> dict:
        d = asdict(self)
        d["unmeasured"] = dict(self.unmeasured)
        return d

    def measured(self) -> Measured | None:
        """What the cost model takes from the report (None when ptxas did not measure it)."""
        if self.registers is None:
            return None
        loop = self.sass.loops[self.sass.hot].counts if self.sass is not None and self.sass.hot is not None else None
        return Measured(self.registers, (self.stack_frame_bytes or 0) + (self.local_bytes or 0),
                        (self.spill_store_bytes or 0) + (self.spill_load_bytes or 0), self.smem_bytes or 0,
                        self.coalescing.efficiency if self.coalescing is not None else None,
                        loop.instructions if loop is not None else None, loop.math if loop is not None else None,
                        self.sass.loads_in_flight_min if self.sass is not None else None,
                        _load_bytes(self.sass.kernel.global_loads) if self.sass is not None else None)


def _load_bytes(loads: dict) -> float | None:
    """Bytes per global load instruction over {"LDG.128": n, ...} (None: no global load)."""
    n = sum(loads.values())
    return sum(int(k.rsplit(".", 1)[-1]) * c for k, c in loads.items()) / 8 / n if n else None


def report_kernels(source: str, entry: "Entry", hw: HardwareProfile, *, trace: bool = True,
                   blocks: Sequence = ("first", "middle")) -> list[KernelReport]:
    """The report of every launch of `entry` (the chain's host function in the emitted CUDA
    module `source`), for the device `hw`. `trace`: also measure coalescing, running `blocks`
    of each launch ("first", "middle", "last", (x, y, z)) under the simulator."""
    if not entry.launches:                            # a cpu module, or a chain of views only
        return []
    with ThreadPoolExecutor(max_workers=1) as pool:   # one of the two runs in a child process
        ptx_job = pool.submit(_ptx, source, hw)
        traced = _trace(source, entry, blocks, hw) if trace else "not traced (trace=False)"
        ptx = ptx_job.result()
    resources: dict[str, tuple[ptxmod.Resources | str, sassmod.SassSummary | str]] = {}
    out = []
    seen: dict[str, int] = {}
    for launch in entry.launches:
        n = seen[launch.kernel] = seen.get(launch.kernel, -1) + 1
        if launch.kernel not in resources:
            resources[launch.kernel] = _resources(ptx, launch.kernel, hw)
        record = traced if isinstance(traced, str) else _nth(traced, launch.kernel, n)
        res, sass = resources[launch.kernel]
        out.append(_report(launch, res, record, hw, sass, _banks(source, launch)))
    return out


def _banks(source: str, launch: "Launch") -> tuple[BankAccess, ...] | str:
    block = _dims(launch.block)
    if block is None:
        return f"the block {launch.block} is not a constant"
    try:
        return bank_conflicts(source, launch.kernel, block)
    except SyntaxError as e:
        return f"the module does not parse ({e})"


def _ptx(source: str, hw: HardwareProfile) -> dict | str:
    try:
        return ptxmod.ptx_of(source, hw.cc)
    except MeasureError as e:
        return f"no PTX: {e}"


def _trace(source: str, entry: "Entry", blocks: Sequence, hw: HardwareProfile) -> list[dict] | str:
    try:
        return trace_launches(source, entry.host, entry.arg_types, blocks, hw.warp_size)
    except MeasureError as e:
        return f"not traced: {e}"


def _nth(records: list[dict], kernel: str, n: int) -> dict | str:
    mine = [r for r in records if r["kernel"] == kernel]
    return mine[n] if n < len(mine) else f"the host function made no launch {n} of {kernel}"


def _resources(ptx: dict | str, kernel: str, hw: HardwareProfile) -> tuple[ptxmod.Resources | str,
                                                                          sassmod.SassSummary | str]:
    """ptxas's resources of one kernel and the summary of its SASS (each a reason when missing)."""
    if isinstance(ptx, str):
        return ptx, ptx
    if kernel in ptx["errors"]:
        return (f"no PTX: {ptx['errors'][kernel]}",) * 2
    if kernel not in ptx["ptx"]:
        return (f"no @cuda.jit(\"signature\") kernel {kernel} in the module",) * 2
    arch = ptxmod.arch_of(hw.cc)
    try:
        res, cubin = ptxmod.assemble(ptx["ptx"][kernel], arch)
    except MeasureError as e:
        return str(e), str(e)
    try:
        return res, sassmod.sass_summary(cubin, ptx["ptx"][kernel], arch)
    except MeasureError as e:
        return res, str(e)


def _dims(dims: tuple[str, ...]) -> tuple[int, ...] | None:
    try:
        return tuple(int(d) for d in dims)
    except ValueError:
        return None


def _allocated(regs: int, hw: HardwareProfile) -> int:
    """Registers a thread is given: a warp's are allocated in units of reg_alloc_unit (256: 8 a thread)."""
    per_thread = max(1, hw.reg_alloc_unit // hw.warp_size)
    return -(-regs // per_thread) * per_thread


def _report(launch: "Launch", res: ptxmod.Resources | str, record: dict | str, hw: HardwareProfile,
            sass: sassmod.SassSummary | str | None = None,
            banks: tuple[BankAccess, ...] | str | None = None) -> KernelReport:
    """One launch's report; `sass` and `banks` None: not asked for (no field, no reason)."""
    unmeasured, errors = [], []
    grid, block = _dims(launch.grid), _dims(launch.block)
    if grid is None and isinstance(record, dict) and "grid" in record:
        grid = tuple(int(n) for n in record["grid"])    # a run-time grid (--dynamic): as the traced call launched it
    threads = blocks = None
    if grid is None or block is None:
        unmeasured.append(("launch", f"the launch's grid {launch.grid} and block {launch.block} are not all constants"))
    else:
        threads, blocks = math.prod(block), math.prod(grid)
    fields: dict = {}
    if isinstance(res, str):
        unmeasured.append(("resources", res))
        unmeasured.append(("occupancy", "needs the registers and shared memory ptxas reports"))
    else:
        fields.update(registers=res.registers, stack_frame_bytes=res.stack_frame_bytes, local_bytes=res.lmem_bytes,
                      spill_store_bytes=res.spill_store_bytes, spill_load_bytes=res.spill_load_bytes,
                      smem_bytes=res.smem_bytes, barriers=res.barriers, shuffles=res.shuffles,
                      mma=res.mma)
        if threads is None:
            unmeasured.append(("occupancy", "needs a constant block size"))
        else:
            try:
                o = occ.occupancy(res.registers, res.smem_bytes, threads, hw, barriers=res.barriers, blocks=blocks)
                fields.update(blocks_per_sm=o.blocks_per_sm, occupancy=o.occupancy, limited_by=o.limited_by,
                              waves=o.waves)
                if not o.blocks_per_sm:
                    unmeasured.append(("waves", f"a block does not fit on an SM ({', '.join(o.limited_by)})"))
                    errors.append(f"does not launch: a block of {threads} threads at {res.registers} registers "
                                  f"(allocated {_allocated(res.registers, hw)} a thread) and {res.smem_bytes} bytes "
                                  f"of shared memory fits no SM (limited by {', '.join(o.limited_by)})")
            except occ.OccupancyError as e:
                unmeasured.append(("occupancy", str(e)))
    if isinstance(record, str):
        unmeasured.append(("coalescing", record))
    elif "error" in record:
        unmeasured.append(("coalescing", record["error"]))
    else:
        fields["coalescing"] = _coalescing(record)
    if isinstance(sass, str):
        unmeasured.append(("sass", sass))
    elif sass is not None:
        fields["sass"] = sass
    if isinstance(banks, str):
        unmeasured.append(("bank_conflicts", banks))
    elif banks is not None:
        fields["bank_conflicts"] = banks
    return KernelReport(launch.kernel, launch.kind, launch.group, grid, block, threads, blocks, **fields,
                        unmeasured=tuple(unmeasured), errors=tuple(errors))


def _coalescing(record: dict) -> Coalescing:
    sites = tuple(AccessSite(s["line"], s["expr"], s["kind"], s["array"], s["requests"], s["lanes"] / s["requests"],
                             s["sectors"] / s["requests"], s["ideal_sectors"] / s["requests"],
                             s["ideal_sectors"] / s["sectors"]) for s in record["sites"])
    return Coalescing(sites, blocks_traced=tuple(tuple(p) for p in record["blocks_traced"]),
                      verified=record["verified"], note=record["note"], **record["summary"])
