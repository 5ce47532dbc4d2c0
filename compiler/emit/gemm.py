"""The block of a contraction kernel, written here (compiler/plan/gemm.py, transforms/gemm_kernels.py).

At the root marked `fusec.block_gemm` inside a gpu.launch, with threads (TX, TY) = (BP / TP,
BQ / TQ), the block computes its tile of the contraction C[q, p] = sum_k Q[q, k] P[k, p] and the
epilogue down to the root:

    for k0 in range(0, K, BK):                       # K: every reduction loop, flattened
        Qs[kl, ql] = Q at (q0 + ql, k0 + kl)         # cooperative: element e = tid + r * T
        Ps[kl, pl] = P at (p0 + pl, k0 + kl)         #   (consecutive threads along the operand's
        syncthreads                                  #    contiguous dim: coalesced)
        for kk in range(BK):                         # per thread, TQ x TP accumulators in registers
            a_i = Qs[kk, ty + i * TY]; b_j = Ps[kk, tx + j * TX]
            acc_i_j = body(a_i, b_j, acc_i_j)       #   (the contraction's own body: f16 extends)
        syncthreads
    out[q, p] = epilogue(acc_i_j)                    # for (q, p) inside the tile: one write each

Double-buffered (`fusec.gemm_prefetch`), the loads go into registers: the first step's before
the loop; in the loop the registers are stored into the tiles, a barrier, the next step's loads
issued (if there is one), then this step's products, so the loads are in flight meanwhile.

The staging tiles are f32 (the compute type) with one word of padding per row (four on tensor
cores: plan/gemm.py tile_pad), so the loader's transposed stores and the compute loop's reads
are free of bank conflicts. An operand's value
at an element is its producer's body evaluated there when a kernel op wrote it (a pad's gather,
an elementwise producer: `fusec.absorbed`), else a load; the epilogue is the root's body
evaluated at each accumulator, reading the accumulator wherever it reads the contraction's
result. Edges: loads outside the operands read zero, stores outside the output are skipped.

On tensor cores (`fusec.gemm_mma` = f16 | bf16), the same shared tiles feed mma.sync.m16n8k16
(f32 accumulate) through two inline-PTX intrinsics the module defines (`_pack_<t>x2`: two f32
rounded into one f16x2/bf16x2 register, `_mma_<t>`: one fragment product), so there is no call,
no link step and no local memory. Warp w of the block owns the (8 TQ) x (4 TP) warp tile at
rows (w // WP) * 8 TQ, columns (w % WP) * 4 TP (WP = BP / (4 TP)); lane l = 4 g + t reads, per
16 of K, its A fragments Qs[k0 + 2t + {0, 1} (+8), rows g (+8) + 16 mi] and B fragments
Ps[k0 + 2t + {0, 1} (+8), columns g + 8 ni], and holds the accumulators at rows g + 8 h + 16 mi,
columns 2 t + e + 8 ni (PTX ISA, "Matrix Fragments for mma.m16n8k16"): accumulator (i, j) is
(mi, h) = divmod(i, 2), (ni, e) = divmod(j, 2), and the epilogue reads them as in the SIMT form.
Numba's simulator runs each thread on its own and has no warp ops: there (`_FMA_ONLY`, set
where `_CUDASIM` is) each lane computes exactly the outputs its fragments hold, from the same
shared tiles, with FMAs. (tests/fusion/test_tensor_cores.py also runs the mma path on the
simulator, with the two intrinsics replaced by a warp-level emulation of the PTX layout.)
"""
from __future__ import annotations

import math

from .mma import TensorCores
from .values import EmitError, atom, add, floordiv, is_int, mod, mul, no_rule
from ..mlir import ir
from ..plan.gemm import mma_tiles_error, tile_pad
from ..marks import ABSORBED, BLOCK_GEMM, CONTRACTION, GEMM_MMA, GEMM_PREFETCH, GEMM_ROOT_LOOPS, GEMM_SIDES, GEMM_TILES

