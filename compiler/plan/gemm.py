"""Tiled contraction kernels (gpu): which kernels can be one, and the shape of its tiles.

A kernel qualifies when it holds exactly one contraction, every other compute op is an
all-parallel elementwise op (or a fill or pad), the root is the contraction or an elementwise
op whose loops are the contraction's parallel loops one to one, the contraction's init is a fill
of the kernel, and the output's contiguous dim is one side's (N). Its ContractionConfig gives the
K step and register tiles, and tensor cores where `mma_kind` allows; tiles need not divide the
loops. See docs/ARCHITECTURE.md, "GPU kernels: how a plan becomes CUDA"
(contraction kernels, tensor cores); the template is compiler/emit/gemm.py.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .analysis import ChainInfo, loop_correspondence
from .cost import (COALESCED, GEMM_REG_HEADROOM, bounded_registers, SCHEDULERS, SECTOR, Tiling, finish_cost, fitting_blocks,
                   issue_per_step, op_flops, warp_occupancy)
from .cost_cpu import cpu_time
from .hardware import WARP, HardwareProfile
from .measured import Measured

SIDES = ("m", "n", "batch", "k")
SMEM_LIMIT = 48 * 1024          # static shared memory per block (more: dynamic, opted in; shared_limit)
F32_BYTES = 4                  # bytes of an f32 element (shared-memory tiles)


@dataclass(frozen=True)
class GemmKernel:
    contraction: int                       # op id
    sides: tuple[str, ...]                 # per contraction loop: m | n | batch | k
    m_operand: int                         # input index of the A operand (rows M; B is the other)
    root_loops: tuple[int, ...]            # per root loop: the contraction loop it is
    k: int                                 # reduction extent (all reduction loops together)
    n_contiguous: bool                     # the B operand's contiguous dim is an N loop (else K)
    m_contiguous: bool                     # the A operand's contiguous dim is an M loop (else K)

    def loops_of(self, side: str) -> tuple[int, ...]:
        return tuple(l for l, s in enumerate(self.sides) if s == side)


def gemm_kernel(info: ChainInfo, members, root: int) -> GemmKernel | str:
    """The contraction kernel the ops `members` (root `root`) make, or why they do not make one."""
    members = set(members)
    contractions = [m for m in members if info.op(m).kind == "contraction"]
    if len(contractions) != 1:
        return "it holds no contraction" if not contractions else "it holds more than one contraction"
    (c,) = contractions
    co = info.op(c)
    if co.n_inputs != 2:
        return f"%{c} does not have two operands"
    for m in members - {c}:
        o = info.op(m)
        if o.kind in ("fill", "pad", "view"):
            continue
        if o.kind != "elementwise" or any(t != "parallel" for t in o.iterators):
            return f"%{m} ({o.label}) is not elementwise"
    init = co.producers[co.n_inputs] if len(co.producers) > co.n_inputs else None
    if init is None or init not in members or info.op(init).kind != "fill":
        return f"the accumulator of %{c} is not filled in the kernel"
    r = info.op(root)
    if root != c:
        if r.kind != "elementwise":
            return f"the root %{root} is not elementwise"
        corr = loop_correspondence(info, root, members).get(c)
        if corr is None:
            return f"the loops of %{c} do not follow the root's"
        loops = []
        for l in range(len(r.loops)):
            mine = corr.get(l, frozenset())
            if len(mine) != 1 or co.iterators[next(iter(mine))] != "parallel":
                return f"root loop {l} is not one parallel loop of %{c}"
            loops.append(next(iter(mine)))
        if sorted(loops) != list(co.parallel_loops):
            return f"the root's loops are not the parallel loops of %{c} one to one"
        root_loops = tuple(loops)
    else:
        root_loops = tuple(co.parallel_loops)
    uses = [frozenset().union(*co.operand_loops[k]) if co.operand_loops[k] else frozenset() for k in range(2)]
    sides = []
    for l, it in enumerate(co.iterators):
        if it != "parallel":
            sides.append("k")
        elif l in uses[0] and l not in uses[1]:
            sides.append("in0")
        elif l in uses[1] and l not in uses[0]:
            sides.append("in1")
        else:
            sides.append("batch")
    last = co.result_loops[-1] if co.result_loops else frozenset()
    inner = {sides[l] for l in last}
    if len(inner) != 1 or inner.pop() not in ("in0", "in1"):
        return "the output's contiguous dim is not one operand's"
    n_in = sides[next(iter(last))]
    m_operand = 1 if n_in == "in0" else 0
    named = tuple({"in0": "n" if n_in == "in0" else "m", "in1": "n" if n_in == "in1" else "m"}.get(s, s) for s in sides)
    if "m" not in named:
        return f"%{c} has no loop of its own on the {'first' if m_operand == 0 else 'second'} operand"
    k = math.prod(co.loops[l] for l, s in enumerate(named) if s == "k")

    def contiguous(operand: int, side: str) -> bool:
        dims = co.operand_loops[operand]
        return bool(dims) and any(named[l] == side for l in dims[-1])

    return GemmKernel(c, named, m_operand, root_loops, k, contiguous(1 - m_operand, "n"), contiguous(m_operand, "m"))


@dataclass(frozen=True)
class GemmShape:
    """One block's tiles of a contraction kernel, from the root's block tiles and (bk, tm, tn)."""
    tiles: tuple[int, ...]      # per contraction parallel loop: its static block tile (0 for k loops)
    bm: int
    bn: int
    bk: int
    tm: int
    tn: int

    @property
    def tx(self) -> int:
        return self.bn // self.tn

    @property
    def ty(self) -> int:
        return self.bm // self.tm

    @property
    def threads(self) -> int:
        return self.tx * self.ty

    @property
    def shared_bytes(self) -> int:
        """The two staging tiles, f32, with their padding (`tile_pad`; at most 4 words a row)."""
        return F32_BYTES * self.bk * (self.bm + 4 + self.bn + 4)

    @property
    def mma_shared_bytes(self) -> int:
        """Tensor cores: one shared array for the staging tiles (f16, swizzled; `mma_staged_bytes`),
        then the block's output tile (one word a row) that the epilogue reads back coalesced."""
        return mma_staged_bytes(self, (), 0)

    def blocks(self, extents) -> int:
        return math.prod(math.ceil(e / t) for e, t in zip(extents, self.tiles) if t)


