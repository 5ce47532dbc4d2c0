"""matmul-rows: a contraction generic that is a matmul with batch dims on its left operand only
becomes linalg.matmul again, on rows; the fused elementwise work on either operand its own generic.

`x[B, S, K] @ w[K, N]` lowers to linalg.matmul on x collapsed to [B*S, K], its result expanded
back. linalg-fuse-elementwise-ops folds that expand into the matmul (a generic over (b, s, n, k))
and then fuses the left operand's elementwise producer into its body (a layernorm's normalise, a
GELU): on the cpu the producer is computed again for every n and no library call takes the
generic (the GPU GEMM template computes it once per tile element as it loads A, so graph.py runs
this pass for the cpu only). A head split of the result (`reshape(x @ w, [B, S, H, D])`, BERT's
Q/K/V projections) is folded in too: the generic runs over (b, s, h, d, k) with w read at
(k, h, d). And a producer on w's side (`x @ (w * 2)`) is fused the same way, computed again for
every row.

Here the generic C[lead..., n...] += X(lead..., k) * W(k, n...), with the body `acc + X * W`,
X computed from inputs that never read an n loop and W from inputs that read only k and the n
loops (the trailing parallel loops), is split back: X into an elementwise generic over
(lead..., k), W into one over (k, n...) (nothing for a side that is an input read as it lies),
linalg.matmul on X's rows [prod lead, K] and W viewed [K, prod n], the result expanded back.
Static shapes only; a body that reads its loop indices or mixes element types stays. See
docs/ARCHITECTURE.md, "Stages and what each hands on" (graph).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..mlir import ir, linalg, tensor
from .generic import iterator_attr, is_dim, map_attr, maps, iterators, rebuild

NAME = "matmul-rows"


@dataclass
class _Match:
    x: object            # the left value in the body
    w: object            # the right value in the body
    x_ins: list          # input indices X is computed from (every input W does not read)
    w_ins: list          # input indices W is computed from
    x_ops: list          # body ops computing X
    w_ops: list          # body ops computing W
    lead: int            # leading parallel loops (batch dims and m): 0 .. lead-1
    par: int             # parallel loops (lead and n); the reduction loops (k...) follow
    mul: object
    add: object


def matmul_rows(module: ir.Module) -> int:
    """Split every matching contraction generic; returns how many became linalg.matmul."""
    count = 0
    with module.context, ir.Location.unknown():
        for f in module.body.operations:
            for op in [o.operation for o in f.regions[0].blocks[0].operations]:
                if op.name == "linalg.generic":
                    m = _match(op)
                    if m is not None:
                        _rewrite(op, m)
                        count += 1
    return count


def _owner(value):
    owner = value.owner
    return owner.operation if hasattr(owner, "operation") else owner


def _match(op) -> _Match | None:
    """The parts of `op` when it is C[lead..., n...] += X(lead..., k...) * W(k..., n...), else None."""
    kinds = iterators(op)
    loops = len(kinds)
    par = kinds.index("reduction") if "reduction" in kinds else loops
    if loops < 3 or par < 2 or kinds != ["parallel"] * par + ["reduction"] * (loops - par):
        return None
    n_in = len(op.opview.inputs)
    if len(op.results) != 1 or len(op.opview.outputs) != 1:
        return None
    amaps = maps(op)
    m_out = amaps[-1]
    if m_out.n_dims != loops or len(m_out.results) != par or not all(
            is_dim(e, i) for i, e in enumerate(m_out.results)):
        return None
    if any(ir.ShapedType(v.type).has_static_shape is False for v in list(op.operands) + list(op.results)):
        return None
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
    elem = str(ir.RankedTensorType(op.results[0].type).element_type)
    if any(str(a.type) != elem for a in args):
        return None
    a, b = mul.operands[0], mul.operands[1]
    for x, w in ((a, b), (b, a)):
        m = _sides(op, x, w, mul, add, amaps, args, n_in, par, body)
        if m is not None:
            return m
    return None


def _sides(op, x, w, mul, add, amaps, args, n_in: int, par: int, body) -> _Match | None:
    """The match with `x` on the left and `w` on the right, when the body splits so."""
    x_ops, x_args = _slice(x, op)
    w_ops, w_args = _slice(w, op)
    if set(map(id, x_ops)) & set(map(id, w_ops)) or any(o in x_ops for o in w_ops):
        return None
    if any(a in x_args for a in w_args):
        return None
    # every op but the last two and the yield computes X or W
    if not all(o in (mul, add, body[-1]) or o in x_ops or o in w_ops for o in body):
        return None
    w_ins = [i for i in range(n_in) if args[i] in w_args]
    x_ins = [i for i in range(n_in) if i not in w_ins]
    # W read at a constant index (a unit batch dim of x @ v, single-head attention at batch 1)
    # stays: the attention template takes that contraction whole
    if any(not re.search(r"\bd\d+\b", str(e)) for i in w_ins for e in amaps[i].results):
        return None
    n_loops = set()
    for i in w_ins:
        n_loops |= {d for d in range(par) if _reads(amaps[i], d)}
    if not n_loops:
        return None
    lead = min(n_loops)
    if n_loops != set(range(lead, par)) or lead < 1:
        return None
    # a matmul whose result is not reshaped needs a batch dim to be a generic at all: keep
    # what elementwise fusion left of a 2-D one (a broadcast or the like) as it is
    if par - lead == 1 and lead < 2 and amaps[-1].n_dims - par == 1:
        return None
    if any(_reads(amaps[i], d) for i in x_ins for d in n_loops):
        return None
    # every reduction loop a K of both sides (batch folding can leave a unit one only W reads)
    if not all(any(_reads(amaps[i], d) for i in x_ins) and any(_reads(amaps[i], d) for i in w_ins)
               for d in range(par, amaps[-1].n_dims)):
        return None
    return _Match(x, w, x_ins, w_ins, x_ops, w_ops, lead, par, mul, add)


def _reads(amap, loop: int) -> bool:
    """Whether a map's results use loop `loop` (d1 is not d10)."""
    name = re.compile(rf"\bd{loop}\b")
    return any(name.search(str(e)) for e in amap.results)


