"""split-rows: inside a row kernel's block, each row is split cyclically over T threads.

Runs between the block and thread levels of tile-and-fuse on a row kernel's ops
(RowConfig(threads=T)): the row dim becomes [N/T, T] (element j*T + t), or with runs of V
(RowConfig.runs, plan/rows.py: row_layout) [N/(V*T), T, V] (element q*V*T + t*V + v, blocked-
cyclic: a thread's V consecutive elements, one 16-byte access for V = 4 f32), each reduction a partial
into a workgroup buffer plus a combine over t marked `fusec.block_reduce`, each elementwise op
along the row a copy per phase that uses it; per-row scalars stay at block level. It returns what
the thread-level script tiles: one forall per phase. See docs/ARCHITECTURE.md, "GPU kernels: how a plan becomes CUDA"
(row kernels).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import CompilerInternalError
from ..lowering.builder import collapse, elem_of, expand
from ..mlir import arith, bufferization, ir, linalg, tensor
from ..plan.analysis import ChainInfo, loop_correspondence
from ..plan.kernels import Kernel
from ..plan.rows import RowKernel, row_kernel
from .generic import empty_like, is_dim, iterator_attr, iterators, map_attr, maps, rebuild, split_groups, type_shape
from .script import tag_of
from ..marks import BLOCK_REDUCE, BLOCK_REDUCE_ON_Y, GROUP, PART, TAG, THREADS_OF
from .. import combiners

WORKGROUP = "#gpu.address_space<workgroup>"


@dataclass(frozen=True)
class Phase:
    """One thread forall of a row kernel: the op tiled to threads and what is fused into it."""
    op: tuple[int, str]                       # (fusec.tag, fusec.part) of the phase op
    fused: tuple[tuple[int, str], ...]        # its producers to fuse, consumers first
    tiles: tuple[int, ...]                    # thread tile sizes over the op's loops (t last)
    thread_rows: bool                         # the block's rows map to thread y (t maps to thread x)
    along: int | None = None                  # the op's loop over j (its chunks of the row), walked one
                                              # element at a time with its copies fused in (no row in local memory)
    columns: bool = False                     # t maps to thread y and the block's rows to thread x
    run: int | None = None                    # the op's loop over v (within a run), walked with `along`


def split_rows(func_op, g: Kernel, info: ChainInfo) -> list[Phase]:
    """Rewrite group `g`'s ops inside its block forall (in the function itself when the kernel
    is one block: to_target.py wraps it later); returns its phases in program order."""
    rk = row_kernel(info, g.ops, g.root)
    if isinstance(rk, str):
        raise CompilerInternalError("tiled", f"kernel {g.id} is planned as a row kernel but {rk}")
    container = _block_forall(func_op, g.id) if any(g.block_tiles) else func_op
    return _Splitter(g, info, rk, _group_ops(container, g)).run()


def _block_forall(func_op, gid: int):
    for op in func_op.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "scf.forall" and GROUP in op.attributes and ir.IntegerAttr(op.attributes[GROUP]).value == gid:
            return op
    raise CompilerInternalError("tiled", f"kernel {gid}: its block forall was not found")


def _group_ops(forall, g: Kernel) -> dict[int, "ir.Operation"]:
    """The kernel's ops inside its block forall, by op id. An op fused once per use has a copy
    per use that CSE could not merge when their destinations differ (one is the loop's shared
    output, for a second output of the kernel): the first copy stands for them all."""
    tags = {tag_of(g.id, m): m for m in g.ops}
    out = {}
    for op in list(forall.regions[0].blocks[0].operations):
        op = op.operation
        if TAG not in op.attributes or ir.IntegerAttr(op.attributes[TAG]).value not in tags:
            continue
        m = tags[ir.IntegerAttr(op.attributes[TAG]).value]
        first = out.get(m)
        if first is None:
            out[m] = op
        elif first.name == op.name == "linalg.generic" and [r.type for r in first.results] == [r.type for r in op.results] \
                and list(first.operands)[:len(op.opview.inputs)] == list(op.operands)[:len(op.opview.inputs)]:
            for a, b in zip(op.results, first.results):
                a.replace_all_uses_with(b)
            op.erase()
        else:
            out[m] = op
    return out


def _label(op, tag, part: str) -> None:
    op.attributes[TAG] = tag
    op.attributes[PART] = ir.StringAttr.get(part)


class _Splitter:
    def __init__(self, g: Kernel, info: ChainInfo, rk: RowKernel, ops: dict[int, "ir.Operation"]):
        self.g, self.info, self.rk, self.ops = g, info, rk, ops
        self.T = g.config.threads
        self.roots = {g.root, *g.siblings}       # the kernel's results that no member reads
        self.J = rk.extent // self.T
        self.V = getattr(g.config, "runs", 0) or 1    # elements per run: 1 cyclic, 4 blocked-cyclic
        self.extra = 1 if self.V == 1 else 2     # loops appended: t, and v when there are runs
        if self.J % self.V:
            raise CompilerInternalError("tiled", f"kernel {g.id}: runs of {self.V} do not divide {self.J} elements")
        self.expanded: dict = {}       # (value, dim) -> the value with that row dim split [.., J, T, ..]
        self.replaced: dict = {}       # old result -> the rewritten op's split result
        self.new: dict[int, "ir.Operation"] = {}    # op id -> its rewritten op (partial of a reduction)
        self.writers: dict[int, "ir.Operation"] = {}   # op id -> the copy that stores a second output
        rows = g.mapped[-1] if g.mapped and g.block_tiles[g.mapped[-1]] > 1 else None
        corr = loop_correspondence(info, g.root, set(g.ops))
        self.row_loop = {m: _only(corr.get(m, {}).get(rows, frozenset())) for m in g.ops} if rows is not None else {}
        missing = [m for m in ops if info.op(m).kind not in ("fill",)]
        if set(missing) != {m for m in g.ops if info.op(m).kind not in ("fill", "view")}:
            raise CompilerInternalError("tiled", f"kernel {g.id}: not every op was fused into its block")

    def run(self) -> list[Phase]:
        originals = dict(self.ops)
        for m in sorted(originals):
            o = self.info.op(m)
            loop = self.rk.loop_of(m)
            if o.kind == "fill" or loop is None:
                continue                               # fills go with their reduction; row scalars stay
            if o.kind == "reduction":
                self._reduction(m, loop)
            else:
                self._elementwise(m, loop)
        for m in sorted(originals, reverse=True):      # the replaced ops, consumers first; unread fills
            op = originals[m]
            if m in self.new or self.info.op(m).kind == "fill":
                if all(not list(r.uses) for r in op.results):
                    op.erase()
                elif m in self.new:
                    raise CompilerInternalError("tiled", f"%{m} is still read after the row split")
        return self._phases()

    # -- operands -----------------------------------------------------------------------------
    def _operand(self, v, amap, loop: int, n_loops: int, at):
        """(value, map) of one operand of the rewritten op (n_loops + 1 loops, t the last; with
        runs n_loops + 2: t, then v)."""
        out_exprs, dim = [], None
        for d, e in enumerate(amap.results):
            out_exprs.append(e)
            if is_dim(e, loop):
                dim = d
                out_exprs += [ir.AffineDimExpr.get(n_loops + i) for i in range(self.extra)]
        new_map = ir.AffineMap.get(n_loops + self.extra, 0, out_exprs)
        if dim is None:
            return v, new_map
        if v in self.replaced:
            return self.replaced[v], new_map
        key = (v, dim)
        if key not in self.expanded:
            shape = type_shape(v)
            if shape[dim] != self.rk.extent:
                raise CompilerInternalError("tiled", f"a row dim of {shape[dim]} elements, not {self.rk.extent}")
            if any(n == ir.ShapedType.get_dynamic_size() for n in shape):
                raise CompilerInternalError("tiled", f"kernel {self.g.id}'s block holds a run-time number of rows; "
                                                     "a row kernel over a run-time extent takes one row per block")
            parts = [self.J, self.T] if self.V == 1 else [self.J // self.V, self.T, self.V]
            with ir.InsertionPoint(at), at.location:
                self.expanded[key] = expand(v, tuple(shape[:dim] + parts + shape[dim + 1:]),
                                            self._groups(len(shape), dim))
        return self.expanded[key], new_map

    def _groups(self, rank: int, dim: int) -> list[list[int]]:
        """Reassociation of a rank-`rank` shape whose row dim `dim` becomes [J, T] or [Q, T, V]."""
        if self.V == 1:
            return split_groups(rank, dim)
        return [[i] for i in range(dim)] + [[dim, dim + 1, dim + 2]] + [[i + 2] for i in range(dim + 1, rank)]

    def _rebuild(self, old, ins, outs, iterators, part: str, loop: int):
        new = rebuild(old, ins, outs, iterators)
        new.attributes[PART] = ir.StringAttr.get(part)
        self._split_index(new, loop, len(iterators) - self.extra)
        return new

    def _split_index(self, op, loop: int, t: int) -> None:
        """The body's position along the row (linalg.index of the row loop, argmax's j) is
        j * T + t once the loop is split into j (in place) and t (loop `t`, appended); with runs
        q * V*T + t * V + v (v: loop t + 1)."""
        index = ir.IndexType.get()
        for inner in list(op.regions[0].blocks[0].operations):
            inner = inner.operation
            if inner.name != "linalg.index" or ir.IntegerAttr(inner.attributes["dim"]).value != loop:
                continue
            with ir.InsertionPoint.after(inner), inner.location:
                lane = linalg.IndexOp(t).result
                if self.V > 1:
                    lane = arith.AddIOp(arith.MulIOp(lane, arith.ConstantOp(index, self.V).result).result,
                                        linalg.IndexOp(t + 1).result).result
                scaled = arith.MulIOp(inner.results[0], arith.ConstantOp(index, self.T * self.V).result).result
                at = arith.AddIOp(scaled, lane).result
            for u in list(inner.results[0].uses):
                if u.owner != scaled.owner:
                    u.owner.operands[u.operand_number] = at

    # -- ops ----------------------------------------------------------------------------------
    def _elementwise(self, m: int, loop: int) -> None:
        old = self.ops[m]
        gen = old.opview
        n, amaps, n_in = len(iterators(old)), maps(old), len(gen.inputs)
        ins = [self._operand(v, a, loop, n, old) for v, a in zip(gen.inputs, amaps[:n_in])]
        outs = [self._operand(v, a, loop, n, old) for v, a in zip(gen.outputs, amaps[n_in:])]
        reads_outs = any(list(a.uses) for a in list(old.regions[0].blocks[0].arguments)[n_in:])
        members = set(self.ops.values())
        # a member the kernel also writes (a second output) gets a writer: a copy that stores
        # it, a phase of its own; the members that read it recompute it (the template's copies)
        written = m not in self.roots and any(u.owner.operation not in members for r in old.results for u in r.uses)
        real = outs
        if written and reads_outs:
            raise CompilerInternalError("tiled", f"%{m} reads its destination and goes out as a second output")
        if written:     # the writer stores into the slice of the forall's result it is inserted into
            real = [self._operand(self._inserted_slice(old, i), a, loop, n, old)
                    for i, (_, a) in enumerate(zip(gen.outputs, amaps[n_in:]))]
        if m not in self.roots and not reads_outs:   # a fresh destination: per thread, a register
            with ir.InsertionPoint(old), old.location:
                outs = [(empty_like(v), a) for v, a in outs]
        new = self._rebuild(old, ins, outs, iterators(old) + ["parallel"] * self.extra, "op", loop)
        writer = None
        if written:
            writer = new.clone(ip=ir.InsertionPoint.after(new)).operation
            for i, (v, _) in enumerate(real):
                writer.operands[n_in + i] = v
            writer.attributes[PART] = ir.StringAttr.get("written")
            self.writers[m] = writer
        for r, (r_old, r_new, out_map) in enumerate(zip(old.results, new.results, amaps[n_in:])):
            dim = next((d for d, e in enumerate(out_map.results) if is_dim(e, loop)), None)
            if dim is None:
                raise CompilerInternalError("tiled", f"%{m} walks the row but its result does not")
            self.replaced[r_old] = r_new
            outside = [u for u in r_old.uses if u.owner.operation not in members]
            if outside:                                # the forall's result: the block's tile, collapsed
                src = writer.results[r] if writer is not None else r_new
                with ir.InsertionPoint.after(writer or new), old.location:
                    flat = collapse(src, tuple(type_shape(r_old)), self._groups(len(type_shape(r_old)), dim))
                for u in outside:
                    u.owner.operands[u.operand_number] = flat
        self.new[m] = new

    def _inserted_slice(self, old, r: int):
        """The slice of the block forall's shared output that result `r` of `old` is inserted
        into (fuse_into_containing_op gave the loop that result for the users after it), taken
        before `old`: the writer's destination, so it stores in place. (The fused op's own
        destination is a slice of the root's output when both were one empty tensor.)"""
        inserts = [u.owner for u in old.results[r].uses if u.owner.name == "tensor.parallel_insert_slice"]
        if len(inserts) != 1:
            raise CompilerInternalError("tiled", f"{old.name} goes out of its row kernel other than by one "
                                        "parallel_insert_slice")
        ins = inserts[0].opview
        for v in list(ins.offsets) + list(ins.sizes) + list(ins.strides):
            owner = v.owner
            if not isinstance(owner, ir.Block) and owner.operation.block == old.block and \
                    _position(owner) > _position(old):
                raise CompilerInternalError("tiled", f"the slice {old.name} is inserted at is computed after it")
        with ir.InsertionPoint(old), old.location:
            return tensor.ExtractSliceOp(old.results[r].type, ins.dest, list(ins.offsets), list(ins.sizes),
                                         list(ins.strides), ins.static_offsets, ins.static_sizes,
                                         ins.static_strides).result

    def _reduction(self, m: int, loop: int) -> None:
        old = self.ops[m]
        gen = old.opview
        n, amaps, n_in = len(iterators(old)), maps(old), len(gen.inputs)
        ins = [self._operand(v, a, loop, n, old) for v, a in zip(gen.inputs, amaps[:n_in])]
        (init,) = gen.outputs
        if init.owner.name != "linalg.fill":
            raise CompilerInternalError("tiled", f"%{m}: its accumulator is not filled in the kernel")
        neutral, rows, elem = init.owner.operands[0], type_shape(init), elem_of(init)
        space = ir.Attribute.parse(WORKGROUP)
        tag = old.attributes[TAG]
        with ir.InsertionPoint(old), old.location:
            buf = bufferization.AllocTensorOp(ir.RankedTensorType.get(rows + [self.T], elem), [],
                                              memory_space=space).result
            filled = linalg.fill(neutral, outs=[buf])
        _label(filled.owner, tag, "init")
        partial_map = ir.AffineMap.get(n + self.extra, 0, list(amaps[n_in].results) + [ir.AffineDimExpr.get(n)])
        partial = self._rebuild(old, ins, [(filled, partial_map)],
                                iterators(old) + ["parallel"] + ["reduction"] * (self.extra - 1), "partial", loop)
        # the combine over t overwrites its destination: workgroup memory, or the kernel's
        # result when the reduction is the root (its destination without the neutral fill)
        k = len(rows)
        with ir.InsertionPoint(old), old.location:
            dest = (init.owner.operands[1] if m in self.roots else
                    bufferization.AllocTensorOp(ir.RankedTensorType.get(rows, elem), [], memory_space=space).result)
            maps_c = [ir.AffineMap.get_identity(k + 1), ir.AffineMap.get(k + 1, 0, [ir.AffineDimExpr.get(i) for i in range(k)])]
            comb = linalg.GenericOp([dest.type], [partial.results[0]], [dest], map_attr(maps_c),
                                    iterator_attr(["parallel"] * k + ["reduction"])).operation
            block = comb.regions[0].blocks.append(elem, elem)
            with ir.InsertionPoint(block):
                combine = combiners.form_of(dict(self.rk.combiners)[m], "tiled")
                linalg.YieldOp([combine.build(block.arguments[0], block.arguments[1])])
        _label(comb, tag, "combine")
        comb.attributes[BLOCK_REDUCE] = ir.StringAttr.get(dict(self.rk.combiners)[m])
        if getattr(self.g.config, "columns", False):
            comb.attributes[BLOCK_REDUCE_ON_Y] = ir.UnitAttr.get()
        old.results[0].replace_all_uses_with(comb.results[0])
        self.new[m] = partial

    # -- phases -------------------------------------------------------------------------------
    def _phases(self) -> list[Phase]:
        ends = [(m, self.new[m]) for m in sorted(self.new) if self.info.op(m).kind == "reduction"]
        ends += [(m, self.new[m]) for m in sorted(self.roots) if m in self.new and self.info.op(m).kind != "reduction"]
        ends += sorted(self.writers.items())
        templates = {m for m in self.new if self.info.op(m).kind == "elementwise"} - self.roots
        closures = {id(op): self._closure(op, templates) for _, op in ends}
        phases = []
        for k, (end, op) in enumerate(sorted(ends, key=lambda e: _position(e[1]))):
            copies = {}                                 # template op id -> its copy for this phase
            for m in sorted(closures[id(op)]):
                tmpl = self.new[m]
                clone = tmpl.clone(ip=ir.InsertionPoint(tmpl)).operation
                _label(clone, tmpl.attributes[TAG], f"x{k}")
                copies[m] = clone
            for user in list(copies.values()) + [op]:
                for i, v in enumerate(user.operands):
                    m = self._template_of(v, templates)
                    if m is not None:
                        user.operands[i] = copies[m].results[ir.OpResult(v).result_number]
            fused = [(_tag_value(copies[m]), f"x{k}") for m in sorted(copies, reverse=True)]
            if self.info.op(end).kind == "reduction":
                fused.append((_tag_value(op), "init"))
            tiles = [0] * len(iterators(op))
            tiles[-self.extra] = 1
            row = self.row_loop.get(end)
            if row is not None:
                tiles[row] = 1
            phases.append(Phase((_tag_value(op), ir.StringAttr(op.attributes[PART]).value), tuple(fused),
                                tuple(tiles), row is not None, self.rk.loop_of(end),
                                bool(getattr(self.g.config, "columns", False)),
                                len(tiles) - 1 if self.V > 1 else None))
        for m in sorted(templates, reverse=True):       # the templates, now unread
            if any(list(r.uses) for r in self.new[m].results):
                raise CompilerInternalError("tiled", f"%{m} is read outside the phases of its row kernel")
            self.new[m].erase()
        return phases

    def _template_of(self, v, templates: set[int]) -> int | None:
        """The template op id whose result `v` is (None: another value)."""
        src = v.owner
        if isinstance(src, ir.Block):
            return None
        src = src.operation
        if PART not in src.attributes or ir.StringAttr(src.attributes[PART]).value != "op":
            return None
        m = _tag_value(src) - tag_of(self.g.id, 0)
        return m if m in templates else None

    def _closure(self, end, templates: set[int]) -> set[int]:
        """The templates op `end` reads, directly or through other templates."""
        seen, todo = set(), [end]
        while todo:
            for v in todo.pop().operands:
                m = self._template_of(v, templates)
                if m is not None and m not in seen:
                    seen.add(m)
                    todo.append(self.new[m])
        return seen


def _tag_value(op) -> int:
    return ir.IntegerAttr(op.attributes[TAG]).value


def _only(loops: frozenset):
    return next(iter(loops)) if len(loops) == 1 else None


def _position(op) -> int:
    op = op.operation
    for i, o in enumerate(op.block.operations):
        if o.operation == op:
            return i
    raise CompilerInternalError("tiled", f"{op.name} is not in its block")
