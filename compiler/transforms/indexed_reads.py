"""inline-indexed-reads: an elementwise value read at a computed index is computed there.

Each `tensor.extract %p[i...]` in a generic's body, where %p is the result of an all-parallel
generic P that reads no output of its own, becomes P's body evaluated at those indices; repeated
until none is left, so concat, gather and computed slices read only what no other op must write
first (a rotary embedding becomes one op). See docs/ARCHITECTURE.md, "GPU kernels: how a plan becomes CUDA" (indexing ops).
"""
from __future__ import annotations

from ..mlir import arith, ir, tensor
from .generic import maps, iterators

NAME = "inline-indexed-reads"


def inline_indexed_reads(module: ir.Module) -> int:
    """Inline every elementwise producer read through tensor.extract; returns how many reads."""
    total = 0
    with module.context, ir.Location.unknown():
        while True:
            done = 0
            for f in module.body.operations:
                for read in _reads(f):
                    done += _inline(read)
            if not done:
                return total
            total += done


def _reads(func_op) -> list:
    """tensor.extract ops inside generic bodies, in program order."""
    found = []

    def visit(op):
        op = op.operation if hasattr(op, "operation") else op
        if op.name == "tensor.extract" and op.parent is not None and op.parent.name == "linalg.generic":
            found.append(op)
        return ir.WalkResult.ADVANCE
    func_op.operation.walk(visit)
    return found


def _inlinable(producer) -> bool:
    if producer.name != "linalg.generic" or any(k != "parallel" for k in iterators(producer)):
        return False
    n_in = len(producer.opview.inputs)
    out_maps = maps(producer)[n_in:]
    if not all(m.is_permutation for m in out_maps):
        return False
    if not all(_affine(e) for m in maps(producer)[:n_in] for e in m.results):
        return False
    block = producer.regions[0].blocks[0]
    outs = list(block.arguments)[n_in:]
    if any(len(list(a.uses)) for a in outs):                 # reads its own output: not elementwise
        return False
    return all(len(op.regions) == 0 for op in block.operations)


def _inline(read) -> int:
    source = read.operands[0]
    owner = source.owner
    if isinstance(owner, ir.Block) or not _inlinable(owner.operation if hasattr(owner, "operation") else owner):
        return 0
    producer = owner.operation if hasattr(owner, "operation") else owner
    n_in = len(producer.opview.inputs)
    out_map = maps(producer)[n_in + source.result_number]
    at = list(read.operands)[1:]
    loops: list = [None] * out_map.n_dims
    for k, e in enumerate(out_map.results):
        loops[e.maybe_downcast().position] = at[k]
    block = producer.regions[0].blocks[0]
    values: dict = {}
    with ir.InsertionPoint(read), read.location:
        for k, (v, m) in enumerate(zip(producer.operands[:n_in], maps(producer)[:n_in])):
            idx = [_apply(e, loops) for e in m.results]
            if isinstance(v.type, ir.RankedTensorType):
                values[block.arguments[k]] = tensor.ExtractOp(v, idx).result
            else:
                values[block.arguments[k]] = v           # a scalar operand is its own element
        result = None
        for op in block.operations:
            op = op.operation
            if op.name == "linalg.yield":
                result = values.get(op.operands[source.result_number], op.operands[source.result_number])
                break
            if op.name == "linalg.index":
                values[op.results[0]] = loops[ir.IntegerAttr(op.attributes["dim"]).value]
                continue
            clone = op.clone()
            for i, v in enumerate(clone.operands):
                if v in values:
                    clone.operands[i] = values[v]
            for old, new in zip(op.results, clone.results):
                values[old] = new
    read.results[0].replace_all_uses_with(result)
    read.erase()
    return 1


def _affine(expr) -> bool:
    """Whether _apply can write the expression (dims, constants, sums and products of them)."""
    e = expr.maybe_downcast()
    if isinstance(e, (ir.AffineDimExpr, ir.AffineConstantExpr)):
        return True
    return isinstance(e, (ir.AffineAddExpr, ir.AffineMulExpr)) and _affine(e.lhs) and _affine(e.rhs)


def _apply(expr, loops: list) -> ir.Value:
    """An affine expression of loop indices as arith ops on index values."""
    e = expr.maybe_downcast()
    if isinstance(e, ir.AffineDimExpr):
        return loops[e.position]
    if isinstance(e, ir.AffineConstantExpr):
        return arith.ConstantOp(ir.IndexType.get(), e.value).result
    if isinstance(e, ir.AffineAddExpr):
        return arith.addi(_apply(e.lhs, loops), _apply(e.rhs, loops))
    return arith.muli(_apply(e.lhs, loops), _apply(e.rhs, loops))
