"""The cost model's shared parts: pure functions from ChainInfo, a kernel's ops and tiles, and a
hardware profile (hardware.py) to a KernelCost. It never touches IR; the planner asks it and
records the decisive numbers. `kernel_cost` counts what every template shares (FLOPs with
recomputation, global bytes with re-reads, the intermediates' footprint) and hands them to the
template's time model (templates.py: `Template.cost`), which ends in `finish_cost` (the
roofline) and `fitting_blocks` (occupancy). See docs/FUSION.md, "The cost model", and
docs/ARCHITECTURE.md, "GPU kernels: how a plan becomes CUDA".
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from .. import mathfns
from .analysis import ChainInfo, OpInfo, loop_correspondence
from .hardware import WARP, HardwareProfile
from .measured import Measured
from .templates import Config, ElementwiseConfig, template

CHEAP = ("fill", "pad")
# gpu execution constants (documented estimates, not datasheet numbers)
MEM_PARALLELISM = 4            # loads one thread keeps in flight (unrolled loops)
DEP_LATENCY = 4                # cycles between dependent FP32 ops of one warp
SCHEDULERS = 4                 # warp schedulers per SM
SECTOR = 32                    # bytes an L1 miss fetches
COALESCED = 0.9               # sector efficiency above which accesses count as coalesced
SMEM_RESERVED = 1024           # shared memory the driver reserves per block (sm_80 and later)
GEMM_REG_HEADROOM = 32   # contraction kernels: registers short of the limit at which ptxas starts to spill
COMBINE_CYCLES = 120           # a block-wide combine: warp shuffles, a shared-memory slot per warp, two barriers


@dataclass(frozen=True)
class Tiling:
    block: tuple[int, ...]
    thread: tuple[int, ...]
    mapped: tuple[int, ...]
    config: Config = ElementwiseConfig()   # the kernel's template and its own levels (plan/templates.py)


@dataclass(frozen=True)
class KernelCost:
    ops: tuple[int, ...]              # compute ops of the kernel
    flops: float                      # weighted FLOPs, recomputation included
    recompute_flops: float            # of which recomputation
    bytes_read: float                 # global memory (DRAM/HBM), first reads
    bytes_written: float
    bytes_cached: float               # re-reads served by L2 / the LLC
    bytes_spilled: float              # on-chip overflow and lost L1 reuse, to L2 or global memory
    bytes_unfused: float              # the same ops as one kernel each
    flops_unfused: float
    kernels_unfused: int
    intermediates: int                # tensors that stay on chip
    onchip_bytes: int                 # their footprint per thread (gpu) / per tile (cpu)
    threads: int                      # per block (gpu) / chunks (cpu)
    blocks: int
    occupancy: float                  # gpu: resident warps / max warps per SM; cpu: busy cores / cores
    compute_s: float
    memory_s: float
    launch_s: float
    alloc_s: float
    recompute_s: float                # share of compute_s spent recomputing
    spill_s: float                    # share of memory_s spent on spills
    time_s: float
    bound: str                        # memory | compute | launch
    waves: float = 0.0                # gpu: blocks / (resident blocks per SM x SMs); < 1: an SM holds fewer than it could
    writes: int = 0                   # tensors the kernel writes (each an array argument of its launch)

    @property
    def bytes(self) -> float:
        return self.bytes_read + self.bytes_written

    @property
    def intensity(self) -> float:
        return self.flops / max(self.bytes, 1.0)

    @property
    def saved_bytes(self) -> float:
        return self.bytes_unfused - self.bytes

    def as_dict(self) -> dict:
        d = asdict(self)
        d["ops"] = list(self.ops)
        d["bytes"] = self.bytes
        d["intensity"] = self.intensity
        return d


# ---- FLOPs ----------------------------------------------------------------------------------

def op_flops(op: OpInfo, hw: HardwareProfile) -> float:
    """Weighted FLOPs of one op over its whole iteration space."""
    counts = op.flop_counts()
    if not counts:
        return 0.0
    calls = any(c in mathfns.CALLS for c in counts)      # a loop holding a call does not vectorise on a cpu
    per_point = 0.0
    for name, n in counts.items():
        w = hw.weight(name)
        if name not in mathfns.CALLS and name not in ("reduce", "mac") and calls and op.kind == "elementwise":
            w = max(w, hw.weight("scalar"))        # a loop with calls does not vectorise
        per_point += n * w
    return per_point * op.points


# ---- bytes ----------------------------------------------------------------------------------

def product(xs) -> int:
    n = 1
    for x in xs:
        n *= max(1, x)
    return n


def _external_reads(info: ChainInfo, members: frozenset[int]) -> dict[str, tuple[int, int, int]]:
    """Tensors a kernel reads from global memory: key -> (bytes, reading op, operand index; None
    for a tensor read at computed indices, at most the reader's points' worth)."""
    out: dict[str, tuple[int, int, int]] = {}
    for m in sorted(members):
        o = info.op(m)
        if o.kind == "fill":
            continue
        for k, key in enumerate(o.operand_keys):
            p = o.producers[k]
            if (p is not None and p in members) or not key.startswith(("arg", "%")) or not o.operand_shapes[k]:
                continue
            if key not in out:
                out[key] = (o.operand_bytes(k), m, k)
        for key, nbytes, _ in o.indirect:              # read at computed indices (operand index None)
            if key.startswith(("arg", "%")) and key not in out:
                out[key] = (nbytes, m, None)
    return out


def _writes(info: ChainInfo, members: frozenset[int], unwritten=frozenset()) -> list[int]:
    """Ops of the kernel whose results reach global memory (used outside it or returned), but
    for those in `unwritten`: computed here for the kernel itself, while other kernels compute
    them too or one writes them (planner.py: Kernel.recomputed)."""
    return [m for m in sorted(members) if info.op(m).is_compute and info.op(m).kind != "pad" and m not in unwritten
            and any(u == -1 or u not in members for u in info.op(m).users)]


def kernel_bytes(info: ChainInfo, members, unwritten=frozenset()) -> float:
    """Global bytes of a kernel, first reads and writes only (no tiling effects)."""
    members = frozenset(members)
    return (sum(b for b, _, _ in _external_reads(info, members).values())
            + sum(info.op(m).result_bytes for m in _writes(info, members, unwritten)))


def with_cheap_producers(info: ChainInfo, op: int) -> frozenset[int]:
    """An op and the fills and pads that travel with it."""
    return frozenset({op} | {p for p in info.op(op).producers if p is not None and info.op(p).kind in CHEAP})


def unfused_kernels(info: ChainInfo, members) -> list[frozenset[int]]:
    """The kernels the same ops make when nothing fuses (one per compute op, fills/pads along)."""
    return [with_cheap_producers(info, m) for m in sorted(members)
            if info.op(m).is_compute and info.op(m).kind not in CHEAP]


# ---- one kernel ------------------------------------------------------------------------------

def kernel_cost(info: ChainInfo, members, root: int, tiling: Tiling, hw: HardwareProfile,
                _unfused: tuple[float, float, int] | None = None, measured: Measured | None = None,
                unwritten=frozenset()) -> KernelCost:
    """Predicted numbers of one kernel: `members` (ops), `root`, `tiling` on `hw`; with the
    kernel report's `measured` resources instead of their estimates (gpu); `unwritten`: members
    the kernel computes for itself only (it does not write them, though others use them)."""
    members = frozenset(members)
    r = info.op(root)
    corr = loop_correspondence(info, root, members, pads=True)
    gpu = hw.kind == "gpu"
    inner = tiling.thread if gpu and any(tiling.thread) else tiling.block
    inner_tiles = {l: r.loops[l] // t for l, t in enumerate(inner) if t}
    block_tiles = {l: r.loops[l] // t for l, t in enumerate(tiling.block) if t}

    # FLOPs, with recomputation of producers that do not move with a tiled loop
    flops = recompute = 0.0
    compute_ops = [m for m in sorted(members) if info.op(m).is_compute and info.op(m).kind not in CHEAP]
    for m in compute_ops:
        f = op_flops(info.op(m), hw)
        factor = 1 if m == root else product(n for l, n in inner_tiles.items() if not corr.get(m, {}).get(l))
        flops += f * factor
        recompute += f * (factor - 1)

    # global bytes: first reads, re-reads by tiles that do not split a tensor, writes
    reads = _external_reads(info, members)
    first = cached = uncached_rereads = 0.0
    for key, (nbytes, m, k) in reads.items():
        first += nbytes
        if k is None:                          # gathered: each tile reads what its indices name
            continue
        varies = _operand_varies(info.op(m), k, corr.get(m, {}))
        again = product(n for l, n in block_tiles.items() if l not in varies) - 1
        if again:
            if nbytes <= hw.l2_bytes:
                cached += nbytes * again
            else:
                uncached_rereads += nbytes * again
    written = _writes(info, members, unwritten)
    wbytes = float(sum(info.op(m).result_bytes for m in written))
    intermediates = [m for m in compute_ops if m != root and m not in written]
    footprint = [(_slice_elems(info.op(m), corr.get(m, {}), inner), info.op(m)) for m in intermediates]

    if _unfused is None:
        parts = unfused_kernels(info, members)
        _unfused = (sum(kernel_bytes(info, p) for p in parts),
                    sum(op_flops(info.op(m), hw) for m in compute_ops), len(parts))
    common = dict(ops=tuple(compute_ops), flops=flops, recompute_flops=recompute, bytes_read=first + uncached_rereads,
                  bytes_written=wbytes, bytes_cached=cached, bytes_unfused=_unfused[0], flops_unfused=_unfused[1],
                  kernels_unfused=_unfused[2], intermediates=len(intermediates), writes=len(written))
    return template(tiling.config).stage("cost")(info, members, root, tiling, hw, common, footprint, reads, corr,
                                                 measured)


# each template's cost (plan/templates.py: TEMPLATES), all called alike


def _operand_varies(op: OpInfo, k: int, corr_m: dict[int, frozenset]) -> set[int]:
    """Root loops along which operand k of `op` takes different slices."""
    if k >= len(op.operand_loops):
        return set(corr_m)
    used = frozenset().union(*op.operand_loops[k]) if op.operand_loops[k] else frozenset()
    return {l for l, mine in corr_m.items() if mine & used}


def _slice_elems(op: OpInfo, corr_m: dict[int, frozenset], inner: tuple[int, ...]) -> int:
    """Elements of op's result one innermost tile computes (a whole dim unless a tiled root loop
    moves along it)."""
    n = 1
    for t, dim in enumerate(op.result_shape):
        loops = op.result_loops[t] if t < len(op.result_loops) else frozenset()
        tiles = [inner[l] for l, mine in corr_m.items() if l < len(inner) and inner[l] and mine & loops]
        n *= min(dim, min(tiles)) if tiles else max(1, dim)
    return n * max(1, len(op.result_shapes))


def _time(compute_s: float, memory_s: float, hw: HardwareProfile) -> float:
    return max(compute_s, memory_s) if hw.overlap else compute_s + memory_s


def finish_cost(common: dict, hw: HardwareProfile, compute_s: float, memory_s: float, launch_s: float,
                alloc_s: float, **kw) -> KernelCost:
    body = _time(compute_s, memory_s, hw)
    # first touches of freshly mapped buffers are memory traffic too
    bound = ("launch" if launch_s > body + alloc_s else
             "compute" if compute_s >= memory_s + alloc_s else "memory")
    return KernelCost(**common, compute_s=compute_s, memory_s=memory_s, launch_s=launch_s, alloc_s=alloc_s,
                      time_s=body + launch_s + alloc_s, bound=bound, **kw)


def allocated_registers(hw: HardwareProfile, regs: int) -> int:
    """The registers a thread of `regs` is given: a warp's are allocated in units of
    reg_alloc_unit (256 on every part since cc 5.0: a thread's count rounds up to 8)."""
    per_thread = max(1, hw.reg_alloc_unit // WARP)
    return -(-regs // per_thread) * per_thread


def bounded_registers(hw: HardwareProfile, threads: int) -> int:
    """The most registers a thread of a block of `threads` can have: the device's limit per
    thread, or less where the block's launch bounds (every emitted kernel's `_bounds(threads)`)
    leave 65,536 / threads, rounded down to the allocation unit."""
    per_thread = max(1, hw.reg_alloc_unit // WARP)
    return min(hw.regs_per_thread, hw.regs_per_unit // max(1, threads) // per_thread * per_thread)


def issue_per_step(math: float, modelled: float, outside: float, measured: Measured | None) -> float:
    """Warp instructions per step of a template's main loop (a K step, a key step), `math` of
    them math: the SASS's when the kernel report measured the kernel's hot loop (its instructions
    per iteration times the iterations a step's math takes; when the hot loop holds a part of a
    step, the compute loop inside a K step, the model's `outside` instructions of the step are
    added), else the model's `modelled`."""
    if measured is None or not measured.loop_math or not measured.loop_instructions or math <= 0:
        return modelled
    iterations = math / measured.loop_math
    return iterations * measured.loop_instructions + (outside if iterations > 1.5 else 0.0)


def in_flight_loads(modelled: float, measured: Measured | None) -> float:
    """Global loads a thread keeps in flight (what hides memory latency): the SASS's fewest over
    the kernel's phases when the kernel report measured them, else the model's."""
    if measured is None or not measured.loads_in_flight:
        return modelled
    return float(measured.loads_in_flight)


def latency_bandwidth(hw: HardwareProfile, threads_per_unit: float, bytes_in_flight: float) -> float:
    """The bandwidth a kernel can draw when each of its threads keeps `bytes_in_flight` bytes of
    global loads outstanding (Little's law over the memory latency, every SM alike)."""
    return hw.units * threads_per_unit * bytes_in_flight / hw.mem_latency_s


def fitting_blocks(hw: HardwareProfile, warps: int, regs: int, smem: int) -> int:
    """Blocks of `warps` warps, `regs` registers per thread and `smem` shared bytes (0: none)
    that one SM holds at once: the planner's estimate of occupancy, by threads, registers (in
    their allocation unit), shared memory and the block limit; 0 when a block does not fit. The
    kernel report measures the real one (report/occupancy.py: NVIDIA's rules, every allocation
    granularity included)."""
    return min(hw.max_blocks_per_unit, hw.max_threads_per_unit // (warps * WARP),
               hw.regs_per_unit // max(1, allocated_registers(hw, regs) * warps * WARP),
               hw.onchip_per_unit // (smem + SMEM_RESERVED) if smem else hw.max_blocks_per_unit)


def warp_occupancy(hw: HardwareProfile, blocks: int, warps: int) -> float:
    """Resident warps of `blocks` blocks of `warps` warps over an SM's warp slots (may pass 1)."""
    return blocks * warps * WARP / hw.max_threads_per_unit


# ---- cpu kernels' chunks and library calls (the planner's and cost_cpu.py's) ------------------


def cpu_chunks(info: ChainInfo, root: int, block, mapped) -> int:
    """Iterations of a cpu kernel's chunk loop (its prange) at these block tiles."""
    r = info.op(root)
    return product(r.loops[l] // block[l] for l in mapped if block[l]) if mapped else 1


def hoisted_matmuls(info: ChainInfo, members, root: int, mapped, chunks: int, cores: int) -> list[int]:
    """Matmuls of a cpu kernel the emitter calls once, whole (split into a slice of C per
    worker: emit/cpu.py _gemm_chunks), before its chunk loop (transforms/cpu_library_calls.py:
    hoist_whole_contractions): those that could be (hoistable_matmuls), where the loop has fewer chunks than cores, so that calls per chunk
    would leave cores idle. With a chunk for every core, each chunk calls BLAS on one thread and
    runs the rest of the kernel on its rows while they are in cache (docs/ARCHITECTURE.md: a
    product's epilogue runs on its chunk; bench/blas_epilogue.py compares the two forms)."""
    return hoistable_matmuls(info, members, root, mapped) if chunks < cores else []


def hoistable_matmuls(info: ChainInfo, members, root: int, mapped) -> list[int]:
    """Matmuls of a cpu kernel that one whole call before its chunk loop can compute:
    zero-filled (their init a fill), both inputs from outside the kernel, rows split by the
    chunk loop (`mapped`, the kernel's mapped root loops)."""
    if not mapped:
        return []
    corr = loop_correspondence(info, root, members)
    out = []
    for m in members:
        o = info.op(m)
        if o.name != "linalg.matmul" or len(o.producers) < 3:
            continue
        a, b, init = o.producers[:3]
        if (init is None or info.op(init).kind != "fill" or not _from_outside(info, a, m, members)
                or not _from_outside(info, b, m, members)):
            continue
        if corr.get(m, {}).get(mapped[0]) == frozenset({0}):          # its rows are the split loop
            out.append(m)
    return out


def _from_outside(info: ChainInfo, p: int | None, reader: int, members) -> bool:
    """A matmul operand that exists before the kernel's loop: made outside the kernel, or a copy
    of such a tensor that only the matmul reads (a transpose, which the cpu emitter folds into
    BLAS's transpose flag: cpu_library_calls.fold_transposed_operands)."""
    if p is None or p not in members:
        return True
    o = info.op(p)
    return (o.label == "copy" and o.users == (reader,) and o.n_inputs == 1
            and (o.producers[0] is None or o.producers[0] not in members))


# ---- chains and the seeds' arithmetic ----------------------------------------------------------

def total_time(costs) -> float:
    return sum(c.time_s for c in costs)


def speedup(unfused, fused) -> float:
    """Predicted speedup of a fused build over the unfused one (sums of kernel times)."""
    return total_time(unfused) / max(total_time(fused), 1e-30)


def roofline_time(flops: float, nbytes: float, hw: HardwareProfile, launches: int = 0) -> float:
    """The plain roofline of a kernel that keeps the whole machine busy."""
    return _time(flops / hw.peak_flops, nbytes / hw.bandwidth, hw) + launches * hw.launch_s


def launch_savings(kernels_before: int, kernels_after: int, hw: HardwareProfile) -> float:
    return (kernels_before - kernels_after) * hw.launch_s


def big_transfers(info: ChainInfo, kernels, share: float = 0.5, unwritten=()) -> int:
    """Global reads and writes of intermediate-sized tensors (at least `share` of the largest
    intermediate; of the largest tensor when there is none) over the given kernels (`unwritten`:
    per kernel, the members it does not write)."""
    sizes = [o.result_bytes for o in info.ops if o.is_compute and o.kind not in CHEAP and -1 not in o.users]
    if not sizes:
        sizes = [o.result_bytes for o in info.ops if o.is_compute]
    limit = share * max(sizes, default=0)
    n = 0
    for k, members in enumerate(kernels):
        members = frozenset(members)
        n += sum(1 for b, _, _ in _external_reads(info, members).values() if b >= limit)
        n += sum(1 for m in _writes(info, members, unwritten[k] if unwritten else frozenset())
                 if info.op(m).result_bytes >= limit)
    return n
