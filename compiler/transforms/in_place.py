"""Elementwise kernels that write over their input (stage `tiled`, before tiling).

A kernel whose elementwise root writes a fresh `tensor.empty` writes into one of its inputs
instead when that input is another kernel's result (never a chain argument), has the root's
type, is read at the element the root writes, and is read by nothing after the root (nor
returned). Kernels with more than one write (siblings, row, contraction and attention kernels)
and roots another kernel recomputes are left alone. See docs/ARCHITECTURE.md, "Stages and what each hands on" (after the list).
"""
from __future__ import annotations

from collections import Counter

from ..mlir import ir
from ..marks import OP_ID
from ..plan.analysis import payload_ops
from ..plan.kernels import FusionPlan
from .generic import iterators, maps, rebuild


def write_in_place(func_op, plan: FusionPlan) -> list[int]:
    """Rewrite every eligible kernel root of `func_op`; returns their op ids."""
    ops = {ir.IntegerAttr(op.attributes[OP_ID]).value: op for op in payload_ops(func_op)
           if OP_ID in op.attributes}
    kernels_of = Counter(m for g in plan.kernels for m in g.ops)
    position = {m: i for i, m in enumerate(ops)}          # program order
    ends = {g.id: max(position.get(m, -1) for m in g.ops) for g in plan.kernels}
    # the last op of any kernel that computes op m (m's readers there are done once it has run)
    done_after = {m: max(ends[g.id] for g in plan.kernels if m in g.ops) for m in kernels_of}
    done = []
    for g in plan.kernels:
        if g.siblings or not g.config.in_place or kernels_of[g.root] > 1:
            continue
        root = ops.get(g.root)
        if root is None or root.name != "linalg.generic" or len(root.results) != 1:
            continue
        here = position[g.root]
        k = _reusable_input(root, set(g.ops), lambda m: done_after.get(m, here) < here)
        if k is None:
            continue
        _write_over(root, k)
        done.append(g.root)
    return done


def _reusable_input(root, members: set[int], earlier) -> int | None:
    n_in = len(root.operands) - 1
    out = root.operands[n_in]
    block = root.regions[0].blocks[0]
    if not all(k == "parallel" for k in iterators(root)):
        return None
    if isinstance(out.owner, ir.Block):
        return None
    if out.owner.operation.name != "tensor.empty" or len(list(block.arguments[n_in].uses)):
        return None
    am = maps(root)
    if not am[n_in].is_permutation:
        return None
    for k in range(n_in):
        v = root.operands[k]
        if v.type != out.type or am[k] != am[n_in] or isinstance(v.owner, ir.Block):
            continue
        prod = v.owner.operation
        if not prod.name.startswith("linalg.") or OP_ID not in prod.attributes:
            continue
        if ir.IntegerAttr(prod.attributes[OP_ID]).value in members:
            continue
        if sum(1 for w in root.operands if w == v) != 1:
            continue
        if all(u.owner.operation == root or (OP_ID in u.owner.attributes and
                                   earlier(ir.IntegerAttr(u.owner.attributes[OP_ID]).value))
               for u in v.uses):
            return k
    return None


def _write_over(root, k: int) -> None:
    """Rebuild `root` with input `k` as its destination, read through the output's argument."""
    n_in = len(root.operands) - 1
    block = root.regions[0].blocks[0]
    am = maps(root)
    block.arguments[k].replace_all_uses_with(block.arguments[n_in])
    ins = [(root.operands[i], am[i]) for i in range(n_in) if i != k]
    args = [block.arguments[i] for i in range(n_in + 1) if i != k]
    empty = root.operands[n_in].owner.operation
    new = rebuild(root, ins, [(root.operands[k], am[n_in])], iterators(root), args)
    root.results[0].replace_all_uses_with(new.results[0])
    root.erase()
    if not list(empty.results[0].uses):
        empty.erase()
