"""max_pool2d, avg_pool2d and adaptive_avg_pool2d: one windowed reduction generic each.

The input is padded by tensor.pad (-inf for max, 0 for the sums; the high side also by ceil
mode's overhang), then one linalg.generic over (n, c, oh, ow, kh, kw), kh and kw reduced, reads
the padded input at (n, c, oh * sh + kh * dh, ow * sw + kw * dw): each thread of a GPU kernel owns
an output element and loops over its window, consecutive threads on consecutive output columns.
Max combines with arith.maximumf (IEEE: NaN wins, +0 over -0), as FDSL's `max` reduction; the
averages divide the window sum by torch's divisor, a constant where every window has the same,
else computed from the output position (linalg.index) in the epilogue. adaptive_avg_pool2d is a
mean over H and W for a 1x1 output, an avg_pool2d where the sizes divide, and otherwise a sum of
the whole plane per output element, masked to its window [floor(i*H/oh), ceil((i+1)*H/oh)). See docs/FDSL.md (pooling).
"""
from __future__ import annotations

from fusec.dsl.ops.pooling import avg_divisor, pool_extra
from fusec.dsl.typed import Node

from ..mlir import arith, ir, linalg, tensor
from .. import combiners
from . import scalar as S
from .builder import (compute_type, dims_map, elem_of, empty, fill, generic, identity_map, narrow, parallel, reduction, scalar,
                      shape_of, tensor_type, widen)
from .reduction import keepdims
from .registry import LoweringContext, rule

_SUM = combiners.of_reduction("sum", "linalg")


def _pad(x: ir.Value, low: tuple[int, int], high: tuple[int, int], value: float) -> ir.Value:
    if not any(low) and not any(high):
        return x
    n, ch, h, w = shape_of(x)
    elem = elem_of(x)
    op = tensor.PadOp(tensor_type((n, ch, h + low[0] + high[0], w + low[1] + high[1]), elem), x, [], [],
                      [0, 0, *low], [0, 0, *high])
    block = op.region.blocks.append(*[ir.IndexType.get()] * 4)
    with ir.InsertionPoint(block):
        tensor.YieldOp(scalar(value, elem))
    return op.result


def _window_map(stride, dilation) -> ir.AffineMap:
    """(n, c, oh, ow, kh, kw) -> (n, c, oh * sh + kh * dh, ow * sw + kw * dw)."""
    d = [ir.AffineDimExpr.get(i) for i in range(6)]
    exprs = [d[0], d[1]]
    for a in (0, 1):
        start = ir.AffineMulExpr.get(d[2 + a], ir.AffineConstantExpr.get(stride[a]))
        exprs.append(ir.AffineAddExpr.get(start, ir.AffineMulExpr.get(d[4 + a], ir.AffineConstantExpr.get(dilation[a]))))
    return ir.AffineMap.get(6, 0, exprs)


def _window_reduce(x: ir.Value, out: tuple, kernel, stride, dilation, init, acc, combine) -> ir.Value:
    """The windows of x combined into an accumulator of `out`'s shape filled with `init`."""
    accum = fill(init, out, acc)
    # the window operand (never read, as the named pooling ops' own) gives the loops kh and kw their extents
    window = empty(kernel, acc)
    (y,) = generic([(x, _window_map(stride, dilation)), (window, dims_map(6, (4, 5)))],
                   [(accum, dims_map(6, range(4)))],
                   ["parallel"] * 4 + ["reduction"] * 2, lambda xs, accs: [combine(xs[0], accs[0])])
    return y


def _round(y: ir.Value, elem: ir.Type) -> ir.Value:
    if elem_of(y) == elem:
        return y
    return parallel([y], shape_of(y), elem, lambda xs: narrow(xs[0], elem))


@rule("max_pool2d")
def lower_max_pool2d(ctx: LoweringContext, node: Node):
    x = ctx.tensor(node.inputs[0])
    (kh, kw), stride, (ph, pw), dilation = (node.attr("kernel"), node.attr("stride"), node.attr("padding"),
                                            node.attr("dilation"))
    out, elem = ctx.shape(node), ctx.elem(node)
    _, _, h, w = shape_of(x)
    eh = pool_extra(h, kh, stride[0], ph, dilation[0], out[2])
    ew = pool_extra(w, kw, stride[1], pw, dilation[1], out[3])
    xp = _pad(x, (ph, pw), (ph + eh, pw + ew), float("-inf"))
    acc = compute_type(elem)
    c = combiners.of_reduction("max", "linalg")
    y = _window_reduce(xp, out, (kh, kw), stride, dilation, c.init(acc), acc, lambda v, a: c.combine(widen(v), a))
    return _round(y, elem)


def _divide(y: ir.Value, elem: ir.Type, dh, dw) -> ir.Value:
    """y / (dh[oh] * dw[ow]): a constant where every window has the same divisor, else built from
    the position: each axis's divisor an int, or its rule for `_axis_count` (("window", stride,
    size, pad, kernel, include_pad) or ("adaptive", size, out))."""
    if isinstance(dh, int) and isinstance(dw, int):
        return parallel([y], shape_of(y), elem, lambda xs: narrow(S.div(xs[0], scalar(dh * dw, xs[0].type)), elem))

    def body(xs):
        v = xs[0]
        n = arith.muli(_axis_count(2, dh), _axis_count(3, dw))
        f = arith.sitofp(v.type, arith.index_cast(ir.IntegerType.get_signless(64), n))
        return narrow(S.div(v, f), elem)
    return parallel([y], shape_of(y), elem, body)


