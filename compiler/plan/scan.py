"""The scan template's time model (cumsum, cumprod: plan/templates.py ScanConfig); the tile
search is tilechoice's scan_search, the kernel emit/scan.py. docs/ARCHITECTURE.md: scans.
"""
from __future__ import annotations

import math

from .cost import (COMBINE_CYCLES, DEP_LATENCY, MEM_PARALLELISM, Tiling, finish_cost, fitting_blocks,
                   warp_occupancy)
from .cost_cpu import cpu_bandwidth
from .hardware import WARP, HardwareProfile


def scan_time(info, members, root, tiling, hw, common, footprint, reads, corr, measured):
    """The scan template's cost stage (templates.py: Template.cost)."""
    return _scan_time(info, root, tiling, hw, common)


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
        per_sm = max(1, fitting_blocks(hw, warps, 0, 0))
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
        occupancy = min(1.0, warp_occupancy(hw, per_sm, warps))
        return finish_cost(dict(common, bytes_spilled=0.0, onchip_bytes=0), hw, compute_s, memory_s, hw.launch_s,
                       hw.alloc_s * common["writes"], threads=T,
                       blocks=blocks, occupancy=occupancy, recompute_s=0.0, spill_s=0.0, waves=waves)
    cores = hw.units
    busy = min(rows, cores)
    compute_s = common["flops"] * hw.weight("scalar") / (hw.peak(r.elem_bytes) / cores * busy) + hw.chunk_s
    memory_s = io / cpu_bandwidth(hw, busy, io <= hw.l2_bytes)
    return finish_cost(dict(common, bytes_spilled=0.0, onchip_bytes=0), hw, compute_s, memory_s, hw.launch_s, 0.0,
                   threads=busy, blocks=rows,
                   occupancy=busy / cores, recompute_s=0.0, spill_s=0.0)
