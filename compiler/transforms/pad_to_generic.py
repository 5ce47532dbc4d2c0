"""pad-to-generic: a tensor.pad becomes an all-parallel linalg.generic that gathers its source.

Tiling a tensor.pad makes `scf.if` guards that yield memrefs after bufferization, outside the
emitter's closed set. The same padding as a generic over the padded shape,
    out[i] = in_range(i - low) ? source[clamp(i - low)] : pad_value
(linalg.index for i, tensor.extract for the read), tiles like any elementwise kernel. Run at the
start of the tiled stage; the generic keeps the pad's `fusec.id`, so the plan still names it.
"""
from __future__ import annotations

from ..marks import OP_ID
from ..lowering.builder import generic, identity_map
from ..mlir import arith, ir, linalg, tensor

NAME = "pad-to-generic"


def _pads(module: ir.Module) -> list:
    found = []

    def visit(op):
        if op.name == "tensor.pad":
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


def _static_list(attr) -> list[int]:
    return list(ir.DenseI64ArrayAttr(attr))


def pad_to_generic(module: ir.Module) -> int:
    """Rewrite every tensor.pad with static low/high padding; returns how many."""
    count = 0
    for pad in _pads(module):
        source = pad.operands[0]
        low = _static_list(pad.attributes["static_low"])
        src_shape = list(ir.RankedTensorType(source.type).shape)
        out_type = ir.RankedTensorType(pad.results[0].type)
        (pad_value,) = pad.regions[0].blocks[0].operations[len(pad.regions[0].blocks[0].operations) - 1].operands
        if pad_value.owner.name != "arith.constant" if hasattr(pad_value.owner, "name") else True:
            continue   # a pad value computed per element: not produced by our lowering
        with pad.location, ir.InsertionPoint(pad):
            const = arith.ConstantOp(pad_value.type, pad_value.owner.attributes["value"]).result
            init = tensor.EmptyOp(list(out_type.shape), out_type.element_type).result
            rank = len(src_shape)

            def body(_ins, _accs):
                index = ir.IndexType.get()
                zero = arith.ConstantOp(index, 0).result
                ok = None
                at = []
                for d in range(rank):
                    i = linalg.IndexOp(d).result
                    if not low[d] and src_shape[d] == out_type.shape[d]:
                        at.append(i)
                        continue
                    s = arith.SubIOp(i, arith.ConstantOp(index, low[d]).result).result
                    inside = arith.AndIOp(
                        arith.CmpIOp(arith.CmpIPredicate.sge, s, zero).result,
                        arith.CmpIOp(arith.CmpIPredicate.slt, s, arith.ConstantOp(index, src_shape[d]).result).result,
                    ).result
                    ok = inside if ok is None else arith.AndIOp(ok, inside).result
                    at.append(arith.SelectOp(inside, s, zero).result)
                val = tensor.ExtractOp(source, at).result
                return [val if ok is None else arith.SelectOp(ok, val, const).result]

            (out,) = generic([], [(init, identity_map(rank))], ["parallel"] * rank, body)
        if OP_ID in pad.attributes:
            out.owner.attributes[OP_ID] = pad.attributes[OP_ID]
        pad.results[0].replace_all_uses_with(out)
        pad.erase()
        count += 1
    return count
