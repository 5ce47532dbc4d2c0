"""Indexing ops: slices, concat, gather and embedding, each one all-parallel linalg.generic over
its result, so they fuse like elementwise ops.

A slice with positive steps reads through an affine indexing map; a negative step, concat and
gather read with `tensor.extract` at clamped indices computed in the body, whose producers the
graph pass `inline-indexed-reads` then inlines (compiler/transforms/indexed_reads.py). See
docs/ARCHITECTURE.md, "GPU kernels: how a plan becomes CUDA" (indexing ops).
"""
from __future__ import annotations

from fusec.dsl.ops import position
from fusec.dsl.ops.indexing import index_layout
from fusec.dsl.typed import Node

from ..mlir import arith, ir, linalg, tensor
from .builder import dims_map, empty, identity_map, generic, shape_of
from .registry import LoweringContext, rule


def _index(value: int) -> ir.Value:
    return arith.ConstantOp(ir.IndexType.get(), value).result


def _clamp(i: ir.Value, lo: int, hi: int) -> ir.Value:
    """min(max(i, lo), hi) on index values."""
    return arith.minsi(arith.maxsi(i, _index(lo)), _index(hi))


def _all_parallel(out_shape, elem, inputs, body) -> ir.Value:
    rank = len(out_shape)
    (out,) = generic(inputs, [(empty(out_shape, elem), identity_map(rank))], ["parallel"] * rank,
                     lambda xs, _acc: [body(xs)])
    return out


@rule("slice")
def lower_slice(ctx: LoweringContext, node: Node):
    x = ctx.tensor(node.inputs[0])
    out_shape = ctx.shape(node)
    starts = [position(s, ctx.binding) for s in node.attr("start")]
    steps, drop = node.attr("step"), set(node.attr("drop"))
    in_shape = shape_of(x)
    if tuple(starts) == (0,) * len(starts) and set(steps) <= {1} and not drop and tuple(out_shape) == in_shape:
        return x
    rank = len(out_shape)
    kept = [a for a in range(len(in_shape)) if a not in drop]
    elem = ir.RankedTensorType(x.type).element_type
    # linalg infers a loop's extent from an operand read at exactly that loop (d), so a map can
    # only read the window of an axis through a start or a step (d + 4, 2 * d)
    partial = [a for a in kept if starts[a] == 0 and steps[a] == 1 and out_shape[kept.index(a)] != in_shape[a]]
    if all(s > 0 for s in steps) and not partial:
        exprs = []
        for a, (start, step) in enumerate(zip(starts, steps)):
            if a in drop:
                exprs.append(ir.AffineConstantExpr.get(start))
                continue
            d = ir.AffineDimExpr.get(kept.index(a))
            term = d if step == 1 else ir.AffineMulExpr.get(d, ir.AffineConstantExpr.get(step))
            exprs.append(term if start == 0 else ir.AffineAddExpr.get(term, ir.AffineConstantExpr.get(start)))
        return _all_parallel(out_shape, elem, [(x, ir.AffineMap.get(rank, 0, exprs))], lambda xs: xs[0])

    def body(_xs):
        at = []
        for a, (start, step) in enumerate(zip(starts, steps)):
            if a in drop:
                at.append(_index(start))
                continue
            i = linalg.IndexOp(kept.index(a)).result
            if step != 1:
                i = arith.muli(i, _index(step))
            at.append(arith.addi(i, _index(start)) if start else i)
        return tensor.ExtractOp(x, at).result
    return _all_parallel(out_shape, elem, [], body)


@rule("concat")
def lower_concat(ctx: LoweringContext, node: Node):
    parts = [ctx.tensor(i) for i in node.inputs]
    if len(parts) == 1:
        return parts[0]
    axis = node.attr("axis")
    out_shape = ctx.shape(node)
    elem = ir.RankedTensorType(parts[0].type).element_type
    rank = len(out_shape)

    ends, at_end = [], 0
    for p in parts:
        at_end += shape_of(p)[axis]
        ends.append(at_end)

    def body(_xs):
        idx = [linalg.IndexOp(d).result for d in range(rank)]
        reads = []
        for p, end in zip(parts, ends):
            n = shape_of(p)[axis]
            at = list(idx)
            at[axis] = _clamp(arith.subi(idx[axis], _index(end - n)) if end > n else idx[axis], 0, n - 1)
            reads.append(tensor.ExtractOp(p, at).result)
        value = reads[-1]
        for read, end in zip(reversed(reads[:-1]), reversed(ends[:-1])):
            value = arith.select(arith.cmpi(arith.CmpIPredicate.slt, idx[axis], _index(end)), read, value)
        return value
    return _all_parallel(out_shape, elem, [], body)


