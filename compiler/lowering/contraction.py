"""matmul and conv2d: linalg named ops wherever one fits.

matmul becomes linalg.matmul or linalg.batch_matmul (batch dims folded or collapsed) where the
operands' batch shapes allow, else one contraction generic whose maps broadcast the batch dims
(nothing materialised); conv2d becomes tensor.pad and linalg.conv_2d_nchw_fchw into a
zero-filled accumulator, the bias an elementwise generic; with groups, linalg.conv_2d_ngchw_gfchw
on the input and weights expanded to [N, G, C/G, H, W] and [G, F/G, C/G, KH, KW] (views), its
[N, G, F/G, HO, WO] result collapsed back to NCHW (each group's work alone, no zeros); a 16-bit
conv whose channels make 16-byte runs channels-last inside (`_conv_channels_last`) or NCHW, as
the context's `conv_layout` says (the pipeline prices both: pipeline.py `_conv_layout`).
Accumulators are in the compute type
and one elementwise generic rounds back. See docs/ARCHITECTURE.md, "Stages and what each hands on" (linalg).
"""
from __future__ import annotations

from fusec.dsl.typed import Node

from ..mlir import ir, linalg, tensor
from . import scalar as S
from .builder import (compute_type, dims_map, elem_of, empty, fill, generic, narrow, parallel, reshape, scalar,
                      shape_of, tensor_type, widen)
from .registry import LoweringContext, rule
from ..marks import NOTE


def _prod(xs) -> int:
    if len(xs) == 1:
        return xs[0]          # (a run-time extent stays itself)
    n = 1
    for x in xs:
        n *= x
    return n


def _padded_batch(shape, nbatch: int) -> tuple[int, ...]:
    batch = tuple(shape[:-2])
    return (1,) * (nbatch - len(batch)) + batch


@rule("matmul")
def lower_matmul(ctx: LoweringContext, node: Node):
    a, b = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1])
    sa, sb, out = shape_of(a), shape_of(b), ctx.shape(node)
    elem = ctx.elem(node)
    acc = compute_type(elem)
    batch, (m, n), k = out[:-2], out[-2:], sa[-1]
    ba, bb = _padded_batch(sa, len(batch)), _padded_batch(sb, len(batch))
    if not batch:
        c = linalg.matmul(a, b, outs=[fill(0, (m, n), acc)])
    elif all(d == 1 for d in bb):
        rows = _prod(batch) * m
        c = linalg.matmul(reshape(a, (rows, k)), reshape(b, (k, n)), outs=[fill(0, (rows, n), acc)])
    elif ba == batch and bb == batch:
        nb = _prod(batch)
        c = linalg.batch_matmul(reshape(a, (nb, m, k)), reshape(b, (nb, k, n)), outs=[fill(0, (nb, m, n), acc)])
    else:
        c = _broadcast_contraction(a, b, out, acc)
    return reshape(_round(c, elem), out)


def _round(c: ir.Value, elem: ir.Type) -> ir.Value:
    """An accumulator rounded back to the op's element type (nothing when they agree)."""
    if elem_of(c) == elem:
        return c
    return parallel([c], shape_of(c), elem, lambda xs: narrow(xs[0], elem))


def _operand_map(shape, batch, rank: int, tail: tuple[int, int]) -> ir.AffineMap:
    """Batch dims broadcast like elementwise operands; the last two dims index `tail`."""
    offset = len(batch) - (len(shape) - 2)
    exprs = []
    for i, d in enumerate(shape[:-2]):
        j = offset + i
        exprs.append(ir.AffineConstantExpr.get(0) if d == 1 and batch[j] != 1 else ir.AffineDimExpr.get(j))
    exprs += [ir.AffineDimExpr.get(t) for t in tail]
    return ir.AffineMap.get(rank, 0, exprs)


def _broadcast_contraction(a: ir.Value, b: ir.Value, out, acc_elem: ir.Type) -> ir.Value:
    """Iteration space (batch..., m, n, k): C[batch, m, n] += A[batch', m, k] * B[batch'', k, n]."""
    nb = len(out) - 2
    rank = nb + 3
    mi, ni, ki = nb, nb + 1, nb + 2
    batch = out[:-2]
    maps = [_operand_map(shape_of(a), batch, rank, (mi, ki)), _operand_map(shape_of(b), batch, rank, (ki, ni))]
    acc = fill(0, out, acc_elem)
    (c,) = generic([(a, maps[0]), (b, maps[1])], [(acc, dims_map(rank, list(range(nb + 2))))],
                   ["parallel"] * (nb + 2) + ["reduction"],
                   lambda xs, accs: [S.add(accs[0], S.mul(widen(xs[0]), widen(xs[1])))])
    return c


