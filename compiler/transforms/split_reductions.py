"""split-reductions (GPU): a reduction that would leave the device idle becomes two reductions.

Its reduced axis (K elements) is split into G chunks: partials P[..., G] from the combiner's
neutral element, then a second reduction of the G partials with the original init; the planner
makes them two kernels. `split_factor` (from the hardware profile) says which reductions and G.
See docs/ARCHITECTURE.md, "GPU kernels: how a plan becomes CUDA" (two-stage reductions).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..lowering.builder import collapse, elem_of, expand
from ..mlir import arith, ir, linalg, tensor
from ..plan.hardware import HardwareProfile
from .generic import is_dim, iterators, map_attr, maps, rebuild, split_groups, type_shape
from ..marks import NOTE
from .. import combiners

NAME = "split-reductions"
MIN_BLOCK_CHUNK = 1024                  # a contiguous chunk per block: 4 per thread at 256 threads
MIN_THREAD_CHUNK = 64                   # a strided chunk per thread


@dataclass(frozen=True)
class Split:
    chunks: int                         # G
    contiguous: bool                    # the reduced axis is every input's innermost dim


def split_factor(outputs: int, steps: int, contiguous: bool, hw: HardwareProfile) -> int:
    """G: how many partials a reduction of `steps` steps per output, over `outputs` outputs,
    gets on `hw` (1: not split). Enough to fill a wave, each chunk worth its block/thread."""
    if contiguous:
        want = 4 * hw.units // max(1, outputs)                 # blocks of one row each
        least = MIN_BLOCK_CHUNK
    else:
        want = 256 * hw.units // max(1, outputs)               # threads of one column each
        least = MIN_THREAD_CHUNK
    if want < 2:
        return 1
    best = 1
    for g in range(2, min(want, steps // least) + 1):
        if steps % g == 0:
            best = g
    return best


def split_reductions(module: ir.Module, hw: HardwareProfile | None) -> int:
    """Split the reductions of every func that would leave `hw` (a GPU) idle; returns how many."""
    if hw is None or hw.kind != "gpu":
        return 0
    count = 0
    with module.context, ir.Location.unknown():
        for f in module.body.operations:
            for op in [o.operation for o in f.regions[0].blocks[0].operations]:
                if op.name == "linalg.generic" and "reduction" in iterators(op):
                    count += _split(op, hw)
    return count


def _combiner(op) -> str | None:
    """The reduction's one combining body op (reads the accumulator), when it is a combiner of
    compiler/combiners.py that may be split (None otherwise: the reduction stays whole, by design)."""
    block = op.regions[0].blocks[0]
    n_in = len(op.opview.inputs)
    accs = list(block.arguments)[n_in:]
    if len(accs) != 1:
        return None
    users = [o for o in block.operations if any(v == accs[0] for v in o.operands)]
    if len(users) != 1 or users[0].name.split(".")[0] != "arith":
        return None
    name = users[0].name.split(".", 1)[1]
    found = combiners.of_op(name)
    return name if found is not None and found[1].splits else None


def _split(op, hw: HardwareProfile) -> int:
    kinds = iterators(op)
    red = [i for i, k in enumerate(kinds) if k == "reduction"]
    combiner = _combiner(op)
    if combiner is None or len(op.results) != 1:
        return 0
    amaps = maps(op)
    gen = op.opview
    n_in = len(gen.inputs)
    if len(red) > 1:
        op = _one_axis(op, red, amaps, n_in)
        if op is None:
            return 0
        kinds, amaps, gen = iterators(op), maps(op), op.opview
        red = [i for i, k in enumerate(kinds) if k == "reduction"]
    (r,) = red
    loops = _extents(op, amaps)
    steps = loops[r]
    outputs = math.prod(loops[i] for i in range(len(loops)) if i != r)
    inputs = list(zip(gen.inputs, amaps[:n_in]))
    along = [(v, m) for v, m in inputs if any(is_dim(e, r) for e in m.results)]
    if not along or any(_compound(m, r) for _, m in inputs):
        return 0
    contiguous = all(is_dim(m.results[_last(v)], r) for v, m in along)
    if not contiguous and _columns_fill(along, r, loops, outputs, hw):
        return 0
    g = split_factor(outputs, steps, contiguous, hw)
    if g < 2:
        return 0
    _rewrite(op, r, g, combiner, amaps, n_in, steps)
    return 1


COLUMN_BLOCK = 8     # columns per block of a column kernel at least (a 32-byte sector of f32 per row)


def _columns_fill(along, r: int, loops: list[int], outputs: int, hw: HardwareProfile) -> bool:
    """Whether a reduction over a non-contiguous axis can be a column kernel that fills the device
    (plan/tilechoice.py: column_search): every input it reduces has a kept loop of COLUMN_BLOCK
    columns or more on its contiguous dim, and its outputs (the other kept loops go to blocks one
    at a time) give blocks of COLUMN_BLOCK columns for every SM. The planner then prices that kernel
    (threads y along the reduced axis, columns on threads x, fused with its producers and
    consumers) against the others; a reduction too narrow for it is split as before."""
    inner = set()
    for v, m in along:
        e = m.results[_last(v)].maybe_downcast()
        if not isinstance(e, ir.AffineDimExpr) or e.position == r:
            return False
        inner.add(e.position)
    return len(inner) == 1 and loops[inner.pop()] >= COLUMN_BLOCK and outputs // COLUMN_BLOCK >= hw.units


def _last(v) -> int:
    """The innermost dim of `v` that is not a unit dim."""
    shape = type_shape(v)
    return max((d for d, n in enumerate(shape) if n != 1), default=len(shape) - 1)


def _compound(m, r: int) -> bool:
    return any(not is_dim(e, r) and f"d{r}" in str(e) for e in m.results)


def _extents(op, amaps) -> list[int]:
    out = [0] * len(iterators(op))
    for v, m in zip(op.operands, amaps):
        for e, n in zip(m.results, type_shape(v)):
            x = e.maybe_downcast()
            if isinstance(x, ir.AffineDimExpr):
                out[x.position] = n
    return out


def _one_axis(op, red: list[int], amaps, n_in: int):
    """A full reduction (every loop reduced) of inputs read with the identity map, as a reduction
    of their 1-D forms over one loop; None when it is not of that form."""
    kinds = iterators(op)
    if len(red) != len(kinds) or any(m != ir.AffineMap.get_identity(len(kinds)) for m in amaps[:n_in]):
        return None
    gen = op.opview
    n = math.prod(type_shape(gen.inputs[0]))
    with ir.InsertionPoint(op), op.location:
        flat = [collapse(v, (n,), [list(range(len(type_shape(v))))]) for v in gen.inputs]
    one = ir.AffineMap.get_identity(1)
    out_map = ir.AffineMap.get(1, 0, [])
    new = rebuild(op, [(v, one) for v in flat], [(gen.outputs[0], out_map)], ["reduction"])
    op.results[0].replace_all_uses_with(new.results[0])
    op.erase()
    return new


def _rewrite(op, r: int, g: int, combiner: str, amaps, n_in: int, steps: int) -> None:
    """Loop r (K steps) -> (r: G chunks, parallel; a new last loop: K/G steps, reduction)."""
    gen = op.opview
    kinds = iterators(op)
    n = len(kinds)
    k_expr = ir.AffineDimExpr.get(n)
    ins = []
    with ir.InsertionPoint(op), op.location:
        for v, m in zip(gen.inputs, amaps[:n_in]):
            dims = [d for d, e in enumerate(m.results) if is_dim(e, r)]
            if not dims:
                ins.append((v, ir.AffineMap.get(n + 1, 0, list(m.results))))
                continue
            (d,) = dims
            shape = type_shape(v)
            v = expand(v, tuple(shape[:d] + [g, shape[d] // g] + shape[d + 1:]), split_groups(len(shape), d))
            exprs = list(m.results[:d + 1]) + [k_expr] + list(m.results[d + 1:])
            ins.append((v, ir.AffineMap.get(n + 1, 0, exprs)))
        init = gen.outputs[0]
        out_map = amaps[n_in]
        elem = elem_of(init)
        kept = [e.maybe_downcast().position for e in out_map.results]
        extents = {**dict(zip(kept, type_shape(init))), r: g}
        p_dims = sorted(kept + [r])                     # the partials in loop order: stores follow threads
        form = combiners.form_of(combiner, "graph")
        width = None if isinstance(elem, ir.FloatType) else ir.IntegerType(elem).width
        neutral = arith.constant(elem, form.start(width))
        partial_init = linalg.fill(neutral, outs=[tensor.EmptyOp([extents[i] for i in p_dims], elem).result])
    partial_map = ir.AffineMap.get(n + 1, 0, [ir.AffineDimExpr.get(i) for i in p_dims])
    partial = rebuild(op, ins, [(partial_init, partial_map)], kinds[:r] + ["parallel"] + kinds[r + 1:] + ["reduction"])
    partial.attributes[NOTE] = ir.StringAttr.get(f"{NAME}: {steps} steps per output as {g} partials of "
                                                 f"{steps // g}, then their combine")
    k = len(kept)
    with ir.InsertionPoint(op), op.location:
        read = ir.AffineMap.get(k + 1, 0, [ir.AffineDimExpr.get(k if i == r else kept.index(i)) for i in p_dims])
        maps_c = [read, ir.AffineMap.get(k + 1, 0, [ir.AffineDimExpr.get(i) for i in range(k)])]
        final = linalg.GenericOp([init.type], [partial.results[0]], [init], map_attr(maps_c),
                                 ir.ArrayAttr.get([ir.Attribute.parse(f"#linalg.iterator_type<{x}>")
                                                   for x in ["parallel"] * k + ["reduction"]])).operation
        block = final.regions[0].blocks.append(elem, elem)
        with ir.InsertionPoint(block):
            linalg.YieldOp([form.build(block.arguments[0], block.arguments[1])])
    op.results[0].replace_all_uses_with(final.results[0])
    op.erase()