def gemm_shape(info: ChainInfo, gk: GemmKernel, root: int, block: tuple[int, ...], gemm: tuple[int, ...]) -> GemmShape:
    co, r = info.op(gk.contraction), info.op(root)
    tiles = [0] * len(co.loops)
    for rl, cl in enumerate(gk.root_loops):
        tiles[cl] = block[rl] if block[rl] else r.loops[rl]
    bm = math.prod(tiles[l] for l in gk.loops_of("m"))
    bn = math.prod(tiles[l] for l in gk.loops_of("n"))
    bk, tm, tn = gemm[:3]
    return GemmShape(tuple(tiles), bm, bn, bk, tm, tn)


MMA_M, MMA_N, MMA_K = 16, 8, 16      # mma.sync.aligned.m16n8k16: one warp's fragment


def mma_tiles_error(bm: int, bn: int, bk: int, tm: int, tn: int) -> str | None:
    """Why tiles do not make a grid of mma.m16n8k16 warp tiles (None: they do): a thread's
    TM x TN accumulators are (TM/2) x (TN/2) fragments' quads, a warp's tile (8 TM) x (4 TN)."""
    if tm % 2 or tn % 2:
        return f"the register tile {tm}x{tn} is not made of 2x2 fragment quads"
    if bk % MMA_K:
        return f"the K step {bk} is not a multiple of {MMA_K}"
    wm, wn = MMA_M // 2 * tm, MMA_N // 2 * tn
    if bm % wm or bn % wn:
        return f"the block tile {bm}x{bn} is not a grid of {wm}x{wn} warp tiles"
    return None


F16_BYTES = 2


