"""matmul-rows: a contraction generic that is a matmul with batch dims on its left operand only
becomes linalg.matmul again, on rows; the left operand's fused elementwise work its own generic.

`x[B, S, K] @ w[K, N]` lowers to linalg.matmul on x collapsed to [B*S, K], its result expanded
back. linalg-fuse-elementwise-ops folds that expand into the matmul (a generic over (b, s, n, k))
and then fuses the left operand's elementwise producer into its body (a layernorm's normalise, a
GELU): on the cpu the producer is computed again for every n and no library call takes the
generic (the GPU GEMM template computes it once per tile element as it loads A, so graph.py runs
this pass for the cpu only). Here the generic whose body is `acc + X * w[k, n]` (w read at
(k, n) alone, X computed from operands that never read n) is split back: X into an elementwise
generic over (b..., m, k) (nothing when X is an operand read as it lies), linalg.matmul on its
rows, the result expanded. Static shapes only; a body that reads its loop indices, mixes element
types or has work on w's side
stays. See docs/ARCHITECTURE.md, "Stages and what each hands on" (graph).
"""
from __future__ import annotations

import re

from ..mlir import ir, linalg, tensor
from .generic import iterator_attr, is_dim, map_attr, maps, iterators, type_shape

NAME = "matmul-rows"


def matmul_rows(module: ir.Module) -> int:
    """Split every matching contraction generic; returns how many became linalg.matmul."""
    count = 0
    with module.context, ir.Location.unknown():
        for f in module.body.operations:
            for op in [o.operation for o in f.regions[0].blocks[0].operations]:
                if op.name == "linalg.generic":
                    parts = _match(op)
                    if parts is not None:
                        _rewrite(op, *parts)
                        count += 1
    return count


def _owner(value):
    owner = value.owner
    return owner.operation if hasattr(owner, "operation") else owner


def _match(op):
    """(the left value X in the body, w's input index, the mulf and addf) when `op` is
    C[b..., m, n] += X(b..., m, k) * w[k, n], else None."""
    kinds = iterators(op)
    loops = len(kinds)
    nb = loops - 3
    if nb < 1 or kinds != ["parallel"] * (loops - 1) + ["reduction"]:
        return None
    n_in = len(op.opview.inputs)
    if len(op.results) != 1 or len(op.opview.outputs) != 1:
        return None
    amaps = maps(op)
    m_out = amaps[-1]
    if m_out.n_dims != loops or len(m_out.results) != loops - 1 or not all(
            is_dim(e, i) for i, e in enumerate(m_out.results)):
        return None
    if any(ir.ShapedType(v.type).has_static_shape is False for v in list(op.operands) + list(op.results)):
        return None
    k, n = loops - 1, loops - 2
    block = op.regions[0].blocks[0]
    args = list(block.arguments)
    body = [o.operation if hasattr(o, "operation") else o for o in block.operations]
    if any(o.name == "linalg.index" for o in body):
        return None
    yielded = body[-1].operands[0]
    add = _owner(yielded) if not isinstance(yielded, ir.BlockArgument) else None
    if add is None or add.name != "arith.addf":
        return None
    acc = args[n_in]
    others = [v for v in add.operands if v != acc]
    if len(others) != 1 or len(list(acc.uses)) != 1:
        return None
    mul_v = others[0]
    mul = _owner(mul_v) if not isinstance(mul_v, ir.BlockArgument) else None
    if mul is None or mul.name != "arith.mulf" or len(list(mul_v.uses)) != 1:
        return None
    w_pos = [i for i in range(n_in) if len(amaps[i].results) == 2 and is_dim(amaps[i].results[0], k)
             and is_dim(amaps[i].results[1], n)]
    for w in w_pos:
        w_arg = args[w]
        xs = [v for v in mul.operands if v != w_arg]
        if len(xs) != 1 or len(list(w_arg.uses)) != 1:
            continue
        x = xs[0]
        elems = {str(x.type), str(w_arg.type), str(acc.type), str(ir.RankedTensorType(op.results[0].type).element_type)}
        if len(elems) != 1:
            return None
        # every other input is the left side's: it never reads n
        if any(_reads(amaps[i], n) for i in range(n_in) if i != w):
            return None
        # every op but the last two and the yield computes X (nothing on w's side)
        computes_x = _slice(x, op)
        if not all(o in (mul, add, body[-1]) or o in computes_x for o in body):
            return None
        return x, w, mul, add
    return None


def _reads(amap, loop: int) -> bool:
    """Whether a map's results use loop `loop` (d1 is not d10)."""
    name = re.compile(rf"\bd{loop}\b")
    return any(name.search(str(e)) for e in amap.results)