def _ints(attr) -> list[int]:
    return [int(x) for x in ir.DenseI64ArrayAttr(attr)]


def _maps(op) -> list["ir.AffineMap"]:
    return [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]


def affine(e: "ir.AffineExpr", dims: list[str]) -> str:
    """An affine expression over loop coordinates `dims` as a Python index expression."""
    e = e.maybe_downcast() if hasattr(e, "maybe_downcast") else e
    if isinstance(e, ir.AffineDimExpr):
        return dims[e.position]
    if isinstance(e, ir.AffineConstantExpr):
        return str(e.value)
    if isinstance(e, ir.AffineAddExpr):
        return add(affine(e.lhs, dims), affine(e.rhs, dims))
    if isinstance(e, ir.AffineMulExpr):
        return mul(affine(e.lhs, dims), affine(e.rhs, dims))
    if isinstance(e, ir.AffineFloorDivExpr):
        return floordiv(affine(e.lhs, dims), affine(e.rhs, dims))
    if isinstance(e, ir.AffineModExpr):
        return mod(affine(e.lhs, dims), affine(e.rhs, dims))
    raise EmitError(f"the emitter has no rule for the affine expression {e}")


def _dims_of(e: "ir.AffineExpr") -> set[int]:
    e = e.maybe_downcast() if hasattr(e, "maybe_downcast") else e
    if isinstance(e, ir.AffineDimExpr):
        return {e.position}
    if isinstance(e, ir.AffineConstantExpr):
        return set()
    if isinstance(e, ir.AffineBinaryExpr):
        return _dims_of(e.lhs) | _dims_of(e.rhs)
    return set()


def _pure_dim(e: "ir.AffineExpr") -> int | None:
    e = e.maybe_downcast() if hasattr(e, "maybe_downcast") else e
    return e.position if isinstance(e, ir.AffineDimExpr) else None


def _is_identity(m: "ir.AffineMap") -> bool:
    return m.n_dims == len(m.results) and all(_pure_dim(e) == i for i, e in enumerate(m.results))


class Tile:
    """A [BK, B] staging tile in shared memory, a 2-D array."""

    def __init__(self, array: str):
        self.array = array

    def at(self, k: str, x: str) -> str:
        return f"{self.array}[{k}, {x}]"


class Grid:
    """A thread grid's accumulators: thread (x, y)'s accumulator (i, j) lies at row y + i NY,
    column x + j NX of the block's tile (the FMA form; the tensor-core form after restaging)."""

    def __init__(self, y: str, ny: int, x: str, nx: int):
        self.y, self.ny, self.x, self.nx = y, ny, x, nx

    def row(self, i: int) -> str:
        return add(self.y, str(i * self.ny))

    def col(self, j: int) -> str:
        return add(self.x, str(j * self.nx))


class _Loader:
    """One operand's tile loader (_Gemm._loader): `load(k0)` reads the K step at k0 into the
    tile; double-buffered, `hold(k0)` reads it into registers, `put()` stores those into the
    tile and `declare()` defines the registers before the loop."""

    def __init__(self, load, hold, put, declare):
        self.load, self.hold, self.put, self.declare = load, hold, put, declare


def block_gemm(body, root) -> None:
    body.need(root, "kernel")
    _Gemm(body, root).emit()


