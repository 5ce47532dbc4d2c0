"""The cost model: pure functions from ChainInfo, a kernel's ops and tiles, and a hardware profile
(hardware.py) to predicted numbers. It never touches IR; the planner (planner.py) asks it and
records the decisive numbers.

Per kernel:
- FLOPs: every op's body per point, transcendentals weighted (profile weights), times the number
  of times tiling recomputes it (a producer that does not move with a tiled loop of the root is
  recomputed once per tile along that loop);
- global bytes: each tensor read from outside the kernel once, plus its re-reads by tiles that do
  not split it (served by L2 / the LLC when it fits), and each result used outside the kernel
  written once; the same ops as one kernel each give the unfused bytes;
- on chip: the intermediates that never reach global memory and their footprint per thread (gpu)
  or per tile (cpu); past the on-chip budget they spill, and on a GPU the row-per-thread (strided)
  reads lose their L1 reuse;
- time: roofline max(FLOPs / peak, bytes / bandwidth) with the peak and the bandwidth scaled by
  how much of the machine the grid keeps busy (occupancy from threads, registers and blocks per
  SM; chunks per core on a CPU), plus the launch and the allocation of global buffers.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from .. import mathfns
from .analysis import ChainInfo, OpInfo, loop_correspondence
from .measured import Measured
from .attention import THREADS_X, THREADS_Y, attention_kernel, attention_registers, shared_bytes
from .gemm import MMA_K, gemm_kernel, gemm_registers, gemm_shape, mma_kind
from .rows import RowKernel, row_kernel
from .conv import choose as choose_conv
from .hardware import WARP, HardwareProfile
from .templates import Config, ElementwiseConfig, template

CHEAP = ("fill", "pad")
# gpu execution constants (documented estimates, not datasheet numbers)
BASE_REGS = 32                 # registers a thread needs besides its private arrays
REG_ARRAY_ELEMS = 16           # private arrays up to this size live in registers (unrolled)
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

def _prod(xs) -> int:
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
    them too or one writes them (planner.py: Group.recomputed)."""
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
        factor = 1 if m == root else _prod(n for l, n in inner_tiles.items() if not corr.get(m, {}).get(l))
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
        again = _prod(n for l, n in block_tiles.items() if l not in varies) - 1
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
def loop_time(info, members, root, tiling, hw, common, footprint, reads, corr, measured):
    if hw.kind == "gpu":
        return _gpu_time(info, members, root, tiling, hw, common, footprint, reads, corr, measured)
    return _cpu_time(info, members, root, tiling, hw, common, footprint, reads)


def conv_time(info, members, root, tiling, hw, common, footprint, reads, corr, measured):
    return _cpu_time(info, members, root, tiling, hw, common, footprint, reads, tiling.config.algorithm)


def row_time(info, members, root, tiling, hw, common, footprint, reads, corr, measured):
    if hw.kind == "gpu":
        return _gpu_row_time(info, members, root, tiling, hw, common, reads, corr, measured)
    return _cpu_time(info, members, root, tiling, hw, common, footprint, reads)


def gemm_time(info, members, root, tiling, hw, common, footprint, reads, corr, measured):
    if hw.kind == "gpu":
        return _gpu_gemm_time(info, members, root, tiling, hw, common, reads, corr, measured)
    return _cpu_time(info, members, root, tiling, hw, common, footprint, reads)


def attention_time(info, members, root, tiling, hw, common, footprint, reads, corr, measured):
    return _attention_time(info, members, tiling, hw, common, measured)


def scan_time(info, members, root, tiling, hw, common, footprint, reads, corr, measured):
    return _scan_time(info, root, tiling, hw, common)


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


def _finish(common: dict, hw: HardwareProfile, compute_s: float, memory_s: float, launch_s: float,
            alloc_s: float, **kw) -> KernelCost:
    body = _time(compute_s, memory_s, hw)
    # first touches of freshly mapped buffers are memory traffic too
    bound = ("launch" if launch_s > body + alloc_s else
             "compute" if compute_s >= memory_s + alloc_s else "memory")
    return KernelCost(**common, compute_s=compute_s, memory_s=memory_s, launch_s=launch_s, alloc_s=alloc_s,
                      time_s=body + launch_s + alloc_s, bound=bound, **kw)


# ---- gpu ------------------------------------------------------------------------------------

