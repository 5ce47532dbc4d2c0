"""Row kernels: which kernels can split each row over the threads of a block.

`row_kernel(info, members, root)` says whether a kernel is one (a RowKernel: all its
reductions reduce the same axis, the row) or why not (a string); the row axis is found by
following tensor dimensions, not loop positions. compiler/transforms/split_rows.py rewrites the
ops. See docs/ARCHITECTURE.md, "GPU kernels: how a plan becomes CUDA" (row kernels).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .analysis import ChainInfo, OpInfo
from .. import combiners
from .cost import (COALESCED, COMBINE_CYCLES, DEP_LATENCY, MEM_PARALLELISM, SCHEDULERS, SECTOR, Tiling,
                   finish_cost, fitting_blocks, in_flight_loads, latency_bandwidth, op_flops, product,
                   warp_occupancy)
from .cost_cpu import cpu_time
from .hardware import WARP, HardwareProfile
from .measured import Measured


@dataclass(frozen=True)
class RowKernel:
    """A kernel whose rows can be split over threads."""
    extent: int                                   # N: elements per row
    root_loop: int | None                         # the root's loop along the row (None: the root is per row)
    op_loops: tuple[tuple[int, int | None], ...]  # (member op, its loop along the row or None)
    reductions: tuple[int, ...]                   # member reductions (each reduces its row loop)
    combiners: tuple[tuple[int, str], ...]        # (reduction, its combining body op)
    coalesced: bool                               # every tensor read along the row has it as its last dim
    inputs_along_row: tuple[str, ...]             # external tensors read along the row (operand keys)

    def loop_of(self, op: int) -> int | None:
        return dict(self.op_loops).get(op)

    def thread_counts(self, limit: int) -> list[int]:
        """Threads per row that divide the row (a cyclic split needs whole chunks), at most `limit`."""
        return [t for t in range(1, min(limit, self.extent) + 1) if self.extent % t == 0]


class _Classes:
    """Union-find over (tensor key, dim) and (op, loop) nodes."""

    def __init__(self):
        self.parent: dict = {}

    def find(self, x):
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a, b) -> None:
        self.parent[self.find(a)] = self.find(b)


def _single_loop(dims: frozenset) -> int | None:
    return next(iter(dims)) if len(dims) == 1 else None


def _axes(info: ChainInfo, members: frozenset[int]) -> _Classes:
    """Which loops of the members and which tensor dims are the same axis."""
    cls = _Classes()
    for m in members:
        o = info.op(m)
        if o.kind == "view":
            continue
        for k, key in enumerate(o.operand_keys):
            if k >= len(o.operand_loops) or not key.startswith(("arg", "%")):   # an empty or a constant:
                continue                                                          # no tensor of the chain
            for d, loops in enumerate(o.operand_loops[k]):
                loop = _single_loop(loops)
                if loop is not None:
                    cls.union((key, d), (m, loop))
        for r in range(max(1, len(o.result_shapes))):
            k = o.n_inputs + r
            if k < len(o.operand_loops):
                for d, loops in enumerate(o.operand_loops[k]):
                    loop = _single_loop(loops)
                    if loop is not None:
                        cls.union((f"%{m}:{r}", d), (m, loop))
    return cls


def _view_unions(info: ChainInfo, cls: _Classes) -> None:
    """Dims of a view that are dims of its source are the same axis."""
    for o in info.ops:
        if o.kind != "view" or not o.operand_keys:
            continue
        for d, src in enumerate(o.view_dims):
            if src is not None:
                cls.union((f"%{o.id}:0", d), (o.operand_keys[0], src))


def row_kernel(info: ChainInfo, members, root: int) -> RowKernel | str:
    """The kernel's row structure, or why its rows cannot be split over threads."""
    members = frozenset(members)
    compute = [m for m in sorted(members) if info.op(m).kind not in ("fill", "view")]
    reductions = [m for m in compute if info.op(m).kind == "reduction"]
    if not reductions:
        return "it has no reduction"
    if any(info.op(m).kind in ("contraction", "pad") for m in compute):
        return "it holds a contraction or a pad"
    named = next((m for m in compute if info.op(m).name != "linalg.generic"), None)
    if named is not None:                        # split_rows rewrites generics' maps
        return f"%{named} is a {info.op(named).name}, not a generic"
    cls = _axes(info, members)
    _view_unions(info, cls)
    row = None
    combiners = []
    for m in reductions:
        o = info.op(m)
        red = [i for i, t in enumerate(o.iterators) if t == "reduction"]
        if len(red) != 1:
            return f"%{m} reduces {len(red)} axes (one row axis is split over threads)"
        if len(o.result_shapes) > 1:
            return f"%{m} has several results"
        c = cls.find((m, red[0]))
        if row is None:
            row = c
        elif c != row:
            return f"%{m} reduces another axis than %{reductions[0]}"
        combiner = _combiner(info, o)
        if isinstance(combiner, str) and combiner.startswith("!"):
            return f"%{m} {combiner[1:]}"
        combiners.append((m, combiner))
    # the axes that number the rows: what the reductions keep
    row_axes = {cls.find((m, i)) for m in reductions for i in info.op(m).parallel_loops}
    op_loops = []
    extent = None
    for m in compute:
        o = info.op(m)
        other = [i for i in o.parallel_loops if o.loops[i] > 1 and cls.find((m, i)) not in row_axes | {row}]
        if other:     # split_rows would leave that loop whole at block level: wrong numbers on the gpu
            return f"%{m} walks an axis that is neither the row nor one that numbers the rows"
        along = [i for i in range(len(o.loops)) if cls.find((m, i)) == row]
        if len(along) > 1:
            return f"%{m} walks the row with several loops"
        loop = along[0] if along else None
        if loop is not None:
            if o.iterators[loop] == "reduction" and m not in reductions:
                return f"%{m} reduces the row without being a reduction"
            if o.kind == "reduction" and o.iterators[loop] != "reduction":
                return f"%{m} keeps the row axis"
            if extent is None:
                extent = o.loops[loop]
            elif o.loops[loop] != extent:
                return f"%{m} walks {o.loops[loop]} elements of a {extent}-element row"
        bad = _off_row_access(o, loop, lambda k, d: cls.find((o.operand_keys[k], d)) == row)
        if bad:
            return f"%{m} {bad}"
        for k, p in enumerate(o.producers[:o.n_inputs]):
            # a member read at a fixed index of an axis it computes (x[-1:] of a value of the kernel):
            # a block would compute another block's rows, whole, in its own buffers
            if p in members and info.op(p).kind not in ("fill", "view") and k < len(o.operand_loops) and any(
                    not loops and n > 1 for loops, n in zip(o.operand_loops[k], o.operand_shapes[k])):
                return f"%{m} reads %{p} at a fixed index of an axis the kernel computes"
        op_loops.append((m, loop))
    root_loop = dict(op_loops).get(root)
    inputs, coalesced = [], True
    for m, loop in op_loops:
        if loop is None:
            continue
        o = info.op(m)
        for k, key in enumerate(o.operand_keys[:o.n_inputs]):
            p = o.producers[k]
            if p is not None and p in members:
                continue
            dims = [d for d, loops in enumerate(o.operand_loops[k]) if loop in loops]
            if not dims:
                continue
            inputs.append(key)
            shape = o.operand_shapes[k]
            last = max((d for d, n in enumerate(shape) if n != 1), default=len(shape) - 1)
            coalesced &= dims == [last]
    if extent is None or extent < 2:
        return "its rows have fewer than 2 elements"
    return RowKernel(extent, root_loop, tuple(op_loops), tuple(reductions), tuple(combiners), coalesced,
                     tuple(dict.fromkeys(inputs)))