def _slice(v0, gen) -> tuple[list, list]:
    """The ops of generic `gen`'s body that compute `v0` (its backward slice within the body),
    and the block arguments they (or `v0` itself) read."""
    out, leaves, todo = [], [], [v0]
    while todo:
        v = todo.pop()
        if isinstance(v, ir.BlockArgument):
            if v.owner == gen.regions[0].blocks[0] and v not in leaves:
                leaves.append(v)
            continue
        o = _owner(v)
        if o.parent is None or o.parent != gen or o in out:
            continue
        out.append(o)
        todo.extend(o.operands)
    return out, leaves


def _rewrite(op, m: _Match) -> None:
    loops = len(iterators(op))
    lead, par = m.lead, m.par
    ks = list(range(par, loops))            # the reduction loops (a head merge: (h, d))
    r = len(ks)
    amaps = maps(op)
    ins = list(op.opview.inputs)
    out_t = ir.RankedTensorType(op.results[0].type)
    elem = out_t.element_type
    c_shape = list(out_t.shape)
    k_shape = [_k_extent(amaps, ins, k) for k in ks]
    kk = _prod(k_shape)
    block = op.regions[0].blocks[0]
    args = list(block.arguments)
    # X over (lead..., k...): its maps' n loops gone
    x_dims = list(range(lead)) + [None] * (par - lead) + [lead + j for j in range(r)]
    # W over (k..., n...): the lead loops gone
    w_dims = [None] * lead + [r + i for i in range(par - lead)] + list(range(r))
    with ir.InsertionPoint(op), op.location:
        a = _plain(m.x, args, amaps, ins, list(range(lead)) + ks)
        if a is None:
            a = _prologue(op, m.x, m.x_ins, m.x_ops, amaps, ins, x_dims, c_shape[:lead] + k_shape, elem)
        b = _plain(m.w, args, amaps, ins, ks + list(range(lead, par)))
        if b is None:
            b = _plain_flat(m.w, args, amaps, ins, ks, k_shape, lead, par, c_shape)
        if b is None:
            b = _prologue(op, m.w, m.w_ins, m.w_ops, amaps, ins, w_dims, k_shape + c_shape[lead:], elem)
        rows, cols = _prod(c_shape[:lead]), _prod(c_shape[lead:])
        a2 = _collapse(a, [list(range(lead)), list(range(lead, lead + r))], [rows, kk], elem)
        b_rank = ir.RankedTensorType(b.type).rank
        b_k = r if b_rank == r + par - lead else 1            # a [K, N] input keeps K whole
        b2 = _collapse(b, [list(range(b_k)), list(range(b_k, b_rank))], [kk, cols], elem)
        groups = [list(range(lead)), list(range(lead, par))]
        init2 = _collapse(op.opview.outputs[0], groups, [rows, cols], elem)
        mm = linalg.matmul(a2, b2, outs=[init2])
        c = mm if lead == 1 and par - lead == 1 else tensor.ExpandShapeOp(out_t, mm, _reassoc(groups), [],
                                                                         c_shape).result
    op.results[0].replace_all_uses_with(c)
    op.erase()


