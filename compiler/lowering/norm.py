"""Normalisations decomposed into linalg reductions and elementwise generics, each following its
textbook formula (the op table's NumPy reference) so later passes see every producer/consumer.
batchnorm is one elementwise generic tagged `fusec.batchnorm = eps` for the fold-batchnorm
pass. Intermediates live in the compute type (f32 for 16-bit floats); the result rounds once.
The decompositions: docs/ARCHITECTURE.md, "Stages and what each hands on" (linalg).
"""
from __future__ import annotations

from fusec.dsl.typed import Node

from ..mlir import ir, math
from . import scalar as S
from .builder import (compute_type, count, count_value, dims_map, elem_of, empty, generic, identity_map, kept_map,
                      narrow, parallel, reduction, shape_of, widen)
from .registry import LoweringContext, rule
from ..combiners import ADD, MAX
from ..marks import BATCHNORM



def _sum(xs, acc):
    return ADD.combine(widen(xs[0]), acc)


@rule("softmax", "log_softmax")
def lower_softmax(ctx: LoweringContext, node: Node):
    x = ctx.tensor(node.inputs[0])
    space, elem = shape_of(x), ctx.elem(node)
    wide = compute_type(elem)
    rank, axes = len(space), (node.attr("axis"),)
    ident, red = identity_map(rank), kept_map(rank, axes)
    m = reduction([(x, ident)], space, axes, MAX.init(wide), wide,
                  lambda xs, acc: MAX.combine(widen(xs[0]), acc))
    if node.op == "log_softmax":
        s = reduction([(x, ident), (m, red)], space, axes, ADD.init(wide), wide,
                      lambda xs, acc: ADD.combine(math.exp(S.sub(widen(xs[0]), xs[1])), acc))
        return parallel([(x, ident), (m, red), (s, red)], space, elem,
                        lambda xs: narrow(S.sub(S.sub(widen(xs[0]), xs[1]), math.log(xs[2])), elem))
    e = parallel([(x, ident), (m, red)], space, wide, lambda xs: math.exp(S.sub(widen(xs[0]), xs[1])))
    s = reduction([(e, ident)], space, axes, ADD.init(wide), wide, _sum)
    # e * (1 / s): one division a row, hoisted out of the loop over it, not one an element
    return parallel([(e, ident), (s, red)], space, elem, lambda xs: narrow(S.mul(xs[0], S.recip(xs[1])), elem))


@rule("layernorm")
def lower_layernorm(ctx: LoweringContext, node: Node):
    x = ctx.tensor(node.inputs[0])
    gamma, beta = ctx.operand(node.inputs[1]), ctx.operand(node.inputs[2])
    space, elem = shape_of(x), ctx.elem(node)
    wide = compute_type(elem)
    axes, eps = tuple(node.attr("axis")), node.attr("eps")
    rank, n = len(space), count(space, axes)
    ident, red = identity_map(rank), kept_map(rank, axes)

    def centred(xv, sv):
        return S.sub(widen(xv), S.div(sv, count_value(n, sv)))

    def squares(xs, acc):
        d = centred(xs[0], xs[1])
        return ADD.combine(S.mul(d, d), acc)

    def epilogue(xs):
        xv, sv, vv, g, b = xs
        var = S.div(vv, count_value(n, vv))
        y = S.mul(centred(xv, sv), S.recip(math.sqrt(S.add(var, S.c(eps, vv)))))   # 1/std once a row
        return narrow(S.add(S.mul(y, widen(g)), widen(b)), elem)

    s = reduction([(x, ident)], space, axes, ADD.init(wide), wide, _sum)
    v = reduction([(x, ident), (s, red)], space, axes, ADD.init(wide), wide, squares)
    return parallel([(x, ident), (s, red), (v, red), gamma, beta], space, elem, epilogue)


@rule("rmsnorm")
def lower_rmsnorm(ctx: LoweringContext, node: Node):
    x = ctx.tensor(node.inputs[0])
    gamma = ctx.operand(node.inputs[1])
    space, elem = shape_of(x), ctx.elem(node)
    wide = compute_type(elem)
    axes, eps = tuple(node.attr("axis")), node.attr("eps")
    rank, n = len(space), count(space, axes)
    ident, red = identity_map(rank), kept_map(rank, axes)

    def squares(xs, acc):
        xv = widen(xs[0])
        return ADD.combine(S.mul(xv, xv), acc)

    def epilogue(xs):
        xv, sv, g = xs
        ms = S.div(sv, count_value(n, sv))
        return narrow(S.mul(S.mul(widen(xv), S.recip(math.sqrt(S.add(ms, S.c(eps, sv))))), widen(g)), elem)

    ss = reduction([(x, ident)], space, axes, ADD.init(wide), wide, squares)
    return parallel([(x, ident), (ss, red), gamma], space, elem, epilogue)


@rule("batchnorm")
def lower_batchnorm(ctx: LoweringContext, node: Node):
    x, mean, var, gamma, beta = (ctx.tensor(i) for i in node.inputs)
    eps, elem = node.attr("eps"), ctx.elem(node)
    space = shape_of(x)
    chan = dims_map(len(space), [1])

    def textbook(xs):
        xv, m, v, g, b = (widen(e) for e in xs)
        return narrow(S.add(S.mul(S.div(S.sub(xv, m), math.sqrt(S.add(v, S.c(eps, v)))), g), b), elem)

    y = parallel([(x, identity_map(len(space))), (mean, chan), (var, chan), (gamma, chan), (beta, chan)],
                 space, elem, textbook)
    y.owner.attributes[BATCHNORM] = ir.FloatAttr.get(ir.F64Type.get(), eps)
    return y


def batchnorm_scale_shift(x: ir.Value, mean: ir.Value, var: ir.Value, gamma: ir.Value, beta: ir.Value,
                          eps: float) -> ir.Value:
    """Inference batchnorm as y = x * scale + shift, with scale = gamma * rsqrt(var + eps) and
    shift = beta - mean * scale computed once per channel (one two-result generic on [C], in the
    compute type). The per-element work is one multiply-add: the form that fuses into a conv
    epilogue. The [C] generic has two uses, so elementwise fusion does not recompute it per element."""
    space, elem = shape_of(x), elem_of(x)
    wide = compute_type(elem)
    (c,) = shape_of(mean)
    ident1 = identity_map(1)

    def per_channel(xs, _acc):
        m, v, g, b = (widen(e) for e in xs)
        scale = S.mul(g, math.rsqrt(S.add(v, S.c(eps, v))))
        return [scale, S.sub(b, S.mul(m, scale))]

    scale, shift = generic([(mean, ident1), (var, ident1), (gamma, ident1), (beta, ident1)],
                           [(empty((c,), wide), ident1), (empty((c,), wide), ident1)], ["parallel"], per_channel)
    chan = dims_map(len(space), [1])
    return parallel([(x, identity_map(len(space))), (scale, chan), (shift, chan)], space, elem,
                    lambda xs: narrow(S.add(S.mul(widen(xs[0]), xs[1]), xs[2]), elem))