def _gpu_time(info, members, root, tiling: Tiling, hw: HardwareProfile, common, footprint, reads, corr,
              measured: Measured | None = None):
    """Throughput (roofline over the whole device) or latency (what one thread does in sequence,
    times the waves of threads), whichever is longer: row-per-thread kernels on small problems
    are latency-bound, large ones bandwidth- or compute-bound."""
    r = info.op(root)
    threads = _prod(tiling.block[l] // (tiling.thread[l] or tiling.block[l]) if tiling.thread else 1
                    for l in tiling.mapped) if tiling.mapped else 1
    blocks = _prod(r.loops[l] // tiling.block[l] for l in tiling.mapped if tiling.block[l]) if tiling.mapped else 1
    warps = math.ceil(threads / WARP)
    reg_elems = sum(n for n, _ in footprint if n <= REG_ARRAY_ELEMS)
    local = sum(n * o.elem_bytes for n, o in footprint if n > REG_ARRAY_ELEMS)
    regs = min(hw.regs_per_thread, BASE_REGS + reg_elems)
    local += max(0, BASE_REGS + reg_elems - hw.regs_per_thread) * 4             # register spills
    smem = 0
    if measured is not None:
        regs, local, smem = measured.registers, measured.local_bytes + measured.spill_bytes, measured.shared_bytes
    per_sm = max(1, min(hw.max_blocks_per_unit, hw.max_threads_per_unit // (warps * WARP),
                        hw.regs_per_unit // max(1, regs * warps * WARP),
                        hw.onchip_per_unit // max(1, smem + SMEM_RESERVED) if smem else hw.max_blocks_per_unit))
    resident_blocks = min(blocks, per_sm * hw.units)
    waves = math.ceil(blocks / (per_sm * hw.units))
    occupancy = per_sm * warps * WARP / hw.max_threads_per_unit
    threads_per_sm = resident_blocks * threads / min(hw.units, resident_blocks)
    total_threads = blocks * threads
    lanes = threads / (warps * WARP)

    # on chip: private arrays per SM against shared memory/L1; what does not fit spills, and the
    # row-per-thread (strided) reads that needed L1 to reuse their sectors lose that reuse
    local_sm = local * threads_per_sm
    onchip = hw.onchip_per_unit
    spill = 0.0
    if local_sm > onchip:
        spill = (1 - onchip / local_sm) * local * total_threads * 2                 # written, read back
    if measured is not None and measured.coalescing is not None:    # traced, not guessed
        strided = set(reads) if measured.coalescing < COALESCED else set()
    else:
        strided = {key for key, (b, m, k) in reads.items() if _strided(info, m, k, corr.get(m, {}), tiling)}
    l1_need = local_sm + len(strided) * threads_per_sm * SECTOR
    lost_frac = min(1.0, (l1_need - onchip) / l1_need) if strided and l1_need > onchip else 0.0
    lost = lost_frac * sum(reads[k][0] for k in strided) * (SECTOR / 4 - 1)
    spill_bytes = spill + lost
    spill_bw = hw.cache_bandwidth if spill <= hw.l2_bytes and lost == 0 else hw.bandwidth

    # latency: the loads one thread waits for in sequence (a row walked by one thread shares each
    # 32-byte sector among 8 floats while L1 holds it), a few in flight at a time; stores are
    # posted and do not stall it
    per_thread = 0.0
    for key, (b, m, k) in reads.items():
        per_elem = info.op(m).operand_elem_bytes[k] if k is not None else info.op(m).elem_bytes
        walk = key in strided and lost_frac < 1
        per_thread += b / total_threads / (SECTOR * (1 - lost_frac) + per_elem * lost_frac if walk else per_elem)
    per_thread += spill / 2 / total_threads / 4                                   # reading spills back
    latency_mem = waves * per_thread * hw.mem_latency_s / MEM_PARALLELISM
    # a thread's dependent ops issue every DEP_LATENCY cycles unless other warps of its
    # scheduler fill the gaps
    warps_per_scheduler = resident_blocks * warps / min(hw.units, resident_blocks) / SCHEDULERS
    cycles_per_op = max(1.0, DEP_LATENCY / max(1.0, warps_per_scheduler))
    latency_cmp = waves * common["flops"] / total_threads * cycles_per_op / hw.clock_hz

    eb = info.op(root).elem_bytes
    share = min(1.0, blocks / hw.units)            # a grid of fewer blocks than SMs leaves SMs idle
    peak = hw.peak(eb) * lanes * share
    io = common["bytes_read"] + common["bytes_written"]
    bw = hw.cache_bandwidth if io + spill_bytes <= hw.l2_bytes else hw.bandwidth   # timed again: in L2
    throughput = (io / bw + common["bytes_cached"] / hw.cache_bandwidth + spill_bytes / spill_bw) / share
    compute_s = max(common["flops"] / peak, latency_cmp)
    # a contraction outside a contraction kernel (plan/gemm.py) is a dot product per thread: every
    # multiply-add loads both operands (from L1 or L2; nothing is reused from registers)
    macs = [(info.op(m).points, max(info.op(m).operand_elem_bytes[:2] or (4,))) for m in members
            if info.op(m).kind == "contraction"]
    if macs:
        l1_bw = hw.units * 128 * hw.clock_hz
        compute_s = max(compute_s, sum(n * 2 * b for n, b in macs) / (l1_bw * share))
    recompute_s = compute_s * common["recompute_flops"] / max(common["flops"], 1e-30)
    memory_s = max(throughput, latency_mem)
    spill_s = memory_s * (spill_bytes / spill_bw) / max(throughput, 1e-30) if spill_bytes else 0.0
    alloc_s = hw.alloc_s * common["writes"]
    return _finish(dict(common, bytes_spilled=spill_bytes, onchip_bytes=int(local + reg_elems * 4)), hw,
                   compute_s, memory_s, hw.launch_s, alloc_s, threads=threads, blocks=blocks,
                   occupancy=min(1.0, occupancy), recompute_s=recompute_s, spill_s=spill_s)


def _gpu_row_time(info, members, root, tiling: Tiling, hw: HardwareProfile, common, reads, corr,
                  measured: Measured | None = None):
    """A row kernel (plan/rows.py): rows to blocks, each row split cyclically over T threads.

    Each reduction is a phase (every thread accumulates J = N/T elements, then the block
    combines the T partials: warp shuffles and a shared-memory slot per warp), and so is the
    root when it walks the row; an elementwise producer along the row is computed again in each
    phase that needs it (nothing row-sized is kept per thread). A tensor read along the row is
    read from global memory in the first phase that needs it and again in the later ones, from
    L1 when the rows of the resident blocks fit there (else from L2, else from memory)."""
    rk = row_kernel(info, members, root)
    if isinstance(rk, str):
        raise ValueError(f"not a row kernel: {rk}")
    T = tiling.config.threads
    R = tiling.block[tiling.mapped[-1]] if tiling.mapped else 1
    threads = T * R
    r = info.op(root)
    blocks = _prod(r.loops[l] // tiling.block[l] for l in tiling.mapped) if tiling.mapped else 1
    J = rk.extent // T
    phases = _row_phases(info, members, root, rk)
    times = {m: sum(1 for closure in phases.values() if m in closure) for m in members}

    # FLOPs: an elementwise op along the row once per phase that uses it
    flops = recompute = 0.0
    for m in common["ops"]:
        f = op_flops(info.op(m), hw)
        n = max(1, times.get(m, 1)) if rk.loop_of(m) is not None and info.op(m).kind == "elementwise" else 1
        flops += f * n
        recompute += f * (n - 1)
    flops += len(rk.reductions) * _prod(r.loops[l] for l in tiling.mapped) * T      # the combines

    # on chip: per reduction T partials, one slot per warp and the row's result, per row of the block
    warps = math.ceil(threads / WARP)
    smem = sum(R * (T + math.ceil(T / WARP) + 1) * max(4, info.op(m).elem_bytes) for m in rk.reductions)
    regs = row_registers(J, R)
    coalesced = rk.coalesced
    if measured is not None:
        regs, smem = measured.registers, measured.shared_bytes
        if measured.coalescing is not None:
            coalesced = measured.coalescing >= COALESCED
    per_sm = max(1, min(hw.max_blocks_per_unit, hw.max_threads_per_unit // (warps * WARP),
                        hw.regs_per_unit // max(1, regs * warps * WARP),
                        hw.onchip_per_unit // max(1, smem + SMEM_RESERVED) if smem else hw.max_blocks_per_unit))
    resident = min(blocks, per_sm * hw.units)
    waves = math.ceil(blocks / (per_sm * hw.units))
    occupancy = per_sm * warps * WARP / hw.max_threads_per_unit

    # re-reads of the row by later phases: from L1 when the resident rows fit beside shared memory
    row_inputs = {key for key in rk.inputs_along_row if key in reads}
    row_bytes = sum(reads[k][0] for k in row_inputs) / max(1, blocks)              # one block's rows
    blocks_per_sm = resident / min(hw.units, max(1, resident))
    l1_free = hw.onchip_per_unit - blocks_per_sm * smem
    readers = {k: {m for m in members if k in info.op(m).operand_keys[:info.op(m).n_inputs]} for k in row_inputs}
    passes = {k: sum(1 for closure in phases.values() if closure & readers[k]) for k in row_inputs}
    again = sum(reads[k][0] * max(0, passes[k] - 1) for k in row_inputs)
    l1_hit = row_bytes * blocks_per_sm <= 0.5 * l1_free
    l1 = again if l1_hit else 0.0
    cached = common["bytes_cached"] + (again if not l1_hit and again <= hw.l2_bytes else 0.0)
    dram = common["bytes_read"] + (again if not (l1_hit or again <= hw.l2_bytes) else 0.0) + common["bytes_written"]
    if not coalesced:                         # a warp's lanes a row apart: a sector per lane
        dram *= SECTOR / 4
    l1_bw = hw.units * 128 * hw.clock_hz
    bw = hw.cache_bandwidth if dram <= hw.l2_bytes else hw.bandwidth             # timed again: in L2
    share = min(1.0, blocks / hw.units)            # a grid of fewer blocks than SMs leaves SMs idle
    throughput = (dram / bw + cached / hw.cache_bandwidth + l1 / l1_bw) / share

    # latency: per thread, J loads per row tensor per phase (the first from memory, the others
    # from L1), a few in flight; each combine a handful of shuffles and two barriers
    loads_first = J * len(row_inputs)
    loads_again = J * sum(max(0, n - 1) for n in passes.values())
    l1_latency = 0.15 * hw.mem_latency_s
    per_thread = (loads_first * hw.mem_latency_s + loads_again * (l1_latency if l1_hit else hw.mem_latency_s)) / MEM_PARALLELISM
    per_thread += len(rk.reductions) * (COMBINE_CYCLES + math.log2(max(2, T)) * DEP_LATENCY) / hw.clock_hz
    latency = waves * per_thread
    warps_per_scheduler = resident * warps / min(hw.units, max(1, resident)) / SCHEDULERS
    cycles_per_op = max(1.0, DEP_LATENCY / max(1.0, warps_per_scheduler))
    latency_cmp = waves * flops / max(1, blocks * threads) * cycles_per_op / hw.clock_hz

    lanes = threads / (warps * WARP)
    compute_s = max(flops / (hw.peak(r.elem_bytes) * lanes * share), latency_cmp)
    memory_s = max(throughput, latency)
    alloc_s = hw.alloc_s * common["writes"]
    return _finish(dict(common, flops=flops, recompute_flops=recompute, bytes_read=dram - common["bytes_written"],
                        bytes_cached=cached + l1, bytes_spilled=0.0, onchip_bytes=int(smem)), hw,
                   compute_s, memory_s, hw.launch_s, alloc_s, threads=threads, blocks=blocks,
                   occupancy=min(1.0, occupancy), recompute_s=compute_s * recompute / max(flops, 1e-30), spill_s=0.0)


def _scan_time(info, root: int, tiling: Tiling, hw: HardwareProfile, common):
    """A scan kernel (cumsum, cumprod): rows are independent, each walked along its axis once.
    gpu: a block of T threads per row takes the row in chunks of T elements: per chunk one
    load, a block-wide scan (warp shuffles, a shared slot per warp, two barriers) and one store,
    so a block's time is its chunks' latencies; rows fill the SMs in waves. cpu: a prange over
    the rows, each a sequential loop (a loop-carried dependence: no vectorising)."""
    r = info.op(root)
    n = r.loops[r.scan_axis]
    rows = max(1, r.points // max(1, n))
    io = common["bytes_read"] + common["bytes_written"]
    if hw.kind == "gpu":
        T = tiling.config.threads
        warps = math.ceil(T / WARP)
        per_sm = max(1, min(hw.max_blocks_per_unit, hw.max_threads_per_unit // (warps * WARP)))
        along_rows = r.scan_axis == len(r.loops) - 2
        blocks = rows if along_rows else math.ceil(rows / T)
        waves = blocks / (per_sm * hw.units)
        if along_rows:                     # per chunk: a load, a block scan, a store
            steps, per_step = math.ceil(n / T), hw.mem_latency_s + 2 * COMBINE_CYCLES / hw.clock_hz
        else:                              # a thread per row: n dependent adds, loads in flight ahead
            steps, per_step = n, hw.mem_latency_s / MEM_PARALLELISM + DEP_LATENCY / hw.clock_hz
        latency = math.ceil(waves) * steps * per_step
        share = min(1.0, blocks * T / (hw.units * hw.max_threads_per_unit))
        memory_s = max(io / hw.bandwidth / max(share, 1e-9) * min(1.0, share * 4), latency)
        compute_s = common["flops"] / hw.peak(r.elem_bytes)
        occupancy = min(1.0, per_sm * warps * WARP / hw.max_threads_per_unit)
        return _finish(dict(common, bytes_spilled=0.0, onchip_bytes=0), hw, compute_s, memory_s, hw.launch_s,
                       hw.alloc_s * common["writes"], threads=T,
                       blocks=blocks, occupancy=occupancy, recompute_s=0.0, spill_s=0.0, waves=waves)
    cores = hw.units
    busy = min(rows, cores)
    compute_s = common["flops"] * hw.weight("scalar") / (hw.peak(r.elem_bytes) / cores * busy) + hw.chunk_s
    memory_s = io / _cpu_bw(hw, busy, io <= hw.l2_bytes)
    return _finish(dict(common, bytes_spilled=0.0, onchip_bytes=0), hw, compute_s, memory_s, hw.launch_s, 0.0,
                   threads=busy, blocks=rows,
                   occupancy=busy / cores, recompute_s=0.0, spill_s=0.0)


def _attention_time(info, members, tiling: Tiling, hw: HardwareProfile, common, measured: Measured | None = None):
    """An attention kernel (plan/attention.py): per block of BQ queries, K and V in steps of BKV
    keys through shared memory (gpu) or the cache (cpu); the scores, their exponentials and the
    running max and sum never leave the chip.

    gpu: 16 x 8 threads; per key step a thread computes a (BQ/16) x (BKV/8) score tile from shared
    memory, the score function, its share of the row max (a combine through shared memory), the
    exponentials, and a (BQ/16) x (DV/8) slice of P · V, with four barriers. Priced like a
    contraction kernel: warp instructions per step at the SM's issue rates, the step's loads
    waited for unless other resident blocks fill the wait. Memory: Q, K, V and the outside
    operands once, K and V once more per block of queries (from L2 when they fit there).
    cpu: two BLAS-sized products per (query block, key step) at the cores' peak, the score
    function and the exponentials vectorised."""
    a = attention_kernel(info, members)
    if isinstance(a, str):
        raise ValueError(f"not an attention kernel: {a}")
    bq, bkv = tiling.config.block_q, tiling.config.block_kv
    nq = math.ceil(a.sq / bq)
    blocks = nq * a.batch
    steps = math.ceil(a.sk / bkv)
    eb = info.op(a.scores).operand_elem_bytes[0]
    kv_bytes = a.batch * a.sk * (a.d + a.dv) * eb
    rereads = kv_bytes * (nq - 1)
    score_flops = sum(op_flops(info.op(m), hw) for m in a.score_ops) / max(1, a.batch * a.sq * a.sk)
    macs = 2.0 * a.batch * a.sq * a.sk * (a.d + a.dv)
    io = common["bytes_read"] + common["bytes_written"]
    if hw.kind != "gpu":
        cores = hw.units
        busy = min(blocks, cores)
        rounds = math.ceil(blocks / cores)
        per_core = hw.peak(eb) / cores
        elementwise = a.batch * a.sq * a.sk * (score_flops + hw.weight("exp") + 6) * rounds * busy / blocks
        compute_s = (macs * rounds * busy / blocks) / (per_core * busy) * 1.6 + elementwise / (per_core * busy) \
            + blocks * steps * 4e-6 / busy + rounds * hw.chunk_s
        resident = kv_bytes <= hw.l2_bytes
        memory_s = io / _cpu_bw(hw, busy, resident) + rereads / hw.cache_bandwidth
        return _finish(dict(common, bytes_spilled=0.0, onchip_bytes=int((bq * bkv + bq * a.dv) * 4),
                            bytes_cached=float(rereads)), hw, compute_s, memory_s, hw.launch_s,
                       0.0, threads=blocks, blocks=blocks, occupancy=busy / cores, recompute_s=0.0, spill_s=0.0)
    T = THREADS_X * THREADS_Y
    warps = T // WARP
    rq, ck, cd = bq // THREADS_Y, bkv // THREADS_X, -(-a.dv // THREADS_X)
    regs = attention_registers(a, bq, bkv)
    smem = shared_bytes(a, bq, bkv)
    if measured is not None:             # the kernel report's ptxas figures
        regs, smem = measured.registers, measured.shared_bytes
    regs_alloc = math.ceil(min(regs, hw.regs_per_thread) / 8) * 8
    spilled = max(0, regs - (hw.regs_per_thread - GEMM_REG_HEADROOM))
    fit = min(hw.max_blocks_per_unit, hw.max_threads_per_unit // T,
              hw.regs_per_unit // max(1, regs_alloc * T), hw.onchip_per_unit // max(1, smem + SMEM_RESERVED))
    per_sm = max(1, fit)
    resident = min(per_sm, math.ceil(blocks / hw.units))
    occupancy = fit * T / hw.max_threads_per_unit
    fma_rate = hw.peak(4) / (2 * WARP * hw.units * hw.clock_hz)
    loads = math.ceil(bkv * (a.d + a.dv) / T)
    fma = a.d * rq * ck + bkv * rq * cd + rq * cd                 # scores, P · V, the rescale
    lds = a.d * (rq + ck) + bkv * (rq + cd) + rq * THREADS_X       # operands, P, the row partials
    sts = loads + rq * ck + rq                                     # K/V tiles, P, the partials
    sfu = rq * ck + rq                                             # exponentials (and alpha)
    other = rq * ck * (score_flops + 4) + loads * 8
    issue = fma + lds + sts + 2 * loads + sfu * 2 + other + 2 * spilled
    cyc = max(fma / fma_rate, lds + sts + 2 * spilled, sfu / (fma_rate / 8), issue / SCHEDULERS)
    latency = hw.mem_latency_s * hw.clock_hz
    barrier = 4 * 20
    per_round = max(resident * warps * cyc, latency + warps * cyc) + barrier
    per_sm_blocks = math.ceil(blocks / hw.units)
    cycles = math.ceil(per_sm_blocks / resident) * (steps * per_round + latency)
    share = min(1.0, blocks / hw.units)
    compute_s = cycles / hw.clock_hz
    bw = hw.cache_bandwidth if io <= hw.l2_bytes else hw.bandwidth
    cached = rereads if kv_bytes <= hw.l2_bytes else 0.0
    memory_s = (io / bw + cached / hw.cache_bandwidth + (rereads - cached) / hw.bandwidth) / max(share, 1e-9)
    alloc_s = hw.alloc_s * common["writes"]
    return _finish(dict(common, bytes_spilled=0.0, onchip_bytes=int(smem), bytes_cached=float(cached),
                        bytes_read=common["bytes_read"] + rereads - cached), hw, compute_s, memory_s,
                   hw.launch_s, alloc_s, threads=T, blocks=blocks, occupancy=min(1.0, occupancy),
                   recompute_s=0.0, spill_s=0.0, waves=blocks / (per_sm * hw.units))


def _gpu_gemm_time(info, members, root, tiling: Tiling, hw: HardwareProfile, common, reads, corr,
                   measured: Measured | None = None):
    """A contraction kernel (plan/gemm.py): per block, K in steps of BK through shared memory,
    a TQ x TP register tile per thread, the epilogue from registers.

    Compute is counted in warp instructions per K step and priced at an SM's issue rates: FMAs at
    the FP32 lanes' rate, shared loads and stores at one warp instruction per cycle (128 B/cycle),
    the loader's index arithmetic at the integer lanes' rate (half the FP32 lanes). An SM keeps
    its resident blocks' warps busy while one block waits at its barrier for the K step's global
    loads; a lone block pays the load latency every K step. The busiest SM runs ceil(blocks /
    SMs) blocks (the waves). Memory: each operand tile is read once per block (the re-reads of
    an operand by the blocks along the other side come from L2 when it holds them). On tensor
    cores (plan/gemm.py: mma_kind) the FMAs are mma.sync instructions at the tensor rate, plus
    the fragments' shared loads and f16x2 packing. Double buffering (`ContractionConfig.prefetch`: the next K
    step's elements loaded into registers before this step's products) hides the load latency
    behind the block's own compute, for as many registers more as the thread loads per step."""
    gk = gemm_kernel(info, members, root)
    if isinstance(gk, str):
        raise ValueError(f"not a contraction kernel: {gk}")
    co = info.op(gk.contraction)
    s = gemm_shape(info, gk, root, tiling.block, tiling.config.steps)
    T = s.threads
    warps = math.ceil(T / WARP)
    blocks = s.blocks(co.loops)
    side_loads = {"q": math.ceil(s.bk * s.bq / T), "p": math.ceil(s.bk * s.bp / T)}
    loads = side_loads["q"] + side_loads["p"]
    # elements whose operand a producer of the kernel computes in the loader (a pad's gather)
    computed = {side: (co.producers[op] is not None and co.producers[op] in members
                       and info.op(co.producers[op]).kind in ("pad", "elementwise"))
                for side, op in (("q", gk.q_operand), ("p", 1 - gk.q_operand))}
    gathered = sum(n for side, n in side_loads.items() if computed[side])
    mma = mma_kind(info, gk, s, hw)
    prefetch = tiling.config.prefetch
    regs, smem, local = (gemm_registers(s.tq, s.tp, loads - gathered, gathered, bool(mma))
                         + (loads if prefetch else 0),       # the next K step's elements, held
                         s.mma_shared_bytes if mma else s.shared_bytes, 0)
    ksteps = math.ceil(gk.k / s.bk)
    # words each thread spills and reloads per K step; the estimate runs up to ~30 registers low at
    # the top end (ptxas: 242 for a predicted 211, and 255 plus 96 B of spills for a predicted 235),
    # so within GEMM_REG_HEADROOM of the limit counts as spilling
    spilled = max(0, regs - (hw.regs_per_thread - GEMM_REG_HEADROOM))
    regs = min(regs, hw.regs_per_thread)
    coalesced = True                  # the loader walks each operand along its contiguous dim
    if measured is not None:
        regs, smem = measured.registers, measured.shared_bytes
        local = measured.local_bytes + measured.spill_bytes
        spilled = local // 4
        if measured.coalescing is not None:
            coalesced = measured.coalescing >= COALESCED
    regs_alloc = math.ceil(regs / 8) * 8
    fit = min(hw.max_blocks_per_unit, hw.max_threads_per_unit // (warps * WARP),
              hw.regs_per_unit // max(1, regs_alloc * warps * WARP),
              hw.onchip_per_unit // max(1, smem + SMEM_RESERVED))
    per_sm = max(1, fit)                  # fit == 0: a block does not fit on an SM (occupancy 0)
    resident = min(per_sm, math.ceil(blocks / hw.units))
    occupancy = fit * warps * WARP / hw.max_threads_per_unit

    # warp instructions per K step of one warp
    fma_rate = hw.peak(4) / (2 * WARP * hw.units * hw.clock_hz)        # FMA warp instructions per SM cycle
    loader_ops, todo = set(), [p for p in co.producers[:2] if p is not None and p in members]
    while todo:                                   # the operands' producers, evaluated per element loaded
        m = todo.pop()
        if m not in loader_ops and info.op(m).kind in ("elementwise", "pad"):
            loader_ops.add(m)
            todo += [p for p in info.op(m).producers if p is not None and p in members]
    producers = sum(op_flops(info.op(m), hw) / max(1, info.op(m).points) for m in loader_ops)
    sts = loads
    ints = loads * 8 + gathered * (12 + producers)      # index math; a gather's window and bounds
    if mma:
        # per 16 of K: (TQ/2) x (TP/2) mma.sync.m16n8k16 (2048 MACs each), the fragments' words
        # read from shared memory (8 per A fragment, 4 per B) and packed in pairs to f16x2
        steps = s.bk // MMA_K
        fma = steps * (s.tq // 2) * (s.tp // 2)
        lds = steps * (4 * s.tq + 2 * s.tp)
        cvt = steps * (2 * s.tq + s.tp)
        mma_rate = hw.tensor_flops_fp16 / (2 * 2048 * hw.units * hw.clock_hz)   # mma per SM cycle
        issue = fma + lds + cvt + sts + 2 * loads + ints + 2 * spilled
        cyc = max(fma / mma_rate, lds + sts + 2 * spilled, (ints + cvt) / (fma_rate / 2), issue / SCHEDULERS)
    else:
        fma = s.bk * s.tq * s.tp
        lds = s.bk * (s.tq + s.tp)
        issue = fma + lds + sts + 2 * loads + ints
        issue += 2 * spilled                                          # a spilled word: a local store and load
        cyc = max(fma / fma_rate, lds + sts + 2 * spilled, ints / (fma_rate / 2), issue / SCHEDULERS)
    latency = hw.mem_latency_s * hw.clock_hz                        # cycles a K step's loads take
    barrier = 2 * 20                                                # two barriers per K step
    if prefetch:      # the next step's global loads are in flight while this step computes
        per_round = max(resident * warps * cyc, latency) + barrier
    else:             # a block waits for its loads before it computes: others fill the wait
        per_round = max(resident * warps * cyc, latency + warps * cyc) + barrier
    per_sm_blocks = math.ceil(blocks / hw.units)
    cycles = math.ceil(per_sm_blocks / resident) * ksteps * per_round
    if prefetch:      # the first step's loads, before the loop, are waited for
        cycles += math.ceil(per_sm_blocks / resident) * latency
    # the epilogue from registers, once per output
    epilogue = sum(op_flops(info.op(m), hw) for m in common["ops"] if m != gk.contraction)
    share = min(1.0, blocks / hw.units)
    compute_s = cycles / hw.clock_hz + epilogue / (hw.peak(4) * share)

    io = common["bytes_read"] + common["bytes_written"]
    dram = io * (1 if coalesced else SECTOR / 4)
    bw = hw.cache_bandwidth if io <= hw.l2_bytes else hw.bandwidth
    spill = spilled * 4 * 2 * ksteps * blocks * T          # a store and a load per K step, through L1/L2
    memory_s = (dram / bw + common["bytes_cached"] / hw.cache_bandwidth + spill / hw.cache_bandwidth) / max(share, 1e-9)
    alloc_s = hw.alloc_s * common["writes"]
    return _finish(dict(common, bytes_spilled=float(spill), onchip_bytes=int(smem)), hw, compute_s, memory_s,
                   hw.launch_s, alloc_s, threads=T, blocks=blocks, occupancy=min(1.0, occupancy),
                   recompute_s=0.0, spill_s=spill / hw.cache_bandwidth, waves=blocks / (per_sm * hw.units))


ROW_UNROLL_LIMIT = 96     # elements per thread beyond which LLVM no longer unrolls a row kernel's loops


def row_registers(per_thread: int, rows: int) -> int:
    """Registers per thread of a row kernel, estimated from the elements each thread handles per
    row (`per_thread` = N/T: LLVM unrolls those loops) and whether the block holds several rows:
    fitted to ptxas -v on this emitter's softmax, layernorm and rmsnorm kernels (N = 512-1024,
    N/T = 1-32: 26-32 registers at N/T <= 4, 40-51 at 8, 56-96 at 16; the kernel report
    measures the real ones). Past ROW_UNROLL_LIMIT the loops stay loops: softmax and layernorm
    rows of 32000 at N/T = 100 and 125 take 29-38 registers, a max 17-22 at any N/T (ptxas -v,
    sm_90; at N/T = 64-80 softmax still unrolls, to 168-252)."""
    if per_thread > ROW_UNROLL_LIMIT:
        return 32 + (4 if rows > 1 else 0)
    return min(255, 26 + 3 * per_thread + (4 if rows > 1 else 0))


def _row_phases(info: ChainInfo, members, root: int, rk: RowKernel) -> dict[int, frozenset[int]]:
    """Each phase of a row kernel (a reduction, or the root when it walks the row) with the
    elementwise ops along the row it computes: the phase op and its producers through such ops."""
    ends = list(rk.reductions) + ([root] if root not in rk.reductions and rk.loop_of(root) is not None else [])
    out = {}
    for end in ends:
        seen, todo = {end}, [end]
        while todo:
            for p in info.op(todo.pop()).producers:
                o = info.op(p) if p is not None and p in members else None
                if o is not None and p not in seen and o.kind == "elementwise" and rk.loop_of(p) is not None:
                    seen.add(p)
                    todo.append(p)
        out[end] = frozenset(seen)
    return out


def _strided(info: ChainInfo, m: int, k: int, corr_m: dict[int, frozenset], tiling: Tiling) -> bool:
    """A global read whose consecutive threads (threadIdx.x: the innermost mapped loop) do not
    move along the tensor's contiguous last dim."""
    if not tiling.mapped:
        return False
    o = info.op(m)
    if k is None or k >= len(o.operand_loops) or not o.operand_loops[k]:
        return False                            # read at computed indices: a gather's rows are contiguous
    x = tiling.mapped[-1]
    mine = corr_m.get(x, frozenset())
    last = o.operand_loops[k][-1]
    varies = any(mine & d for d in o.operand_loops[k])
    return varies and not (mine & last)


# ---- cpu ------------------------------------------------------------------------------------

def _cpu_time(info, members, root, tiling: Tiling, hw: HardwareProfile, common, footprint, reads, algorithm: str = ""):
    r = info.op(root)
    cores = hw.units
    chunks = cpu_chunks(info, root, tiling.block, tiling.mapped)
    rounds = math.ceil(chunks / cores)
    busy = min(chunks, cores)
    efficiency = chunks / (rounds * cores)
    # per tile: intermediates and the tile's slices of what it reads and writes. Every op of the
    # kernel walks the tile in its own loop, so the second and later passes over a tensor, and
    # the intermediates, come from one core's L2 when the tile fits there, else from the LLC
    # when every busy core's tile fits there, else from memory
    tile_inter = sum(n * o.elem_bytes for n, o in footprint)
    total_io = common["bytes_read"] + common["bytes_written"]
    tile_io = total_io / max(1, chunks)
    working = tile_inter + tile_io
    spill = 0.0
    resident = total_io <= hw.l2_bytes            # timed again and again: found in the LLC
    bw = _cpu_bw(hw, busy, resident)
    spill_bw = bw
    if working > hw.onchip_per_unit:
        passes = _passes(info, members, reads)
        spill = sum(b * (passes.get(key, 1) - 1) for key, (b, _, _) in reads.items())
        spill += sum(n * o.elem_bytes * 2 for n, o in footprint) * chunks
        spill_bw = _cpu_bw(hw, busy, working * busy <= hw.l2_bytes)
    eb = r.elem_bytes
    peak = hw.peak(eb) * efficiency
    # contractions are BLAS calls (transforms/cpu_library_calls.py): one per chunk, each with
    # blas_threads threads (more than the cores do not help), or, for a zero-filled 2-D matmul
    # whose row tiles make the whole product, one call before the chunk loop
    per_core = hw.peak(eb) / cores
    hoist = hoisted_matmuls(info, members, root, tiling.mapped, chunks, cores)
    hoisted = sum(op_flops(info.op(m), hw) for m in hoist)
    conv = choose_conv(info, members, root, tiling.block, tiling.mapped, hw, algorithm)
    conv_flops = op_flops(info.op(conv.op), hw) if conv else 0.0
    conv_s = dict(conv.predicted)[conv.algorithm] if conv else 0.0       # its algorithm's own model
    per_chunk = [m for m in members if info.op(m).kind == "contraction" and m not in hoist
                 and not (conv and m == conv.op)]
    library = sum(op_flops(info.op(m), hw) for m in per_chunk)
    blas = max(1, hw.blas_threads)
    # a call per chunk runs on its worker's one thread (emit/module.py limits BLAS to one thread
    # when its calls are in the prange), and packs its B operand afresh: a read of B per call
    # (row chunks of A share it), from the LLC where B fits there
    packed = sum(_matmul_b_bytes(info.op(m)) for m in per_chunk if tiling.mapped)
    pack_bw = (hw.cache_bandwidth / cores if packed <= hw.l2_bytes else
               hw.single_core_bandwidth or hw.bandwidth / cores)
    compute_s = ((common["flops"] - hoisted - library - conv_flops) / peak
                 + library * rounds / (chunks * per_core) + rounds * packed / pack_bw
                 + hoisted / (per_core * min(cores, blas)) + conv_s + rounds * hw.chunk_s)
    recompute_s = common["recompute_flops"] / peak
    spill_s = spill / spill_bw
    # chunks run in rounds of one per core; a last, partial round has fewer cores streaming
    full, last = divmod(chunks, cores)
    per_chunk = total_io / chunks
    memory_s = (full * cores * per_chunk / bw + (last * per_chunk / _cpu_bw(hw, last, resident) if last else 0.0)
                + common["bytes_cached"] / hw.cache_bandwidth + spill_s)
    # no page faults on repeated calls: intermediates live in the memory plan's arena and outputs
    # come from its pool (compiler/emit/memplan.py), so no buffer is mapped afresh
    alloc_s = 0.0
    # a whole call runs on BLAS's threads, which then spin where the next prange's workers run
    launch_s = hw.launch_s + (hw.pool_switch_s if hoist else 0.0)
    return _finish(dict(common, bytes_spilled=spill, onchip_bytes=int(tile_inter)), hw, compute_s, memory_s,
                   launch_s, alloc_s, threads=chunks, blocks=chunks, occupancy=busy / cores,
                   recompute_s=recompute_s, spill_s=spill_s)


def cpu_chunks(info: ChainInfo, root: int, block, mapped) -> int:
    """Iterations of a cpu kernel's chunk loop (its prange) at these block tiles."""
    r = info.op(root)
    return _prod(r.loops[l] // block[l] for l in mapped if block[l]) if mapped else 1


def hoisted_matmuls(info: ChainInfo, members, root: int, mapped, chunks: int, cores: int) -> list[int]:
    """Matmuls of a cpu kernel the emitter calls once, whole, on BLAS's own threads, before its
    chunk loop (transforms/cpu_library_calls.py: hoist_whole_contractions): those that could be
    (hoistable_matmuls), where the loop has fewer chunks than cores, so that calls per chunk
    would leave cores idle. With a chunk for every core, each chunk calls BLAS on one thread and
    runs the rest of the kernel on its rows while they are in cache: measured 1.3-1.6x faster
    than the whole call followed by the chunk loop, whose BLAS and Numba thread pools spin on the
    same cores while the other works (python -m bench.blas_epilogue, each form in its own process)."""
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


def _matmul_b_bytes(o) -> int:
    """Bytes of a 2-D matmul's B operand (K x N: its loops are M, N, K); 0 for other contractions."""
    if o.name != "linalg.matmul" or len(o.loops) != 3:
        return 0
    return o.loops[1] * o.loops[2] * o.elem_bytes


def _from_outside(info: ChainInfo, p: int | None, reader: int, members) -> bool:
    """A matmul operand that exists before the kernel's loop: made outside the kernel, or a copy
    of such a tensor that only the matmul reads (a transpose, which the cpu emitter folds into
    BLAS's transpose flag: cpu_library_calls.fold_transposed_operands)."""
    if p is None or p not in members:
        return True
    o = info.op(p)
    return (o.label == "copy" and o.users == (reader,) and o.n_inputs == 1
            and (o.producers[0] is None or o.producers[0] not in members))


def _cpu_bw(hw: HardwareProfile, busy: int, resident: bool) -> float:
    """Bandwidth with `busy` cores streaming (DRAM: between one core's and all cores'; from
    the LLC: in proportion to the cores)."""
    if resident:
        return max(hw.bandwidth, hw.cache_bandwidth) * busy / hw.units
    if not hw.single_core_bandwidth or hw.units == 1:
        return hw.bandwidth
    return hw.single_core_bandwidth + (hw.bandwidth - hw.single_core_bandwidth) * (busy - 1) / (hw.units - 1)


def _passes(info: ChainInfo, members, reads) -> dict[str, int]:
    """How many ops of the kernel read each external tensor (each reads it in its own loop)."""
    out: dict[str, int] = {}
    for m in members:
        o = info.op(m)
        for key in set(o.operand_keys):
            if key in reads:
                out[key] = out.get(key, 0) + 1
    return out


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