def _axis_count(dim: int, rule_or_n) -> ir.Value:
    """The divisor along one axis at the position linalg.index(dim), as an index."""
    index = ir.IndexType.get()
    if isinstance(rule_or_n, int):
        return arith.constant(index, rule_or_n)
    kind = rule_or_n[0]
    i = linalg.IndexOp(dim).result
    c = lambda n: arith.constant(index, n)  # noqa: E731
    if kind == "window":
        _, s, size, p, k, include = rule_or_n
        start = arith.subi(arith.muli(i, c(s)), c(p))
        end = arith.minsi(arith.addi(start, c(k)), c(size + p))
        if include:
            return arith.subi(end, start)
        return arith.subi(arith.minsi(end, c(size)), arith.maxsi(start, c(0)))
    _, size, out = rule_or_n                       # adaptive: ceil((i+1)*size/out) - floor(i*size/out)
    lo = arith.floordivsi(arith.muli(i, c(size)), c(out))
    hi = arith.ceildivsi(arith.muli(arith.addi(i, c(1)), c(size)), c(out))
    return arith.subi(hi, lo)


@rule("avg_pool2d")
def lower_avg_pool2d(ctx: LoweringContext, node: Node):
    x = ctx.tensor(node.inputs[0])
    (kh, kw), stride, (ph, pw) = node.attr("kernel"), node.attr("stride"), node.attr("padding")
    include = node.attr("count_include_pad")
    out, elem = ctx.shape(node), ctx.elem(node)
    _, _, h, w = shape_of(x)
    eh = pool_extra(h, kh, stride[0], ph, 1, out[2])
    ew = pool_extra(w, kw, stride[1], pw, 1, out[3])
    xp = _pad(x, (ph, pw), (ph + eh, pw + ew), 0.0)
    acc = compute_type(elem)
    y = _window_reduce(xp, out, (kh, kw), stride, (1, 1), _SUM.init(acc), acc, lambda v, a: arith.addf(a, widen(v)))
    counts = []
    for a, (size, k, s, p) in enumerate(((h, kh, stride[0], ph), (w, kw, stride[1], pw))):
        per = avg_divisor(size, k, s, p, out[2 + a], include)
        counts.append(int(per[0]) if (per == per[0]).all() else ("window", s, size, p, k, include))
    return _divide(y, elem, *counts)


@rule("adaptive_avg_pool2d")
def lower_adaptive_avg_pool2d(ctx: LoweringContext, node: Node):
    x = ctx.tensor(node.inputs[0])
    out, elem = ctx.shape(node), ctx.elem(node)
    n, ch, h, w = shape_of(x)
    acc = compute_type(elem)
    if out[2:] == (1, 1):                       # global: mean(x, axis=[2, 3], keepdims=true)
        c = combiners.of_reduction("mean", "linalg")
        y = reduction([(x, identity_map(4))], (n, ch, h, w), (2, 3), c.init(acc), acc,
                      lambda xs, a: c.combine(widen(xs[0]), a))
        y = parallel([y], shape_of(y), elem, lambda xs: narrow(S.div(xs[0], scalar(h * w, xs[0].type)), elem))
        return keepdims(y, out)
    (oh, ow) = out[2], out[3]
    if h % oh == 0 and w % ow == 0:             # equal windows: avg_pool2d(kernel=stride=size / out)
        k = (h // oh, w // ow)
        y = _window_reduce(x, out, k, k, (1, 1), _SUM.init(acc), acc, lambda v, a: arith.addf(a, widen(v)))
        return _divide(y, elem, k[0], k[1])
    # unequal windows: every output element sums the whole plane, masked to its window (tiling
    # cannot split the loops of a read at (i * H) floordiv oh + kh, so the read is the plane's own)
    index = ir.IndexType.get()

    def masked(xs, a):
        inside = None
        for axis, (size, o) in enumerate(((h, oh), (w, ow))):
            i, at = linalg.IndexOp(2 + axis).result, linalg.IndexOp(4 + axis).result
            lo = arith.floordivsi(arith.muli(i, arith.constant(index, size)), arith.constant(index, o))
            hi = arith.ceildivsi(arith.muli(arith.addi(i, arith.constant(index, 1)), arith.constant(index, size)),
                                 arith.constant(index, o))
            ok = arith.andi(arith.cmpi(arith.CmpIPredicate.sge, at, lo), arith.cmpi(arith.CmpIPredicate.slt, at, hi))
            inside = ok if inside is None else arith.andi(inside, ok)
        v = widen(xs[0])
        return arith.addf(a, arith.select(inside, v, scalar(0.0, v.type)))
    y = reduction([(x, dims_map(6, (0, 1, 4, 5)))], (n, ch, oh, ow, h, w), (4, 5), _SUM.init(acc), acc, masked)
    return _divide(y, elem, ("adaptive", h, oh), ("adaptive", w, ow))
