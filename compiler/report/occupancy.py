"""Resident blocks per SM, occupancy and waves of a launch: a port of NVIDIA's cuda_occupancy.h
(`occupancy(regs, smem, threads, hw, barriers=..., blocks=...)`) for a launch as Numba makes it,
device numbers from the HardwareProfile, architecture rules for cc 8.0 to 9.0. See docs/GPU.md,
"The kernel report".
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..plan.hardware import KB, HardwareProfile

# cudaOccAlignUpShmemSizeVoltaPlus: the shared-memory sizes an SM can be configured to, in KiB
_CARVEOUTS_KIB = {(8, 0): (0, 8, 16, 32, 64, 100, 132, 164), (8, 7): (0, 8, 16, 32, 64, 100, 132, 164),
                  (8, 6): (0, 8, 16, 32, 64, 100), (8, 9): (0, 8, 16, 32, 64, 100),
                  (9, 0): (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)}
_MAX_REGS_PER_THREAD = 256          # cudaOccRegAllocationMaxPerThread, cc 7.0 and later (ptxas stops at 255)
_BARRIER_SLOTS_PER_BLOCK = 2        # cudaOccMaxBlocksPerSMBlockBarrierLimit: 2 x the block limit (8.0, 9.0)


class OccupancyError(ValueError):
    """No occupancy rules for this compute capability."""


@dataclass(frozen=True)
class Occupancy:
    blocks_per_sm: int                  # resident blocks of this kernel on one SM
    occupancy: float                    # resident warps / the SM's warp slots
    limited_by: tuple[str, ...]         # the resources that allow no more: warps, registers, smem, blocks, barriers
    waves: float | None                 # blocks / (blocks_per_sm x SMs): < 1 leaves the device partly idle


def occupancy(regs: int, smem: int, threads: int, hw: HardwareProfile, *, barriers: int = 0,
              blocks: int | None = None) -> Occupancy:
    """`regs` per thread and `smem` static shared bytes per block (ptxas), `threads` per block,
    `barriers` (ptxas's "used N barriers"), `blocks` in the grid (for waves)."""
    carveouts = _CARVEOUTS_KIB.get(tuple(hw.cc))
    if carveouts is None:
        raise OccupancyError(f"no occupancy rules for compute capability {hw.cc[0]}.{hw.cc[1]} "
                             f"(known: {', '.join(f'{a}.{b}' for a, b in sorted(_CARVEOUTS_KIB))})")
    max_warps = hw.max_threads_per_unit // hw.warp_size
    warps = -(-threads // hw.warp_size)
    limits: dict[str, float] = {}

    # cudaOccMaxBlocksPerSMWarpsLimit
    limits["warps"] = 0 if threads > hw.max_threads_per_block else max_warps // warps

    # cudaOccMaxBlocksPerSMRegsLimit: registers go to warps in units of reg_alloc_unit; each
    # sub-partition holds its share of the register file. The hardware's launch check assumes
    # a block's warps are spread over all sub-partitions at once (warps rounded up to them).
    regs_per_warp = _round_up(regs * hw.warp_size, hw.reg_alloc_unit)
    assumed = regs_per_warp * _round_up(warps, hw.sub_partitions)
    if hw.regs_per_block < assumed or hw.regs_per_block < regs_per_warp * warps or regs > _MAX_REGS_PER_THREAD:
        limits["registers"] = 0
    elif regs_per_warp:
        per_sub = (hw.regs_per_unit // hw.sub_partitions) // regs_per_warp
        limits["registers"] = per_sub * hw.sub_partitions // warps
    else:
        limits["registers"] = math.inf

    # cudaOccMaxBlocksPerSMSmemLimit with the default carveout (the SM's full shared memory,
    # aligned up to a configurable size) and no opt-in; the driver reserves some per block.
    allocated = _round_up(smem + hw.reserved_smem_per_block, hw.smem_alloc_unit)
    preference = _align_up(hw.onchip_per_unit, carveouts)
    if preference is None or allocated > hw.smem_per_block + hw.reserved_smem_per_block:
        limits["smem"] = 0
    else:
        per_sm = preference if preference >= allocated else _align_up(allocated, carveouts)
        limits["smem"] = per_sm // allocated if allocated else math.inf

    limits["blocks"] = hw.max_blocks_per_unit
    resident = min(limits.values())
    # cc 9.0 and later: barriers limit only kernels that use them
    if tuple(hw.cc) >= (9, 0) and barriers > 0:
        limits["barriers"] = _BARRIER_SLOTS_PER_BLOCK * hw.max_blocks_per_unit // barriers
        resident = min(resident, limits["barriers"])
    resident = int(resident)
    waves = blocks / (resident * hw.units) if blocks is not None and resident else None
    return Occupancy(resident, resident * warps / max_warps, tuple(k for k, v in limits.items() if v == resident),
                     waves)


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def _align_up(size: int, carveouts_kib: tuple[int, ...]) -> int | None:
    return next((k * KB for k in carveouts_kib if size <= k * KB), None)
