"""Memref views that are never materialised: each memref value is a base array plus a function
from the view's indices to the base array's indices, folded into every load and store.

subview adds offsets and strides (dropping rank-reduced dims), expand_shape linearises a group
of indices, collapse_shape delinearises one (div/mod), cast is the identity."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from .values import Elem, EmitError, expr_add, expr_mul, floordiv, is_int, mod
from ..mlir import ir

Index = tuple[str, ...]


@dataclass(frozen=True)
class Array:
    """A real array variable of the generated code."""
    name: str
    elem: Elem
    rank: int       # rank as carried: rank-0 memrefs travel as 1-element 1-D arrays
    storage: str    # NumPy dtype name of the array's elements
    space: str = "global"   # "global" | "shared" | "local"

    @property
    def signature(self) -> str:
        """Numba's type of the array as a C-contiguous kernel parameter: `float32[:, ::1]`."""
        nb = {"bool_": "boolean"}.get(self.storage, self.storage)
        return f"{nb}[{', '.join([':'] * (self.rank - 1) + ['::1'])}]"


@dataclass(frozen=True)
class View:
    """A memref value: `array[to_base(indices)]` reads its element at `indices`."""
    array: Array
    shape: Index                                   # sizes as Python expressions
    to_base: Callable[[Index], Index] = field(compare=False)
    free: tuple["ir.Value", ...] = ()              # host scalars its index math reads
    host: str | None = None                        # host expression holding it as an array
    contiguous: bool = True
    whole: bool = False                            # exactly the array, in its own shape
    # the array's own shape where the view is the whole array reshaped (an expand_shape of a
    # whole view: a grouped conv's [N, G, C/G, H, W] input), for 1-D reads (FlatViews)
    base_shape: Index | None = None

    @property
    def rank(self) -> int:
        return len(self.shape)

    def at(self, indices: Index) -> str:
        base = self.to_base(tuple(indices))
        return f"{self.array.name}[{', '.join(base)}]"

    def load(self, indices: Index) -> str:
        """Element `indices` as a value of its compute type (computed)."""
        return computed(self.array, self.at(indices))

    def store(self, indices: Index, value: str) -> str:
        """The statement storing compute-type `value` at `indices` (stored)."""
        return f"{self.at(indices)} = {stored(self.array, value)}"


def is_bf16_bits(array: Array) -> bool:
    """A bf16 array held as its 16 bits (uint16: every cuda array in global memory; the cpu's and
    the kernels' shared and local arrays hold float32)."""
    return array.elem.mlir == "bf16" and array.storage == "uint16"


def copy_element(src: "View", dst: "View", idx: Index) -> str:
    """dst[idx] = src[idx]: as it lies where both hold the same type (an f16 half converts by
    itself), a bf16's bits widened or narrowed where only one side holds them."""
    if src.array.storage == dst.array.storage or not (is_bf16_bits(src.array) or is_bf16_bits(dst.array)):
        return f"{dst.at(idx)} = {src.at(idx)}"
    return dst.store(idx, src.load(idx))


def computed(array: Array, e: str) -> str:
    """Element expression `e` read from `array` as its compute type: an f16 half widened to f32,
    a bf16's bits moved to the top half of an f32 (exact: emit/bf16.py's `_bf16_f32`); else `e`."""
    if is_bf16_bits(array):
        return f"_bf16_f32({e})"
    if array.storage != array.elem.compute:
        return f"np.{array.elem.compute}({e})"
    return e


def from_bits(array: Array, e: str) -> str:
    """Element expression `e` of `array` widened where it is a bf16's bits, else as it is (a site
    that reads f16 halves as they are, Numba widening them where they meet f32)."""
    return f"_bf16_f32({e})" if is_bf16_bits(array) else e


def stored(array: Array, value: str) -> str:
    """Compute-type `value` as what `array` stores: a bf16's bits, the f32 rounded to nearest
    even (NaN kept; `_f32_bf16`, one cvt.rn on a GPU); else `value` (an f16 array's store
    rounds by itself)."""
    return f"_f32_bf16({value})" if is_bf16_bits(array) else value


def whole(array: Array, shape: Index, host: str | None = None) -> View:
    """The view of a whole array."""
    if not shape:
        return View(array, (), lambda idx: ("0",), host=host, whole=True)
    return View(array, tuple(shape), lambda idx: tuple(idx), host=host, whole=True)