def _pad(x: ir.Value, ph: int, pw: int) -> ir.Value:
    """x [..., H, W] zero-padded by ph rows and pw columns on each side."""
    *lead, h, w = shape_of(x)
    elem = elem_of(x)
    lo = hi = [0] * len(lead) + [ph, pw]
    op = tensor.PadOp(tensor_type((*lead, h + 2 * ph, w + 2 * pw), elem), x, [], [], lo, hi)
    block = op.region.blocks.append(*[ir.IndexType.get()] * (len(lead) + 2))
    with ir.InsertionPoint(block):
        tensor.YieldOp(scalar(0, elem))
    return op.result


def _channels_last(x, w, elem) -> bool:
    """A 16-bit conv whose channels make whole 16-byte runs (8 halves) may run channels-last: its
    window gather then reads 8 consecutive channels at a time (a 16-byte cp.async) where NCHW
    reads 2-byte elements along a shifted row."""
    static = all(isinstance(d, int) for d in (*shape_of(x), *shape_of(w)))
    return str(elem) in ("f16", "bf16") and static and shape_of(x)[1] % 8 == 0


def _layout_copy(v: ir.Value, perm: tuple[int, ...], why: str) -> ir.Value:
    """v's dims permuted (result dim i is v's dim perm[i]): a linalg.transpose (a named op, so
    elementwise fusion leaves it a tensor of its own) noted as a layout change."""
    shape = shape_of(v)
    op = linalg.transpose(v, outs=[empty(tuple(shape[d] for d in perm), elem_of(v))], permutation=list(perm))
    op.operation.attributes[NOTE] = ir.StringAttr.get(f"channels-last: {why}")
    return op.results[0]


def _conv_channels_last(x, w, out, elem, stride, pad, dil) -> ir.Value:
    """y[n, f, oh, ow] = sum over (kh, kw, c) of xl[n, oh sh + kh dh, ow sw + kw dw, c] wl[f, kh,
    kw, c]: the input zero-padded and copied channels-last (xl [N, H + 2 ph, W + 2 pw, C]), the
    weights copied to [F, KH, KW, C], so K = (kh, kw, c) has the channels innermost in both
    operands; the output stays NCHW (the contraction's own loops, no copy after it)."""
    ph, pw = pad
    if ph or pw:
        x = _pad(x, ph, pw)
    xl = _layout_copy(x, (0, 2, 3, 1), "the input channels-last for the conv's 16-byte window gather")
    wl = _layout_copy(w, (0, 2, 3, 1), "the weights in the conv's (kh, kw, c) order")
    d = [ir.AffineDimExpr.get(i) for i in range(7)]     # n, f, oh, ow, kh, kw, c
    (sh, sw), (dh, dw) = stride, dil
    xmap = ir.AffineMap.get(7, 0, [d[0], d[2] * sh + d[4] * dh, d[3] * sw + d[5] * dw, d[6]])
    wmap = ir.AffineMap.get(7, 0, [d[1], d[4], d[5], d[6]])
    acc = fill(0, out, compute_type(elem))
    (y,) = generic([(xl, xmap), (wl, wmap)], [(acc, dims_map(7, [0, 1, 2, 3]))],
                   ["parallel"] * 4 + ["reduction"] * 3,
                   lambda xs, accs: [S.add(accs[0], S.mul(widen(xs[0]), widen(xs[1])))])
    return y


@rule("conv2d")
def lower_conv2d(ctx: LoweringContext, node: Node):
    x, w = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1])
    (sh, sw), (ph, pw), (dh, dw) = node.attr("stride"), node.attr("padding"), node.attr("dilation")
    out, elem = ctx.shape(node), ctx.elem(node)
    g = node.attr("groups", 1)
    if g == 1 and ctx.conv_layout == "channels-last" and _channels_last(x, w, elem):
        y = _conv_channels_last(x, w, out, elem, (sh, sw), (ph, pw), (dh, dw))
    elif g == 1:
        if ph or pw:
            x = _pad(x, ph, pw)
        y = linalg.conv_2d_nchw_fchw(x, w, outs=[fill(0, out, compute_type(elem))], strides=[sh, sw],
                                     dilations=[dh, dw])
    else:
        # the input expanded before it is padded: the pad's result is the conv's operand itself,
        # so the pad fuses into the conv's kernel (a view of a pad's result would stop it)
        n, c, h, wd = shape_of(x)
        f, cg, kh, kw = shape_of(w)
        xg = reshape(x, (n, g, cg, h, wd))
        if ph or pw:
            xg = _pad(xg, ph, pw)
        wg = reshape(w, (g, f // g, cg, kh, kw))
        yg = linalg.conv_2d_ngchw_gfchw(xg, wg, outs=[fill(0, (out[0], g, f // g, *out[2:]), compute_type(elem))],
                                        strides=[sh, sw], dilations=[dh, dw])
        y = reshape(yg, out)
    if len(node.inputs) < 3:
        return _round(y, elem)
    bias = ctx.tensor(node.inputs[2])
    return parallel([y, (bias, dims_map(4, [1]))], out, elem, lambda xs: narrow(S.add(xs[0], widen(xs[1])), elem))
