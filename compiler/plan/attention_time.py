"""The attention template's time model (plan/attention.py finds the pattern and its tiles).
docs/ARCHITECTURE.md: attention.
"""
from __future__ import annotations

import math

from .attention import (THREADS_X, THREADS_Y, NotAttention, attention_kernel, attention_registers, gpu_layout,
                        shared_bytes)
from .cost import (GEMM_REG_HEADROOM, SCHEDULERS, Tiling, finish_cost, fitting_blocks, issue_per_step,
                   op_flops, warp_occupancy)
from .cost_cpu import cpu_bandwidth
from .hardware import WARP, HardwareProfile
from .measured import Measured
from .attention_mma import (MMA_WARPS, causal_mask, causal_steps, mma_registers, mma_shared_bytes,
                            mma_step_cycles)


def attention_time(info, members, root, tiling, hw, common, footprint, reads, corr, measured):
    """The attention template's cost stage (templates.py: Template.cost)."""
    return _attention_time(info, members, tiling, hw, common, measured)


def _attention_time(info, members, tiling: Tiling, hw: HardwareProfile, common, measured: Measured | None = None):
    """An attention kernel (plan/attention.py): per block of BQ queries, K and V in steps of BKV
    keys through shared memory (gpu) or the cache (cpu); the scores, their exponentials and the
    running max and sum never leave the chip.

    gpu: 16 x 8 threads; per key step a thread computes a (BQ/16) x (BKV/8) score tile from shared
    memory (LDS.128), the score function, its share of the row max (combined by shuffles), the
    exponentials, and a (BQ/16) x (DV/8) slice of P · V, with two barriers. Priced like a
    contraction kernel: warp instructions per step at the SM's issue rates, the step's loads
    waited for unless other resident blocks fill the wait. Memory: Q, K, V and the outside
    operands once, K and V once more per block of queries (from L2 when they fit there).
    cpu: two BLAS-sized products per (query block, key step) at the cores' peak, the score
    function and the exponentials vectorised."""
    a = attention_kernel(info, members)
    if isinstance(a, NotAttention):
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
        memory_s = io / cpu_bandwidth(hw, busy, resident) + rereads / hw.cache_bandwidth
        return finish_cost(dict(common, bytes_spilled=0.0, onchip_bytes=int((bq * bkv + bq * a.dv) * 4),
                            bytes_cached=float(rereads)), hw, compute_s, memory_s, hw.launch_s,
                       0.0, threads=blocks, blocks=blocks, occupancy=busy / cores, recompute_s=0.0, spill_s=0.0)
    T = THREADS_X * THREADS_Y
    warps = T // WARP
    if tiling.config.mma:
        return _mma_time(info, a, tiling, hw, common, measured, blocks, nq, kv_bytes, rereads, score_flops, io)
    rq, ck = bq // THREADS_Y, bkv // THREADS_X
    lay = gpu_layout(a.d, a.dv, bq, bkv)
    cols = lay.groups * lay.cw                                    # value columns per thread
    regs = attention_registers(a, bq, bkv)
    smem = shared_bytes(a, bq, bkv)
    if measured is not None:             # the kernel report's ptxas figures
        regs, smem = measured.registers, measured.shared_bytes
    regs_alloc = math.ceil(min(regs, hw.regs_per_thread) / 8) * 8
    spilled = max(0, regs - (hw.regs_per_thread - GEMM_REG_HEADROOM))
    fit = fitting_blocks(hw, warps, regs_alloc, smem)
    per_sm = max(1, fit)
    resident = min(per_sm, math.ceil(blocks / hw.units))
    occupancy = warp_occupancy(hw, fit, warps)
    fma_rate = hw.peak(4) / (2 * WARP * hw.units * hw.clock_hz)
    # warp instructions per key step, as the emitted step issues them (emit/attention.py; the
    # bench tiles: 1,595 in SASS, this counts ~1,540)
    loads = math.ceil(bkv * lay.dp / T) + math.ceil(bkv * a.dv / T)
    fma = lay.dp * rq * ck + bkv * rq * cols + rq * cols + rq * ck  # scores, P . V, rescale, exp args
    lds = lay.dp // 4 * (rq + ck) + bkv // 4 * (rq + 4 * lay.groups)  # LDS.128 (cw-wide runs of V)
    sts = loads + rq * ck                                          # K/V tiles, P
    sfu = rq * ck + rq                                             # exponentials (and alpha)
    other = rq * ck * (score_flops + 10) + rq * 24 + 20            # score function, max, shuffles, loop
    issue = fma + lds + sts + 3 * loads + sfu * 2 + other + 2 * spilled
    # with the kernel report: the SASS's hot loop (the key step, or the compute loop inside it)
    issue = issue_per_step(fma + sfu, issue, sts + 3 * loads + 2 * spilled, measured)
    cyc = max(fma / fma_rate, 2 * lds + sts + 2 * spilled, sfu / (fma_rate / 8), issue / SCHEDULERS)
    latency = hw.mem_latency_s * hw.clock_hz
    barrier = 2 * 20
    per_round = max(resident * warps * cyc, latency + warps * cyc) + barrier
    per_sm_blocks = math.ceil(blocks / hw.units)
    cycles = math.ceil(per_sm_blocks / resident) * (steps * per_round + latency)
    share = min(1.0, blocks / hw.units)
    compute_s = cycles / hw.clock_hz
    bw = hw.cache_bandwidth if io <= hw.l2_bytes else hw.bandwidth
    cached = rereads if kv_bytes <= hw.l2_bytes else 0.0
    memory_s = (io / bw + cached / hw.cache_bandwidth + (rereads - cached) / hw.bandwidth) / max(share, 1e-9)
    alloc_s = hw.alloc_s * common["writes"]
    return finish_cost(dict(common, bytes_spilled=0.0, onchip_bytes=int(smem), bytes_cached=float(cached),
                        bytes_read=common["bytes_read"] + rereads - cached), hw, compute_s, memory_s,
                   hw.launch_s, alloc_s, threads=T, blocks=blocks, occupancy=min(1.0, occupancy),
                   recompute_s=0.0, spill_s=0.0, waves=blocks / (per_sm * hw.units))


