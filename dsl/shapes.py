"""Shape arithmetic shared by the op table: symbol unification and NumPy broadcasting."""
from __future__ import annotations

from .types import Dim


class OpError(Exception):
    """A shape or dtype rule failed. `arg` names the argument to blame (index or name)."""

    def __init__(self, message: str, arg: int | str | None = None):
        super().__init__(message)
        self.message = message
        self.arg = arg


class Symbols:
    """Union-find over dims: a symbol unifies with another symbol or with one extent.

    The representative of a class is its extent when it has one, otherwise its
    first-declared symbol, so resolved types read like the user's declarations.
    """

    def __init__(self, order: list[str] | None = None) -> None:
        self._parent: dict[str, Dim] = {}
        self._order: dict[str, int] = {}
        for s in order or []:
            self.declare(s)

    def declare(self, sym: str) -> None:
        if sym not in self._order:
            self._order[sym] = len(self._order)
            self._parent[sym] = sym

    def find(self, d: Dim) -> Dim:
        while isinstance(d, str) and self._parent.get(d, d) != d:
            d = self._parent[d]
        return d

    def unify(self, a: Dim, b: Dim) -> bool:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return True
        if isinstance(ra, int) and isinstance(rb, int):
            return False
        if isinstance(ra, int):
            ra, rb = rb, ra
        if isinstance(rb, str) and self._order.get(rb, 1 << 30) > self._order.get(ra, 1 << 30):
            ra, rb = rb, ra
        self._parent[ra] = rb
        return True

    def resolve(self, shape) -> tuple[Dim, ...]:
        return tuple(self.find(d) for d in shape)


def broadcast_shapes(syms: Symbols, shapes: list[tuple[Dim, ...]], culprit: str = "") -> tuple[Dim, ...]:
    """NumPy broadcasting of several shapes; a symbol unifies with any non-1 extent it meets.

    Raises OpError blaming the index of the first shape that does not fit.
    """
    rank = max((len(s) for s in shapes), default=0)
    out: list[Dim] = []
    for pos in range(-rank, 0):
        cur: Dim = 1
        cur_raw: Dim = 1
        for i, s in enumerate(shapes):
            if len(s) < -pos:
                continue
            raw = s[pos]
            d = syms.find(raw)
            if d == 1:
                continue
            if cur == 1:
                cur, cur_raw = d, raw
            elif not syms.unify(cur, d):
                raise OpError(f"shapes do not broadcast ({_show(syms, cur_raw)} vs {_show(syms, raw)})", arg=i)
            cur = syms.find(cur)
        out.append(cur)
    return tuple(syms.find(d) for d in out)


def _show(syms: Symbols, raw: Dim) -> str:
    """A dim for messages: `M = 3` when a symbol has been tied to an extent."""
    d = syms.find(raw)
    return f"{raw} = {d}" if isinstance(raw, str) and d != raw else str(d)


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < rank:
        raise OpError(f"{what} {axis} is out of range for a tensor of rank {rank}", arg=what)
    return axis % rank


def normalize_axes(axis, rank: int) -> tuple[int, ...]:
    """An int, a list of ints or None (all axes) as a sorted tuple of non-negative axes."""
    if axis is None:
        return tuple(range(rank))
    axes = [axis] if isinstance(axis, int) else list(axis)
    norm = [normalize_axis(a, rank) for a in axes]
    if len(set(norm)) != len(norm):
        raise OpError(f"axis {list(axes)} names the same axis twice", arg="axis")
    return tuple(sorted(norm))