def _prod(xs) -> int:
    out = 1
    for d in xs:
        out *= d
    return out


def _collapse(v, groups, shape, elem):
    """`v` viewed at `shape` (groups of its dims merged); `v` itself when nothing merges, and the
    source of an expand_shape that the collapse undoes."""
    if all(len(g) == 1 for g in groups):
        return v
    src = v.owner
    src = src.operation if hasattr(src, "operation") else src
    if (not isinstance(v, ir.BlockArgument) and src.name == "tensor.expand_shape"
            and list(ir.RankedTensorType(src.operands[0].type).shape) == shape
            and str(src.attributes["reassociation"]) == str(_reassoc(groups))):
        return src.operands[0]
    if not isinstance(v, ir.BlockArgument) and src.name == "linalg.transpose":
        merged = _merged_transpose(src, groups, shape, elem)
        if merged is not None:
            return merged
    return tensor.CollapseShapeOp(ir.RankedTensorType.get(shape, elem), v, _reassoc(groups)).result


def _merged_transpose(t, groups, shape, elem):
    """collapse(transpose(expand(S), perm), groups) as one transpose of S itself, when each
    collapsed group of the transpose's dims is one of the expand's groups, in order: Llama's
    `permute(w, [1, 0])` by the head split folded into it (w at (h, d, n) to (n, h, d)) is then
    `transpose(w)` again, which the cpu plan fuses into the product and BLAS reads as it lies
    (its transpose flag: cpu_library_calls.fold_transposed_operands), not a copy of the weight
    on every call. None when the groups do not line up."""
    e = t.operands[0].owner
    if isinstance(e, ir.Block):
        return None
    e = e.operation if hasattr(e, "operation") else e
    if e.name != "tensor.expand_shape":
        return None
    perm = list(ir.DenseI64ArrayAttr(t.attributes["permutation"]))
    src_groups = [[int(ir.IntegerAttr(d).value) for d in g] for g in ir.ArrayAttr(e.attributes["reassociation"])]
    order = []
    for g in groups:
        dims = [perm[i] for i in g]
        if dims not in src_groups:
            return None
        order.append(src_groups.index(dims))
    s = e.operands[0]
    if sorted(order) != list(range(len(src_groups))):
        return None
    if [ir.RankedTensorType(s.type).shape[j] for j in order] != list(shape):
        return None
    if order == list(range(len(order))):
        return s
    return linalg.transpose(s, outs=[tensor.EmptyOp(list(shape), elem).result], permutation=order)


def _k_extent(amaps, ins, k: int) -> int:
    for v, amap in zip(ins, amaps):
        for axis, e in enumerate(amap.results):
            if is_dim(e, k):
                return ir.RankedTensorType(v.type).shape[axis]
    raise ValueError("no operand reads the reduction loop")


