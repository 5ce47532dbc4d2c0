"""The block-wide combine of a row kernel: a `linalg.generic` marked `fusec.block_reduce` combines,
per row of the block, the T per-thread partials P[row, t] into O[row] with its combiner's scalar
rules (O's initial contents ignored). Warp shuffles on a GPU when T is a multiple of 32, else
and under the simulator a tree in P (`_CUDASIM`); both end with a barrier. See
docs/ARCHITECTURE.md, "GPU kernels", Row kernels.
"""
from __future__ import annotations

from . import ids
from .values import EmitError
from .views import from_bits, is_bf16_bits, stored
from ..marks import BLOCK_REDUCE, BLOCK_REDUCE_ON_Y
from ..plan.hardware import WARP


def block_reduce(body, op) -> None:
    body.need(op, "kernel")
    inner = [o.operation for o in op.regions[0].blocks[0].operations]
    if len(inner) != 2 or inner[0].name.split(".")[0] != "arith":
        raise EmitError("a fusec.block_reduce body must be one arith op and its yield", op)
    combine_op = inner[0]
    P, O = body.view(op.operands[0]), body.view(op.operands[1])
    shape = [int(d) for d in P.shape] if all(str(d).isdigit() for d in P.shape) else None
    if shape is None or tuple(O.shape) != tuple(P.shape[:-1]):
        raise EmitError("a fusec.block_reduce needs static partials [rows..., T] and a result [rows...]", op)
    T, rows = shape[-1], shape[:-1]
    big = [i for i, d in enumerate(rows) if d != 1]
    if len(big) > 1:
        raise EmitError("a fusec.block_reduce combines one row dim per block (threads y)", op)
    dims = body.ctx.block_dims or None
    R = rows[big[0]] if big else 1
    if BLOCK_REDUCE_ON_Y in op.attributes:
        _on_y(body, op, P, O, T, R, rows, big, dims, combine_op)
        return
    if dims is not None and (str(dims[0]) != str(T) or (R > 1 and str(dims[1]) != str(R))):
        raise EmitError(f"a fusec.block_reduce over {T} partials x {R} rows in a block of {dims}", op)
    x, y = ids.thread_id("x"), (ids.thread_id("y") if R > 1 else "0")
    elem = P.array.elem

    def at(view, t=None):
        idx = [y if i in big else "0" for i in range(len(rows))]
        return view.at(idx + ([t] if t is not None else []))

    comb = _combiner(body, op, combine_op)
    w = body.w
    names = body.names
    body.ctx.helpers.cudasim = True
    w(f"# {BLOCK_REDUCE} {combine_op.name}: {T} partials per row x {R} rows, threads x along the partials")
    slots = names.temp("slots")
    warps = max(1, T // WARP)
    w(f"{slots} = cuda.shared.array(({R}, {warps}), numba.{elem.compute})")
    w(f"if _CUDASIM or {T % WARP}:")
    with w.indent():
        _tree(w, at, comb, P, O, x, T)
    w("else:")
    with w.indent():
        v, other = names.temp("v"), names.temp("other")
        w(f"{v} = {from_bits(P.array, at(P, x))}")
        for off in (16, 8, 4, 2, 1):           # a butterfly: every lane ends with the warp's total
            w(f"{other} = cuda.shfl_xor_sync(0xFFFFFFFF, {v}, {off})")
            w(f"{v} = {comb(v, other)}")
        w(f"if {x} % {WARP} == 0:")
        with w.indent():
            w(f"{slots}[{y}, {x} // {WARP}] = {v}")
        w("cuda.syncthreads()")
        w(f"if {x} == 0:")
        with w.indent():
            acc = names.temp("acc")
            w(f"{acc} = {slots}[{y}, 0]")
            if warps > 1:
                k = names.temp("k")
                w(f"for {k} in range(1, {warps}):")
                with w.indent():
                    w(f"{acc} = {comb(acc, f'{slots}[{y}, {k}]')}")
            w(f"{at(O)} = {stored(O.array, acc)}")
    w("cuda.syncthreads()")


def _on_y(body, op, P, O, T: int, R: int, rows, big, dims, combine_op) -> None:
    """A column kernel's combine (plan/templates.py: RowConfig.columns): the partials P[row, t]
    of the block's R rows (its columns) on thread x and their T threads on thread y, combined
    by a tree over y in P (a warp holds consecutive columns, so no shuffle combines them), then
    O[row] = P[row, 0]; a barrier after each step."""
    if dims is not None and (str(dims[1]) != str(T) or (R > 1 and str(dims[0]) != str(R))):
        raise EmitError(f"a fusec.block_reduce on y over {T} partials x {R} rows in a block of {dims}", op)
    x, y = (ids.thread_id("x") if R > 1 else "0"), ids.thread_id("y")

    def at(view, t=None):
        idx = [x if i in big else "0" for i in range(len(rows))]
        return view.at(idx + ([t] if t is not None else []))

    comb = _combiner(body, op, combine_op)
    w = body.w
    w(f"# {BLOCK_REDUCE} {combine_op.name}: {T} partials per row x {R} rows, threads y along the partials, "
      "x along the rows")
    _tree(w, at, comb, P, O, y, T)
    w("cuda.syncthreads()")


def _combiner(body, op, combine_op):
    """comb(a, b): the text of combine_op's scalar rule applied to a and b."""
    def comb(a: str, b: str) -> str:
        e = body.ctx.rules.expr(combine_op, [a, b])
        if e is None:
            raise EmitError(f"the emitter has no rule for the combiner {combine_op.name}", op)
        return e
    return comb


def _tree(w, at, comb, P, O, t: str, T: int) -> None:
    """The T partials P[row, t] combined by halves in place over thread index `t` (a barrier after
    each step), then O[row] = P[row, 0] by thread 0."""
    n = T
    while n > 1:
        h = (n + 1) // 2
        w(f"if {t} < {n - h}:")
        with w.indent():
            w(f"{at(P, t)} = {stored(P.array, comb(from_bits(P.array, at(P, t)), from_bits(P.array, at(P, f'{t} + {h}'))))}")
        w("cuda.syncthreads()")
        n = h
    w(f"if {t} == 0:")
    with w.indent():
        w(f"{at(O)} = {stored(O.array, from_bits(P.array, at(P, '0')))}" if is_bf16_bits(O.array) != is_bf16_bits(P.array)
          else f"{at(O)} = {at(P, '0')}")
