"""fold-unit-reshapes: a reshape that only inserts or drops unit dims folds into the index maps of
the generics that read it.

Each generic reading the reshaped tensor reads its source instead (the unit dims' index
expressions dropped for expand_shape, constant 0 for collapse_shape), so a producer reached only
through the view feeds its consumer directly. Named ops keep their operands; a reshape with
other users stays; a rewrite that would leave a loop without an operand dim is skipped. See
docs/ARCHITECTURE.md, "Stages and what each hands on" (graph).
"""
from __future__ import annotations

from ..mlir import ir
from .generic import RESHAPES, map_attr, maps, type_shape

NAME = "fold-unit-reshapes"


def fold_unit_reshapes(module: ir.Module) -> int:
    """Fold every unit-dim reshape read by a generic; returns how many operands now skip one."""
    count = 0
    with module.context, ir.Location.unknown():
        for f in module.body.operations:
            for op in [o.operation for o in f.regions[0].blocks[0].operations]:
                if op.name in RESHAPES:
                    count += _fold(op)
    return count


def _groups(op) -> list[list[int]]:
    return [[ir.IntegerAttr(d).value for d in ir.ArrayAttr(g)] for g in ir.ArrayAttr(op.attributes["reassociation"])]


def _source_exprs(op, exprs: list) -> list | None:
    """The index expressions of the reshape's source, given those of its result; None when the
    reshape moves more than unit dims."""
    src, out = type_shape(op.operands[0]), type_shape(op.results[0])
    zero = ir.AffineConstantExpr.get(0)
    groups = _groups(op)
    if op.name == "tensor.expand_shape":          # one group of result dims per source dim
        new = []
        for i, g in enumerate(groups):
            big = [d for d in g if out[d] != 1]
            if len(big) > 1:
                return None
            new.append(exprs[big[0]] if big and src[i] != 1 else zero)
        return new
    new = [zero] * len(src)                          # collapse: one group of source dims per result dim
    for r, g in enumerate(groups):
        big = [d for d in g if src[d] != 1]
        if len(big) > 1:
            return None
        if big:
            new[big[0]] = exprs[r]
    return new


def _fold(op) -> int:
    result = op.results[0]
    count = 0
    for use in list(result.uses):
        gen = use.owner
        gen = gen.operation if hasattr(gen, "operation") else gen
        if gen.name != "linalg.generic" or use.operand_number >= len(gen.opview.inputs):
            continue
        amaps = maps(gen)
        m = amaps[use.operand_number]
        exprs = _source_exprs(op, list(m.results))
        if exprs is None:
            return count
        new = list(amaps)
        new[use.operand_number] = ir.AffineMap.get(m.n_dims, m.n_symbols, exprs)
        if not _loops_covered(new, m.n_dims):
            continue
        gen.operands[use.operand_number] = op.operands[0]
        gen.attributes["indexing_maps"] = map_attr(new)
        count += 1
    return count


def _loops_covered(amaps, n: int) -> bool:
    seen = set()
    for m in amaps:
        for e in m.results:
            d = e.maybe_downcast()
            if isinstance(d, ir.AffineDimExpr):
                seen.add(d.position)
    return seen >= set(range(n))