def _halves(width: int) -> int:
    """Halves a row of a tensor-core tile takes (emit/mma.py: SwizzledTile): its width where its
    16-byte chunks are a power of two or odd in number, else one chunk more."""
    c = width // 8
    return width if c & (c - 1) == 0 or c % 2 else width + 8


def restage_stride(bn: int) -> int:
    """Words between rows of a tensor-core block's output tile in shared memory (emit/mma.py:
    restage): the least above BN that is 8 mod 16, so the accumulator pairs a half-warp stores
    (rows g < 4 apart, 8 bytes at column 2 t) fill the 32 banks once."""
    return bn + 1 + (7 - bn) % 16


def mma_staged_bytes(s: "GemmShape", sides, stages: int) -> int:
    """A tensor-core block's shared array: both f16 tiles, rows along K or along the side (the
    larger of the two), a ring of `stages` for each cp.async side, or the f32 output tile the
    epilogue reads back (`restage_stride`), whichever is larger."""
    tile = {side: max(s.bk * _halves(b), b * _halves(s.bk)) for side, b in (("m", s.bm), ("n", s.bn))}
    halves = sum(n * (stages if stages and side in sides else 1) for side, n in tile.items())
    return max(F16_BYTES * halves, F32_BYTES * s.bm * restage_stride(s.bn))


def tile_pad(mma: bool, wide: bool = False) -> int:
    """Words of padding per row of a [BK][B] staging tile. FMA form: 1 (an odd row stride: the
    loader's transposed stores and the row reads hit 32 banks); 4 for a side read in runs of 4
    (`wide`: emit/gemm.py's WideGrid; a row stride a multiple of 4 words keeps each run 16-byte
    aligned for `LDS.128`). Tensor cores: 4 (B is a multiple
    of 8, so the stride is 4 or 12 mod 16 and a fragment read, k rows 2t (+1), columns g, hits
    bank 2t * stride + g: 32 banks)."""
    return 4 if mma or wide else 1


def mma_kind(info: ChainInfo, gk: GemmKernel, shape: GemmShape, hw=None) -> str | None:
    """'f16' or 'bf16' when the kernel runs on tensor cores (mma.sync.m16n8k16, f32 accumulate):
    both operands f16 or both bf16 (emit/mma.py: 16-bit swizzled tiles), a multiply-add body into
    an f32 accumulator, a device that has them (`hw.mma_sync_flops()`; None: any), and tiles a
    warp grid covers: TM, TN even, BK a multiple of 16, BM of 8 TM, BN of 4 TN. Else None (SIMT)."""
    if mma_error(info, gk, shape, hw) is not None:
        return None
    return info.op(gk.contraction).operand_dtypes[0]


def mma_error(info: ChainInfo, gk: GemmKernel, shape: GemmShape, hw=None) -> str | None:
    """Why a contraction kernel does not run on tensor cores (None: it does)."""
    co = info.op(gk.contraction)
    dts = co.operand_dtypes
    if len(dts) < 3 or dts[0] != dts[1] or dts[0] not in ("f16", "bf16"):
        return "its operands are not both f16 or both bf16"
    if dts[2] != "f32":
        return "it does not accumulate in f32"
    body = [b for b in co.body_ops if b != "linalg.yield"]
    if sorted(set(body) - {"arith.extf"}) != ["arith.addf", "arith.mulf"] or body.count("arith.mulf") != 1:
        return "its body is not a multiply-add"
    if hw is not None and not (hw.mma_sync_flops() if hasattr(hw, "mma_sync_flops") else 0):
        return f"{hw.name} has no tensor cores in its profile"
    if (why := mma_tiles_error(shape.bm, shape.bn, shape.bk, shape.tm, shape.tn)) is not None:
        return why
    # past the static 48 KB: dynamic shared memory, the kernel opted in (shared_limit)
    limit = max(SMEM_LIMIT, hw.onchip_per_block) if hw is not None and hw.kind == "gpu" else SMEM_LIMIT
    if shape.mma_shared_bytes > limit:
        return f"its {shape.bm}x{shape.bn} output tile does not fit in shared memory for the epilogue"
    return None


