"""mark-scans: every running sum or product carries its `fusec.scan` mark after the graph passes.

Elementwise fusion rebuilds a scan generic without the lowering's mark; this pass puts it back
from the body: a generic whose last loop j is its only reduction, whose output is read at its
other loops in order, and whose body yields `combine(acc, select(j <= i, value, neutral))` for
a combiner that runs as a scan (compiler/combiners.py). Anything else is not a scan, by design.
See docs/ARCHITECTURE.md, "GPU kernels: how a plan becomes CUDA" (scans).
"""
from __future__ import annotations

from ..mlir import ir
from .generic import iterators, maps
from ..marks import SCAN, SCAN_AXIS
from .. import combiners

NAME = "mark-scans"

_ULE = 7                  # arith.cmpi's predicate number for "ule"


def mark_scans(module: ir.Module) -> int:
    """Mark every scan-shaped generic; returns how many carry the mark."""
    count = 0
    i64 = ir.IntegerType.get_signless(64, module.context)
    for f in module.body.operations:
        for op in f.regions[0].blocks[0].operations:
            op = op.operation
            if op.name != "linalg.generic":
                continue
            found = _scan_of(op)
            if found is None:
                continue
            kind, axis = found
            op.attributes[SCAN] = ir.StringAttr.get(kind, module.context)
            op.attributes[SCAN_AXIS] = ir.IntegerAttr.get(i64, axis)
            count += 1
    return count


def _owner(v):
    owner = v.owner
    return None if isinstance(owner, ir.Block) else (owner.operation if hasattr(owner, "operation") else owner)


def _scan_of(op) -> tuple[str, int] | None:
    kinds = iterators(op)
    n = len(kinds)
    if n < 2 or kinds[-1] != "reduction" or "reduction" in kinds[:-1] or len(op.results) != 1:
        return None
    out_map = maps(op)[-1]
    if [str(e) for e in out_map.results] != [f"d{i}" for i in range(n - 1)]:
        return None
    block = op.regions[0].blocks[0]
    acc = block.arguments[len(block.arguments) - 1]
    ops = [o.operation for o in block.operations]
    combine = _owner(ops[-1].operands[0])
    name = combine.name if combine is not None else ""
    found = combiners.of_op(name.removeprefix("arith.")) if name.startswith("arith.") else None
    if found is None or found[0].scan is None or acc not in list(combine.operands):
        return None
    kind, neutral = found[0].scan, found[1].neutral
    other = [v for v in combine.operands if v != acc]
    select = _owner(other[0]) if len(other) == 1 else None
    if select is None or select.name != "arith.select":
        return None
    cond, _, fallback = select.operands
    const = _owner(fallback)
    cmp = _owner(cond)
    if const is None or const.name != "arith.constant" or cmp is None or cmp.name != "arith.cmpi":
        return None
    if ir.IntegerAttr(cmp.attributes["predicate"]).value != _ULE:
        return None
    if _constant(const) != neutral:
        return None
    j, i = (_index_dim(v) for v in cmp.operands)
    if j != n - 1 or i is None or i >= n - 1:
        return None
    return kind, i


def _constant(op):
    attr = op.attributes["value"]
    for cls in (ir.FloatAttr, ir.IntegerAttr):
        try:
            return cls(attr).value
        except (ValueError, TypeError):
            continue
    return None


def _index_dim(v) -> int | None:
    op = _owner(v)
    if op is None or op.name != "linalg.index":
        return None
    return ir.IntegerAttr(op.attributes["dim"]).value
