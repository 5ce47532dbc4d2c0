"""The contraction template: one block of a contraction kernel, written whole at the root marked
`fusec.block_gemm`: its BM x BN tile of C[m, n] = sum_k A[m, k] B[k, n] and the epilogue down
to the root. Values come from `TemplateValues`; on tensor cores the products from
`TensorCores` (emit/mma.py). See docs/ARCHITECTURE.md, "GPU kernels", Contraction kernels.
"""
from __future__ import annotations

import math
from contextlib import nullcontext

from . import conv, ids
from .vector import VECTOR_HELPERS
from .cp_async import CP_ASYNC16H_HELPERS, CP_ASYNC_HELPERS, MAX_STAGES
from .mma import SwizzledTile, TensorCores
from .template_values import FLAT_HELPER, FlatViews, TemplateValues, affine, n_inputs, dims_of, dims_of_map, indexing_maps, ints, linear, pure_dim
from .views import computed
from .values import EmitError, elem_of_type, expr_add, expr_mul, floordiv, is_int, mod, small_div
from ..mlir import ir
from ..plan.gemm import F32_BYTES, SMEM_LIMIT, mma_tiles_error, tile_pad
from ..marks import ABSORBED, BLOCK_GEMM, CONTRACTION, GEMM_MMA, GEMM_PREFETCH, GEMM_ROOT_LOOPS, GEMM_SIDES, GEMM_STAGES, GEMM_TILES


def _store(tile, at: tuple[str, str], v: str) -> str:
    """The statement that puts `v` at element `at` (k, x) of a staging tile (a bf16 tensor-core
    tile stores bits: SwizzledTile.store)."""
    return tile.store(*at, v) if isinstance(tile, SwizzledTile) else f"{tile.at(*at)} = {v}"


class Tile:
    """A [BK, B] staging tile in shared memory, a 2-D array."""

    def __init__(self, array: str):
        self.array = array

    def at(self, k: str, x: str) -> str:
        return f"{self.array}[{k}, {x}]"


class StagedTile(Tile):
    """Stage `stage` of a ring of [BK, B] tiles in shared memory, a 3-D array [S, BK, B]."""

    def __init__(self, array: str, stage: str):
        super().__init__(array)
        self.stage = stage

    def at(self, k: str, x: str) -> str:
        return f"{self.array}[{self.stage}, {k}, {x}]"

    def index(self, k: str, x: str) -> str:
        return f"({self.stage}, {k}, {x})"


class CarvedTile(Tile):
    """A [BK, B] staging tile (or stage `stage` of a ring of them) at word `offset` of the flat
    dynamic shared array: rows `stride` words apart, stages `size` words apart."""

    def __init__(self, array: str, offset: int, stride: int, size: int = 0, stage: str = "0"):
        super().__init__(array)
        self.offset, self.stride, self.size, self.stage = offset, stride, size, stage

    def staged(self, stage: str) -> "CarvedTile":
        return CarvedTile(self.array, self.offset, self.stride, self.size, stage)

    def flat(self, k: str, x: str) -> str:
        """The word index: its variable part masked non-negative (else each index keeps Numba's
        wraparound select, and the 4 reads of a run are no longer one LDS.128), its constant
        part added after the mask, so a run's 4 reads share one masked base."""
        (kb, kc), (xb, xc) = _split_const(k), _split_const(x)
        var = expr_add(expr_mul(kb, str(self.stride)), xb)
        if self.size:
            var = expr_add(expr_mul(self.stage, str(self.size)), var)
        const = kc * self.stride + xc + self.offset
        if is_int(var):
            return str(int(var) + const)
        return expr_add(f"(({var}) & 0x7fffffff)", str(const))

    def at(self, k: str, x: str) -> str:
        return f"{self.array}[{self.flat(k, x)}]"

    def index(self, k: str, x: str) -> str:
        return f"({self.flat(k, x)},)"


class Grid:
    """A thread grid's accumulators: thread (x, y)'s accumulator (i, j) lies at row y + i NY,
    column x + j NX of the block's tile (the FMA form; the tensor-core form after restaging)."""

    def __init__(self, y: str, ny: int, x: str, nx: int):
        self.y, self.ny, self.x, self.nx = y, ny, x, nx

    def row(self, i: int) -> str:
        return expr_add(self.y, str(i * self.ny))

    def col(self, j: int) -> str:
        return expr_add(self.x, str(j * self.nx))


