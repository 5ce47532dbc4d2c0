"""Reading and rebuilding linalg.generic ops: the helpers the rewrites that change an op's loops
share (split_rows.py, split_reductions.py)."""
from __future__ import annotations

from ..mlir import arith, ir, linalg, tensor

RESHAPES = ("tensor.collapse_shape", "tensor.expand_shape")


def empty_like(value: ir.Value) -> ir.Value:
    """A tensor.empty of `value`'s type, its run-time extents read from `value` (tensor.dim), at
    the insertion point (where `value` must dominate)."""
    t = ir.RankedTensorType(value.type)
    index = ir.IndexType.get()
    sizes = [tensor.DimOp(value, arith.ConstantOp(index, d).result).result if t.is_dynamic_dim(d) else n
             for d, n in enumerate(t.shape)]
    return tensor.EmptyOp(sizes, t.element_type).result


def maps(op) -> list:
    return [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]


def iterators(op) -> list[str]:
    return ["reduction" if "reduction" in str(a) else "parallel" for a in ir.ArrayAttr(op.attributes["iterator_types"])]


def iterator_attr(kinds) -> ir.ArrayAttr:
    return ir.ArrayAttr.get([ir.Attribute.parse(f"#linalg.iterator_type<{k}>") for k in kinds])


def map_attr(maps) -> ir.ArrayAttr:
    return ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps])


def is_dim(expr, loop: int) -> bool:
    e = expr.maybe_downcast()
    return isinstance(e, ir.AffineDimExpr) and e.position == loop


def type_shape(v) -> list[int]:
    """The shape `v`'s tensor type says: a run-time extent is MLIR's dynamic size."""
    return list(ir.RankedTensorType(v.type).shape)


def split_groups(rank: int, dim: int) -> list[list[int]]:
    """Reassociation of a rank-`rank` shape whose dim `dim` becomes two."""
    return [[i] for i in range(dim)] + [[dim, dim + 1]] + [[i + 1] for i in range(dim + 1, rank)]


def rebuild(old, ins, outs, kinds, args=None):
    """A linalg.generic with old's body moved in (old is left with an empty body, to erase),
    old's attributes, and the given (value, map) operands and iterator kinds. `args`: the old
    block's arguments that the new block's stand for, in order (default: all of them; any
    other must have no use left)."""
    with ir.InsertionPoint(old), old.location:
        new = linalg.GenericOp([v.type for v, _ in outs], [v for v, _ in ins], [v for v, _ in outs],
                               map_attr([m for _, m in ins + outs]), iterator_attr(kinds)).operation
    for name in list(old.attributes):
        name = name if isinstance(name, str) else name.name
        if name not in ("indexing_maps", "iterator_types", "operandSegmentSizes"):
            new.attributes[name] = old.attributes[name]
    old_block = old.regions[0].blocks[0]
    args = list(old_block.arguments) if args is None else args
    block = new.regions[0].blocks.append(*[a.type for a in args])
    for a, b in zip(args, block.arguments):
        a.replace_all_uses_with(b)
    at = ir.InsertionPoint(block)
    for op in list(old_block.operations):
        op.detach_from_parent()
        at.insert(op)
    return new