def _combiner(info: ChainInfo, o: OpInfo) -> str:
    """The reduction's combining op, a combiner of compiler/combiners.py, when its init is that
    op's neutral element ('!why' if not: a body op that is no combiner keeps the kernel off the
    row split, by design). A neutral that is a bound of the integer type (the integer min and
    max) is not compared, the analysis keeping no width: any init is right for them, since they
    are idempotent (each partial combines the init once; argmax's index search starts from the
    row's length)."""
    ops = [c for c in o.reduction_ops]
    if len(ops) != 1:
        return f"!combines its accumulator with {len(ops)} ops"
    combiner = ops[0]
    init = o.producers[o.n_inputs] if len(o.producers) > o.n_inputs else None
    if init is None or info.op(init).kind != "fill":
        return "!has an initial value that is not a fill"
    value = info.op(init).fill_value
    found = combiners.of_op(combiner)
    if found is None:
        return f"!combines with {combiner}"
    c, form = found
    if form.bound and c.idempotent:
        return combiner
    if value is None or value != form.neutral:
        return f"!starts from {value}, not the neutral element of {combiner}"
    return combiner


def _off_row_access(o: OpInfo, loop: int | None, on_row) -> str | None:
    """Why an operand's access along the row is not the op's row loop alone (None when each
    row-axis dim it reads is indexed by exactly that loop, over the whole dim)."""
    for k, dims in enumerate(o.operand_loops[:len(o.operand_keys)]):
        for d, loops in enumerate(dims):
            if loop is not None and loop in loops and len(loops) > 1:
                return "indexes the row with a compound expression"
            if on_row(k, d) and loops != frozenset({loop}):
                return "reads single elements of a row"
            shape = o.operand_shapes[k] if k < len(o.operand_shapes) else ()
            if loop is not None and loops == frozenset({loop}) and d < len(shape) and shape[d] != o.loops[loop]:
                # x[:, 1:33] of [M, 40] (d1 + 1), x[:, ::2] (d1 * 2): split_rows splits whole
                # dims indexed by the loop alone; it would leave this one unsplit
                return f"reads {o.loops[loop]} elements of a {shape[d]}-element dim along the row (a slice)"
    return None


