"""Tile candidates for one kernel and the cost model's pick among them.

GPU: the root's last three tileable loops are mapped, block tiles divide their loops and thread
tiles the block tiles, within the profile's threads per block; the search moves from the
conventional shape only for a predicted gain of 2% or more. CPU: one loop is split into prange
chunks, every divisor a candidate. See docs/FUSION.md, "The cost model" (tiles).
"""
from __future__ import annotations

from contextlib import contextmanager

import itertools
import math
from dataclasses import dataclass

from .analysis import ChainInfo, tileable_loops
from .cost import KernelCost, Tiling, allocated_registers, kernel_bytes, kernel_cost, op_flops, unfused_kernels
from .hardware import WARP, HardwareProfile
from .measured import Measured
from .attention import Attention, attention_kernel, attention_tiles
from .conv import library_conv
from .attention_mma import MMA_BQ, attention_mma_kind, mma_shared_bytes, mma_tiles
from .gemm import STAGE_CHOICES, gemm_kernel, gemm_shape, gemm_tiling_error, staged_sides
from .rows import row_kernel, row_registers, row_tiling_error
from .templates import TEMPLATES, AttentionConfig, ContractionConfig, RowConfig, ScanConfig, searched_config

MARGIN = 0.02          # a candidate must be this much faster than the incumbent to replace it
MAX_CPU_CANDIDATES = 48


@dataclass(frozen=True)
class Choice:
    tiling: Tiling
    cost: KernelCost
    candidates: tuple[tuple[Tiling, float], ...]      # what was evaluated, fastest first
    tuned: bool = False                                # tiles taken from autotuning


VECTOR = 4                   # f32 a thread of an elementwise kernel takes along the contiguous axis: 16 bytes


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(math.isqrt(n)) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _largest_divisor(n: int, limit: int) -> int:
    for d in range(min(n, max(1, limit)), 0, -1):
        if n % d == 0:
            return d
    return 1


def group_signature(info: ChainInfo, members) -> str:
    """A key for a kernel independent of op numbering: its ops' kinds, bodies, shapes and dtypes."""
    parts = []
    root = max(m for m in members if info.op(m).is_compute)
    for m in sorted(members):
        o = info.op(m)
        parts.append(f"{o.kind}:{o.name}:{'/'.join(o.body_ops)}:{o.loops}:{o.operand_shapes}:"
                     f"{o.operand_elem_bytes}:{o.elem_bytes}:{m == root}")
    return "|".join(parts)