def _plain(v, args, amaps, ins, want: list[int]):
    """The input `v` is, when `v` is an input read at loops `want` as it lies (no broadcast)."""
    if not isinstance(v, ir.BlockArgument):
        return None
    i = args.index(v)
    amap = amaps[i]
    if len(amap.results) != len(want) or not all(is_dim(e, d) for e, d in zip(amap.results, want)):
        return None
    return ins[i]


def _plain_flat(v, args, amaps, ins, ks: list[int], k_shape: list[int], lead: int, par: int, c_shape):
    """The input `v` is, when `v` is a [K, N] input read at (the k loops' row-major index, the n
    loops' row-major index)."""
    if not isinstance(v, ir.BlockArgument):
        return None
    i = args.index(v)
    amap = amaps[i]
    if len(amap.results) != 2:
        return None

    def flat(loops, extents):
        e = ir.AffineDimExpr.get(loops[0])
        for d, n in zip(loops[1:], extents[1:]):
            e = e * ir.AffineConstantExpr.get(n) + ir.AffineDimExpr.get(d)
        return e
    n_loops = list(range(lead, par))
    want = ir.AffineMap.get(amap.n_dims, 0, [flat(ks, k_shape), flat(n_loops, [c_shape[d] for d in n_loops])])
    if str(want) != str(amap):
        return None
    return ins[i]


def _prologue(op, v, side: list[int], ops: list, amaps, ins, dims: list, shape: list[int], elem):
    """`v` as an elementwise generic over len(shape) loops: the body's ops in `ops` moved in, each
    input of `side` read with old loop d at new loop dims[d] (a loop it never reads: None)."""
    loops = len(shape)
    new_maps = [_remap(amaps[i], dims, loops) for i in side]
    out_map = ir.AffineMap.get_identity(loops)
    empty = tensor.EmptyOp(shape, elem).result
    gen = linalg.GenericOp([ir.RankedTensorType.get(shape, elem)], [ins[i] for i in side], [empty],
                           map_attr(new_maps + [out_map]), iterator_attr(["parallel"] * loops)).operation
    old_block = op.regions[0].blocks[0]
    old_args = list(old_block.arguments)
    new_block = gen.regions[0].blocks.append(*([old_args[i].type for i in side] + [elem]))
    for i, b in zip(side, new_block.arguments):
        old_args[i].replace_all_uses_with(b)
    at = ir.InsertionPoint(new_block)
    for o in list(old_block.operations):
        o = o.operation if hasattr(o, "operation") else o
        if o not in ops:
            continue
        o.detach_from_parent()
        at.insert(o)
    with at:
        linalg.YieldOp([v if not isinstance(v, ir.BlockArgument) else new_block.arguments[side.index(old_args.index(v))]])
    return gen.results[0]


def _remap(amap, dims: list, loops: int):
    """A map over the old loops as one over `loops` new ones: old loop d is new loop dims[d] (0
    where None: the op never reads it)."""
    repl = [ir.AffineConstantExpr.get(0) if d is None else ir.AffineDimExpr.get(d) for d in dims]
    return ir.AffineMap.get(loops, 0, [e.compose(ir.AffineMap.get(loops, 0, repl)) for e in amap.results])


def _reassoc(groups) -> ir.ArrayAttr:
    i64 = ir.IntegerType.get_signless(64)
    return ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(i64, d) for d in g]) for g in groups])


# --- the ops around the matmuls on rows, on rows too ---------------------------------------------
#
# The split leaves `collapse(X) -> matmul -> expand` with X's generic over (b..., m, k) and the
# epilogue (bias, GELU, residual) over (b..., m, n): the reshapes stand between the matmul and
# both, and the planner does not fuse across a reshape of a contraction's result. `flatten_rows`
# rewrites the generics connected to those reshapes over the rows themselves (the lead loops
# one loop, every row operand viewed [prod lead, ...]) when the whole connected set can be: the
# two reshapes then fold away (collapse(expand(v)) is v) and what is left of reshapes is on the
# chain's arguments (views of inputs) and before its results, as in the 2-D form.