CP_ASYNC_CC = (8, 0)             # cp.async: sm_80 and later
STAGE_CHOICES = (2, 3)           # the tile search's cp.async rings


def staged_sides(info: ChainInfo, gk: GemmKernel, members, shape: GemmShape, hw=None) -> tuple[str, ...]:
    """The sides whose tile cp.async can copy as it lies (emit/gemm.py: `_runs_of_4`, staged): the
    operand's contiguous dim is the side's innermost loop with a block tile a multiple of 4 (runs
    of 16 bytes), K is one loop, the operand an f32 array no op of the kernel computes, and the
    device has cp.async (sm_80+; `hw` None: any). On tensor cores (tile rows along the operand's
    contiguous dim: emit/mma.py) an f16 or bf16 operand in runs of 8 halves: a side tile a multiple of 8
    where the side's loop is the contiguous one; K's innermost where K is several (a conv's)."""
    if hw is not None and (hw.kind != "gpu" or tuple(hw.cc) < CP_ASYNC_CC):
        return ()
    co = info.op(gk.contraction)
    mma, kl = mma_kind(info, gk, shape, hw), gk.loops_of("k")
    if len(kl) != 1 and not (mma and co.loops[kl[-1]] % shape.bk == 0):
        return ()
    out = []
    for side, op, contiguous in (("m", gk.m_operand, gk.m_contiguous), ("n", 1 - gk.m_operand, gk.n_contiguous)):
        p = co.producers[op]
        computed = p is not None and p in members and info.op(p).kind not in ("view",)
        big = [l for l in gk.loops_of(side) if shape.tiles[l] != 1]
        if mma:
            dims = co.operand_loops[op]
            k_fast = bool(dims) and kl[-1] in dims[-1]
            dims_of = co.operand_shapes[op] if op < len(co.operand_shapes) else ()
            rows8 = bool(dims_of) and dims_of[-1] > 0 and dims_of[-1] % 8 == 0    # (static, whole rows of 16 bytes)
            if (not computed and rows8 and co.operand_dtypes[op:op + 1] in (("f16",), ("bf16",))
                    and ((contiguous and big and len(kl) == 1 and shape.tiles[big[-1]] % 8 == 0) or (not contiguous and k_fast))):
                out.append(side)
        elif (contiguous and not computed and co.operand_dtypes[op:op + 1] == ("f32",)
                and big and shape.tiles[big[-1]] % 4 == 0):
            out.append(side)
    return tuple(out)


def staged_shared_bytes(s: GemmShape, sides, stages: int) -> int:
    """The staging tiles with a ring of `stages` for each staged side (4 words of padding a row)."""
    if not stages or not sides:
        return s.shared_bytes
    per = {"m": F32_BYTES * s.bk * (s.bm + 4), "n": F32_BYTES * s.bk * (s.bn + 4)}
    return sum(per[side] * (stages if side in sides else 1) for side in per)


def gemm_tiling_error(info: ChainInfo, members, root: int, block: tuple[int, ...], gemm: tuple[int, ...],
                      max_threads: int = 1024, stages: int = 0, hw=None) -> str | None:
    """Why the block tiles and (bk, tm, tn) do not make a contraction kernel (None: they do)."""
    gk = gemm_kernel(info, members, root)
    if isinstance(gk, str):
        return gk
    if len(gemm) < 3 or min(gemm[:3]) < 1:
        return "gemm needs [bk, tm, tn], each at least 1"
    if sum(1 for t in block if t) > 3:
        return "at most 3 loops can be mapped to GPU blocks"
    co = info.op(gk.contraction)
    for rl, cl in enumerate(gk.root_loops):
        if gk.sides[cl] == "batch" and block[rl] != 1 and co.loops[cl] > 1:
            return f"loop {rl} runs over both operands (a batch): its block tile must be 1"
    s = gemm_shape(info, gk, root, block, gemm)
    if s.bm % s.tm or s.bn % s.tn:
        return f"the register tile {s.tm}x{s.tn} does not divide the block tile {s.bm}x{s.bn}"
    if not 1 <= s.threads <= max_threads:
        return f"{s.threads} threads per block (limit {max_threads})"
    smem = s.shared_bytes
    if stages:
        if not 2 <= stages <= 4:
            return f"{stages} cp.async stages (2 to 4)"
        sides = staged_sides(info, gk, members, s, hw)
        if not sides:
            return "no operand tile cp.async can copy as it lies (an f32 operand along its side, " \
                   "runs of 4, or an f16 one on tensor cores, runs of 8; one K loop, sm_80+)"
        smem = (mma_staged_bytes(s, sides, stages) if mma_kind(info, gk, s, hw)
                else staged_shared_bytes(s, sides, stages))
    limit = shared_limit(info, gk, s, hw)
    if smem > limit:
        return f"{smem} B of shared memory per block (limit {limit})"
    return None