class TileChooser:
    """Best tiles per kernel (memoised), for one chain, target and profile."""

    def __init__(self, info: ChainInfo, target: str, hw: HardwareProfile, tuned: dict | None = None,
                 run_time_loops: dict[int, frozenset[int]] | None = None):
        self.info, self.target, self.hw = info, target, hw
        self.tuned = tuned or {}
        # per op, the loops whose extent is taken at run time (--dynamic): on the gpu a block's
        # tile along one is clamped at the edge, so its threads each take one point of it (a
        # thread loop's count must be the tile's at most) and a row kernel's block one row of it
        # (the row split needs the block's rows as a number)
        self.run_time = run_time_loops or {}
        self.memo: dict[tuple, Choice] = {}
        self.seeds: dict[int, list[Tiling]] = {}          # good tilings found per root
        self.unwritten: frozenset[int] = frozenset()      # ops no kernel priced now writes (writing_none_of)

    @contextmanager
    def writing_none_of(self, ops):
        """Price kernels as computing `ops` for themselves only (Kernel.recomputed)."""
        old, self.unwritten = self.unwritten, frozenset(ops)
        try:
            yield self
        finally:
            self.unwritten = old

    def _key(self, members: frozenset) -> tuple:
        return members, self.unwritten & members

    def root(self, members) -> int:
        return max(m for m in members if self.info.op(m).is_compute)

    def cost(self, members, tiling: Tiling, measured: Measured | None = None) -> KernelCost:
        members = frozenset(members)
        unfused = (sum(kernel_bytes(self.info, p) for p in unfused_kernels(self.info, members)),
                   sum(op_flops(self.info.op(m), self.hw) for m in members
                       if self.info.op(m).is_compute and self.info.op(m).kind not in ("fill", "pad")),
                   len(unfused_kernels(self.info, members)))
        return kernel_cost(self.info, members, self.root(members), tiling, self.hw, unfused, measured,
                           self.unwritten & members)

    def best(self, members) -> Choice:
        members = frozenset(members)
        key = self._key(members)
        if key not in self.memo:
            self.memo[key] = self._choose(members)
            if not self.memo[key].tuned:
                self.seeds.setdefault(self.root(members), []).append(self.memo[key].tiling)
        return self.memo[key]

    def group_best(self, g) -> Choice:
        """A planned kernel's (a Kernel's) tiling choice, priced with the members it does not write."""
        with self.writing_none_of(g.recomputed):
            return self.best(frozenset(g.ops))

    def group_cost(self, g, measured: Measured | None = None) -> KernelCost:
        """A planned kernel's cost at its tiling, priced with the members it does not write."""
        with self.writing_none_of(g.recomputed):
            return self.cost(g.ops, g.tiling, measured)

    def offer(self, members, tiling: Tiling) -> Choice:
        """Try a tiling found for another kernel with the same root; keep it if it is better, so
        that two kernels compared in a decision are searched alike."""
        members = frozenset(members)
        old = self.best(members)
        if old.tuned or tiling == old.tiling or not self._valid(members, tiling):
            return old
        c = self.cost(members, tiling)
        if c.time_s < old.cost.time_s * (1 - MARGIN):
            ranked = tuple(sorted(old.candidates + ((tiling, c.time_s),), key=lambda x: x[1]))
            self.memo[self._key(members)] = Choice(tiling, c, ranked)
        return self.memo[self._key(members)]

    def _valid(self, members, t: Tiling) -> bool:
        allowed = tileable_loops(self.info, self.root(members), set(members))
        valid = TEMPLATES[t.config.name].stage("valid")
        if valid is not None:
            return valid(self, members, t, allowed)
        if not t.mapped:
            return not allowed
        return set(t.mapped) <= set(allowed) and (self.target != "gpu" or tuple(t.mapped) == tuple(allowed[-3:]))

    def _choose(self, members: frozenset) -> Choice:
        root = self.root(members)
        tile = tileable_loops(self.info, root, set(members))
        tuned = self.tuned.get(group_signature(self.info, members))
        if tuned is not None:
            t = Tiling(tuple(tuned["block"]), tuple(tuned.get("thread", ())), tuple(tuned["mapped"]),
                       searched_config(int(tuned.get("row_threads", 0)), tuple(tuned.get("gemm", ())),
                                       bool(tuned.get("row_columns", False))))
            c = self.cost(members, t)
            return Choice(t, c, ((t, c.time_s),), tuned=True)
        choice = None
        for t in TEMPLATES.values():           # plan/templates.py: claiming searches first, then the rest compete
            search = t.stage("search")
            found = search(self, members, root, tile) if search else None
            if found is not None and t.claims:
                return found
            if found is not None:
                choice = _prefer(found, choice) if choice else found
        return choice

    def loop_search(self, members, root, tile) -> Choice:
        """A loop nest's tiles: one block when no loop can be split, else the gpu's hill-climb
        or the cpu's divisors."""
        if not tile:
            n = len(self.info.op(root).loops)
            serial = Tiling((0,) * n, (0,) * n if self.target == "gpu" else (), ())
            c = self.cost(members, serial)
            return Choice(serial, c, ((serial, c.time_s),))
        search = self._gpu_search if self.target == "gpu" else self._cpu_search
        return search(members, root, tile)

    def attention_search(self, members, root, tile) -> Choice | None:
        """An attention kernel's tiles (plan/attention.py): on the gpu every (queries per block,
        keys per step) whose shared memory fits, on the cpu query blocks of 32-256 rows and key
        steps of 64-512; None when `members` are not an attention kernel."""
        a = attention_kernel(self.info, members, self.target)
        if not isinstance(a, Attention):
            return None
        n = len(self.info.op(self.root(members)).loops)
        gpu = self.target == "gpu"
        if gpu:
            shapes = attention_tiles(a)
        else:
            shapes = [(bq, bkv) for bq in (32, 64, 128, 256) for bkv in (64, 128, 256, 512)
                      if bq <= max(32, a.sq) and bkv <= max(64, a.sk)]
        configs = [AttentionConfig(block_q=bq, block_kv=bkv) for bq, bkv in shapes]
        kind = attention_mma_kind(self.info, a, MMA_BQ, self.hw) if gpu else ""
        if kind:      # the tensor-core form (plan/attention_mma.py), where its shared memory fits
            configs += [AttentionConfig(block_q=bq, block_kv=bkv, mma=kind) for bq, bkv in mma_tiles(a)
                        if mma_shared_bytes(a.d, a.dv, bkv) <= self.hw.onchip_per_block]
        evaluated = []
        for config in configs:
            t = Tiling((0,) * n, (0,) * n if gpu else (), (), config)
            evaluated.append((t, self.cost(members, t)))
        if not evaluated:
            return None
        if gpu:       # as for contraction kernels: shapes that give every SM a block, when there are any
            filling = [(t, c) for t, c in evaluated if self._fills(c)]
            evaluated = filling or evaluated
        evaluated.sort(key=lambda x: x[1].time_s)
        best = evaluated[0]
        return Choice(best[0], best[1], tuple((t, c.time_s) for t, c in evaluated[:3]))

    def scan_search(self, members, root, tile) -> Choice | None:
        """A scan kernel (cumsum, cumprod) is not tiled by MLIR: its template walks each row along
        the axis. gpu, along the last axis: T threads per row (a block each), a warp multiple up
        to the row's length, 128 to 1024 tried; along another axis: a thread per row, blocks of
        64 to 256; cpu: a prange over the rows."""
        r = self.info.op(root)
        if not r.scan:
            return None
        n = len(r.loops)
        if self.target != "gpu":
            t = Tiling((0,) * n, (), (), ScanConfig(threads=1))
            c = self.cost(members, t)
            return Choice(t, c, ((t, c.time_s),))
        extent = r.loops[r.scan_axis]
        if r.scan_axis == n - 2:           # along the contiguous axis: a row's threads scan it together
            fit = min(self.hw.max_threads_per_block, max(32, -(-extent // 32) * 32))
            counts = sorted({min(fit, T) for T in (128, 256, 512, 1024)})
        else:                              # a thread per row, consecutive rows side by side
            counts = [T for T in (64, 128, 256) if T <= self.hw.max_threads_per_block]
        evaluated = [(t, self.cost(members, t)) for t in
                     (Tiling((0,) * n, (0,) * n, (), ScanConfig(threads=T)) for T in counts)]
        evaluated.sort(key=lambda x: x[1].time_s)
        return Choice(evaluated[0][0], evaluated[0][1], tuple((t, c.time_s) for t, c in evaluated))

    # ---- cpu: every divisor of one loop --------------------------------------------------
    def _cpu_search(self, members, root, tile) -> Choice:
        """Chunks along the first tileable loop, every divisor a candidate (the default: about
        4 chunks a core). A kernel with a conv the cpu hands to BLAS also tries the second: the
        conv's filters are its first loop after a batch of 1, and each filter chunk gathers the
        whole input's im2col columns again, where a chunk of output rows gathers its own
        (ResNet-18's 7x7 stem at batch 1: 3.41 ms in two filter chunks, 2.69 ms in two row
        chunks, predicted 3.06 and 2.68 ms)."""
        r = self.info.op(root)
        n = len(r.loops)
        loops = tile[:2] if any(library_conv(self.info.op(m)) for m in members) else tile[:1]
        extent = r.loops[loops[0]]
        chunks = 4 * self.hw.units
        default = (loops[0], _largest_divisor(extent, max(1, -(-extent // chunks))))
        options = []
        for loop in loops:
            divs = divisors(r.loops[loop])
            if len(divs) > MAX_CPU_CANDIDATES:
                step = len(divs) / MAX_CPU_CANDIDATES
                divs = sorted({divs[int(i * step)] for i in range(MAX_CPU_CANDIDATES)} | {r.loops[loop]}
                              | ({default[1]} if loop == default[0] else set()))
            options += [(loop, d) for d in divs]

        def tiling(option):
            loop, d = option
            block = [0] * n
            block[loop] = d
            return Tiling(tuple(block), (), (loop,))

        evaluated = {o: self.cost(members, tiling(o)) for o in options}
        best = default
        for o, c in evaluated.items():
            if c.time_s < evaluated[best].time_s * (1 - MARGIN):
                best = o
        chosen = tiling(best)
        ranked = tuple(sorted(((tiling(o), c.time_s) for o, c in evaluated.items()),
                              key=lambda x: (x[1], x[0] != chosen)))
        return Choice(chosen, evaluated[best], ranked)

    # ---- gpu row kernels: threads per row x rows per block -----------------------------------
    def row_search(self, members, root, tile) -> Choice | None:
        """Every (row threads T, rows per block R) of a row kernel (plan/rows.py), fastest first;
        the start is T = 256 or the largest warp multiple below that divides the row, with
        enough rows per block for 128 threads; another shape must be 2% faster to win."""
        if self.target != "gpu":
            return None
        rk = row_kernel(self.info, members, root)
        if isinstance(rk, str):
            return None
        if not rk.coalesced:      # strided rows: threads x along the contiguous axis instead
            return self.column_search(members, root, tile, rk) if tile else None
        if any(loop is not None and loop in self.run_time.get(m, ()) for m, loop in rk.op_loops):
            return None           # a run-time row: its split over threads is counted at compile time
        r = self.info.op(root)
        n = len(r.loops)
        # the rows' loop (threads y) and up to two outer loops, one block each along them (the
        # grid's other dims): a tileable loop left out would put all its rows in one block
        mapped = tuple(tile[-3:])
        if any(r.loops[l] > 1 for l in tile[:-3]):
            return None
        limit = self.hw.max_threads_per_block
        counts = rk.thread_counts(limit)
        warp_multiples = [t for t in counts if t % 32 == 0]
        counts = warp_multiples or [t for t in counts if t >= 2]
        inner = r.loops[mapped[-1]] if mapped else 1
        row_options = [d for d in divisors(inner) if d <= 64]
        if mapped and mapped[-1] in self.run_time.get(root, ()):
            row_options = [1]

        def tiling(T, R):
            block, thread = [0] * n, [0] * n
            for loop in mapped[:-1]:
                block[loop] = 1
            if mapped:
                block[mapped[-1]], thread[mapped[-1]] = R, 1
            return Tiling(tuple(block), tuple(thread), mapped, RowConfig(threads=T))

        evaluated = {}
        for T in counts:
            for R in row_options:
                regs = row_registers(rk.extent // T, R)
                if (T * R <= limit and allocated_registers(self.hw, regs) * T * R <= self.hw.regs_per_unit  # launchable
                        and row_tiling_error(self.info, members, root, tiling(T, R), "gpu", limit) is None):
                    evaluated[(T, R)] = self.cost(members, tiling(T, R))
        if not evaluated:
            return None
        T0 = max([t for t in counts if t <= 256] or [min(counts)])
        R0 = min([R for R in row_options if (T0, R) in evaluated and T0 * R >= 128] or
                 [R for R in row_options if (T0, R) in evaluated] or [min(evaluated)[1]])
        best = (T0, R0) if (T0, R0) in evaluated else min(evaluated, key=lambda k: evaluated[k].time_s)
        for key, c in evaluated.items():
            if c.time_s < evaluated[best].time_s * (1 - MARGIN):
                best = key
        best = self._filling(best, evaluated)
        ranked = tuple(sorted(((tiling(*k), c.time_s) for k, c in evaluated.items()),
                              key=lambda x: (x[1], x[0] != tiling(*best))))
        return Choice(tiling(*best), evaluated[best], ranked)

    def column_search(self, members, root, tile, rk) -> Choice | None:
        """A row kernel whose row is not the contiguous axis (a reduction over axis 0 of [M, N]
        with its producers and consumers) as a column kernel (RowConfig.columns): R columns per
        block on threads x (the root's innermost mapped loop, which must be its last: the
        contiguous one), each column's elements split cyclically over T threads y (T <= 64,
        dividing the reduced extent), the partials combined through shared memory. Every
        (T, R) with R in 8..64 is priced; the fastest wins (filling the device within the
        margin)."""
        if any(loop is not None and loop in self.run_time.get(m, ()) for m, loop in rk.op_loops):
            return None
        r = self.info.op(root)
        n = len(r.loops)
        mapped = tuple(tile[-3:])
        if any(r.loops[l] > 1 for l in tile[:-3]) or not mapped or mapped[-1] != n - 1 \
                or mapped[-1] == rk.root_loop:
            return None
        limit = self.hw.max_threads_per_block
        counts = [t for t in rk.thread_counts(limit) if 2 <= t <= 64]
        columns = [d for d in divisors(r.loops[mapped[-1]]) if 8 <= d <= 64]
        if mapped[-1] in self.run_time.get(root, ()) or not counts or not columns:
            return None

        def tiling(T, R):
            block, thread = [0] * n, [0] * n
            for loop in mapped[:-1]:
                block[loop] = 1
            block[mapped[-1]], thread[mapped[-1]] = R, 1
            return Tiling(tuple(block), tuple(thread), mapped, RowConfig(threads=T, columns=True))

        evaluated = {}
        for T in counts:
            for R in columns:
                regs = row_registers(rk.extent // T, R)
                if (T * R <= limit and regs * T * R <= self.hw.regs_per_unit
                        and row_tiling_error(self.info, members, root, tiling(T, R), "gpu", limit) is None):
                    evaluated[(T, R)] = self.cost(members, tiling(T, R))
        if not evaluated:
            return None
        best = self._filling(min(evaluated, key=lambda k: evaluated[k].time_s), evaluated)
        ranked = tuple(sorted(((tiling(*k), c.time_s) for k, c in evaluated.items()),
                              key=lambda x: (x[1], x[0] != tiling(*best))))
        return Choice(tiling(*best), evaluated[best], ranked)

    # ---- gpu contraction kernels: block tiles x K step x register tiles -----------------------
    def gemm_search(self, members, root, tile) -> Choice | None:
        """Every contraction-kernel shape (plan/gemm.py) from side tiles of 16-128 (Q) and 32-256
        (P) outputs, K steps of 8-32 and register tiles of 2-8 a side, each with and without
        double buffering, priced by the model, less
        those whose registers the model says spill (local memory) or do not fit on an SM; the
        start is 64 x 64, K step 16, 4 x 4 per thread; another shape must be 2% faster to win.
        Only shapes that give every SM a block of 64 threads or more are taken, when there are
        any (issue 10's full wave: >= 132 blocks on the H200)."""
        if self.target != "gpu" or not tile:
            return None
        gk = gemm_kernel(self.info, members, root)
        if isinstance(gk, str):
            return None
        r, co = self.info.op(root), self.info.op(gk.contraction)
        n = len(r.loops)
        of_loop = {cl: rl for rl, cl in enumerate(gk.root_loops)}

        def side_tiles(side: str, size: int) -> dict[int, int]:
            """Root loop -> block tile for one side: whole inner loops first, then a share of the next."""
            out, left = {}, size
            for cl in reversed(gk.loops_of(side)):
                ext = co.loops[cl]
                t = max(1, min(ext, left))
                out[of_loop[cl]] = t
                left = max(1, left // t)
            return out

        evaluated: dict[Tiling, KernelCost] = {}
        start = None
        # 16-bit float operands (f16, bf16) on a device with tensor cores: warp tiles 64 columns wide too (TN 16)
        sixteen = co.operand_dtypes[:2] in (("f16", "f16"), ("bf16", "bf16"))
        wide_n = (16,) if sixteen and getattr(self.hw, "tensor_flops_fp16", 0) else ()
        # two warps a block at least (one when the whole output is smaller than that)
        min_threads = 64 if math.prod(co.loops[l] for l in gk.loops_of("m") + gk.loops_of("n")) >= 64 * 16 else 32
        for sm in (16, 32, 64, 128):
            for sn in (32, 64, 128, 256):
                tiles = {of_loop[cl]: 1 for cl in gk.loops_of("batch")}
                tiles.update(side_tiles("m", sm))
                tiles.update(side_tiles("n", sn))
                block = tuple(0 if tiles.get(l, r.loops[l]) >= r.loops[l] else tiles[l] for l in range(n))
                mapped = tuple(l for l in range(n) if block[l])
                if len(mapped) > 3:
                    continue
                bm = math.prod(tiles[of_loop[cl]] for cl in gk.loops_of("m"))
                bn = math.prod(tiles[of_loop[cl]] for cl in gk.loops_of("n"))
                # cp.async rings where a side's tile can be copied as it lies (sm_80+)
                rings = (0,)
                # (a tensor-core shape: f16 tiles in runs of 8 halves, plan/gemm.py)
                if any(staged_sides(self.info, gk, members, gemm_shape(self.info, gk, root, block, probe), self.hw)
                       for probe in ((8, 1, 1), (16, 2, 2))):
                    rings = (0,) + STAGE_CHOICES
                for bk in (8, 16, 32):
                    for tm in (t for t in (2, 4, 8) if bm % t == 0):
                        for tn, buffered, ring in itertools.product(sorted({t for t in (2, 4, 7, 8) + wide_n if bn % t == 0}),
                                                                    (0, 1), rings):
                            t = Tiling(block, (0,) * n, mapped, ContractionConfig(bk=bk, tm=tm, tn=tn,
                                                                                  prefetch=bool(buffered), stages=ring))
                            if t in evaluated or (bm // tm) * (bn // tn) < min_threads:
                                continue
                            if gemm_tiling_error(self.info, members, root, block, t.config.steps,
                                                 self.hw.max_threads_per_block, ring, self.hw) is None:
                                c = self.cost(members, t)
                                if c.occupancy == 0 or c.bytes_spilled > 0:
                                    continue          # registers spill, or a block does not fit on an SM
                                evaluated[t] = c
                                if (sm, sn, bk, tm, tn, buffered, ring) == (64, 64, 16, 4, 4, 0, 0):
                                    start = t
        if not evaluated:
            return None
        # at least one full wave (a block of 64 or more threads for every SM) whenever a shape
        # gives one: larger tiles that leave SMs idle are ranked but not taken
        filling = {t: c for t, c in evaluated.items() if self._fills(c)}
        pool = filling or evaluated
        # 16-bit operands (tensor cores, priced at mma.sync's ceiling): shapes the ceiling binds tie
        # on time; of those, the one that moves the fewest bytes (larger block tiles, fewer
        # re-reads), then the fewest threads (larger warp tiles: fewer ldmatrix per mma.sync)
        narrow = co.operand_dtypes[0] in ("f16", "bf16")
        fastest = min(pool, key=lambda k: (pool[k].time_s, pool[k].memory_s, pool[k].threads) if narrow
                      else pool[k].time_s)
        best = (start if start in pool and pool[fastest].time_s >= pool[start].time_s * (1 - MARGIN)
                else fastest)
        ranked = tuple(sorted(((t, c.time_s) for t, c in evaluated.items()), key=lambda x: (x[1], x[0] != best)))
        return Choice(best, evaluated[best], ranked)

    def _filling(self, best, evaluated: dict):
        """Launch shapes from the device: when `best` leaves SMs without a block (fewer blocks
        than SMs, or blocks under two warps) and a candidate within the model's margin fills
        every SM, that one (the fastest such)."""
        if self._fills(evaluated[best]):
            return best
        near = [k for k, c in evaluated.items()
                if self._fills(c) and c.time_s <= evaluated[best].time_s * (1 + MARGIN)]
        return min(near, key=lambda k: evaluated[k].time_s) if near else best

    def _fills(self, c: KernelCost) -> bool:
        """A full wave: a block of two warps or more for every SM."""
        return c.blocks >= self.hw.units and c.threads >= 64

    # ---- gpu: hill-climb over neighbouring divisors ---------------------------------------
    def _gpu_search(self, members, root, tile) -> Choice:
        r = self.info.op(root)
        n = len(r.loops)
        mapped = tile[-3:]
        limits = {0: 32, 1: 8, 2: 2} if r.kind != "contraction" else {0: 16, 1: 16, 2: 1}
        block = [0] * n
        thread = [0] * n
        for depth, loop in enumerate(reversed(mapped)):
            block[loop] = _largest_divisor(r.loops[loop], limits[depth])
            thread[loop] = 1
        start = Tiling(tuple(block), tuple(thread), tuple(mapped))
        seen: dict[Tiling, KernelCost] = {start: self.cost(members, start)}
        best = start
        for seed in self.seeds.get(root, []):
            if (seed.config == start.config and seed not in seen and self._valid(members, seed)
                    and self._one_point(seed, root)):
                seen[seed] = self.cost(members, seed)
                if seen[seed].time_s < seen[best].time_s * (1 - MARGIN):
                    best = seed
        while True:
            improved = False
            for cand in self._neighbours(best, r.loops, root):
                if cand not in seen:
                    seen[cand] = self.cost(members, cand)
                if seen[cand].time_s < seen[best].time_s * (1 - MARGIN):
                    best, improved = cand, True
            if not improved:
                break
        best = self._filling(best, seen)
        vector = self._vector_tiling(members, best, r, root)
        if vector is not None:
            seen.setdefault(vector, self.cost(members, vector))
            best = vector
        ranked = tuple(sorted(((t, c.time_s) for t, c in seen.items()), key=lambda x: (x[1], x[0] != best)))
        return Choice(best, seen[best], ranked)

    def _vector_tiling(self, members, t: Tiling, r, root: int) -> Tiling | None:
        """An elementwise kernel's tiling with VECTOR (4) consecutive f32 a thread along its
        contiguous axis (the last loop, threadIdx.x), so the emitter gives them one 16-byte load
        or store each (emit/vector.py), and a warp inside one row: threads along x 32 (when the
        row's runs of 4 divide by 32), else the whole row (33 to 1,024 runs) with one row a
        block. None when the axis is not split 4 ways evenly, is taken at run time, or the grid
        would not fill the device twice over."""
        if r.kind != "elementwise" or not t.mapped or r.elem_bytes != 4:
            return None
        x = t.mapped[-1]
        extent = r.loops[x]
        if x != len(r.loops) - 1 or t.thread[x] != 1 or extent % VECTOR or x in self.run_time.get(root, ()):
            return None
        runs = extent // VECTOR
        block, thread = list(t.block), list(t.thread)
        if runs % WARP == 0:
            lanes = WARP
        elif WARP < runs <= self.hw.max_threads_per_block:
            lanes = runs
            for loop in t.mapped[:-1]:              # one row a block: no warp holds two rows
                block[loop] = thread[loop] = 1
        else:
            return None
        block[x], thread[x] = VECTOR * lanes, VECTOR
        out = Tiling(tuple(block), tuple(thread), t.mapped, t.config)
        blocks = math.prod(r.loops[loop] // out.block[loop] for loop in out.mapped)
        if (blocks < 2 * self.hw.units or not 1 <= _threads(out) <= self.hw.max_threads_per_block
                or not self._valid(members, out)):
            return None
        return out

    def _neighbours(self, t: Tiling, loops, root: int) -> list[Tiling]:
        out = []
        for loop in t.mapped:
            ds = divisors(loops[loop])
            i = ds.index(t.block[loop])
            for j in (i - 1, i + 1):
                if 0 <= j < len(ds):
                    b = list(t.block)
                    th = list(t.thread)
                    b[loop] = ds[j]
                    if b[loop] % th[loop]:
                        th[loop] = 1
                    out.append(Tiling(tuple(b), tuple(th), t.mapped))
            per = divisors(t.block[loop])
            k = per.index(t.thread[loop])
            for j in (k - 1, k + 1):
                if 0 <= j < len(per):
                    th = list(t.thread)
                    th[loop] = per[j]
                    out.append(Tiling(t.block, tuple(th), t.mapped))
            for f in (2, 0.5):                 # more (fewer) points per thread, same threads
                b, th = list(t.block), list(t.thread)
                b[loop], th[loop] = int(b[loop] * f), int(th[loop] * f)
                if th[loop] >= 1 and b[loop] >= 1 and loops[loop] % b[loop] == 0 and b[loop] % th[loop] == 0:
                    out.append(Tiling(tuple(b), tuple(th), t.mapped))
        return [c for c in out if 1 <= _threads(c) <= self.hw.max_threads_per_block and self._one_point(c, root)]

    def _one_point(self, t: Tiling, root: int) -> bool:
        """Each thread takes one point along every run-time loop (see `run_time`)."""
        return all(t.thread[loop] == 1 for loop in self.run_time.get(root, ()) if loop in t.mapped)


def _prefer(first: Choice, other: Choice) -> Choice:
    """A row kernel's split rows unless the other tilings are 2% faster than every split-row
    tiling; candidates merged."""
    ranked = tuple(sorted(dict(other.candidates + first.candidates).items(), key=lambda x: x[1]))
    fastest_rows = min([s for _, s in first.candidates] + [first.cost.time_s])
    if other.cost.time_s < fastest_rows * (1 - MARGIN):
        return Choice(other.tiling, other.cost, ranked)
    return Choice(first.tiling, first.cost, ranked)


def _threads(t: Tiling) -> int:
    n = 1
    for loop in t.mapped:
        n *= t.block[loop] // t.thread[loop] if t.thread and t.thread[loop] else 1
    return n


# each template's check of a tiling another kernel's search found (TileChooser.offer; plan/templates.py)
def gemm_valid(chooser: TileChooser, members, t: Tiling, allowed) -> bool:
    return gemm_tiling_error(chooser.info, members, chooser.root(members), t.block, t.config.steps,
                             chooser.hw.max_threads_per_block, getattr(t.config, "stages", 0), chooser.hw) is None


def row_valid(chooser: TileChooser, members, t: Tiling, allowed) -> bool:
    return (tuple(t.mapped) == tuple(allowed[-3:]) and
            row_tiling_error(chooser.info, members, chooser.root(members), t, chooser.target,
                             chooser.hw.max_threads_per_block) is None)
