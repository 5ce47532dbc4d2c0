"""fold-batchnorm: inference batchnorm -> one per-channel scale-and-shift.

The lowering emits batchnorm as its textbook generic, (x - mean) / sqrt(var + eps) * gamma + beta,
tagged `fusec.batchnorm = eps`. This rewrite replaces each tagged generic by
    scale, shift = [C]-generic: scale = gamma * rsqrt(var + eps), shift = beta - mean * scale
    y            = x * scale + shift     (scale/shift read per channel through the indexing map)
so the per-element work is one multiply-add, the form that later fuses into a conv epilogue.
"""
from __future__ import annotations

from ..lowering.norm import batchnorm_scale_shift
from ..marks import BATCHNORM
from ..mlir import ir

NAME = "fold-batchnorm"


def _tagged_generics(module: ir.Module) -> list[ir.Operation]:
    found: list[ir.Operation] = []

    def visit(op):
        if op.name == "linalg.generic" and BATCHNORM in op.attributes:
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


def fold_batchnorm(module: ir.Module) -> int:
    """Rewrite every tagged batchnorm generic in place; returns how many were rewritten."""
    count = 0
    for op in _tagged_generics(module):
        # A tagged generic reads (x, mean, var, gamma, beta) and writes one init; anything else was
        # rewritten by someone who kept our tag, and is left alone.
        if len(op.operands) != 6 or len(op.results) != 1:
            continue
        x, mean, var, gamma, beta = list(op.operands)[:5]
        eps = ir.FloatAttr(op.attributes[BATCHNORM]).value
        with op.location, ir.InsertionPoint(op):
            y = batchnorm_scale_shift(x, mean, var, gamma, beta, eps)
        op.results[0].replace_all_uses_with(y)
        op.erase()
        count += 1
    return count