def row_tiling_error(info: ChainInfo, members, root: int, t, target: str, max_threads: int = 1024) -> str | None:
    """Why a row-kernel tiling `t` (a cost.Tiling) does not fit the kernel (None when it does). The row threads
    split each row cyclically, so they divide it; rows go to blocks: the root's outer mapped row
    loops one row per block, its innermost mapped row loop R rows per block, one thread row each
    (thread tile 1), so a block has T x R threads."""
    if target != "gpu":
        return "rows are split over threads only on a GPU"
    rk = row_kernel(info, members, root)
    if isinstance(rk, str):
        return f"not a row kernel: {rk}"
    if rk.extent % t.config.threads:
        return f"{t.config.threads} threads do not divide a {rk.extent}-element row"
    if rk.root_loop is not None and t.block[rk.root_loop]:
        return "the row loop itself cannot be tiled"
    if len(t.mapped) > 2:
        return "at most 2 row loops map to blocks beside the row threads"
    if any(t.block[loop] != 1 for loop in t.mapped[:-1]):
        return "outer row loops go to blocks one row at a time"
    if t.mapped and t.thread[t.mapped[-1]] != 1:
        return "each row of a block is one row of threads (thread tile 1)"
    rows = t.block[t.mapped[-1]] if t.mapped else 1
    n_rows = info.op(root).loops[t.mapped[-1]] if t.mapped else 1
    if rows > 1 and n_rows % rows:
        # the last block would hold a partial, run-time count of rows: each block takes whole tiles
        return f"{rows} rows per block do not divide the {n_rows} rows of loop {t.mapped[-1]}"
    if rows * t.config.threads > max_threads:
        return f"{rows} rows x {t.config.threads} threads exceed {max_threads} threads per block"
    return None


# ---- the layout of a row over its threads ----------------------------------------------------------

RUN = 4                   # f32 per 16-byte access: a blocked-cyclic thread's run


def row_layout(info: ChainInfo, members, root: int, threads: int, columns: bool = False) -> tuple[int, str]:
    """(runs, why): how each of the T threads holds its share of a row. RUN when every tensor
    the kernel reads along the row from global memory is f32 with the row as its contiguous dim,
    RUN x T divides the row, the thread's share is unrolled (J = N/T <= ROW_KEPT:
    emit/row_phases.py writes each run's 4 loads as one `_ld4_f32`): blocked-cyclic, thread t
    holds the runs 4t + {0..3} + 4T*q, each run one 16-byte load (and store) where its address
    is 16-byte aligned at run time (else 4 scalar ones), no member gathers (its loads are at
    computed indices, left 4-byte), and no tensor is read along the row through a view other than expand_shape (a collapse's div/mod hides that a run's addresses
    are consecutive: the emitter would write 4 scalar loads 16 bytes apart per lane, a quarter
    of each sector). The row's extent a multiple of 4 keeps every row's start, so every run,
    aligned in a contiguous array. Else 1: cyclic (thread t holds t + T*j, one 4-byte load
    each), with the reason."""
    rk = row_kernel(info, members, root)
    if isinstance(rk, str):
        return 1, f"not a row kernel: {rk}"
    if columns:
        return 1, "a column kernel's threads walk the strided axis"
    if not rk.coalesced:
        return 1, "a tensor read along the row is not contiguous along it"
    if rk.extent % (RUN * threads):
        return 1, f"{RUN} x {threads} threads do not divide a {rk.extent}-element row"
    if rk.extent // threads > ROW_KEPT:
        return 1, f"{rk.extent // threads} elements per thread: the phases stay loops (over {ROW_KEPT})"
    gather = next((m for m in members if info.op(m).indirect), None)
    if gather is not None:          # its loads are at computed indices: 4-byte, 16 bytes apart in a run
        return 1, f"%{gather} reads {info.op(gather).indirect[0][0]} at computed indices (a gather)"
    found = False
    for m, loop in rk.op_loops:
        if loop is None:
            continue
        o = info.op(m)
        for k, key in enumerate(o.operand_keys[:o.n_inputs]):
            p = o.producers[k]
            if (p is not None and p in members) or not any(loop in loops for loops in o.operand_loops[k]):
                continue
            dtype = o.operand_dtypes[k] if k < len(o.operand_dtypes) else "?"
            if dtype != "f32":
                return 1, f"{key} is read along the row as {dtype}, not f32"
            while p is not None and info.op(p).kind == "view":
                v = info.op(p)
                if v.name != "tensor.expand_shape":   # a collapse's div/mod: no consecutive address text
                    return 1, f"{key} is read along the row through %{p} {v.name.split('.')[-1]}"
                p = v.producers[0] if v.producers else None
            found = True
    if not found:
        return 1, "no tensor is read along the row from global memory"
    return RUN, f"runs of {RUN} f32 (16-byte loads where aligned at run time)"