class WideGrid(Grid):
    """The FMA form's thread grid in runs of 4 (CUTLASS SIMT) along the sides whose register
    tile is a multiple of 4: thread y's rows are 4 y + {0..3} + 4 NY q (`y` given as 4 y) where
    `rows`, thread x's columns 4 x + {0..3} + 4 NX p (`x` given as 4 x) where `cols`, so a
    thread's 4 operands of one run are adjacent in the tile's row k and one 16-byte shared load
    (`LDS.128`) reads them. The epilogue stores a run of 4 columns with one 16-byte global store
    (`_st4_f32`), so a warp's store request stays as few sectors as a scalar one per column."""

    def __init__(self, y: str, ny: int, x: str, nx: int, rows: bool, cols: bool):
        super().__init__(y, ny, x, nx)
        self.rows, self.cols = rows, cols

    def row(self, i: int) -> str:
        return expr_add(self.y, str(i % 4 + 4 * self.ny * (i // 4))) if self.rows else super().row(i)

    def col(self, j: int) -> str:
        return expr_add(self.x, str(j % 4 + 4 * self.nx * (j // 4))) if self.cols else super().col(j)


class _Loader:
    """One operand's tile loader (_Gemm._loader): `load(k0)` reads the K step at k0 into the
    tile; double-buffered, `hold(k0)` reads it into registers, `put()` stores those into the
    tile and `declare()` defines the registers before the loop. A staged loader (cp.async,
    `_Gemm._staged_loader`) has `issue(k0, stage)` instead: the K step's copies into a stage
    of its ring (k0 a constant before the K loop; in it the step S - 1 ahead, whose offset a
    strength-reduced loader keeps in a running variable that `advance()` steps)."""

    def __init__(self, load=None, hold=None, put=None, declare=None, issue=None, advance=None):
        self.load, self.hold, self.put, self.declare = load, hold, put, declare
        self.issue = issue
        self.advance = advance    # a staged loader's K-step increment, at the end of each K step


class _FlatRuns:
    """A staged loader's strength-reduced sources (_Gemm._flat_offsets): the array's 1-D view,
    each run's offset at K step 0, the running offset of the step the K loop copies."""

    def __init__(self, w, array: str, bases: dict, run: str, coef: int, step: int, dsts: dict, stage_bytes: int):
        self.w, self.array, self.bases, self.run, self.coef, self.step = w, array, bases, run, coef, step
        self.dsts, self.stage_bytes = dsts, stage_bytes

    def dst(self, key, stage: str) -> str:
        """Run `key`'s 32-bit shared address in stage `stage` (`_cp_async16hs`)."""
        return expr_add(self.dsts[key], expr_mul(stage, str(self.stage_bytes)))

    def at(self, key, k0: str) -> str:
        """Run `key`'s offset in the K step at k0: a constant step before the loop, the running
        offset in it."""
        if is_int(k0):
            return expr_add(self.bases[key], str(int(k0) * self.coef))
        return expr_add(self.bases[key], self.run)

    def advance(self) -> None:
        self.w(f"{self.run} = {self.run} + {self.step}")


class _ConvRuns(_FlatRuns):
    """_FlatRuns for a channels-last conv's operand: a constant K step's offset from its
    coordinates, the running one from the K steps' stepper (conv.KStepper), which the first
    operand's loader advances (`steps`; one advance moves both operands' offsets)."""

    def __init__(self, w, array: str, bases: dict, run: str, stepper, coef: dict, dsts: dict, stage_bytes: int,
                 steps: bool):
        super().__init__(w, array, bases, run, 0, 0, dsts, stage_bytes)
        self.stepper, self.coef, self.steps = stepper, coef, steps

    def at(self, key, k0: str) -> str:
        if is_int(k0):
            return expr_add(self.bases[key], str(self.stepper.offset(self.coef, int(k0))))
        return expr_add(self.bases[key], self.run)

    def advance(self) -> None:
        if self.steps:
            self.stepper.advance()


_RUN = "__fusec_run__"       # stands for an offset along a run of 4 while index expressions are compared


def _positions(base: str, step: int, n: int, extent: int):
    """(index, guard) per position: base + i * step for i < n, guarded below extent."""
    out = []
    for i in range(n):
        idx = expr_add(base, str(i * step))
        guard = None
        if (i + 1) * step > extent and extent % step:
            guard = f"{idx} < {extent}"
        out.append((idx, guard))
    return out


def block_gemm(body, root) -> None:
    body.need(root, "kernel")
    _Gemm(body, root).emit()


class _Gemm:
    """The contraction template at one `fusec.block_gemm` root (module doc). It holds the
    kernel's values (`TemplateValues`: the contraction supplied from the accumulators) and, on
    tensor cores, a `TensorCores`."""

    def __init__(self, body, root):
        self.body, self.root = body, root
        self.w, self.names, self.ctx = body.w, body.names, body.ctx
        self._kstep = None       # a channels-last conv's K-step stepper (conv.KStepper)
        block = [o.operation for o in root.block.operations]
        cs = [op for op in block if CONTRACTION in op.attributes]
        if len(cs) != 1 or cs[0].name != "linalg.generic":
            raise EmitError("a fusec.block_gemm needs one generalized fusec.gemm_contraction in its block", root)
        self.c = cs[0]
        writers = [op for op in block if op.name.startswith("linalg.")
                   and (ABSORBED in op.attributes or CONTRACTION in op.attributes or op == root)]
        self.values = TemplateValues(body, root, writers, (self.c,))
        self.bk, self.tm, self.tn = ints(root.attributes[BLOCK_GEMM])
        self.tiles = ints(root.attributes[GEMM_TILES])
        self.sides = [ir.StringAttr(s).value for s in ir.ArrayAttr(root.attributes[GEMM_SIDES])]
        self.root_loops = ints(root.attributes[GEMM_ROOT_LOOPS])
        self.cmaps = indexing_maps(self.c)
        n_in = len(self.c.operands) - 1
        if n_in != 2 or len(self.cmaps) != 3 or len(self.sides) != self.cmaps[0].n_dims:
            raise EmitError("a fusec.gemm_contraction needs two operands and one result", self.c)
        self.loops = {s: [l for l, x in enumerate(self.sides) if x == s] for s in ("m", "n", "batch", "k")}
        used = [dims_of_map(m) for m in self.cmaps[:2]]
        self.m_op = 0 if set(self.loops["m"]) & used[0] else 1
        self.n_op = 1 - self.m_op
        self.out = self.c.operands[2]
        self.ext = self._extents()
        self.bm = math.prod(self.tiles[l] for l in self.loops["m"])
        self.bn = math.prod(self.tiles[l] for l in self.loops["n"])
        self.tx, self.ty = self.bn // self.tn, self.bm // self.tm
        self.T = self.tx * self.ty
        dims = tuple(str(d) for d in (body.ctx.block_dims or ()))
        if dims and dims != (str(self.tx), str(self.ty), "1"):
            raise EmitError(f"a fusec.block_gemm of {self.tx}x{self.ty} threads in a block of {dims}", root)
        self.mma = ir.StringAttr(root.attributes[GEMM_MMA]).value if GEMM_MMA in root.attributes else ""
        why = mma_tiles_error(self.bm, self.bn, self.bk, self.tm, self.tn) if self.mma else None
        if why is not None:
            raise EmitError(f"a {self.mma} tensor-core fusec.block_gemm: {why}", root)

    # -- sizes --------------------------------------------------------------------------------
    def _extents(self) -> list[str]:
        """Each contraction loop's extent in this block (dynamic at the edges)."""
        out: list[str | None] = [None] * len(self.sides)
        for v, m in zip(self.c.operands, self.cmaps):
            shape = self.body.view(v).shape
            for d, e in enumerate(m.results):
                l = pure_dim(e)
                if l is not None and out[l] is None:
                    out[l] = shape[d]
        if any(x is None for x in out):
            raise EmitError("a fusec.gemm_contraction loop indexes no operand dim by itself", self.c)
        return out

    def K(self) -> str:
        """The flattened reduction's extent (every K loop's)."""
        n = "1"
        for l in self.loops["k"]:
            n = expr_mul(n, self.ext[l])
        return n

    # -- emission ------------------------------------------------------------------------------
    def emit(self) -> None:
        """The block (module doc): thread numbering, staging tiles, the K loop, the epilogue."""
        w, names = self.w, self.names
        w(f"# {BLOCK_GEMM}: {self.bm}x{self.bn} outputs per block, K in steps of {self.bk}, "
          f"{self.tm}x{self.tn} per thread")
        self.tid = names.fresh("tid")
        self.txn, self.tyn = names.fresh("tx"), names.fresh("ty")
        w(f"{self.txn} = {ids.thread_id('x')}")
        w(f"{self.tyn} = {ids.thread_id('y')}")
        w(f"{self.tid} = {self.tyn} * {self.tx} + {self.txn}")
        # where a thread's accumulator (i, j) lies in the block's tile (`.row(i)`, `.col(j)`)
        wide = not self.mma and self.tm % 4 == 0
        wide_n = not self.mma and self.tn % 4 == 0
        self.at = Grid(self.tyn, self.ty, self.txn, self.tx)
        if wide or wide_n:
            ty4, tx4 = self.tyn, self.txn
            if wide:
                ty4 = names.fresh("ty4")
                w(f"{ty4} = {self.tyn} * 4")
            if wide_n:
                tx4 = names.fresh("tx4")
                w(f"{tx4} = {self.txn} * 4")
            self.at = WideGrid(ty4, self.ty, tx4, self.tx, wide, wide_n)
        tc = None
        if self.mma:
            tc = TensorCores(self.body, self.mma, self.tid, self.bm, self.bn, self.bk, self.tm, self.tn, self.T)
            self.at = tc.layout()
        self.tc = tc
        stages = ints(self.root.attributes[GEMM_STAGES])[0] if GEMM_STAGES in self.root.attributes else 0
        sm, sn = names.fresh("Ms"), names.fresh("Ns")
        if tc:     # cp.async of runs of 8 halves: a tile's rows follow the operand's contiguous dim
            runs = {side: self._runs_of_4(side, op, 8) for side, op in (("m", self.m_op), ("n", self.n_op))}
            staged = {side: bool(stages) and r is not None for side, r in runs.items()}
        else:
            runs = {side: self._runs_of_4(side, op) for side, op in (("m", self.m_op), ("n", self.n_op))}
            # cp.async where the side's tile has the operand's layout (its runs along the side)
            staged = {side: bool(stages) and r is not None and r[0] for side, r in runs.items()}
        if tc and stages and not any(staged.values()):
            stages = 0           # (a plan's ring where no f16 operand is copied as it lies: loaded as before)
        if stages and not any(staged.values()):
            raise EmitError(f"a {GEMM_STAGES} contraction with no operand copied as it lies", self.root)
        if not 2 <= (stages or 2) <= MAX_STAGES:
            raise EmitError(f"{GEMM_STAGES} {stages}: 2 to {MAX_STAGES} stages", self.root)
        if tc:
            # 16-byte aligned: ldmatrix reads rows of 16 bytes
            align = self.body.ctx.helpers.use_text("_SMEM_ALIGN", [
                "_SMEM_ALIGN = None if _CUDASIM else 16   # shared staging tiles: 16-byte runs (LDS.128)"])
            sm, sn = tc.tiles(self._side_fast("m", self.m_op), self._side_fast("n", self.n_op), align,
                              *(stages if staged[side] else 1 for side in ("m", "n")))
        else:
            pm, pn = tile_pad(False, wide or staged["m"]), tile_pad(False, wide_n or staged["n"])
            # 16-byte aligned (the simulator takes no alignment), so a run of 4 is one LDS.128
            align = self.body.ctx.helpers.use_text("_SMEM_ALIGN", [
                "_SMEM_ALIGN = None if _CUDASIM else 16   # shared staging tiles: 16-byte runs (LDS.128)"])
            plan = [(name, side, b + pad, stages if staged[side] else 1)
                    for name, side, b, pad in ((sm, "m", self.bm, pm), (sn, "n", self.bn, pn))]
            words = sum(self.bk * stride * ring for *_, stride, ring in plan)
            kinds = {elem_of_type(self.c.operands[op].type).compute for op in (self.m_op, self.n_op)}
            if F32_BYTES * words > SMEM_LIMIT and kinds == {"float32"}:
                # over the static limit: both tiles carved from the dynamic shared array, its
                # bytes given at launch (the kernel opted in to them: emit/module.py)
                dyn = names.fresh("S")
                w(f"{dyn} = cuda.shared.array(0, numba.float32, {align})   # dynamic: {F32_BYTES * words} B")
                self.ctx.dynamic_shared = F32_BYTES * words
                tiles, offset = [], 0
                for name, side, stride, ring in plan:
                    tiles.append(CarvedTile(dyn, offset, stride, self.bk * stride if staged[side] else 0))
                    offset += self.bk * stride * ring
                sm, sn = tiles
            else:
                for (name, side, stride, ring), op in zip(plan, (self.m_op, self.n_op)):
                    shape = f"({stages}, {self.bk}, {stride})" if staged[side] else f"({self.bk}, {stride})"
                    w(f"{name} = cuda.shared.array({shape}, numba.{elem_of_type(self.c.operands[op].type).compute}, {align})")
                sm, sn = Tile(sm), Tile(sn)
        if len(self.loops["k"]) > 1:      # a conv's (c, r, s): its 4-D operands read through 1-D views
            self.values.flat = FlatViews(w, names, self.body.ctx.helpers, len(w.lines), w.depth)
        loads = []
        for side, op, tile, b in (("m", self.m_op, sm, self.bm), ("n", self.n_op, sn, self.bn)):
            if staged[side]:
                loads.append(self._staged_loader(side, op, tile, b, runs[side][1], *((runs[side][0], 8, stages) if tc else ())))
            elif runs[side] is not None and not tc:
                loads.append(self._wide_loader(side, op, tile, b, *runs[side]))
            else:
                loads.append(self._loader(side, op, tile, b))
        ring = [ld for ld in loads if ld.issue]
        regs = [ld for ld in loads if not ld.issue]
        init = self._init()
        accs = [[names.fresh(f"acc{i}_{j}") for j in range(self.tn)] for i in range(self.tm)]
        for row in accs:
            for a in row:
                w(f"{a} = {init}")
        k0 = names.fresh("k0")
        K = self.K()
        rd, wr = names.fresh("rd"), names.fresh("wr")
        if ring:                 # the first S - 1 K steps in flight before the loop, a group each
            for st in range(stages - 1):
                if st and not (is_int(K) and int(K) > st * self.bk):
                    w(f"if {st * self.bk} < {K}:")
                    with w.indent():
                        for ld in ring:
                            ld.issue(str(st * self.bk), str(st))
                else:
                    for ld in ring:
                        ld.issue(str(st * self.bk), str(st))
                w("_cp_commit()")
            w(f"{rd} = 0")           # the stage this step reads
            w(f"{wr} = {stages - 1}")   # the stage its copies fill (read S - 1 steps later)
            rings = (sm, sn)
            sm, sn = (self._stage(t, rd) if staged[side] else t for t, side in ((sm, "m"), (sn, "n")))
        prefetch = GEMM_PREFETCH in self.root.attributes and bool(regs)
        if ring and tc and stages == 2 and self._kstep is not None and not regs and is_int(K):
            self._conv_pairs(k0, int(K), ring, [(t, staged[side]) for t, side in zip(rings, ("m", "n"))], accs)
            self._after_k(accs)
            return
        if prefetch:             # the first K step into registers before the loop
            for ld in regs:
                ld.declare()
            for ld in regs:
                ld.hold("0")
        w(f"for {k0} in range(0, {K}, {self.bk}):")
        with w.indent():
            # the step's start, known non-negative (a range's induction variable is not to
            # LLVM): its indices need no wraparound select
            w(f"{k0} = {k0} & 0x7fffffff")
            if prefetch:
                # this step from the registers into the tiles, then the next step's loads issued
                # before this step's products, so their latency hides behind them
                for ld in regs:
                    ld.put()
            else:
                for ld in regs:
                    ld.load(k0)
            if ring:             # this thread's copies of this step landed (S - 2 groups left in flight)
                w(f"_cp_wait{stages - 2}()")
            w("cuda.syncthreads()")
            if ring:
                # every thread is past the last step's products: the stage they read takes the
                # copies of the step S - 1 ahead (a group each step, empty past the end)
                ahead = f"({k0} + {(stages - 1) * self.bk})"
                w(f"if {ahead} < {K}:")
                with w.indent():
                    for ld in ring:
                        ld.issue(ahead, wr)
                w("_cp_commit()")
            if prefetch:
                w(f"if {k0} + {self.bk} < {K}:")
                with w.indent():
                    for ld in regs:
                        ld.hold(f"({k0} + {self.bk})")
            if tc:
                self._tc_products(sm, sn, accs)
            else:
                self._fma_steps(sm, sn, accs, None)
            w("cuda.syncthreads()")
            if ring:
                for ld in ring:
                    if ld.advance:
                        ld.advance()
                if tc and stages == 2:       # (an xor: 2 instructions fewer per step than the select)
                    w(f"{rd} = {rd} ^ 1")
                    w(f"{wr} = {wr} ^ 1")
                else:
                    w(f"{rd} = 0 if {rd} == {stages - 1} else {rd} + 1")
                    w(f"{wr} = 0 if {wr} == {stages - 1} else {wr} + 1")
        self._after_k(accs)

    def _after_k(self, accs) -> None:
        """After the K loop: the accumulators (restaged through shared memory on tensor cores)
        into the epilogue."""
        self.values.flat = None
        if self.tc:
            accs, self.at = self.tc.restage(accs, self.at, Grid)
        self._epilogue(accs)

    def _tc_products(self, sm, sn, accs) -> None:
        """A K step's products on tensor cores (on FMAs where the module runs without them:
        `_FMA_ONLY`, the simulator)."""
        w = self.w
        w("if _FMA_ONLY:")
        with w.indent():
            self._fma_steps(sm, sn, accs, f"range({self.bk})")
        w("else:")
        with w.indent():
            for kk in range(0, self.bk, 16):
                self.tc.step(sm, sn, accs, kk)

    def _conv_pairs(self, k0: str, K: int, ring, tiles, accs) -> None:
        """A channels-last conv's K loop on a 2-stage ring (its copies stepped by conv.KStepper),
        unrolled by the ring's 2 stages: each iteration two K steps, the first reading stage 0 and
        filling stage 1, the second the other way round, so the stages' offsets (the copies'
        shared addresses, the ldmatrix rows) are constants and no ring index is kept; an odd
        number of K steps ends with the last step after the loop (its copies all issued)."""
        w, bk = self.w, self.bk
        steps = K // bk
        pairs = steps // 2

        def step(rd: str, wr: str, ahead: str | None, guard: bool) -> None:
            w("_cp_wait0()")
            w("cuda.syncthreads()")
            if ahead is not None:
                if guard:
                    w(f"if {ahead} < {K}:")
                with w.indent() if guard else nullcontext():
                    for ld in ring:
                        ld.issue(ahead, wr)
                w("_cp_commit()")
            sm, sn = (self._stage(t, rd) if st else t for t, st in tiles)
            self._tc_products(sm, sn, accs)
            w("cuda.syncthreads()")
            if ahead is not None:
                for ld in ring:
                    if ld.advance:
                        ld.advance()

        if pairs:
            w(f"for {k0} in range(0, {2 * bk * pairs}, {2 * bk}):     # two K steps: stage 0, then stage 1")
            with w.indent():
                w(f"{k0} = {k0} & 0x7fffffff")
                step("0", "1", f"({k0} + {bk})", False)      # (its next step is inside K)
                step("1", "0", f"({k0} + {2 * bk})", steps % 2 == 0)
        if steps % 2:
            w("# the last K step (an odd count), in stage 0: nothing left to copy")
            step("0", "1", None, False)

    @staticmethod
    def _stage(tile, stage: str):
        """Stage `stage` of a staged side's ring."""
        return tile.staged(stage) if isinstance(tile, (CarvedTile, SwizzledTile)) else StagedTile(tile.array, stage)

    # -- the products ----------------------------------------------------------------------------
    def _fma_steps(self, sm, sn, accs, ks: str | None) -> None:
        """Per k of `ks` (a range's text), each accumulator += its row of A times its column of
        B. None: the K step's BK written out, so each shared-memory index is the thread's row or
        column plus a constant (and a run of 4 rows of a `WideGrid` one 16-byte load)."""
        w, names = self.w, self.names

        def step(kk: str) -> None:
            a = [names.fresh(f"a{i}") for i in range(self.tm)]
            b = [names.fresh(f"b{j}") for j in range(self.tn)]
            for i, n in enumerate(a):
                w(f"{n} = {getattr(sm, 'value', sm.at)(kk, self.at.row(i))}")
            for j, n in enumerate(b):
                w(f"{n} = {getattr(sn, 'value', sn.at)(kk, self.at.col(j))}")
            for i in range(self.tm):
                for j in range(self.tn):
                    ins = [None, None]
                    ins[self.m_op], ins[self.n_op] = a[i], b[j]
                    w(f"{accs[i][j]} = {self.values.contraction_step(self.c, ins[0], ins[1], accs[i][j])}")

        if ks is None:
            for kk in range(self.bk):
                step(str(kk))
            return
        kk = names.fresh("kk")
        w(f"for {kk} in {ks}:")
        with w.indent():
            step(kk)

    def _init(self) -> str:
        """The accumulators' initial value: the fill of the contraction's output."""
        writer = self.values.writer(self.out, self.c)
        if writer is None or writer.name != "linalg.fill":
            raise EmitError("the accumulator of a fusec.gemm_contraction must be filled in its kernel", self.c)
        return self.body.val(writer.operands[0])

    # -- the tile loader -------------------------------------------------------------------------
    def _side_fast(self, side: str, operand: int) -> bool:
        """Whether the operand's contiguous dim is one of the side's loops (else K's)."""
        m = self.cmaps[operand]
        last = dims_of(m.results[-1]) if len(m.results) else set()
        return bool(last & set(self.loops[side]))

    def _loader(self, side: str, operand: int, tile, bs: int):
        """Per-thread positions before the K loop; returns what loads one K step.

        The [BK, BS] tile is read along the operand's contiguous dim (the side's loops, or K):
        the block's threads are W lanes along it (W the largest power of two dividing T that
        fits it) by T / W rows along the other dim, each thread keeping its lane and its row
        across the K loop; the side's coordinates are computed once per lane or row position."""
        w, names = self.w, self.names
        m = self.cmaps[operand]
        last = dims_of(m.results[-1]) if len(m.results) else set()
        side_fast = bool(last & set(self.loops[side]))
        along, across = (bs, self.bk) if side_fast else (self.bk, bs)
        lanes = 1
        while self.T % (lanes * 2) == 0 and lanes * 2 <= along:
            lanes *= 2
        if self.values.flat is not None and along % lanes:
            # a conv's (oh, ow) tile (2 x 56): the fewest lanes above that dividing both T and
            # the tile, so no position along it is guarded (its coordinates are computed once)
            lanes = next((d for d in range(lanes, min(along, self.T) + 1)
                          if self.T % d == 0 and along % d == 0), lanes)
        rows = self.T // lanes
        lane, row = names.fresh(f"{side}l"), names.fresh(f"{side}r")
        if lanes & (lanes - 1) == 0:
            w(f"{lane} = {self.tid} & {lanes - 1}")            # lanes is a power of two
            w(f"{row} = {self.tid} >> {lanes.bit_length() - 1}")
        else:
            w(f"{lane} = {self.tid} % {lanes}")
            w(f"{row} = {self.tid} // {lanes}")
        n_along, n_across = -(-along // lanes), -(-across // rows)

        pos_along = _positions(lane, lanes, n_along, along)
        pos_across = _positions(row, rows, n_across, across)
        side_pos = pos_along if side_fast else pos_across
        sides = []            # per side position: coords, inside the operand, inside the tile
        for i, (sl, guard) in enumerate(side_pos):
            coords = self._delinearize(sl, self.loops[side], f"{side}c{i}_")
            conds = [f"{coords[l]} < {self.ext[l]}" for l in self.loops[side] if self.ext[l] != str(self.tiles[l])]
            ok = None
            if conds:
                ok = names.fresh(f"{side}ok{i}")
                w(f"{ok} = {' and '.join(conds)}")
            sides.append((sl, coords, ok, guard))
        k_pos = pos_across if side_fast else pos_along
        zero = self.ctx.consts.zero(elem_of_type(self.c.operands[operand].type))
        K = self.K()
        k_ok_needed = not (is_int(K) and int(K) % self.bk == 0)
        ext_k = [self.ext[l] for l in self.loops["k"]]
        kloops = self.loops["k"]

        direct = self._k_flat(operand, sides, side)
        split = None if direct else self._k_split(k_pos, kloops, ext_k)
        counted = None if split is not None or direct else self._k_counted(k_pos, kloops, ext_k)

        held: dict[tuple[int, int], str] = {}      # double-buffered: element -> the register holding it

        def elements():
            for si, (sl, coords, ok, sguard) in enumerate(sides):
                for ki, (kl, kguard) in enumerate(k_pos):
                    yield (si, ki), sl, coords, ok, kl, [g for g in (sguard, kguard) if g]

        def fetch(k0: str, store: bool) -> None:
            """Each of the thread's elements of the K step at k0, loaded (zero outside the
            operand); stored into the tile at once, or kept in its register (`held`)."""
            step = counted(k0) if counted is not None else None
            for key, sl, coords, ok, kl, inside in elements():
                with w.when(inside):             # positions past the tile's end
                    k = names.fresh("k")
                    w(f"{k} = {k0} + {kl}")
                    v = names.fresh("v") if store else held.setdefault(key, names.fresh("pf"))
                    conds = ([ok] if ok else []) + ([f"{k} < {K}"] if k_ok_needed else [])
                    if conds:
                        w(f"{v} = {zero}")
                    with w.when(conds):
                        self.values.forget()
                        full = dict(coords)
                        if direct:                   # the K coordinates' offset is k itself
                            w(f"{v} = {direct(key[0], k)}")
                        elif split is not None:        # the K step's outer coordinate, the rest the thread's own
                            inner, per_pos = split
                            outer, rest = per_pos[kl]
                            full.update(rest)
                            full[kloops[0]] = expr_add(floordiv(k0, str(inner)), outer)
                        elif step is not None:
                            full.update(step(kl))
                        else:
                            full.update(self._delinearize(k, kloops, "kc_", ext_k))
                        if not direct:
                            dims = [full.get(l, "0") for l in range(len(self.sides))]
                            idx = [affine(e, dims) for e in m.results]
                            w(f"{v} = {self.values.read(self.c.operands[operand], idx, self.c)}")
                    if store:
                        w(_store(tile, (kl, sl), v))

        def put() -> None:
            """The held elements into the tile."""
            for key, sl, coords, ok, kl, inside in elements():
                with w.when(inside):
                    w(_store(tile, (kl, sl), held[key]))

        def declare() -> None:
            """The held registers, defined on every path before the K loop."""
            for key, *_ in elements():
                w(f"{held.setdefault(key, names.fresh('pf'))} = {zero}")

        return _Loader(lambda k0: fetch(k0, True), lambda k0: fetch(k0, False), put, declare)

    def _k_flat(self, operand: int, sides, side: str):
        """Reads of an operand that is a whole global array of static shape whose K loops are
        its trailing dims in order (a conv's weights [F, C, R, S], K = (c, r, s)) through its
        1-D view (`FlatViews`): element (side position i, k) lies at offset base_i + k, base_i
        computed once per side position before the K loop, so no K step divides k into its
        coordinates. Returns (i, k) -> the read, or None (another operand, or no 1-D views)."""
        flat, kloops = self.values.flat, self.loops["k"]
        v = self.c.operands[operand]
        if flat is None or self.values.writer(v, self.c) is not None:
            return None
        view = self.body.view(v)
        if (view.array.space != "global" or not view.whole or view.rank < 3
                or not all(is_int(n) for n in view.shape + tuple(self.ext[l] for l in kloops))
                or math.prod(int(n) for n in view.shape) >= 1 << 31):
            return None
        coef, const, stride = {}, 0, 1
        for e, n in reversed(list(zip(self.cmaps[operand].results, view.shape))):
            lin = linear(e)
            if lin is None:
                return None
            for l, c in lin[0].items():
                coef[l] = coef.get(l, 0) + c * stride
            const += lin[1] * stride
            stride *= int(n)
        inner = 1
        for l in reversed(kloops):            # k's own row-major strides
            if coef.pop(l, 0) != inner:
                return None
            inner *= int(self.ext[l])
        if any(c and l not in self.loops[side] for l, c in coef.items()):
            return None
        array = flat.name(view.array, stride)
        bases = []
        for i, (_, coords, _, _) in enumerate(sides):
            b = str(const)
            for l, c in coef.items():
                b = expr_add(expr_mul(coords[l], str(c)), b)
            if " " in b:
                n = self.names.fresh(f"{side}b{i}_")
                self.w(f"{n} = {b}")
                b = n
            bases.append(b)
        def read(i: int, k: str) -> str:
            return computed(view.array, f"{array}[{expr_add(bases[i], k)}]")
        return read

    def _runs_of_4(self, side: str, operand: int, n: int = 4):
        """Where the operand's tile can be read in runs of 4 consecutive elements of its
        contiguous dim (a plan fact): (side_fast, the loop a run walks), else None. The operand
        is an f32 array the kernel reads as it is (no producer computes it in the loader), and
        its contiguous dim is either the side's innermost loop with a block tile a multiple of
        4 (runs never straddle a row of the tile) or a single K loop with BK a multiple of 4; a
        run is 4 consecutive elements of the array (checked on the index expressions). n = 8: runs
        of 8 halves (16 bytes) of a 16-bit array, the tensor-core tiles' cp.async copies."""
        if bool(self.mma) != (n == 8):
            return None
        v = self.c.operands[operand]
        view = self.body.view(v)
        if (self.values.writer(v, self.c) is not None or view.array.space != "global"
                or view.array.storage not in (("float32",) if n == 4 else ("float16", "uint16"))):
            return None
        m = self.cmaps[operand]
        last = dims_of(m.results[-1]) if len(m.results) else set()
        side_fast = bool(last & set(self.loops[side]))
        if side_fast:
            big = [l for l in self.loops[side] if self.tiles[l] != 1]
            if not big or self.tiles[big[-1]] % n:
                return None
            inner = big[-1]
        if len(self.loops["k"]) != 1 and (side_fast or n != 8 or conv.k_outer_step(self) is None):
            return None                  # (a conv's K: its loader's own coordinates, _k_split)
        if side_fast:
            pass
        else:
            if self.bk % n or self.loops["k"][-1] not in last:
                return None
            inner = self.loops["k"][-1]
        dims = [f"__fusec_d{l}__" for l in range(len(self.sides))]
        marked = list(dims)
        marked[inner] = expr_add(dims[inner], _RUN)
        b0 = view.to_base(tuple(affine(e, dims) for e in m.results))
        bm = view.to_base(tuple(affine(e, marked) for e in m.results))
        if any(_RUN in e for e in bm[:-1]) or tuple(bm[:-1]) != tuple(b0[:-1]) or bm[-1] != expr_add(b0[-1], _RUN):
            return None
        # runs of 8 halves: 16-byte aligned where the run's array index along the contiguous
        # dim is its coordinate (a multiple of 8) plus the block's offset (a name defined as a
        # block id times a multiple of 8) or constants that are multiples of 8, and the array's
        # rows are 16-byte multiples (the plan's fact: the operand's rows a static multiple of 8
        # elements; its base and pitch checked at launch, cp_async.py's _align16)
        if n == 8:
            try:
                strides, _ = ir.MemRefType(v.type).get_strides_and_offset()
            except (ValueError, TypeError):
                return None
            if strides[-1] != 1 or any(s <= 0 or s % 8 for s in strides[:-1]):
                return None              # rows not a static multiple of 8 elements apart
            terms = b0[-1].split(" + ")
            rest = [t for t in terms if t != dims[inner]]
            if len(rest) != len(terms) - 1 or not all((is_int(t) and int(t) % 8 == 0) or self._block_offset(t, 8)
                                                      for t in rest):
                return None
        return side_fast, inner

    def _block_offset(self, name: str, n: int) -> bool:
        """Whether `name` is the emitted value of a block id times a constant multiple of `n`
        (an arith.muli of a gpu.block_id and a constant, read from the ops the emitter named)."""
        if not name.isidentifier():
            return False
        v = next((v for v, e in self.ctx.expr.items() if e == name), None)
        op = getattr(v, "owner", None)
        if op is None or getattr(op, "name", None) != "arith.muli":
            return False
        a, b = (self.ctx.expr.get(x) for x in op.operands)
        by_block = [getattr(x.owner, "name", None) == "gpu.block_id" for x in op.operands]
        for i, c in ((0, b), (1, a)):
            if by_block[i] and c is not None and is_int(c):
                return int(c) % n == 0
        return False

    def _run_layout(self, side: str, operand: int, bs: int, side_fast: bool, inner: int, n: int = 4):
        """The threads over the operand's [BK, BS] tile in runs of 4 (`_runs_of_4`): W lanes
        of runs along the contiguous dim (W the largest power of two dividing T that fits it),
        T / W rows along the other, each thread keeping its lane and row across the K loop.
        Returns `runs(k0)`: per run of the K step at k0 (writing the statements its indices
        need), (key, tile index of element r, array index of element r, guards of the run's
        position in the tile, conditions on the whole run, the whole run inside the operand
        or None, conditions per element r or None). Runs of `n` (4, or 8 halves)."""
        w, names = self.w, self.names
        m = self.cmaps[operand]
        along, across = (bs, self.bk) if side_fast else (self.bk, bs)
        runs = along // n
        lanes = 1
        while self.T % (lanes * 2) == 0 and lanes * 2 <= runs:
            lanes *= 2
        rows = self.T // lanes
        lane, row = names.fresh(f"{side}l"), names.fresh(f"{side}r")
        w(f"{lane} = ({self.tid} & {lanes - 1}) << {n.bit_length() - 1}")     # the first element of the thread's run
        w(f"{row} = {self.tid} >> {lanes.bit_length() - 1}")
        pos_along = _positions(lane, n * lanes, -(-along // (n * lanes)), along)
        pos_across = _positions(row, rows, -(-across // rows), across)
        side_pos = pos_along if side_fast else pos_across
        k_pos = pos_across if side_fast else pos_along
        K = self.K()
        k_ok_needed = not (is_int(K) and int(K) % self.bk == 0)
        sides = []
        for i, (sl, guard) in enumerate(side_pos):
            coords = self._delinearize(sl, self.loops[side], f"{side}c{i}_")
            loops = [l for l in self.loops[side] if self.ext[l] != str(self.tiles[l])]
            uniform = [f"{coords[l]} < {self.ext[l]}" for l in loops if not (side_fast and l == inner)]
            edge = None                  # the run's loop at the operand's edge: (coordinate, extent)
            if side_fast and inner in loops:
                e = self.ext[inner]
                if is_int(e) and int(e) % n == 0:        # a run is all inside or all outside
                    uniform.append(f"{coords[inner]} < {e}")
                else:
                    edge = (coords[inner], e)
            ok = None
            if uniform:
                ok = names.fresh(f"{side}ok{i}")
                w(f"{ok} = {' and '.join(uniform)}")
            sides.append((sl, coords, ok, guard, edge))

        flat = conv.k_runs_flat(self, operand, side, sides, k_pos) if len(self.loops["k"]) > 1 else None

        def gen(k0: str):
            outer, step = {}, None
            if len(self.loops["k"]) > 1 and flat is not None and self._kstep is not None:
                k0, outer = self._kstep.coords(k0)     # stepped, not split (conv.KStepper)
            elif len(self.loops["k"]) > 1:     # the step's outer K coordinates; k is then the innermost's
                k0, outer = conv.k_outer(self, k0)
                if flat is not None:           # and its offset in the operand's 1-D view
                    step = self.names.fresh("ks")
                    self.w(f"{step} = {flat[2](k0, outer)}")
            for si, (sl, coords, ok, sguard, edge) in enumerate(sides):
                for ki, (kl, kguard) in enumerate(k_pos):
                    k = names.fresh("k")
                    inside = [g for g in (sguard, kguard) if g]
                    conds = [ok] if ok else []
                    full, each = None, None
                    if side_fast:
                        if k_ok_needed:
                            conds.append(f"{k} < {K}")
                        if edge is not None:
                            full = f"{expr_add(edge[0], str(n - 1))} < {edge[1]}"
                            each = [f"{expr_add(edge[0], str(r))} < {edge[1]}" for r in range(n)]
                    elif k_ok_needed:
                        if is_int(K) and int(K) % n == 0:
                            conds.append(f"{k} < {K}")
                        else:
                            full = f"{expr_add(k, str(n - 1))} < {K}"
                            each = [f"{expr_add(k, str(r))} < {K}" for r in range(n)]

                    def index(r: int, coords=coords, k=k):
                        full_c = {**coords, **outer}
                        if side_fast:
                            full_c[inner] = expr_add(coords[inner], str(r))
                            full_c[inner_k] = k
                        else:
                            full_c[inner_k] = expr_add(k, str(r))
                        dims = [full_c.get(l, "0") for l in range(len(self.sides))]
                        return [affine(e, dims) for e in m.results]

                    def at(r: int, sl=sl, kl=kl):
                        return (kl, expr_add(sl, str(r))) if side_fast else (expr_add(kl, str(r)), sl)

                    if step is not None:       # the run's first element in the 1-D view
                        index.flat = (flat[0], f"{flat[1][(si, ki)]} + {step}")
                    yield (si, ki), k, expr_add(k0, kl), at, index, inside, conds, full, each

        inner_k = self.loops["k"][-1]
        if len(self.loops["k"]) > 1 and (side_fast or conv.k_outer_step(self) is None):
            raise EmitError("a contraction tile read in runs needs one K loop, or K steps inside its innermost", self.c)
        gen.flat = flat
        return gen

    def _wide_loader(self, side: str, operand: int, tile, bs: int, side_fast: bool, inner: int) -> _Loader:
        """The tile loader in runs of 4 through registers: each run one `_ld4_f32` (a 16-byte
        global load where the address is aligned, else 4 scalar ones), zero outside the
        operand; a run at the operand's edge (a dynamic extent, or one not a multiple of 4)
        element by element. The 4 values go to the tile's row k (a run along the side) or to
        4 rows (a run along K: the transposed side)."""
        w, names = self.w, self.names
        v = self.c.operands[operand]
        view = self.body.view(v)
        zero = self.ctx.consts.zero(elem_of_type(v.type))
        runs = self._run_layout(side, operand, bs, side_fast, inner)
        self.body.ctx.helpers.use_text("_ld4_f32", VECTOR_HELPERS)
        held: dict = {}

        def fetch(k0: str, store: bool) -> None:
            """The K step's runs into registers (every load issued before the first store into
            the tile, so they are in flight together), then stored (`store`) or held."""
            stores = []
            for key, k, kval, at, index, inside, conds, full, each in runs(k0):
                xs = ([names.fresh("x") for _ in range(4)] if store
                      else [held.setdefault((key, r), names.fresh("pf")) for r in range(4)])
                if inside and store:     # defined on every path to the stores after the loads
                    w(f"{' = '.join(xs)} = {zero}")
                with w.when(inside):
                    w(f"{k} = {kval}")
                    self.values.forget()
                    base = view.to_base(tuple(index(0)))
                    wide = f"{', '.join(xs)} = _ld4_f32({view.array.name}, ({', '.join(base)},))"
                    if conds or full:
                        w(f"{' = '.join(xs)} = {zero}")
                    with w.when(conds):
                        if full:
                            w(f"if {full}:")
                            with w.indent():
                                w(wide)
                            w("else:")
                            with w.indent():
                                for r in range(4):
                                    w(f"if {each[r]}:")
                                    with w.indent():
                                        w(f"{xs[r]} = {self.values.read(v, index(r), self.c)}")
                        else:
                            w(wide)
                if store:
                    stores.append((inside, [_store(tile, at(r), xs[r]) for r in range(4)]))
            for inside, lines in stores:
                with w.when(inside):
                    for line in lines:
                        w(line)

        def put() -> None:
            for key, k, kval, at, index, inside, conds, full, each in runs("0"):
                with w.when(inside):
                    for r in range(4):
                        w(_store(tile, at(r), held[(key, r)]))

        def declare() -> None:
            for key, *_ in runs("0"):
                for r in range(4):
                    w(f"{held.setdefault((key, r), names.fresh('pf'))} = {zero}")

        return _Loader(lambda k0: fetch(k0, True), lambda k0: fetch(k0, False), put, declare)

    def _staged_loader(self, side: str, operand: int, ring, bs: int, inner: int, side_fast: bool = True,
                       n: int = 4, stages: int = 0) -> _Loader:
        """The tile loader by cp.async into a ring of stages (emit/cp_async.py), for a side
        whose tile has the operand's layout (the run along the side's contiguous dim, into the
        tile's row k): each run one `_cp_async16`; at the operand's edge element by element
        (`_cp_async4`), a zero stored where an element lies outside. n = 8: a tensor-core tile's
        runs of 8 halves along the operand's contiguous dim (the side's, or K: `side_fast`), one
        `_cp_async16h` each; at an edge element by element (a plain load), zero outside; their
        source offsets strength-reduced where the array's shape is static (`_flat_offsets`)."""
        w = self.w
        v = self.c.operands[operand]
        view = self.body.view(v)
        zero = self.ctx.consts.zero(elem_of_type(v.type))
        runs = self._run_layout(side, operand, bs, side_fast, inner, n)
        self.body.ctx.helpers.use_text("_cp_async16", CP_ASYNC_HELPERS)
        if n == 8:
            self.body.ctx.helpers.use_text("_cp_async16h", CP_ASYNC16H_HELPERS)
            if view.array.name not in self.ctx.aligned16:
                self.ctx.aligned16.append(view.array.name)
        array = ring.array
        if n == 8 and len(self.loops["k"]) == 1:
            flat = self._flat_offsets(side, operand, view, runs, ring, stages)
        elif n == 8 and getattr(runs, "flat", None) is not None and stages:
            flat = self._conv_offsets(side, runs, ring, stages)    # a channels-last conv's K steps
        else:
            flat = None

        def issue(k0: str, stage: str) -> None:
            tile = self._stage(ring, stage)
            for key, k, kval, at, index, inside, conds, full, each in runs(k0):
                with w.when(inside):
                    whole = conds + ([full] if full else [])
                    name, first = getattr(index, "flat", (view.array.name, None))
                    if flat is None or whole:        # (k: the run's K index, for the guards)
                        w(f"{k} = {kval}")
                    src = lambda r: f"({', '.join(view.to_base(tuple(index(r))))},)"
                    with w.when(whole):
                        if flat is not None:
                            w(f"_cp_async16hs({array}, {tile.index(*at(0))}, {flat.dst(key, stage)}, {flat.array}, "
                              f"({flat.at(key, k0)},))")
                        else:
                            w(f"_cp_async16{'h' if n == 8 else ''}({array}, {tile.index(*at(0))}, {name}, "
                              f"{f'({first},)' if first else src(0)})")
                    if whole:
                        w("else:")
                        with w.indent():
                            for r in range(n):
                                if each is None:
                                    w(_store(tile, at(r), zero))
                                    continue
                                w(f"if {' and '.join(conds + [each[r]])}:")
                                with w.indent():
                                    if n == 8:
                                        w(f"{tile.at(*at(r))} = {view.array.name}[{', '.join(view.to_base(tuple(index(r))))}]")
                                    else:
                                        w(f"_cp_async4({array}, {tile.index(*at(r))}, {view.array.name}, {src(r)})")
                                w("else:")
                                with w.indent():
                                    w(_store(tile, at(r), zero))

        return _Loader(issue=issue, advance=flat.advance if flat is not None else None)

    def _flat_offsets(self, side: str, operand: int, view, runs, ring, stages: int) -> "_FlatRuns | None":
        """The strength-reduced source addresses of a tensor-core tile's cp.async runs: where the
        operand's array has a static shape (under 2**31 elements) and K moves its index along
        dims by constant strides, each run's element offset in the array's 1-D view (`_flat`)
        at K step 0 is computed once before the K loop, and the K loop's copies add one running
        offset, stepped by a constant per K step (Numba indexes a 2-D array with its run-time
        row stride: a 64-bit multiply per copy in the loop where LLVM does not reduce it).
        Returns None where the array's shape is not static."""
        w, names = self.w, self.names
        shape = view.shape if view.whole else view.base_shape
        if shape is None:            # a tile of the array: the shape of its whole view
            shape = next((u.shape for u in self.body.ctx.views.values() if u.whole and u.array == view.array), None)
        if view.array.space != "global" or shape is None or not all(is_int(x) for x in shape):
            return None
        shape = [int(x) for x in shape]
        size = math.prod(shape)
        if size >= 1 << 31:
            return None
        strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
        inner_k = self.loops["k"][0]
        dims = [f"__fusec_d{l}__" for l in range(len(self.sides))]
        marked = list(dims)
        marked[inner_k] = expr_add(dims[inner_k], _RUN)
        m = self.cmaps[operand]
        b0 = view.to_base(tuple(affine(e, dims) for e in m.results))
        bm = view.to_base(tuple(affine(e, marked) for e in m.results))
        coef = 0
        for d, (e0, e1) in enumerate(zip(b0, bm)):
            if e1 == expr_add(e0, _RUN):
                coef += strides[d]
            elif e1 != e0:
                return None             # K not a unit step along its dims
        self.body.ctx.helpers.use_text("_flat", FLAT_HELPER)
        array = names.fresh(f"{view.array.name}_f")
        w(f"{array} = _flat({view.array.name}, {size})")
        bases, dsts = {}, {}
        tile = self._stage(ring, "0")
        for key, k, kval, at, index, inside, conds, full, each in runs("0"):
            d = names.fresh(f"s{side}{key[0]}_{key[1]}_")      # its shared address in stage 0 (bytes)
            w(f"{d} = {self.tc.hb} + {expr_mul('2', tile.flat(*at(0)))}")
            dsts[key] = d
            off = "0"
            for i, st in zip(view.to_base(tuple(index(0))), strides):
                off = expr_add(off, expr_mul(i, str(st)))
            # k stands for the run's K position in the step (kval at k0 = 0)
            b = names.fresh(f"g{side}{key[0]}_{key[1]}_")
            w(f"{k} = {kval}")
            w(f"{b} = {off}")
            bases[key] = b
        run = names.fresh(f"g{side}k")
        w(f"{run} = {(stages - 1) * self.bk * coef}")    # the first step the K loop copies: S - 1 ahead
        return _FlatRuns(w, array, bases, run, coef, self.bk * coef, dsts, 2 * ring.size)

    def _conv_offsets(self, side: str, runs, ring, stages: int) -> "_FlatRuns":
        """`_flat_offsets` for a channels-last conv's operand (several K loops, `conv.k_runs_flat`):
        each run's offset at K step 0 (named by k_runs_flat) and its 32-bit shared address in
        stage 0 before the K loop; the K loop's copies add the operand's running offset, which
        the K steps' stepper (`conv.KStepper`, one for both operands) advances."""
        w, names = self.w, self.names
        array, bases, _, coef = runs.flat
        first = self._kstep is None
        if first:
            self._kstep = conv.KStepper(self, (stages - 1) * self.bk)
        run = self._kstep.add(side, coef)
        dsts = {}
        tile = self._stage(ring, "0")
        for key, k, kval, at, index, inside, conds, full, each in runs("0"):
            d = dsts[key] = names.fresh(f"s{side}{key[0]}_{key[1]}_")      # its shared address in stage 0 (bytes)
            w(f"{d} = {self.tc.hb} + {expr_mul('2', tile.flat(*at(0)))}")
        return _ConvRuns(w, array, bases, run, self._kstep, coef, dsts, 2 * ring.size, steps=first)

    def _k_split(self, k_pos, kloops: list[int], ext_k: list[str]):
        """The loader's K coordinates without a division per element: where K is several loops
        (a conv's (c, r, s)) of static inner extents whose product `inner` divides BK, a K step
        starts on a multiple of `inner`, so the element at k0 + kl has outer coordinate
        k0 // inner + kl // inner and inner coordinates those of kl % inner, all but the first
        term fixed per thread: computed here, before the K loop. Returns (inner, {kl: (outer
        offset, {loop: coordinate})}), or None (one K loop, or BK not a multiple)."""
        if len(kloops) < 2 or not all(is_int(e) for e in ext_k[1:]):
            return None
        inner = math.prod(int(e) for e in ext_k[1:])
        if inner == 1 or self.bk % inner:
            return None
        out = {}
        for i, (kl, _) in enumerate(k_pos):
            rem = self.names.fresh(f"kr{i}_")
            self.w(f"{rem} = {mod(kl, str(inner))}")
            outer = self.names.fresh(f"kq{i}_")
            self.w(f"{outer} = {floordiv(kl, str(inner))}")
            out[kl] = (outer, self._delinearize(rem, kloops[1:], f"ki{i}_", ext_k[1:]))
        return inner, out

    def _k_counted(self, k_pos, kloops: list[int], ext_k: list[str]):
        """The loader's K coordinates with one division per K step where K is several loops of
        static inner extents (product `inner`) but BK is no multiple of `inner` (a conv's
        (c, r, s), BK 16, inner 9): k0 = inner q0 + r0 once per step, each position's kl =
        inner kq + kr once per thread, so k0 + kl has outer coordinate q0 + kq + (r0 + kr >=
        inner) and the inner ones those of r0 + kr (less inner on the carry), all below 2 inner:
        divisions by constants written as a multiply and a shift (`values.small_div`). Returns
        k0 -> (kl -> {loop: coordinate}) (writing the step's statements), or None."""
        if len(kloops) < 2 or not all(is_int(e) for e in ext_k[1:]):
            return None
        sizes = [int(e) for e in ext_k[1:]]
        inner = math.prod(sizes)
        if inner == 1 or small_div("x", inner, 2 * inner) is None:
            return None
        names, w = self.names, self.w
        per_pos = {}
        for i, (kl, _) in enumerate(k_pos):
            if kl in per_pos:
                continue
            q, r = names.fresh(f"kq{i}_"), names.fresh(f"kr{i}_")
            w(f"{q} = {floordiv(kl, str(inner))}")
            w(f"{r} = {mod(kl, str(inner))}")
            per_pos[kl] = (q, r)

        def at(k0: str):
            q0, r0 = names.fresh("kq"), names.fresh("kr")
            w(f"{q0} = {k0} // {inner}")
            w(f"{r0} = {k0} - {q0} * {inner}")

            def coords(kl: str) -> dict[int, str]:
                q, r = per_pos[kl]
                e, cy, rem = names.fresh("ke"), names.fresh("kcy"), names.fresh("krem")
                w(f"{e} = {r0} + {r}")
                w(f"{cy} = {small_div(e, inner, 2 * inner - 2)}")
                w(f"{rem} = {e} - {cy} * {inner}")
                out = {kloops[0]: f"{q0} + {q} + {cy}"}
                div = {}                         # rem // P for P a suffix product of the sizes
                for li, l in enumerate(kloops[1:]):
                    p_in = math.prod(sizes[li + 1:])
                    p_out = p_in * sizes[li]
                    for p in (p_in, p_out):
                        if p not in div:
                            if p == 1:
                                div[p] = rem
                            elif p >= inner:
                                div[p] = "0"
                            else:
                                div[p] = names.fresh("kd")
                                w(f"{div[p]} = {small_div(rem, p, inner - 1)}")
                    c = div[p_in] if div[p_out] == "0" else f"{div[p_in]} - {div[p_out]} * {sizes[li]}"
                    if " " in c:
                        n = names.fresh("kc")
                        w(f"{n} = {c}")
                        c = n
                    out[l] = c
                return out
            return coords
        return at

    def _delinearize(self, flat: str, loops: list[int], stem: str, extents: list[str] | None = None) -> dict[int, str]:
        """Coordinates of `loops` (row-major over their static tiles, or `extents`) from a flat index."""
        sizes = [str(self.tiles[l]) for l in loops] if extents is None else list(extents)
        out = {l: "0" for l, n in zip(loops, sizes) if n == "1"}
        keep = [(l, n) for l, n in zip(loops, sizes) if n != "1"]
        if not keep:
            return out
        loops, sizes = [l for l, _ in keep], [n for _, n in keep]
        if len(loops) == 1:
            return {**out, loops[0]: flat}
        inner = "1"
        for l, n in reversed(list(zip(loops, sizes))):
            e = floordiv(flat, inner)
            out[l] = e if l == loops[0] else mod(e, n)
            inner = expr_mul(inner, n)
        named = {l: "0" for l in out if out[l] == "0" and l not in loops}
        for l in loops:
            if is_int(out[l]) or " " not in out[l]:
                named[l] = out[l]
            else:
                n = self.names.fresh(f"{stem}{l}")
                self.w(f"{n} = {out[l]}")
                named[l] = n
        return named

    # -- the epilogue ----------------------------------------------------------------------------
    def _epilogue(self, accs) -> None:
        """Each accumulator's epilogue down to the root, stored. Where the thread's columns run
        in 4s (`WideGrid.cols`) along the output arrays' contiguous dim, each run's 4 values are
        computed, then stored with one `_st4_f32` per output (a scalar store per column past the
        output's edge)."""
        w = self.w
        ms = []
        for i in range(len(accs)):
            coords = self._delinearize(self.at.row(i), self.loops["m"], f"mo{i}_")
            conds = [f"{coords[l]} < {self.ext[l]}" for l in self.loops["m"] if self.ext[l] != str(self.tiles[l])]
            ms.append((coords, conds))
        self.values.forget()
        runs = isinstance(self.at, WideGrid) and self.at.cols
        for i, (mc, mconds) in enumerate(ms):
            j = 0
            while j < len(accs[0]):
                if runs and j % 4 == 0 and self._run4(i, j, accs, mc, mconds):
                    j += 4
                    continue
                nc, nconds = self._ncoords(self.at.col(j), f"no{j}_")
                with self.values.guarded(mconds + nconds):    # values computed outside stay valid
                    self._store(mc, nc, accs[i][j], None)
                j += 1

    def _ncoords(self, n: str, stem: str):
        coords = self._delinearize(n, self.loops["n"], stem)
        conds = [f"{coords[l]} < {self.ext[l]}" for l in self.loops["n"] if self.ext[l] != str(self.tiles[l])]
        return coords, conds

    def _outputs(self, dims: list[str]):
        """(view, index) of each array the epilogue stores at loop coordinates `dims`."""
        if self.root == self.c:
            ops, maps = [self.out], [self.cmaps[2]]
        else:
            n_in = n_inputs(self.root)
            ops, maps = list(self.root.operands)[n_in:], indexing_maps(self.root)[n_in:]
        return [(self.body.view(v), [affine(e, dims) for e in m.results]) for v, m in zip(ops, maps)]

    def _store(self, mc, nc, acc: str, into: list | None) -> None:
        """Accumulator `acc`'s epilogue at (mc, nc): each result stored, or (`into`) kept in a
        register appended to `into`."""
        dims = [mc.get(l, nc.get(l, "0")) for l in range(len(self.sides))]
        self.values.supply(self.out, [affine(e, dims) for e in self.cmaps[2].results], acc)
        if self.root == self.c:
            values = [acc]
        else:
            values = self.values.results(self.root, [dims[cl] for cl in self.root_loops])
        for (view, idx), v in zip(self._outputs(dims), values):
            if into is None:
                self.w(view.store(idx, v))
            else:
                t = self.names.fresh("y")
                self.w(f"{t} = {v}")
                into.append(t)

    def _run_reads(self, i: int, j: int, accs, mc, nc0: dict, inner: int, mark: str) -> list:
        """The global f32 reads of the epilogue of columns j..j+3 of row i whose 4 elements are
        consecutive on the array's contiguous dim: [(array, base index)]. Found by writing the
        epilogue at the run's first column (n coordinates `nc0`) and at it plus `mark` on the
        innermost n loop, and discarding the text (the reads in order)."""
        w = self.w
        found = []
        for nc in (nc0, {**nc0, inner: expr_add(nc0[inner], mark)}):
            lines, depth, memo = len(w.lines), w.depth, dict(self.values.memo)
            self.values.probe = []
            try:
                self._store(mc, nc, accs[i][j], [])
            finally:
                found.append(self.values.probe)
                self.values.probe = None
                del w.lines[lines:]
                w.depth, self.values.memo = depth, memo
        out = []
        if len(found[0]) != len(found[1]):
            return out
        for (view, i0), (_, im) in zip(*found):
            if view.array.space != "global" or view.array.storage != "float32":
                continue
            b0, bm = tuple(view.to_base(tuple(i0))), tuple(view.to_base(tuple(im)))
            if any(mark in e for e in bm[:-1]) or bm[:-1] != b0[:-1] or bm[-1] != expr_add(b0[-1], mark):
                continue
            if (view.array.name, b0) not in out:
                out.append((view.array.name, b0))
        return out

    def _run4(self, i: int, j: int, accs, mc, mconds) -> bool:
        """Columns j..j+3 (one run of 4) of row i stored 16 bytes at a time where each output's
        4 elements are consecutive on its array's contiguous dim; False (nothing written) where
        they are not."""
        mark = "__fusec_run__"
        nb = self.at.col(j)
        big = [l for l in self.loops["n"] if self.tiles[l] != 1]
        # the run's 4 columns (nb a multiple of 4) differ only in the innermost n loop's coordinate
        if not big or self.tiles[big[-1]] % 4:
            return False
        inner = big[-1]
        nc0, _ = self._ncoords(nb, f"no{j}_")
        ncm = {**nc0, inner: expr_add(nc0[inner], mark)}
        dims0 = [mc.get(l, nc0.get(l, "0")) for l in range(len(self.sides))]
        dimsm = [mc.get(l, ncm.get(l, "0")) for l in range(len(self.sides))]
        bases = []
        for (view, idx0), (_, idxm) in zip(self._outputs(dims0), self._outputs(dimsm)):
            if view.array.space != "global" or view.array.storage != "float32":
                return False
            b0, bm = view.to_base(tuple(idx0)), view.to_base(tuple(idxm))
            if any(mark in e for e in bm[:-1]) or bm[:-1] != b0[:-1] or bm[-1] != expr_add(b0[-1], mark):
                return False
            bases.append((view.array.name, b0))
        self.body.ctx.helpers.use_text("_ld4_f32", VECTOR_HELPERS)
        # the columns as nb + r, the form the wide loads' registers are keyed by
        def at(r: int):
            nc = {**nc0, inner: expr_add(nc0[inner], str(r))}
            return nc, [f"{nc[l]} < {self.ext[l]}" for l in self.loops["n"] if self.ext[l] != str(self.tiles[l])]

        cols = [at(r) for r in range(4)]
        last = cols[3][1]
        loads = self._run_reads(i, j, accs, mc, nc0, inner, mark)
        with self.values.guarded(mconds):
            with self.values.guarded(last):
                for array, base in loads:      # the epilogue's operands along n: 16 bytes each
                    lanes = [self.names.fresh("x") for _ in range(4)]
                    self.w(f"{', '.join(lanes)} = _ld4_f32({array}, ({', '.join(base)},))")
                    for r, x in enumerate(lanes):
                        self.values.loaded[(array, base[:-1] + (expr_add(base[-1], str(r)),))] = x
                regs: list[str] = []
                for r, (nc, _) in enumerate(cols):
                    self._store(mc, nc, accs[i][j + r], regs)
                k = len(bases)
                for o, (array, base) in enumerate(bases):
                    lanes = regs[o::k]
                    self.w(f"_st4_f32({array}, ({', '.join(base)},), {', '.join(lanes)})")
                self.values.loaded = {}
            if last:
                self.w("else:")
                self.w.depth += 1
                saved = dict(self.values.memo)
                for r, (nc, nconds) in enumerate(cols):
                    with self.values.guarded(nconds):
                        self._store(mc, nc, accs[i][j + r], None)
                self.values.memo = saved
                self.w.depth -= 1
        return True


def _split_const(e: str) -> tuple[str, int]:
    """(the rest, c) for an expression `rest + c` with c an integer literal; (e, 0) otherwise."""
    if is_int(e):
        return "0", int(e)
    head, sep, tail = e.rpartition(" + ")
    if sep and tail.isdigit() and "(" not in tail:
        return head, int(tail)
    return e, 0