class _Gemm:
    def __init__(self, body, root):
        self.body, self.root = body, root
        self.w, self.names, self.ctx = body.w, body.names, body.ctx
        block = [o.operation for o in root.block.operations]
        self.order = {op: i for i, op in enumerate(block)}
        cs = [op for op in block if CONTRACTION in op.attributes]
        if len(cs) != 1 or cs[0].name != "linalg.generic":
            raise EmitError("a fusec.block_gemm needs one generalized fusec.gemm_contraction in its block", root)
        self.c = cs[0]
        self.writers = [op for op in block if op.name.startswith("linalg.")
                        and (ABSORBED in op.attributes or CONTRACTION in op.attributes or op == root)]
        self.bk, self.tq, self.tp = _ints(root.attributes[BLOCK_GEMM])
        self.tiles = _ints(root.attributes[GEMM_TILES])
        self.sides = [ir.StringAttr(s).value for s in ir.ArrayAttr(root.attributes[GEMM_SIDES])]
        self.root_loops = _ints(root.attributes[GEMM_ROOT_LOOPS])
        self.cmaps = _maps(self.c)
        n_in = len(self.c.operands) - 1
        if n_in != 2 or len(self.cmaps) != 3 or len(self.sides) != self.cmaps[0].n_dims:
            raise EmitError("a fusec.gemm_contraction needs two operands and one result", self.c)
        self.loops = {s: [l for l, x in enumerate(self.sides) if x == s] for s in ("q", "p", "batch", "k")}
        used = [_dims_of_map(m) for m in self.cmaps[:2]]
        self.q_op = 0 if set(self.loops["q"]) & used[0] else 1
        self.p_op = 1 - self.q_op
        self.out = self.c.operands[2]
        self.ext = self._extents()
        self.bq = math.prod(self.tiles[l] for l in self.loops["q"])
        self.bp = math.prod(self.tiles[l] for l in self.loops["p"])
        self.tx, self.ty = self.bp // self.tp, self.bq // self.tq
        self.T = self.tx * self.ty
        dims = tuple(str(d) for d in (body.ctx.block_dims or ()))
        if dims and dims != (str(self.tx), str(self.ty), "1"):
            raise EmitError(f"a fusec.block_gemm of {self.tx}x{self.ty} threads in a block of {dims}", root)
        self.mma = ir.StringAttr(root.attributes[GEMM_MMA]).value if GEMM_MMA in root.attributes else ""
        why = mma_tiles_error(self.bq, self.bp, self.bk, self.tq, self.tp) if self.mma else None
        if why is not None:
            raise EmitError(f"a {self.mma} tensor-core fusec.block_gemm: {why}", root)
        self.memo: dict = {}
        self.acc: dict = {}             # the contraction's output index (as text) -> accumulator name

    # -- sizes --------------------------------------------------------------------------------
    def _extents(self) -> list[str]:
        """Each contraction loop's extent in this block (dynamic at the edges)."""
        out: list[str | None] = [None] * len(self.sides)
        for v, m in zip(self.c.operands, self.cmaps):
            shape = self.body.view(v).shape
            for d, e in enumerate(m.results):
                l = _pure_dim(e)
                if l is not None and out[l] is None:
                    out[l] = shape[d]
        if any(x is None for x in out):
            raise EmitError("a fusec.gemm_contraction loop indexes no operand dim by itself", self.c)
        return out

    def K(self) -> str:
        n = "1"
        for l in self.loops["k"]:
            n = mul(n, self.ext[l])
        return n

    # -- emission ------------------------------------------------------------------------------
    def emit(self) -> None:
        w, names = self.w, self.names
        w(f"# {BLOCK_GEMM}: {self.bq}x{self.bp} outputs per block, K in steps of {self.bk}, "
          f"{self.tq}x{self.tp} per thread")
        self.tid = names.fresh("tid")
        self.txn, self.tyn = names.fresh("tx"), names.fresh("ty")
        w(f"{self.txn} = cuda.threadIdx.x")
        w(f"{self.tyn} = cuda.threadIdx.y")
        w(f"{self.tid} = {self.tyn} * {self.tx} + {self.txn}")
        # where a thread's accumulator (i, j) lies in the block's tile (`.row(i)`, `.col(j)`)
        self.at = Grid(self.tyn, self.ty, self.txn, self.tx)
        tc = None
        if self.mma:
            tc = TensorCores(self.body, self.mma, self.tid, self.bq, self.bp, self.bk, self.tq, self.tp, self.T)
            self.at = tc.layout()
        sq, sp = names.fresh("Qs"), names.fresh("Ps")
        pad = tile_pad(bool(self.mma))
        if tc:
            sq, sp = tc.tiles(pad)
        else:
            w(f"{sq} = cuda.shared.array(({self.bk}, {self.bq + pad}), numba.{_elem(self.c.operands[self.q_op]).compute})")
            w(f"{sp} = cuda.shared.array(({self.bk}, {self.bp + pad}), numba.{_elem(self.c.operands[self.p_op]).compute})")
            sq, sp = Tile(sq), Tile(sp)
        loads = [self._loader("q", self.q_op, sq, self.bq), self._loader("p", self.p_op, sp, self.bp)]
        init = self._init()
        accs = [[names.fresh(f"acc{i}_{j}") for j in range(self.tp)] for i in range(self.tq)]
        for row in accs:
            for a in row:
                w(f"{a} = {init}")
        k0 = names.fresh("k0")
        prefetch = GEMM_PREFETCH in self.root.attributes
        if prefetch:             # the first K step into registers before the loop
            for ld in loads:
                ld.declare()
            for ld in loads:
                ld.hold("0")
        w(f"for {k0} in range(0, {self.K()}, {self.bk}):")
        with w.indent():
            if prefetch:
                # this step from the registers into the tiles, then the next step's loads issued
                # before this step's products, so their latency hides behind them
                for ld in loads:
                    ld.put()
                w("cuda.syncthreads()")
                w(f"if {k0} + {self.bk} < {self.K()}:")
                with w.indent():
                    for ld in loads:
                        ld.hold(f"({k0} + {self.bk})")
            else:
                for ld in loads:
                    ld.load(k0)
                w("cuda.syncthreads()")
            if tc:
                kk0 = names.fresh("kk0")
                w(f"for {kk0} in range(0, {self.bk}, 16):")
                with w.indent():
                    w("if _FMA_ONLY:")
                    with w.indent():
                        self._fma_steps(sq, sp, accs, f"range({kk0}, {kk0} + 16)")
                    w("else:")
                    with w.indent():
                        tc.step(sq, sp, accs, kk0)
            else:
                self._fma_steps(sq, sp, accs, f"range({self.bk})")
            w("cuda.syncthreads()")
        if tc:
            accs, self.at = tc.restage(accs, self.at, Grid)
        self._epilogue(accs)

    # -- the products ----------------------------------------------------------------------------
    def _fma_steps(self, sq, sp, accs, ks: str) -> None:
        """Per k of `ks`, each accumulator += its row of Q times its column of P."""
        w, names = self.w, self.names
        kk = names.fresh("kk")
        w(f"for {kk} in {ks}:")
        with w.indent():
            a = [names.fresh(f"a{i}") for i in range(self.tq)]
            b = [names.fresh(f"b{j}") for j in range(self.tp)]
            for i, n in enumerate(a):
                w(f"{n} = {sq.at(kk, self.at.row(i))}")
            for j, n in enumerate(b):
                w(f"{n} = {sp.at(kk, self.at.col(j))}")
            for i in range(self.tq):
                for j in range(self.tp):
                    ins = [None, None]
                    ins[self.q_op], ins[self.p_op] = a[i], b[j]
                    w(f"{accs[i][j]} = {self._contraction_step(ins[0], ins[1], accs[i][j])}")

    def _init(self) -> str:
        writer = self._writer(self.out, self.c)
        if writer is None or writer.name != "linalg.fill":
            raise EmitError("the accumulator of a fusec.gemm_contraction must be filled in its kernel", self.c)
        return self.body.val(writer.operands[0])

    def _contraction_step(self, x: str, y: str, acc: str) -> str:
        """The contraction's body on one pair of operands (an expression)."""
        block = self.c.regions[0].blocks[0]
        args = list(block.arguments)
        env = {args[0]: x, args[1]: y, args[2]: acc}
        ops = [o.operation for o in block.operations]
        for op in ops[:-1]:
            if len(op.results) != 1 or op.regions or any(v not in env and not self._known(v) for v in op.operands):
                raise EmitError("a fusec.gemm_contraction body must be scalar arithmetic", self.c)
            e = self.ctx.rules.expr(op, [env[v] if v in env else self.body.val(v) for v in op.operands])
            if e is None:
                raise no_rule(op)
            env[op.results[0]] = atom(e)
        (y_,) = ops[-1].operands
        return env[y_] if y_ in env else self.body.val(y_)

    def _known(self, v) -> bool:
        return v in self.ctx.expr

    # -- the tile loader -------------------------------------------------------------------------
    def _loader(self, side: str, operand: int, tile, bs: int):
        """Per-thread positions before the K loop; returns what loads one K step.

        The [BK, BS] tile is read along the operand's contiguous dim (the side's loops, or K):
        the block's threads are W lanes along it (W the largest power of two dividing T that
        fits it) by T / W rows along the other dim, each thread keeping its lane and its row
        across the K loop; the side's coordinates are computed once per lane or row position."""
        w, names = self.w, self.names
        m = self.cmaps[operand]
        last = _dims_of(m.results[-1]) if len(m.results) else set()
        side_fast = bool(last & set(self.loops[side]))
        along, across = (bs, self.bk) if side_fast else (self.bk, bs)
        lanes = 1
        while self.T % (lanes * 2) == 0 and lanes * 2 <= along:
            lanes *= 2
        rows = self.T // lanes
        lane, row = names.fresh(f"{side}l"), names.fresh(f"{side}r")
        w(f"{lane} = {mod(self.tid, str(lanes))}")
        w(f"{row} = {floordiv(self.tid, str(lanes))}")
        n_along, n_across = -(-along // lanes), -(-across // rows)

        def position(base: str, step: int, n: int, extent: int, stem: str):
            """(index, guard) per position: base + i * step for i < n, guarded below extent."""
            out = []
            for i in range(n):
                idx = add(base, str(i * step))
                guard = None
                if (i + 1) * step > extent and extent % step:
                    guard = f"{idx} < {extent}"
                out.append((idx, guard))
            return out

        pos_along = position(lane, lanes, n_along, along, "a")
        pos_across = position(row, rows, n_across, across, "c")
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
        zero = self.ctx.consts.zero(_elem(self.c.operands[operand]))
        K = self.K()
        k_ok_needed = not (is_int(K) and int(K) % self.bk == 0)
        ext_k = [self.ext[l] for l in self.loops["k"]]
        kloops = self.loops["k"]

        held: dict[tuple[int, int], str] = {}      # double-buffered: element -> the register holding it

        def elements():
            for si, (sl, coords, ok, sguard) in enumerate(sides):
                for ki, (kl, kguard) in enumerate(k_pos):
                    yield (si, ki), sl, coords, ok, kl, [g for g in (sguard, kguard) if g]

        def fetch(k0: str, store: bool) -> None:
            """Each of the thread's elements of the K step at k0, loaded (zero outside the
            operand); stored into the tile at once, or kept in its register (`held`)."""
            for key, sl, coords, ok, kl, inside in elements():
                if inside:                       # positions past the tile's end
                    w(f"if {' and '.join(inside)}:")
                    w.depth += 1
                k = names.fresh("k")
                w(f"{k} = {k0} + {kl}")
                v = names.fresh("v") if store else held.setdefault(key, names.fresh("pf"))
                conds = ([ok] if ok else []) + ([f"{k} < {K}"] if k_ok_needed else [])
                if conds:
                    w(f"{v} = {zero}")
                    w(f"if {' and '.join(conds)}:")
                    w.depth += 1
                self.memo = {}
                full = dict(coords)
                full.update(self._delinearize(k, kloops, "kc_", ext_k))
                dims = [full.get(l, "0") for l in range(len(self.sides))]
                idx = [affine(e, dims) for e in m.results]
                w(f"{v} = {self.read(self.c.operands[operand], idx, self.c)}")
                if conds:
                    w.depth -= 1
                if store:
                    w(f"{tile.at(kl, sl)} = {v}")
                if inside:
                    w.depth -= 1

        def put() -> None:
            """The held elements into the tile."""
            for key, sl, coords, ok, kl, inside in elements():
                if inside:
                    w(f"if {' and '.join(inside)}:")
                    w.depth += 1
                w(f"{tile.at(kl, sl)} = {held[key]}")
                if inside:
                    w.depth -= 1

        def declare() -> None:
            """The held registers, defined on every path before the K loop."""
            for key, *_ in elements():
                w(f"{held.setdefault(key, names.fresh('pf'))} = {zero}")

        return _Loader(lambda k0: fetch(k0, True), lambda k0: fetch(k0, False), put, declare)

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
            inner = mul(inner, n)
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
        w = self.w
        qs, ps = [], []
        for i in range(len(accs)):
            q = self.at.row(i)
            coords = self._delinearize(q, self.loops["q"], f"qo{i}_")
            conds = [f"{coords[l]} < {self.ext[l]}" for l in self.loops["q"] if self.ext[l] != str(self.tiles[l])]
            qs.append((coords, conds))
        for j in range(len(accs[0])):
            p = self.at.col(j)
            coords = self._delinearize(p, self.loops["p"], f"po{j}_")
            conds = [f"{coords[l]} < {self.ext[l]}" for l in self.loops["p"] if self.ext[l] != str(self.tiles[l])]
            ps.append((coords, conds))
        out_map = self.cmaps[2]
        self.memo = {}
        for i, (qc, qconds) in enumerate(qs):
            for j, (pc, pconds) in enumerate(ps):
                dims = [qc.get(l, pc.get(l, "0")) for l in range(len(self.sides))]
                self.acc = {_key(self.out, [affine(e, dims) for e in out_map.results]): accs[i][j]}
                conds = qconds + pconds
                saved = dict(self.memo)       # values computed outside any guard stay valid
                if conds:
                    w(f"if {' and '.join(conds)}:")
                    w.depth += 1
                if self.root == self.c:
                    idx = [affine(e, dims) for e in out_map.results]
                    w(f"{self.body.view(self.out).at(idx)} = {accs[i][j]}")
                else:
                    rdims = [dims[cl] for cl in self.root_loops]
                    self._store_root(rdims)
                if conds:
                    w.depth -= 1
                    self.memo = saved

    def _store_root(self, rdims: list[str]) -> None:
        root = self.root
        maps = _maps(root)
        n_in = _n_inputs(root)
        outs = list(root.operands)[n_in:]
        values = self._inline(root, rdims)
        for k, (v, m) in enumerate(zip(outs, maps[n_in:])):
            idx = [affine(e, rdims) for e in m.results]
            self.w(f"{self.body.view(v).at(idx)} = {values[k]}")

    # -- values of the kernel's buffers -----------------------------------------------------------
    def _writer(self, v, before) -> "ir.Operation | None":
        """The last kernel op before `before` that writes the buffer `v`."""
        limit = self.order[before]
        found = None
        for op in self.writers:
            if self.order[op] >= limit:
                break
            outs = [op.operands[1]] if op.name == "memref.copy" else list(op.operands)[_n_inputs(op):]
            if v in outs:
                found = op
        return found

    def _written_through_another_view(self, v) -> bool:
        """Whether a kernel op writes the array under buffer `v` through another view than `v`."""
        name = self.body.view(v).array.name
        return any(v2 != v and self.body.view(v2).array.name == name
                   for op in self.writers if op.name != "memref.copy" for v2 in list(op.operands)[_n_inputs(op):])

    def read(self, v, idx: list[str], before) -> str:
        """The value of buffer `v` at `idx` as the kernel's ops before `before` left it."""
        writer = self._writer(v, before)
        view = self.body.view(v)
        if writer is None:
            if self._written_through_another_view(v):
                raise EmitError("a fusec.block_gemm kernel reads a buffer through another view than the one "
                                "its op wrote", before)
            e = view.at(idx)
            if view.array.storage != view.array.elem.compute:
                e = f"np.{view.array.elem.compute}({e})"
            return e
        if writer.name == "linalg.fill":
            return self.body.val(writer.operands[0])
        if writer.name == "memref.copy":          # an absorbed copy between the kernel's buffers
            return self.read(writer.operands[0], idx, writer)
        if writer in getattr(self, "supplied", (self.c,)):
            key = _key(v, idx)
            if key not in self.acc:
                raise EmitError("a fusec.block_gemm epilogue reads the contraction's result at another "
                                "element than its own", before)
            return self.acc[key]
        if writer.name != "linalg.generic":
            raise no_rule(writer, "inside a fusec.block_gemm kernel")
        n_in = _n_inputs(writer)
        k = list(writer.operands)[n_in:].index(v)
        out_map = _maps(writer)[n_in + k]
        if not _is_identity(out_map):
            raise EmitError("a producer inside a fusec.block_gemm kernel must write its result in loop order", writer)
        key = (id(writer), tuple(idx))
        if key not in self.memo:
            temps = []
            for e in self._inline(writer, list(idx)):
                t = self.names.fresh("t")
                self.w(f"{t} = {e}")
                temps.append(t)
            self.memo[key] = temps
        return self.memo[key][k]

    def _inline(self, op, dims: list[str]) -> list[str]:
        """Op's body at loop coordinates `dims`: its results as expressions (statements for
        values used more than once)."""
        if any("parallel" not in str(t) for t in ir.ArrayAttr(op.attributes["iterator_types"])):
            raise EmitError("a producer inside a fusec.block_gemm kernel must be elementwise", op)
        maps = _maps(op)
        block = op.regions[0].blocks[0]
        args = list(block.arguments)
        expr = self.ctx.expr
        for a, v, m in zip(args, op.operands, maps):
            if not list(a.uses):
                continue
            expr[a] = self.read(v, [affine(e, dims) for e in m.results], op)
        inner = [o.operation for o in block.operations]
        for o in inner[:-1]:
            if o.name == "linalg.index":
                expr[o.results[0]] = dims[ir.IntegerAttr(o.attributes["dim"]).value]
                continue
            if o.name == "arith.constant":
                self.body.op(o)
                continue
            if o.regions or len(o.results) != 1:
                raise no_rule(o, "inside a fusec.block_gemm producer")
            if o.name == "memref.load":
                src = o.operands[0]
                idx = [self.body.val(i) for i in o.operands[1:]]
                e = self.read(src, idx, op)
            else:
                if any(_is_memref_value(x) for x in o.operands):
                    raise no_rule(o, "inside a fusec.block_gemm producer")
                e = self.ctx.rules.expr(o, [self.body.val(x) for x in o.operands])
                if e is None:
                    raise no_rule(o)
            r = o.results[0]
            if len(list(r.uses)) == 1:
                expr[r] = atom(e)
            else:
                self.body.assign(r, e)
        return [self.body.val(x) for x in inner[-1].operands]


def _key(v, idx) -> tuple:
    return (v, tuple(idx))


def _n_inputs(op) -> int:
    try:
        return len(op.opview.inputs)
    except AttributeError:
        raise EmitError("the emitter cannot split the operands of this op into ins and outs", op) from None


def _is_memref_value(v) -> bool:
    return isinstance(v.type.maybe_downcast(), ir.MemRefType)


def _dims_of_map(m) -> set[int]:
    out = set()
    for e in m.results:
        out |= _dims_of(e)
    return out


def _elem(v):
    from .values import elem_of
    return elem_of(v.type)
