"""What a typed chain needs of a binding of its symbols beyond positive sizes.

The checker refuses every slice that cannot fit its input; a slice whose bound or extent is a
symbol (x[:4] of f32[N], x[-4:], x[:M] of f32[N]) fits for some sizes only, so each binding is
checked here before anything is compiled, allocated or run: a misfit is a user error at the
slice (the subscript, or the split that made it).
"""
from __future__ import annotations

from .diagnostics import Diagnostic, FdslError
from .ops import bind_slice_errors, position
from .typed import TypedChain


def binding_errors(chain: TypedChain, binding: dict[str, int]) -> list[Diagnostic]:
    """Every slice of `chain` that does not fit its input under `binding` (symbol -> size), one
    error per axis that does not fit."""
    out = []
    for n in chain.nodes:
        if n.op != "slice":
            continue
        src_node = chain.nodes[n.inputs[0]]
        src = src_node.type
        starts, steps, drop = n.attr("start"), n.attr("step"), n.attr("drop")
        syms = list(dict.fromkeys([*src.symbols, *n.type.symbols, *(p[0] for p in starts if isinstance(p, tuple))]))
        if not syms or any(s not in binding for s in syms):
            continue                    # all static: the checker has seen it; unbound: reported elsewhere
        in_shape, out_shape = src.concrete(binding), n.type.concrete(binding)
        sizes = ", ".join(f"{s}={binding[s]}" for s in syms)
        what = f"'{src_node.name}'" if src_node.name else "the input"
        k = 0
        for axis, (p, step) in enumerate(zip(starts, steps)):
            dropped = axis in drop
            extent, count = in_shape[axis], 1 if dropped else out_shape[k]
            k += not dropped
            if bind_slice_errors((p,), (step,), (0,) if dropped else (), (extent,), () if dropped else (count,),
                                 binding):
                why = _misfit(axis, p, step, dropped, extent, count, binding)
                out.append(Diagnostic(n.span or chain.span, f"{why} under this binding ({sizes}); {what} is {src}"))
    return out


def _misfit(axis: int, p, step: int, dropped: bool, extent: int, count: int, binding: dict[str, int]) -> str:
    """Why one axis of a slice does not fit, in the user's terms."""
    first = position(p, binding)
    if dropped:
        written = p[1] if isinstance(p, tuple) else p
        return f"the index {written} is outside axis {axis}, which has {extent} element{'s' if extent != 1 else ''}"
    if count > extent:
        return f"the slice of axis {axis} takes {count} elements but the axis has {extent}"
    if isinstance(p, tuple) and first < 0:
        return f"the slice of axis {axis} starts {-p[1]} elements before the end, but the axis has {extent}"
    lo, hi = sorted((first, first + step * (count - 1)))
    return f"the slice of axis {axis} reads elements {lo} to {hi} but the axis has {extent}"


def check_binding(chain: TypedChain, binding: dict[str, int]) -> None:
    """Raise FdslError listing every slice of `chain` that `binding` makes misfit."""
    errors = binding_errors(chain, binding)
    if errors:
        raise FdslError(errors)