def _mma_time(info, a, tiling: Tiling, hw: HardwareProfile, common, measured, blocks, nq, kv_bytes, rereads,
              score_flops, io):
    """The tensor-core form (plan/attention_mma.py): per key step a block's 4 warps issue the
    step's HMMAs (both products), LDSMs, score function and online softmax on the accumulators,
    P's packing and the K/V copies; its cycles are the larger of the tensor cores' time at
    mma.sync's ceiling (hardware.py `mma_sync_flops`) and the issue of all of it; the next
    step's copies are in flight while a step computes (2 stages), so a step waits for memory
    only where the SM's blocks cannot fill the latency. A causal mask skips the key tiles above
    the diagonal (`causal_steps`)."""
    bkv = tiling.config.block_kv
    regs = mma_registers(a.d, a.dv, bkv)
    smem = mma_shared_bytes(a.d, a.dv, bkv)
    if measured is not None:             # the kernel report's ptxas figures
        regs, smem = measured.registers, measured.shared_bytes
    regs_alloc = math.ceil(min(regs, hw.regs_per_thread) / 8) * 8
    fit = max(1, fitting_blocks(hw, MMA_WARPS, regs_alloc, smem))
    resident = min(fit, math.ceil(blocks / hw.units))
    elem_copies = info.op(a.scores).operand_dtypes[0] not in ("f16", "bf16")
    hot = measured.loop_instructions if measured is not None and measured.loop_math else None
    cyc, n = mma_step_cycles(hw, a.d, a.dv, bkv, score_flops, elem_copies, hot)
    steps = causal_steps(a.sq, a.sk, bkv) if causal_mask(info, a) else math.ceil(a.sk / bkv)
    latency = hw.mem_latency_s * hw.clock_hz
    barrier = 2 * 20
    per_round = max(resident * cyc, latency / 2 + cyc) + barrier
    per_sm_blocks = math.ceil(blocks / hw.units)
    cycles = math.ceil(per_sm_blocks / resident) * (steps * per_round + latency)
    compute_s = cycles / hw.clock_hz
    share = min(1.0, blocks / hw.units)
    bw = hw.cache_bandwidth if io <= hw.l2_bytes else hw.bandwidth
    frac = steps / max(1, math.ceil(a.sk / bkv))
    cached = rereads * frac if kv_bytes <= hw.l2_bytes else 0.0
    memory_s = (io / bw + cached / hw.cache_bandwidth + (rereads * frac - cached) / hw.bandwidth) / max(share, 1e-9)
    alloc_s = hw.alloc_s * common["writes"]
    return finish_cost(dict(common, bytes_spilled=0.0, onchip_bytes=int(smem), bytes_cached=float(cached),
                            bytes_read=common["bytes_read"] + rereads * frac - cached), hw, compute_s, memory_s,
                       hw.launch_s, alloc_s, threads=MMA_WARPS * WARP, blocks=blocks,
                       occupancy=min(1.0, warp_occupancy(hw, fit, MMA_WARPS)), recompute_s=0.0, spill_s=0.0,
                       waves=blocks / (fit * hw.units))