def _slice(x, gen) -> list:
    """The ops of generic `gen`'s body that compute `x` (its backward slice within the body)."""
    out, todo = [], [x]
    while todo:
        v = todo.pop()
        if isinstance(v, ir.BlockArgument):
            continue
        o = _owner(v)
        if o.parent is None or o.parent != gen or o in out:
            continue
        out.append(o)
        todo.extend(o.operands)
    return out


def _rewrite(op, x, w: int, mul, add) -> None:
    loops = len(iterators(op))
    nb = loops - 3
    k, n = loops - 1, loops - 2
    n_in = len(op.opview.inputs)
    amaps = maps(op)
    ins = list(op.opview.inputs)
    out_t = ir.RankedTensorType(op.results[0].type)
    elem = out_t.element_type
    c_shape = list(out_t.shape)
    block = op.regions[0].blocks[0]
    args = list(block.arguments)
    left = [i for i in range(n_in) if i != w]
    with ir.InsertionPoint(op), op.location:
        a = _plain_operand(x, args, amaps, ins, nb, k)
        if a is None:
            a = _prologue(op, x, left, amaps, ins, c_shape[:nb + 1] + [_k_extent(op, amaps, ins, k)], elem, nb, k,
                          mul, add)
        kk = ir.RankedTensorType(a.type).shape[-1]
        rows = 1
        for d in c_shape[:nb + 1]:
            rows *= d
        groups = [list(range(nb + 1)), [nb + 1]]
        a2 = tensor.CollapseShapeOp(ir.RankedTensorType.get([rows, kk], elem), a, _reassoc(groups)).result
        init = op.opview.outputs[0]
        c2_t = ir.RankedTensorType.get([rows, c_shape[-1]], elem)
        init2 = tensor.CollapseShapeOp(c2_t, init, _reassoc(groups)).result
        mm = linalg.matmul(a2, ins[w], outs=[init2])
        c = tensor.ExpandShapeOp(out_t, mm, _reassoc(groups), [], c_shape).result
    op.results[0].replace_all_uses_with(c)
    op.erase()


def _k_extent(op, amaps, ins, k: int) -> int:
    for v, amap in zip(ins, amaps):
        for axis, e in enumerate(amap.results):
            if is_dim(e, k):
                return ir.RankedTensorType(v.type).shape[axis]
    raise ValueError("no operand reads the reduction loop")


def _plain_operand(x, args, amaps, ins, nb: int, k: int):
    """The input X is, when X is an input read at (b..., m, k) as it lies (no broadcast)."""
    if not isinstance(x, ir.BlockArgument):
        return None
    i = args.index(x)
    amap = amaps[i]
    want = list(range(nb + 1)) + [k]
    if len(amap.results) != len(want) or not all(is_dim(e, d) for e, d in zip(amap.results, want)):
        return None
    return ins[i]


def _prologue(op, x, left: list[int], amaps, ins, shape: list[int], elem, nb: int, k: int, mul, add):
    """X as an elementwise generic over (b..., m, k): the body's ops that compute it moved in,
    each left input read with n dropped and k where n was."""
    loops = nb + 2
    new_maps = [_drop_n(amaps[i], nb, k, loops) for i in left]
    out_map = ir.AffineMap.get_identity(loops)
    empty = tensor.EmptyOp(shape, elem).result
    gen = linalg.GenericOp([ir.RankedTensorType.get(shape, elem)], [ins[i] for i in left], [empty],
                           map_attr(new_maps + [out_map]), iterator_attr(["parallel"] * loops)).operation
    old_block = op.regions[0].blocks[0]
    old_args = list(old_block.arguments)
    new_block = gen.regions[0].blocks.append(*([old_args[i].type for i in left] + [elem]))
    for i, b in zip(left, new_block.arguments):
        old_args[i].replace_all_uses_with(b)
    at = ir.InsertionPoint(new_block)
    for o in list(old_block.operations):
        o = o.operation if hasattr(o, "operation") else o
        if o in (mul, add) or o.name == "linalg.yield":
            continue
        o.detach_from_parent()
        at.insert(o)
    with at:
        linalg.YieldOp([x if not isinstance(x, ir.BlockArgument) else new_block.arguments[left.index(old_args.index(x))]])
    return gen.results[0]


def _drop_n(amap, nb: int, k: int, loops: int):
    """A map over (b..., m, n, k) as one over (b..., m, k): n is never read; k moves to n's place."""
    repl = [ir.AffineDimExpr.get(d) for d in range(nb + 1)] + [ir.AffineConstantExpr.get(0),
                                                              ir.AffineDimExpr.get(nb + 1)]
    return ir.AffineMap.get(loops, 0, [e.compose(ir.AffineMap.get(loops, 0, repl)) for e in amap.results])


def _reassoc(groups) -> ir.ArrayAttr:
    i64 = ir.IntegerType.get_signless(64)
    return ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(i64, d) for d in g]) for g in groups])
