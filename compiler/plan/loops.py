"""The elementwise (loop nest) template's time model: on a gpu, MLIR's thread tiles with the
roofline over the grid against what one thread does in sequence; on a cpu, cost_cpu.py.
docs/ARCHITECTURE.md: the cost model.
"""
from __future__ import annotations

import math

from .analysis import ChainInfo
from .cost import (COALESCED, DEP_LATENCY, MEM_PARALLELISM, SCHEDULERS, SECTOR, Tiling, finish_cost,
                   fitting_blocks, in_flight_loads, latency_bandwidth, product,
                   warp_occupancy)
from .cost_cpu import cpu_time
from .hardware import WARP, HardwareProfile
from .measured import Measured

BASE_REGS = 32                 # registers a thread needs besides its private arrays
REG_ARRAY_ELEMS = 16           # private arrays up to this size live in registers (unrolled)


def loop_time(info, members, root, tiling, hw, common, footprint, reads, corr, measured):
    """The elementwise template's cost stage (templates.py: Template.cost)."""
    if hw.kind == "gpu":
        return _gpu_time(info, members, root, tiling, hw, common, footprint, reads, corr, measured)
    return cpu_time(info, members, root, tiling, hw, common, footprint, reads)


def _gpu_time(info, members, root, tiling: Tiling, hw: HardwareProfile, common, footprint, reads, corr,
              measured: Measured | None = None):
    """Throughput (roofline over the whole device) or latency (what one thread does in sequence,
    times the waves of threads), whichever is longer: row-per-thread kernels on small problems
    are latency-bound, large ones bandwidth- or compute-bound."""
    r = info.op(root)
    threads = product(tiling.block[l] // (tiling.thread[l] or tiling.block[l]) if tiling.thread else 1
                    for l in tiling.mapped) if tiling.mapped else 1
    blocks = product(r.loops[l] // tiling.block[l] for l in tiling.mapped if tiling.block[l]) if tiling.mapped else 1
    warps = math.ceil(threads / WARP)
    reg_elems = sum(n for n, _ in footprint if n <= REG_ARRAY_ELEMS)
    local = sum(n * o.elem_bytes for n, o in footprint if n > REG_ARRAY_ELEMS)
    regs = min(hw.regs_per_thread, BASE_REGS + reg_elems)
    local += max(0, BASE_REGS + reg_elems - hw.regs_per_thread) * 4             # register spills
    smem = 0
    if measured is not None:
        regs, local, smem = measured.registers, measured.local_bytes + measured.spill_bytes, measured.shared_bytes
    per_sm = max(1, fitting_blocks(hw, warps, regs, smem))
    resident_blocks = min(blocks, per_sm * hw.units)
    waves = math.ceil(blocks / (per_sm * hw.units))
    occupancy = warp_occupancy(hw, per_sm, warps)
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
    if measured is not None and measured.loads_in_flight and measured.global_load_bytes:
        # the loads a thread has in flight (the SASS's) bound what its SM draws: Little's law
        bw = min(bw, latency_bandwidth(hw, threads_per_sm, in_flight_loads(1, measured) * measured.global_load_bytes))
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
    return finish_cost(dict(common, bytes_spilled=spill_bytes, onchip_bytes=int(local + reg_elems * 4)), hw,
                   compute_s, memory_s, hw.launch_s, alloc_s, threads=threads, blocks=blocks,
                   occupancy=min(1.0, occupancy), recompute_s=recompute_s, spill_s=spill_s)


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