def resolve_rows(info: ChainInfo, members, root: int, t, hw, target: str):
    """A row kernel's config as its group holds it: the search's threads with its layout
    (row_layout: runs of 4 where they fit)."""
    from dataclasses import replace
    if target != "gpu":
        return replace(t.config, runs=0)
    if t.config.runs:                  # a hand plan's (handplan.py checked a forced 4 fits)
        return t.config
    runs, _ = row_layout(info, members, root, t.config.threads, t.config.columns)
    return replace(t.config, runs=runs)


# ---- the time model (the registry's cost stage: templates.py) ------------------------------------

def row_time(info, members, root, tiling, hw, common, footprint, reads, corr, measured):
    """The row template's cost stage (templates.py: Template.cost)."""
    if hw.kind == "gpu":
        return _gpu_row_time(info, members, root, tiling, hw, common, reads, corr, measured)
    return cpu_time(info, members, root, tiling, hw, common, footprint, reads)


def _gpu_row_time(info, members, root, tiling: Tiling, hw: HardwareProfile, common, reads, corr,
                  measured: Measured | None = None):
    """A row kernel (plan/rows.py): rows to blocks, each row split cyclically over T threads.

    Each reduction is a phase (every thread accumulates J = N/T elements, then the block
    combines the T partials: warp shuffles and a shared-memory slot per warp), and so is the
    root when it walks the row; an elementwise producer along the row is computed again in each
    phase that needs it. A tensor read along the row is read from global memory in the first
    phase that needs it; when J <= ROW_KEPT the emitter keeps the thread's elements in registers
    for the later phases (emit/row_phases.py), else the later phases read it again, from L1 when
    the rows of the resident blocks fit there (else from L2, else from memory)."""
    rk = row_kernel(info, members, root)
    if isinstance(rk, str):
        raise ValueError(f"not a row kernel: {rk}")
    T = tiling.config.threads
    R = tiling.block[tiling.mapped[-1]] if tiling.mapped else 1
    threads = T * R
    r = info.op(root)
    blocks = product(r.loops[l] // tiling.block[l] for l in tiling.mapped) if tiling.mapped else 1
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
    flops += len(rk.reductions) * product(r.loops[l] for l in tiling.mapped) * T      # the combines

    # on chip: per reduction T partials, one slot per warp and the row's result, per row of the block
    warps = math.ceil(threads / WARP)
    smem = sum(R * (T + math.ceil(T / WARP) + 1) * max(4, info.op(m).elem_bytes) for m in rk.reductions)
    regs = row_registers(J, R)
    # a column kernel (RowConfig.columns): a warp reads R consecutive columns of a few rows
    coalesced = rk.coalesced or (getattr(tiling.config, "columns", False) and R * 4 >= SECTOR)
    if measured is not None:
        regs, smem = measured.registers, measured.shared_bytes
        if measured.coalescing is not None:
            coalesced = measured.coalescing >= COALESCED
    per_sm = max(1, fitting_blocks(hw, warps, regs, smem))
    resident = min(blocks, per_sm * hw.units)
    waves = math.ceil(blocks / (per_sm * hw.units))
    occupancy = warp_occupancy(hw, per_sm, warps)

    # re-reads of the row by later phases: from L1 when the resident rows fit beside shared memory
    row_inputs = {key for key in rk.inputs_along_row if key in reads}
    row_bytes = sum(reads[k][0] for k in row_inputs) / max(1, blocks)              # one block's rows
    blocks_per_sm = resident / min(hw.units, max(1, resident))
    l1_free = hw.onchip_per_unit - blocks_per_sm * smem
    readers = {k: {m for m in members if k in info.op(m).operand_keys[:info.op(m).n_inputs]} for k in row_inputs}
    passes = {k: sum(1 for closure in phases.values() if closure & readers[k]) for k in row_inputs}
    if J <= ROW_KEPT:                          # later phases read the thread's elements from registers
        passes = {k: min(1, n) for k, n in passes.items()}
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
    if measured is not None and measured.loads_in_flight and measured.global_load_bytes:
        # the bytes each thread keeps in flight (the SASS's) bound what its SM draws: Little's law
        bw = min(bw, latency_bandwidth(hw, resident * threads / min(hw.units, max(1, resident)),
                                       in_flight_loads(1, measured) * measured.global_load_bytes))
    throughput = (dram / bw + cached / hw.cache_bandwidth + l1 / l1_bw) / share

    # latency: per thread, J/runs loads per row tensor per phase (runs of 4 f32 one 16-byte load
    # each: row_layout), the first from memory, the others from L1, a few in flight; each
    # combine a handful of shuffles and two barriers
    runs = getattr(tiling.config, "runs", 0) or row_layout(info, members, root, T,
                                                           bool(getattr(tiling.config, "columns", False)))[0]
    loads_first = J // runs * len(row_inputs)
    loads_again = J // runs * sum(max(0, n - 1) for n in passes.values())
    l1_latency = 0.15 * hw.mem_latency_s
    # in flight: a phase's loads are issued before their first use (emit/row_phases.py); the
    # SASS's fewest over the phases when the kernel report measured them, else MEM_PARALLELISM
    # as every template assumes without it
    # (a thread with fewer loads than that still waits one latency for them: a row of runs of 4
    # is J/4 16-byte loads, one for a softmax of 4 elements per thread)
    in_flight = in_flight_loads(MEM_PARALLELISM, measured)
    per_thread = (max(loads_first / in_flight, min(1, loads_first)) * hw.mem_latency_s
                  + loads_again * (l1_latency if l1_hit else hw.mem_latency_s) / in_flight)
    per_thread += len(rk.reductions) * (COMBINE_CYCLES + math.log2(max(2, T)) * DEP_LATENCY) / hw.clock_hz
    latency = waves * per_thread
    warps_per_scheduler = resident * warps / min(hw.units, max(1, resident)) / SCHEDULERS
    cycles_per_op = max(1.0, DEP_LATENCY / max(1.0, warps_per_scheduler))
    latency_cmp = waves * flops / max(1, blocks * threads) * cycles_per_op / hw.clock_hz

    lanes = threads / (warps * WARP)
    compute_s = max(flops / (hw.peak(r.elem_bytes) * lanes * share), latency_cmp)
    memory_s = max(throughput, latency)
    alloc_s = hw.alloc_s * common["writes"]
    return finish_cost(dict(common, flops=flops, recompute_flops=recompute, bytes_read=dram - common["bytes_written"],
                        bytes_cached=cached + l1, bytes_spilled=0.0, onchip_bytes=int(smem)), hw,
                   compute_s, memory_s, hw.launch_s, alloc_s, threads=threads, blocks=blocks,
                   occupancy=min(1.0, occupancy), recompute_s=compute_s * recompute / max(flops, 1e-30), spill_s=0.0)


ROW_UNROLL_LIMIT = 96     # elements per thread beyond which LLVM no longer unrolls a row kernel's loops
ROW_KEPT = 16             # elements per thread up to which the emitter unrolls a phase, loads first, and
                          # keeps a row's elements in registers for the later phases (emit/row_phases.py)


def row_registers(per_thread: int, rows: int) -> int:
    """Registers per thread of a row kernel, estimated from the elements each thread handles per
    row (`per_thread` = N/T: LLVM unrolls those loops up to ROW_UNROLL_LIMIT) and whether the
    block holds several rows; the kernel report measures the real ones.
    Fitted to ptxas (sm_90, launch bounds T x R) on this emitter's softmax, layernorm and rmsnorm
    kernels with their phases unrolled and the row kept in registers, cyclic and blocked-cyclic
    alike (the layout moves them by 0-4): layernorm, the most (x kept, gamma and beta loaded in
    the output phase), is 28-30 at J = 3-4, 37-41 at 6, 40-42 at 8, 55-58 at 12, 64-68 at 16
    (R = 1 or 8); the estimate is 0-6 above it, and 5-30 above softmax (25-40) and rmsnorm
    (22-50). (It was 26 + 3J + 4: 6-14 above layernorm.)"""
    if per_thread > ROW_UNROLL_LIMIT:
        return 32 + (4 if rows > 1 else 0)
    return min(255, 20 + 3 * per_thread + (2 if rows > 1 else 0))


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