@rule("gather", "embedding")
def lower_gather(ctx: LoweringContext, node: Node):
    """out[pre, i..., post] = table[pre, clamp(idx[i...]), post]; the reference (and the cpu
    runtime, for index inputs) refuses an index outside the axis: the clamp keeps every target's
    reads inside the table whatever the indices (the GPU's documented behaviour)."""
    table, idx = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1])
    axis = node.attr("axis")
    t_shape, i_rank = shape_of(table), len(shape_of(idx))
    out_shape = ctx.shape(node)
    rank = len(out_shape)
    elem = ir.RankedTensorType(table.type).element_type

    def body(xs):
        i = arith.index_cast(ir.IndexType.get(), xs[0])
        at = [linalg.IndexOp(d).result for d in range(axis)]
        at.append(_clamp(i, 0, t_shape[axis] - 1))
        at += [linalg.IndexOp(axis + i_rank + k).result for k in range(len(t_shape) - axis - 1)]
        return tensor.ExtractOp(table, at).result
    return _all_parallel(out_shape, elem, [(idx, dims_map(rank, range(axis, axis + i_rank)))], body)


def _wrapped(i: ir.Value, n: int) -> ir.Value:
    """An index counted once from the end when negative (NumPy's rule), then clamped into [0, n - 1]
    as gather's: the reference and `cpu` refuse an index outside [-n, n - 1], the GPU clamps it."""
    i = arith.index_cast(ir.IndexType.get(), i)
    i = arith.select(arith.cmpi(arith.CmpIPredicate.slt, i, _index(0)), arith.addi(i, _index(n)), i)
    return _clamp(i, 0, n - 1)


@rule("take_along_axis")
def lower_take_along_axis(ctx: LoweringContext, node: Node):
    """out[..., j, ...] = x[..., wrap(idx[..., j, ...]), ...] along `axis`; the other axes
    broadcast (an axis of one of x or idx facing a longer one reads position 0)."""
    x, idx = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1])
    axis = node.attr("axis")
    x_shape, i_shape = shape_of(x), shape_of(idx)
    out_shape = ctx.shape(node)
    rank = len(out_shape)
    elem = ir.RankedTensorType(x.type).element_type

    def broadcast_dim(d: int, extent):
        return ir.AffineConstantExpr.get(0) if extent == 1 and out_shape[d] != 1 else ir.AffineDimExpr.get(d)

    i_map = ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(d) if d == axis else broadcast_dim(d, e)
                                       for d, e in enumerate(i_shape)])

    def body(xs):
        at = []
        for d, e in enumerate(x_shape):
            if d == axis:
                at.append(_wrapped(xs[0], e))
            else:
                at.append(_index(0) if e == 1 and out_shape[d] != 1 else linalg.IndexOp(d).result)
        return tensor.ExtractOp(x, at).result
    return _all_parallel(out_shape, elem, [(idx, i_map)], body)


@rule("gather_nd")
def lower_gather_nd(ctx: LoweringContext, node: Node):
    """out[b..., m..., r...] = x[b..., wrap(idx[b..., m..., 0]), ..., wrap(idx[b..., m..., k-1]), r...]:
    idx is read once per position of its last axis (a map with that position as a constant)."""
    x, idx = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1])
    b = node.attr("batch_dims")
    x_shape, i_shape = shape_of(x), shape_of(idx)
    k, lead = i_shape[-1], len(i_shape) - 1
    out_shape = ctx.shape(node)
    rank = len(out_shape)
    elem = ir.RankedTensorType(x.type).element_type
    reads = [(idx, ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(d) for d in range(lead)]
                                    + [ir.AffineConstantExpr.get(j)])) for j in range(k)]

    def body(xs):
        at = [linalg.IndexOp(d).result for d in range(b)]
        at += [_wrapped(xs[j], x_shape[b + j]) for j in range(k)]
        at += [linalg.IndexOp(lead + t).result for t in range(len(x_shape) - b - k)]
        return tensor.ExtractOp(x, at).result
    return _all_parallel(out_shape, elem, reads, body)


@rule("index")
def lower_index(ctx: LoweringContext, node: Node):
    """NumPy's advanced indexing: each index tensor is read through a map broadcasting it onto the
    result's index axes, x at the wrapped, clamped positions on the indexed axes and at the
    result's own positions on the others (dsl/ops/indexing.py, index_layout)."""
    x, idxs = ctx.tensor(node.inputs[0]), [ctx.tensor(i) for i in node.inputs[1:]]
    axes = node.attr("axes")
    x_shape = shape_of(x)
    out_shape = ctx.shape(node)
    rank = len(out_shape)
    s = rank - (len(x_shape) - len(axes))
    first, kept_at = index_layout(len(x_shape), axes, s)
    elem = ir.RankedTensorType(x.type).element_type
    reads = []
    for t in idxs:
        t_shape = shape_of(t)
        at = first + s - len(t_shape)
        reads.append((t, ir.AffineMap.get(rank, 0, [
            ir.AffineConstantExpr.get(0) if e == 1 and out_shape[at + i] != 1 else ir.AffineDimExpr.get(at + i)
            for i, e in enumerate(t_shape)])))
    kept = dict(zip([d for d in range(len(x_shape)) if d not in axes], kept_at))

    def body(xs):
        at = [_wrapped(xs[axes.index(d)], e) if d in axes else linalg.IndexOp(kept[d]).result
              for d, e in enumerate(x_shape)]
        return tensor.ExtractOp(x, at).result
    return _all_parallel(out_shape, elem, reads, body)
