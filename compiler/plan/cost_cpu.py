"""The cpu time model of loop-nest kernels (the elementwise, row, contraction and conv templates
on a cpu): a prange over chunks of the mapped loops, named contractions as BLAS calls and
contraction generics as scalar loops, a conv as its
chosen algorithm (plan/conv.py), from the numbers cost.kernel_cost gathers. The attention and
scan templates price their cpu kernels in their own modules, with `cpu_bandwidth`.
docs/ARCHITECTURE.md: the cpu kernels.
"""
from __future__ import annotations

import math

from .analysis import ChainInfo
from .conv import choose as choose_conv
from .cost import Tiling, cpu_chunks, finish_cost, hoisted_matmuls, op_flops
from .hardware import HardwareProfile

# The contraction generics the cpu emitter writes as scalar loop nests (no library call takes a
# linalg.generic: transforms/cpu_library_calls.py), per core: Numba's loops over a reduction
# that LLVM keeps in order, measured 1.9 GFLOP/s with the reduced operand read along its rows
# (12 x 128 x 128 x 64, a batched Q.K^T with its scale inside) and 0.86 GFLOP/s with a weight read
# down its columns (128 x 768 x 768) on the 2-core AMD EPYC host, 2026-12-06, one thread
LOOP_CONTRACTION_FLOPS = 1.4e9


def conv_time(info, members, root, tiling, hw, common, footprint, reads, corr, measured):
    """The conv template's cost stage: the cpu model with the config's algorithm (plan/conv.py)."""
    return cpu_time(info, members, root, tiling, hw, common, footprint, reads, tiling.config.algorithm)


def cpu_time(info, members, root, tiling: Tiling, hw: HardwareProfile, common, footprint, reads, algorithm: str = ""):
    """A loop-nest kernel on a cpu: chunks in rounds over the cores, BLAS calls per chunk or
    hoisted, a conv at its algorithm's price, spills past a core's cache (`algorithm`: a conv's)."""
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
    bw = cpu_bandwidth(hw, busy, resident)
    spill_bw = bw
    if working > hw.onchip_per_unit:
        passes = _passes(info, members, reads)
        spill = sum(b * (passes.get(key, 1) - 1) for key, (b, _, _) in reads.items())
        spill += sum(n * o.elem_bytes * 2 for n, o in footprint) * chunks
        spill_bw = cpu_bandwidth(hw, busy, working * busy <= hw.l2_bytes)
    eb = r.elem_bytes
    peak = hw.peak(eb) * efficiency
    # contractions are BLAS calls (transforms/cpu_library_calls.py): one per chunk on its
    # worker's one BLAS thread, or, for a zero-filled 2-D matmul whose row tiles make the whole
    # product, one call before the chunk loop, split among every core's worker (emit/cpu.py:
    # _gemm_chunks)
    per_core = hw.peak(eb) / cores
    hoist = hoisted_matmuls(info, members, root, tiling.mapped, chunks, cores)
    hoisted = sum(op_flops(info.op(m), hw) for m in hoist)
    conv = choose_conv(info, members, root, tiling.block, tiling.mapped, hw, algorithm)
    conv_flops = op_flops(info.op(conv.op), hw) if conv else 0.0
    conv_s = dict(conv.predicted)[conv.algorithm] if conv else 0.0       # its algorithm's own model
    contractions = [m for m in members if info.op(m).kind == "contraction" and m not in hoist
                    and not (conv and m == conv.op)]
    looped = [m for m in contractions if info.op(m).name == "linalg.generic"]
    per_chunk = [m for m in contractions if m not in looped]
    library = sum(op_flops(info.op(m), hw) for m in per_chunk)
    loops = sum(op_flops(info.op(m), hw) for m in looped)
    # a call per chunk runs on its worker's one thread (emit/module.py limits BLAS to one thread
    # when its calls are in the prange), and packs its B operand afresh: a read of B per call
    # (row chunks of A share it), from the LLC where B fits there
    packed = sum(_matmul_b_bytes(info.op(m)) for m in per_chunk if tiling.mapped)
    pack_bw = (hw.cache_bandwidth / cores if packed <= hw.l2_bytes else
               hw.single_core_bandwidth or hw.bandwidth / cores)
    compute_s = ((common["flops"] - hoisted - library - loops - conv_flops) / peak
                 + library * rounds / (chunks * per_core) + rounds * packed / pack_bw
                 + loops * rounds / (chunks * min(per_core, LOOP_CONTRACTION_FLOPS))
                 + hoisted / (per_core * cores) + conv_s + rounds * hw.chunk_s)
    recompute_s = common["recompute_flops"] / peak
    spill_s = spill / spill_bw
    # chunks run in rounds of one per core; a last, partial round has fewer cores streaming
    full, last = divmod(chunks, cores)
    per_chunk = total_io / chunks
    memory_s = (full * cores * per_chunk / bw + (last * per_chunk / cpu_bandwidth(hw, last, resident) if last else 0.0)
                + common["bytes_cached"] / hw.cache_bandwidth + spill_s)
    # no page faults on repeated calls: intermediates live in the memory plan's arena and outputs
    # come from its pool (compiler/emit/memplan.py), so no buffer is mapped afresh
    alloc_s = 0.0
    # a whole call is a prange of its own (its split among the workers) before the chunk loop
    launch_s = hw.launch_s * (1 + len(hoist))
    return finish_cost(dict(common, bytes_spilled=spill, onchip_bytes=int(tile_inter)), hw, compute_s, memory_s,
                   launch_s, alloc_s, threads=chunks, blocks=chunks, occupancy=busy / cores,
                   recompute_s=recompute_s, spill_s=spill_s)


def _matmul_b_bytes(o) -> int:
    """Bytes of a 2-D matmul's B operand (K x N: its loops are M, N, K); 0 for other contractions."""
    if o.name != "linalg.matmul" or len(o.loops) != 3:
        return 0
    return o.loops[1] * o.loops[2] * o.elem_bytes


def cpu_bandwidth(hw: HardwareProfile, busy: int, resident: bool) -> float:
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