def flatten_rows(module: ir.Module) -> int:
    """Rewrite, per matmul on rows, the generics around it over rows (see above); returns how
    many generics were rewritten."""
    done = 0
    with module.context, ir.Location.unknown():
        for f in module.body.operations:
            block = f.regions[0].blocks[0]
            seen: list = []
            while True:
                seeds = [o for o in _ops(block) if _seed(o) is not None and o not in seen]
                if not seeds:
                    break
                seed = seeds[0]
                seen.append(seed)
                comp = _component(seed, block)
                if comp:
                    _flatten(comp, _seed(seed), block)
                    done += len(comp[0])
    return done


def _ops(block) -> list:
    return [o.operation if hasattr(o, "operation") else o for o in block.operations]


def _seed(op):
    """The lead shape (the extents merged into rows) when `op` is a rows reshape beside a
    linalg.matmul: collapse [[0..l-1], [l]] feeding one, or expand of one's result back."""
    if op.name not in ("tensor.collapse_shape", "tensor.expand_shape"):
        return None
    big = op.operands[0] if op.name == "tensor.collapse_shape" else op.results[0]
    t = ir.RankedTensorType(big.type)
    if not t.has_static_shape or t.rank < 3:
        return None
    lead = t.rank - 1
    if str(op.attributes["reassociation"]) != str(_reassoc([list(range(lead)), [lead]])):
        return None
    if op.name == "tensor.expand_shape":
        src = _owner(op.operands[0]) if not isinstance(op.operands[0], ir.BlockArgument) else None
        if src is None or src.name != "linalg.matmul":
            return None
    elif not any(_owner_of_use(u).name == "linalg.matmul" and u.operand_number == 0 for u in op.results[0].uses):
        return None
    return tuple(t.shape[:lead])


def _owner_of_use(use):
    o = use.owner
    return o.operation if hasattr(o, "operation") else o


def _producer(v):
    if isinstance(v, ir.BlockArgument):
        return None
    return _owner(v)


def _row_operand(amap, lead: int) -> bool:
    return len(amap.results) >= lead and all(is_dim(amap.results[i], i) for i in range(lead))


def _collapsible(op, shape: tuple) -> bool:
    """A generic whose first len(shape) loops are parallel, of those extents, every operand read
    with them first (a row operand) or not at all, and whose body does not read its indices."""
    if op.name != "linalg.generic":
        return False
    lead = len(shape)
    kinds = iterators(op)
    if len(kinds) <= lead or kinds[:lead] != ["parallel"] * lead:
        return False
    if any(o.name == "linalg.index" for o in _ops(op.regions[0].blocks[0])):
        return False
    n_in = len(op.opview.inputs)
    for i, (v, amap) in enumerate(zip(op.operands, maps(op))):
        t = ir.RankedTensorType(v.type)
        if not t.has_static_shape:
            return False
        if _row_operand(amap, lead):
            if tuple(t.shape[:lead]) != shape or any(_reads(amap, d) for d in range(lead) for e in [0]
                                                    if any(_reads(ir.AffineMap.get(amap.n_dims, 0, [r]), d)
                                                           for r in list(amap.results)[lead:])):
                return False
        elif i >= n_in or any(_reads(amap, d) for d in range(lead)):
            return False
    return True


def _component(seed, block):
    """(the generics to rewrite, in block order; the row values they read that come from outside)
    for the rows reshape `seed`, or None when a generic connected to them cannot be rewritten."""
    shape = _seed(seed)
    lead = len(shape)
    comp, todo = [], []
    if seed.name == "tensor.expand_shape":
        todo += [_owner_of_use(u) for u in seed.results[0].uses]
    else:
        p = _producer(seed.operands[0])
        if p is not None:
            todo.append(p)
    while todo:
        op = todo.pop()
        if op in comp:
            continue
        if op.name == "func.return":
            continue
        if op.name == "tensor.collapse_shape" and _seed(op) == shape:
            continue
        if not _collapsible(op, shape):
            return None
        comp.append(op)
        n_in = len(op.opview.inputs)
        for i, (v, amap) in enumerate(zip(op.operands, maps(op))):
            if not _row_operand(amap, lead):
                continue
            p = _producer(v)
            if p is None:
                continue
            if p.name == "tensor.expand_shape" and _seed(p) == shape:
                continue
            if i >= n_in and _init_of(v) is not None:
                continue
            if p.name == "linalg.generic":
                todo.append(p)
            else:
                return None
        for r in op.results:
            for u in r.uses:
                todo.append(_owner_of_use(u))
    if not comp:
        return None
    order = _ops(block)
    comp.sort(key=lambda o: next(i for i, b in enumerate(order) if b == o))
    return comp, shape