def shared_loads(t: int) -> int:
    """Shared loads per k for one side of a TM x TN register tile on the FMA path: a side that
    is a multiple of 4 reads its runs of 4 with one 16-byte load each (emit/gemm.py's WideGrid:
    LDS.128), another side one 4-byte load per element (LDS.32)."""
    return t // 4 if t % 4 == 0 else t


def shared_limit(info: ChainInfo, gk: GemmKernel, s: GemmShape, hw=None) -> int:
    """The shared memory a contraction block may have: past the static 48 KB, the device's
    per-block opt-in (`hw.onchip_per_block`: 227 KB on sm_90) for the FMA form whose tiles are
    f32 (f32, f16 or bf16 operands): emit/gemm.py carves them from the dynamic shared array and the
    launch opts the kernel in (emit/module.py: `_dynamic_shared`), and tensor cores (their one
    shared array dynamic past 48 KB: emit/mma.py). f64 and no device (`hw` None): the static limit."""
    if hw is None or hw.kind != "gpu":
        return SMEM_LIMIT
    if mma_kind(info, gk, s, hw):
        return max(SMEM_LIMIT, hw.onchip_per_block)
    if not set(info.op(gk.contraction).operand_dtypes[:2]) <= {"f32", "f16", "bf16"}:
        return SMEM_LIMIT
    return max(SMEM_LIMIT, hw.onchip_per_block)


def gemm_registers(tm: int, tn: int, loads: int, gathered: int = 0, mma: bool = False, flat: bool = False) -> int:
    """Registers per thread of a contraction kernel: the TM x TN accumulators, a column of A and
    a row of B per K step, one per element the thread loads per K step (`loads`), seven per element
    whose operand a producer computes in the loader (`gathered`: a pad's window keeps its bounds
    live; two where the loader reads through 1-D views, `flat`: a conv's K of several loops), and
    34 for indices and addresses; on tensor cores (`mma`) tm * tn + 2 tm + tn more (fragments); a
    channels-last conv whose operands cp.async copies (`flat`, no `loads`) 24 + 1.5 tm tn. Fitted
    to ptxas -v on this emitter's sm_90 kernels (docs/PERFORMANCE.md, "Figures behind the planner's
    constants"); the report's measured registers re-price the plan. Past 255 the rest spills."""
    if mma and flat and not loads and not gathered:
        return 24 + 3 * tm * tn // 2
    regs = 34 + tm * tn + tm + tn + loads + (2 if flat else 7) * gathered
    return regs + (tm * tn + 2 * tm + tn if mma else 0)


def resolve_contraction(info: ChainInfo, members, root: int, t, hw, target: str):
    """A contraction kernel's config as its group holds it: the search's (bk, tm, tn, prefetch)
    with the threads its block tile gives and its tensor-core type (`mma_kind`; "" on FMAs)."""
    gk = gemm_kernel(info, members, root)
    s = gemm_shape(info, gk, root, t.block, t.config.steps)
    return replace(t.config, threads_m=s.ty, threads_n=s.tx, mma=mma_kind(info, gk, s, hw) or "")


# ---- the time model (the registry's cost stage: templates.py) ------------------------------------

