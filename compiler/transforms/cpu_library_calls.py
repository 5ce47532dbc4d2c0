"""cpu-library-calls: on the CPU target, contractions stay linalg ops for the emitter to hand
to NumPy's BLAS; every other linalg op becomes loops.

Scalar loops reach a few percent of a CPU's GEMM rate (a 512x1024x4096 matmul: 8 s in Numba
loops, 10 ms in OpenBLAS), so after bufferization (CPU lowering, before the loops pass) each
float linalg.matmul, linalg.batch_matmul and linalg.conv_2d_nchw_fchw on memrefs is marked with
`fusec.cpu_call`: "zero" when a linalg.fill of +0.0 into the same buffer directly precedes it
(the fill is dropped: the call writes C = A B instead of accumulating), "acc" otherwise. Tiles
stay tiles: a contraction inside a parallel loop is one call per tile, followed in the same
iteration by its fused epilogue. The rest is lowered with transform.structured.convert_to_loops.
"""
from __future__ import annotations

import math

from ..mlir import ir

NAME = "cpu-library-calls"
ATTR = "fusec.cpu_call"
LOOPS = "fusec.to_loops"
CONTRACTIONS = ("linalg.matmul", "linalg.batch_matmul", "linalg.conv_2d_nchw_fchw")
_FLOATS = ("f32", "f64")


def _linalg_ops(module: ir.Module) -> list:
    found = []

    def visit(op):
        if op.name.startswith("linalg.") and not op.parent.name.startswith("linalg."):
            found.append(op)      # structured ops, not the yield/index inside their bodies
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


def _element(v: "ir.Value") -> str | None:
    t = v.type
    if not isinstance(t.maybe_downcast(), ir.MemRefType):
        return None
    return str(ir.MemRefType(t).element_type)


def _callable(op) -> bool:
    """All operands memrefs of one float type (mixed or integer contractions stay loops)."""
    elems = {_element(v) for v in op.operands}
    return len(elems) == 1 and elems.pop() in _FLOATS


def _zero_fill_before(op) -> "ir.Operation | None":
    """The linalg.fill of +0.0 into op's output buffer directly before op, if there is one."""
    out = op.operands[len(op.operands) - 1]
    prev = None
    for o in op.operation.block.operations:
        if o.operation == op.operation:
            break
        prev = o.operation
    if prev is None or prev.name != "linalg.fill" or prev.operands[1] != out:
        return None
    const = prev.operands[0].owner
    if getattr(const, "name", None) != "arith.constant":
        return None
    attr = const.attributes["value"]
    if not isinstance(attr.maybe_downcast(), ir.FloatAttr):
        return None
    value = ir.FloatAttr(attr).value
    return prev if value == 0.0 and not math.copysign(1.0, value) < 0 else None


def mark_library_calls(module: ir.Module) -> int:
    """Mark the contractions (dropping their zero fills) and every other linalg op for loops;
    returns how many were marked as calls."""
    count = 0
    for op in _linalg_ops(module):
        if op.name in CONTRACTIONS and _callable(op):
            fill = _zero_fill_before(op)
            op.attributes[ATTR] = ir.StringAttr.get("zero" if fill is not None else "acc")
            if fill is not None:
                fill.erase()
            count += 1
    for op in _linalg_ops(module):
        if ATTR not in op.attributes:
            op.attributes[LOOPS] = ir.UnitAttr.get()
    return count


def loops_script() -> str:
    """The transform script lowering the ops marked LOOPS (all but the calls) to scf loops."""
    any_op = "!transform.any_op"
    return ("module attributes {transform.with_named_sequence} {\n"
            f"  transform.named_sequence @__transform_main(%root: {any_op} {{transform.consumed}}) {{\n"
            f'    %l = transform.structured.match attributes {{"{LOOPS}"}} in %root : ({any_op}) -> {any_op}\n'
            f"    %loops = transform.structured.convert_to_loops %l : ({any_op}) -> {any_op}\n"
            "    transform.yield\n  }\n}\n")