def subview(src: View, offsets: Index, sizes: Index, strides: Index,
            result_shape: tuple[int | None, ...], free: tuple, op: "ir.Operation") -> View:
    keep = _kept_dims(sizes, result_shape, op)
    parent = src.to_base

    def to_base(idx: Index) -> Index:
        it = iter(idx)
        return parent(tuple(expr_add(o, expr_mul(next(it), s)) if k else o
                            for o, s, k in zip(offsets, strides, keep)))

    host = None
    if src.host is not None:
        parts = [f"{o}:{expr_add(o, expr_mul(n, s))}" + ("" if s == "1" else f":{s}") if k else o
                 for o, n, s, k in zip(offsets, sizes, strides, keep)]
        host = f"{src.host}[{', '.join(parts)}]"
    shape = tuple(n for n, k in zip(sizes, keep) if k)
    return View(src.array, shape, to_base, src.free + free, host, contiguous=False)


def _kept_dims(sizes: Index, result_shape: tuple[int | None, ...], op) -> list[bool]:
    """Which source dims a (possibly rank-reducing) subview keeps. Dropped dims have size 1 and
    only index 0, so which of several size-1 dims is dropped does not change any address."""
    keep, k = [], 0
    for n in sizes:
        want = result_shape[k] if k < len(result_shape) else "none"
        if want != "none" and (want is None or n == str(want) or not is_int(n)):
            keep.append(True)
            k += 1
        elif n == "1":
            keep.append(False)
        else:
            raise EmitError("the emitter cannot match the subview's sizes to its result type", op)
    if k != len(result_shape):
        raise EmitError("the emitter cannot match the subview's sizes to its result type", op)
    return keep


def expand_shape(src: View, groups: list[list[int]], out_shape: Index) -> View:
    """expand_shape: source dim g is the row-major linearisation of result dims groups[g]."""
    parent = src.to_base

    def to_base(idx: Index) -> Index:
        out = []
        for g in groups:
            e = idx[g[0]]
            for d in g[1:]:
                e = expr_add(expr_mul(e, out_shape[d]), idx[d])
            out.append(e)
        return parent(tuple(out))

    host = f"{src.host}.reshape({shape_tuple(out_shape)})" if src.host and src.contiguous else None
    base = src.shape if src.whole else src.base_shape
    return View(src.array, tuple(out_shape), to_base, src.free, host, src.contiguous, base_shape=base)


def collapse_shape(src: View, groups: list[list[int]]) -> View:
    """collapse_shape: result dim k runs row-major over source dims groups[k]."""
    parent, sizes = src.to_base, src.shape

    def to_base(idx: Index) -> Index:
        out = []
        for i, g in zip(idx, groups):
            for p, d in enumerate(g):
                inner = "1"
                for later in g[p + 1:]:
                    inner = expr_mul(inner, sizes[later])
                e = floordiv(i, inner)
                out.append(e if p == 0 else mod(e, sizes[d]))
        return parent(tuple(out))

    shape = []
    for g in groups:
        n = "1"
        for d in g:
            n = expr_mul(n, sizes[d])
        shape.append(n)
    host = f"{src.host}.reshape({shape_tuple(shape)})" if src.host and src.contiguous else None
    return View(src.array, tuple(shape), to_base, src.free, host, src.contiguous)


def cast(src: View, shape: Index) -> View:
    return replace(src, shape=tuple(shape))


def transpose(src: View, perm: tuple[int, ...]) -> View:
    """memref.transpose with an involutive permutation (perm == its inverse): result index i is
    source index perm[i]; on the host the same NumPy view, transposed."""
    parent = src.to_base

    def to_base(idx: Index) -> Index:
        return parent(tuple(idx[perm[i]] for i in range(len(perm))))

    host = None if src.host is None else f"{src.host}.transpose({_tuple(str(p) for p in perm)})"
    return View(src.array, tuple(src.shape[p] for p in perm), to_base, src.free, host, contiguous=False)


def reinterpret(src: View, offset: str, sizes: Index, strides: Index, op) -> View:
    """reinterpret_cast of a whole contiguous array: flat = offset + sum(i*stride), unravelled
    back onto the array's own shape."""
    if not src.whole:
        raise EmitError("the emitter supports reinterpret_cast only of a whole array", op)
    base_shape = src.shape

    def to_base(idx: Index) -> Index:
        flat = offset
        for i, s in zip(idx, strides):
            flat = expr_add(flat, expr_mul(i, s))
        if not base_shape:
            return ("0",)
        out = []
        for p, n in enumerate(base_shape):
            inner = "1"
            for later in base_shape[p + 1:]:
                inner = expr_mul(inner, later)
            e = floordiv(flat, inner)
            out.append(e if p == 0 else mod(e, n))
        return tuple(out)

    return View(src.array, tuple(sizes), to_base, src.free, None, contiguous=False)


def _tuple(items) -> str:
    items = list(items)
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


def shape_tuple(items) -> str:
    """A Python tuple literal of sizes: `(4,)`, `(2, 3)`, `()`."""
    return _tuple(items) if items else "()"