def gemm_time(info, members, root, tiling, hw, common, footprint, reads, corr, measured):
    """The contraction template's cost stage (templates.py: Template.cost)."""
    if hw.kind == "gpu":
        return _gpu_gemm_time(info, members, root, tiling, hw, common, reads, corr, measured)
    return cpu_time(info, members, root, tiling, hw, common, footprint, reads)


def _gpu_gemm_time(info, members, root, tiling: Tiling, hw: HardwareProfile, common, reads, corr,
                   measured: Measured | None = None):
    """A contraction kernel (plan/gemm.py): per block, K in steps of BK through shared memory,
    a TM x TN register tile per thread, the epilogue from registers.

    Compute is counted in warp instructions per K step and priced at an SM's issue rates: FMAs at
    the FP32 lanes' rate, shared loads and stores at one warp instruction per cycle (128 B/cycle),
    the loader's index arithmetic at the integer lanes' rate (half the FP32 lanes). An SM keeps
    its resident blocks' warps busy while one block waits at its barrier for the K step's global
    loads; a lone block pays the load latency every K step. The busiest SM runs ceil(blocks /
    SMs) blocks (the waves). Memory: each operand tile is read once per block (the re-reads of
    an operand by the blocks along the other side come from L2 when it holds them). On tensor
    cores (plan/gemm.py: mma_kind) the FMAs are mma.sync instructions at mma.sync's own ceiling
    (`hw.mma_sync_flops()`: on Hopper half the wgmma peak `tensor_flops_fp16` reports), plus
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
    side_loads = {"m": math.ceil(s.bk * s.bm / T), "n": math.ceil(s.bk * s.bn / T)}
    loads = side_loads["m"] + side_loads["n"]
    # elements whose operand a producer of the kernel computes in the loader (a pad's gather)
    computed = {side: (co.producers[op] is not None and co.producers[op] in members
                       and info.op(co.producers[op]).kind in ("pad", "elementwise"))
                for side, op in (("m", gk.m_operand), ("n", 1 - gk.m_operand))}
    gathered = sum(n for side, n in side_loads.items() if computed[side])
    mma = mma_kind(info, gk, s, hw)
    prefetch = tiling.config.prefetch
    flat = len(gk.loops_of("k")) > 1         # emit/gemm.py reads the operands through 1-D views
    stages = getattr(tiling.config, "stages", 0)
    staged = staged_sides(info, gk, members, s, hw) if stages else ()
    # elements copied by cp.async (no register, no shared store) and those read 16 bytes at a time
    copied = sum(side_loads[side] for side in staged)
    held = loads - copied
    # a double-buffered conv holds its window's coordinates and guards across the K step too
    regs, smem, local = (gemm_registers(s.tm, s.tn, loads - gathered - copied, gathered, bool(mma),
                                        flat=flat and not prefetch)
                         + (held if prefetch else 0),       # the next K step's elements, held
                         mma_staged_bytes(s, staged, stages) if mma else staged_shared_bytes(s, staged, stages), 0)
    ksteps = math.ceil(gk.k / s.bk)
    # words each thread spills and reloads per K step; the estimate runs low at the top end (against
    # ptxas), so within GEMM_REG_HEADROOM of the limit counts as spilling
    # a block's launch bounds (emit: `_bounds(threads)`) cap a thread's registers below the
    # device's limit at 65,536 / threads (in allocation units): ptxas spills past that cap
    limit = bounded_registers(hw, warps * WARP)
    spilled = max(0, regs - (limit - GEMM_REG_HEADROOM if limit == hw.regs_per_thread else limit))
    regs = min(regs, limit)
    coalesced = True                  # the loader walks each operand along its contiguous dim
    if measured is not None:
        regs, smem = measured.registers, measured.shared_bytes
        local = measured.local_bytes + measured.spill_bytes
        spilled = local // 4
        if measured.coalescing is not None:
            coalesced = measured.coalescing >= COALESCED
    regs_alloc = math.ceil(regs / 8) * 8
    fit = fitting_blocks(hw, warps, regs_alloc, smem)
    per_sm = max(1, fit)                  # fit == 0: a block does not fit on an SM (occupancy 0)
    resident = min(per_sm, math.ceil(blocks / hw.units))
    occupancy = warp_occupancy(hw, fit, warps)

    # warp instructions per K step of one warp
    fma_rate = hw.peak(4) / (2 * WARP * hw.units * hw.clock_hz)        # FMA warp instructions per SM cycle
    loader_ops, todo = set(), [p for p in co.producers[:2] if p is not None and p in members]
    while todo:                                   # the operands' producers, evaluated per element loaded
        m = todo.pop()
        if m not in loader_ops and info.op(m).kind in ("elementwise", "pad"):
            loader_ops.add(m)
            todo += [p for p in info.op(m).producers if p is not None and p in members]
    producers = sum(op_flops(info.op(m), hw) / max(1, info.op(m).points) for m in loader_ops)
    sts = loads - copied
    ints = loads * 8 + gathered * (12 + producers)      # index math; a gather's window and bounds
    if copied:        # a run of 4 (8 halves on tensor cores) copied by one LDGSTS.128: its index math and issue once a run
        ints -= copied * 6
        sts += copied // (8 if mma else 4)
    if mma:
        # per 16 of K: (TM/2) x (TN/2) mma.sync.m16n8k16 (2048 MACs each), the fragments read
        # from shared memory by ldmatrix.x4: one per A fragment, one per pair of B fragments
        steps = s.bk // MMA_K
        fma = steps * (s.tm // 2) * (s.tn // 2)
        lds = steps * (s.tm // 2 + (s.tn // 2 + 1) // 2)
        cvt = 0
        # mma per SM cycle at mma.sync's own ceiling (hardware.py: on sm_90 half the wgmma peak
        # that `tensor_flops_fp16` reports; wgmma is not what these kernels issue)
        mma_rate = hw.mma_sync_flops() / (2 * 2048 * hw.units * hw.clock_hz)
        issue = fma + lds + cvt + sts + 2 * loads + ints + 2 * spilled
        cyc = max(fma / mma_rate, lds + sts + 2 * spilled, (ints + cvt) / (fma_rate / 2), issue / SCHEDULERS)
    else:
        fma = s.bk * s.tm * s.tn
        # 16-byte runs priced where the loader reads through 1-D views (a conv, K of several
        # loops); elsewhere one per element as before, which keeps the other plans as they were
        lds = s.bk * ((shared_loads(s.tm) + shared_loads(s.tn)) if flat else (s.tm + s.tn))
        issue = fma + lds + sts + 2 * loads + ints
        issue += 2 * spilled                                          # a spilled word: a local store and load
        # with the kernel report: the SASS's hot loop (the K step written out, or a part of it)
        issue = issue_per_step(fma, issue, sts + 2 * loads + ints + 2 * spilled, measured)
        cyc = max(fma / fma_rate, lds + sts + 2 * spilled, ints / (fma_rate / 2), issue / SCHEDULERS)
    latency = hw.mem_latency_s * hw.clock_hz                        # cycles a K step's loads take
    barrier = 2 * 20                                                # two barriers per K step
    if staged:        # S - 1 steps' copies in flight while this step computes
        per_round = max(resident * warps * cyc, latency / (stages - 1)) + barrier
    elif prefetch:    # the next step's global loads are in flight while this step computes
        per_round = max(resident * warps * cyc, latency) + barrier
    else:             # a block waits for its loads before it computes: others fill the wait
        per_round = max(resident * warps * cyc, latency + warps * cyc) + barrier
    per_sm_blocks = math.ceil(blocks / hw.units)
    cycles = math.ceil(per_sm_blocks / resident) * ksteps * per_round
    if prefetch or staged:      # the first step's loads, before the loop, are waited for
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
    return finish_cost(dict(common, bytes_spilled=float(spill), onchip_bytes=int(smem)), hw, compute_s, memory_s,
                   hw.launch_s, alloc_s, threads=T, blocks=blocks, occupancy=min(1.0, occupancy),
                   recompute_s=0.0, spill_s=spill / hw.cache_bandwidth, waves=blocks / (per_sm * hw.units))