def _init_of(v):
    """(fill value or None) when `v` is a tensor.empty or a linalg.fill of one: an init to make
    again at the rows' shape; else None."""
    p = _producer(v)
    if p is None:
        return None
    if p.name == "tensor.empty":
        return ("empty",)
    if p.name == "linalg.fill" and _init_of(p.operands[1]) == ("empty",):
        return ("fill", p.operands[0])
    if p.name == "tensor.expand_shape" and _init_of(p.operands[0]) == ("empty",):
        return ("empty",)
    return None


def _flatten(comp, shape, block) -> None:
    ops, shape = comp
    lead = len(shape)
    rows = _prod(shape)
    new: list = []            # (old row value, its value on rows); ir.Value does not hash

    def known(v):
        return next((nv for k, nv in new if k == v), None)

    def on_rows(v, at_op):
        if known(v) is not None:
            return known(v)
        t = ir.RankedTensorType(v.type)
        flat_t = ir.RankedTensorType.get([rows] + list(t.shape[lead:]), t.element_type)
        groups = [list(range(lead))] + [[d] for d in range(lead, t.rank)]
        p = _producer(v)
        with ir.InsertionPoint(at_op), at_op.location:
            if p is not None and p.name == "tensor.expand_shape" and _seed(p) == shape:
                out = p.operands[0]
            elif _init_of(v) is not None:
                init = _init_of(v)
                out = tensor.EmptyOp(list(flat_t.shape), t.element_type).result
                if init[0] == "fill":
                    out = linalg.fill(init[1], outs=[out])
            else:
                out = tensor.CollapseShapeOp(flat_t, v, _reassoc(groups)).result
        new.append((v, out))
        return out

    for op in ops:
        amaps = maps(op)
        n_in = len(op.opview.inputs)
        loops = len(iterators(op))
        sub = [ir.AffineDimExpr.get(0)] * lead + [ir.AffineDimExpr.get(d - lead + 1) for d in range(lead, loops)]
        sub_map = ir.AffineMap.get(loops - lead + 1, 0, sub)
        operands, new_maps = [], []
        for v, amap in zip(op.operands, amaps):
            if _row_operand(amap, lead):
                operands.append(on_rows(v, op))
                res = [ir.AffineDimExpr.get(0)] + [e.compose(sub_map) for e in list(amap.results)[lead:]]
            else:
                operands.append(v)
                res = [e.compose(sub_map) for e in amap.results]
            new_maps.append(ir.AffineMap.get(loops - lead + 1, 0, res))
        kinds = ["parallel"] + iterators(op)[lead:]
        ins = list(zip(operands[:n_in], new_maps[:n_in]))
        outs = list(zip(operands[n_in:], new_maps[n_in:]))
        gen = rebuild(op, ins, outs, kinds)
        new.extend(zip(op.results, gen.results))
    # the readers outside: the matmul's collapse takes the value on rows, the return an expand
    dead = []
    for op in ops:
        for r in op.results:
            nv = known(r)
            for u in list(r.uses):
                user = _owner_of_use(u)
                if user.name == "tensor.collapse_shape" and _seed(user) == shape:
                    user.results[0].replace_all_uses_with(nv)
                    dead.append(user)
                elif user.name == "func.return":
                    t = ir.RankedTensorType(r.type)
                    groups = [list(range(lead))] + [[d] for d in range(lead, t.rank)]
                    with ir.InsertionPoint(user), user.location:
                        e = tensor.ExpandShapeOp(r.type, nv, _reassoc(groups), [], list(t.shape)).result
                    user.operands[u.operand_number] = e
    for op in dead + list(reversed(ops)):
        op.erase()
