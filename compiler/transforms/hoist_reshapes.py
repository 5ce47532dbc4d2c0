"""hoist-reshapes: a reshape of an elementwise op's result moves onto that op's inputs.

`reshape(exp(x), [N, M])` becomes `exp(reshape(x, [N, M]))` when every input is read at the
op's own shape, repeated until nothing moves, so the elementwise op lands next to its consumers.
A reshape stays on a reduction's or contraction's result, an op with other users, one that
broadcasts or transposes an input, or one whose body reads its loop indices; the planner names
it when it stops a fusion (plan/grower.py: `_view_reason`). See docs/ARCHITECTURE.md, "Stages and what each hands on" (graph).
"""
from __future__ import annotations

from ..mlir import ir, tensor
from .generic import RESHAPES, iterators, maps, rebuild, type_shape

NAME = "hoist-reshapes"


def hoist_reshapes(module: ir.Module) -> int:
    """Move every movable reshape up, until none moves; returns how many moves were made."""
    moved = 0
    with module.context, ir.Location.unknown():
        for f in module.body.operations:
            block = f.regions[0].blocks[0]
            while True:
                for op in [o.operation for o in block.operations]:
                    if op.name in RESHAPES and _movable(op):
                        _move(op)
                        moved += 1
                        break
                else:
                    break
    return moved


def movable_generic(gen) -> bool:
    """An elementwise linalg.generic that reads every input at its own shape (or a 0-d input), writes
    one result, and does not read its loop indices."""
    if gen.name != "linalg.generic" or len(gen.results) != 1 or "reduction" in iterators(gen):
        return False
    n_in = len(gen.opview.inputs)
    amaps = maps(gen)
    rank = len(iterators(gen))
    ident = ir.AffineMap.get_identity(rank)
    if amaps[n_in] != ident:
        return False
    for v, m in zip(gen.opview.inputs, amaps[:n_in]):
        if not isinstance(v.type, ir.RankedTensorType):
            return False
        if m != ident and not (len(m.results) == 0 and not type_shape(v)):
            return False
    return not any(o.name == "linalg.index" for o in gen.regions[0].blocks[0].operations)


def _producer(op):
    owner = op.operands[0].owner
    return None if isinstance(owner, ir.Block) else owner.operation


def _movable(op) -> bool:
    gen = _producer(op)
    if gen is None or not movable_generic(gen):
        return False
    return len(list(gen.results[0].uses)) == 1


def _move(op) -> None:
    gen = _producer(op)
    inputs = list(gen.opview.inputs)
    amaps = maps(gen)
    out_type = ir.RankedTensorType(op.results[0].type)
    rank = len(out_type.shape)
    ident = ir.AffineMap.get_identity(rank)
    reassoc = op.attributes["reassociation"]
    ins = []
    with ir.InsertionPoint(op), op.location:
        for v, m in zip(inputs, amaps[:len(inputs)]):
            if len(m.results) == 0:                     # a 0-d input reads the same element everywhere
                ins.append((v, ir.AffineMap.get(rank, 0, [])))
                continue
            t = ir.RankedTensorType.get(out_type.shape, ir.RankedTensorType(v.type).element_type)
            if op.name == "tensor.collapse_shape":
                moved = tensor.CollapseShapeOp(t, v, reassoc).result
            else:
                moved = tensor.ExpandShapeOp(t, v, reassoc, [], list(out_type.shape)).result
            ins.append((moved, ident))
        init = tensor.EmptyOp(list(out_type.shape), out_type.element_type).result
    new = rebuild(gen, ins, [(init, ident)], ["parallel"] * rank)
    new.move_before(op)                              # after the moved reshapes it reads
    op.results[0].replace_all_uses_with(new.results[0])
    op.erase()
    gen.erase()
