"""Small IR-building helpers shared by the lowering rules: types, constants, tensor.empty,
linalg.fill, linalg.generic with a Python body, broadcasting indexing maps and reshapes.

Every helper builds at the current insertion point and location (set by the caller with
`with ir.InsertionPoint(...), loc:`), so lowering rules read like the math they lower.
"""
from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

from fusec.dsl.types import DType

from ..mlir import arith, ir, linalg, tensor

Shape = tuple[int, ...]
DYNAMIC = ir.ShapedType.get_dynamic_size()


class DynamicUnsupported(Exception):
    """A lowering rule needed a run-time extent as a number (a count, a reshape's product, a
    pad): the op cannot take that symbol at run time."""


class Dyn(int):
    """The extent of a symbol taken at run time (options.dynamic): MLIR's dynamic size, naming
    its symbol. It compares by symbol; arithmetic on it raises DynamicUnsupported, so a rule
    that would bake a run-time extent into a constant refuses instead."""
    symbol: str

    def __new__(cls, symbol: str) -> "Dyn":
        d = super().__new__(cls, DYNAMIC)
        d.symbol = symbol
        return d

    def __eq__(self, other) -> bool:
        return isinstance(other, Dyn) and other.symbol == self.symbol

    def __ne__(self, other) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(("dyn", self.symbol))

    def __repr__(self) -> str:
        return self.symbol

    def _refuse(self, *_):
        raise DynamicUnsupported(self.symbol)

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __floordiv__ = __rfloordiv__ = _refuse
    __mod__ = __rmod__ = __truediv__ = __rtruediv__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse
    __neg__ = __float__ = _refuse


def is_dynamic(d: int) -> bool:
    return isinstance(d, Dyn) or d == DYNAMIC


class _Dims:
    """While a chain with run-time extents lowers: each symbol's extent as an index value (a
    tensor.dim of the first parameter that carries it), and what each func argument's shape is."""
    def __init__(self):
        self.values: dict[str, ir.Value] = {}
        self.args: dict[ir.Value, Shape] = {}

    def symbol_of(self, value: ir.Value) -> str | None:
        """The symbol whose extent `value` is (None: no run-time extent)."""
        return next((s for s, v in self.values.items() if v == value), None)


class _Lowering(threading.local):
    """This thread's stack of the chains lowering (threads of one process compile at once: a
    stack shared by all lowered one chain's shapes against another's extents)."""
    def __init__(self):
        self.dims: list[_Dims] = []


_LOWERING = _Lowering()


@contextlib.contextmanager
def dynamic_dims() -> Iterator[_Dims]:
    """The run-time extents of the chain lowering inside the block (see _Dims)."""
    _LOWERING.dims.append(_Dims())
    try:
        yield _LOWERING.dims[-1]
    finally:
        _LOWERING.dims.pop()


@dataclass(frozen=True)
class ScalarConst:
    """A typed compile-time scalar (an FDSL 'constant' node), or a tensor of one value (a `full`:
    `shape`, its lowered shape). Elementwise rules inline it as an arith.constant in the generic's
    body instead of passing a tensor operand; a rule that needs a tensor gets one from
    LoweringContext.tensor (a rank-0 constant, or a generic that writes the value)."""
    value: float | int | bool
    dtype: DType
    shape: tuple = ()


def element_type(dtype: DType) -> ir.Type:
    if dtype.name == "f16":
        return ir.F16Type.get()
    if dtype.name == "bf16":
        return ir.BF16Type.get()
    if dtype.name == "f32":
        return ir.F32Type.get()
    if dtype.name == "f64":
        return ir.F64Type.get()
    return ir.IntegerType.get_signless(dtype.bits)


@dataclass(frozen=True)
class RunTimeCount:
    """How many elements some axes hold when a run-time extent is among them: a static factor
    times the symbols' extents (read in the body from their tensor.dim values)."""
    static: int
    symbols: tuple[str, ...]


def count(space: Shape, axes: Sequence[int]) -> "int | RunTimeCount":
    """The number of elements of `space` along `axes` (a mean's or a norm's divisor)."""
    n, symbols = 1, []
    for a in axes:
        if isinstance(space[a], Dyn):
            symbols.append(space[a].symbol)
        else:
            n *= space[a]
    return RunTimeCount(n, tuple(symbols)) if symbols else n


def count_value(n: "int | RunTimeCount", like: ir.Value) -> ir.Value:
    """A count (`count`) as a scalar of `like`'s type, built where the caller builds (a body)."""
    if not isinstance(n, RunTimeCount):
        return scalar(n, like.type)
    index = ir.IndexType.get()
    v = None
    for s in n.symbols:
        d = _LOWERING.dims[-1].values[s]
        v = d if v is None else arith.muli(v, d)
    if n.static != 1:
        v = arith.muli(v, arith.constant(index, n.static))
    if is_float(like.type):
        return arith.sitofp(like.type, arith.index_cast(ir.IntegerType.get_signless(64), v))
    return arith.index_cast(like.type, v)


def tensor_type(shape: Sequence[int], elem: ir.Type) -> ir.RankedTensorType:
    return ir.RankedTensorType.get(list(shape), elem)


def shape_of(value: ir.Value) -> Shape:
    """A tensor's shape; a run-time extent as the Dyn of its symbol, found from the IR that made
    the value (a parameter, a tensor.empty's size operands, a linalg op's init, a reshape that
    keeps the dim alone)."""
    shape = tuple(ir.RankedTensorType(value.type).shape)
    if not any(map(is_dynamic, shape)):
        return shape
    return tuple(Dyn(s) if isinstance(s, str) else s for s in _symbolic(value))


def _symbolic(value: ir.Value) -> tuple:
    shape = tuple(ir.RankedTensorType(value.type).shape)
    if DYNAMIC not in shape:
        return shape
    dims = _LOWERING.dims[-1] if _LOWERING.dims else None
    if dims is None:
        raise DynamicUnsupported("?")
    if isinstance(value, ir.BlockArgument):
        if value not in dims.args:
            raise DynamicUnsupported("?")
        return tuple(d.symbol if isinstance(d, Dyn) else d for d in dims.args[value])
    op = value.owner
    name = op.name
    if name == "tensor.empty":
        sizes = iter(op.operands)
        return tuple(dims.symbol_of(next(sizes)) if d == DYNAMIC else d for d in shape)
    if name.startswith("linalg."):
        n = len(op.results)
        return _symbolic(op.operands[len(op.operands) - n + ir.OpResult(value).result_number])
    if name in ("tensor.collapse_shape", "tensor.expand_shape"):
        src = _symbolic(op.operands[0])
        groups = [[ir.IntegerAttr(i).value for i in g] for g in ir.ArrayAttr(op.attributes["reassociation"])]
        out = list(shape)
        long, short = (src, out) if name == "tensor.collapse_shape" else (out, src)
        for j, g in enumerate(groups):
            kept = [long[i] for i in g if long[i] != 1]
            if name == "tensor.collapse_shape":
                if shape[j] == DYNAMIC:
                    if len(kept) != 1 or not isinstance(kept[0], str):
                        raise DynamicUnsupported("?")
                    out[j] = kept[0]
            else:
                for i in g:
                    if shape[i] == DYNAMIC:
                        if len(g) - sum(1 for k in g if shape[k] == 1) != 1 or not isinstance(short[j], str):
                            raise DynamicUnsupported("?")
                        out[i] = short[j]
        return tuple(out)
    raise DynamicUnsupported("?")


def elem_of(value: ir.Value) -> ir.Type:
    return ir.RankedTensorType(value.type).element_type


def is_float(t: ir.Type) -> bool:
    return isinstance(t, ir.FloatType)


def compute_type(elem: ir.Type) -> ir.Type:
    """The type arithmetic is done in: 16-bit floats compute (and accumulate) in f32 and round
    once per FDSL op, as GPU code does and as the NumPy reference does; others compute as is."""
    if isinstance(elem, (ir.F16Type, ir.BF16Type)):
        return ir.F32Type.get()
    return elem


def widen(x: ir.Value) -> ir.Value:
    """A scalar in its compute type (f16/bf16 -> f32; anything else unchanged)."""
    wide = compute_type(x.type)
    return x if wide == x.type else arith.extf(wide, x)


def narrow(x: ir.Value, elem: ir.Type) -> ir.Value:
    """A computed scalar rounded back to the op's result type."""
    return x if x.type == elem else arith.truncf(elem, x)


def scalar(value: float | int | bool, elem: ir.Type) -> ir.Value:
    """An arith.constant of type `elem` (a float, an integer or an i1)."""
    if is_float(elem):
        return arith.constant(elem, float(value))
    if ir.IntegerType(elem).width == 1:
        return arith.constant(elem, ir.IntegerAttr.get(elem, int(bool(value))))
    return arith.constant(elem, int(value))


def rank0_tensor(c: ScalarConst) -> ir.Value:
    """A ScalarConst as a rank-0 tensor constant, for the few consumers that need a tensor."""
    elem = element_type(c.dtype)
    t = tensor_type((), elem)
    if is_float(elem):
        attr = ir.DenseElementsAttr.get_splat(t, ir.FloatAttr.get(elem, float(c.value)))
    else:
        attr = ir.DenseElementsAttr.get_splat(t, ir.IntegerAttr.get(elem, int(c.value)))
    return arith.constant(t, attr)


def empty(shape: Sequence[int], elem: ir.Type) -> ir.Value:
    """tensor.empty; a Dyn extent takes its symbol's run-time value."""
    if not any(map(is_dynamic, shape)):
        return tensor.empty(list(shape), elem)
    sizes = iter(_run_time_sizes(shape))
    return tensor.empty([next(sizes) if is_dynamic(d) else d for d in shape], elem)


def _run_time_sizes(shape: Sequence[int]) -> list[ir.Value]:
    """The values of `shape`'s run-time extents, in order (a tensor.empty's or an expand_shape's
    size operands; none when it is static); DynamicUnsupported for one that names no symbol."""
    dynamic = [d for d in shape if is_dynamic(d)]
    if dynamic and (not _LOWERING.dims or not all(isinstance(d, Dyn) and d.symbol in _LOWERING.dims[-1].values for d in dynamic)):
        raise DynamicUnsupported("?")
    return [_LOWERING.dims[-1].values[d.symbol] for d in dynamic]


def fill(value: float | int, shape: Sequence[int], elem: ir.Type) -> ir.Value:
    """tensor.empty + linalg.fill: an accumulator initialised to `value`."""
    return linalg.fill(scalar(value, elem), outs=[empty(shape, elem)])


# ---- indexing maps ---------------------------------------------------------------------

def identity_map(rank: int) -> ir.AffineMap:
    return ir.AffineMap.get_identity(rank)


def dims_map(rank: int, dims: Sequence[int]) -> ir.AffineMap:
    """(d0..d{rank-1}) -> (d_i for i in dims)."""
    return ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(i) for i in dims])


def broadcast_map(in_shape: Shape, out_shape: Shape) -> ir.AffineMap:
    """NumPy broadcasting as an indexing map: the operand's dims align with the output's trailing
    dims, and an extent-1 dim facing a larger output extent reads index 0."""
    rank, offset = len(out_shape), len(out_shape) - len(in_shape)
    exprs = []
    for i, d in enumerate(in_shape):
        j = offset + i
        if d == 1 and out_shape[j] != 1:
            exprs.append(ir.AffineConstantExpr.get(0))
        else:
            exprs.append(ir.AffineDimExpr.get(j))
    return ir.AffineMap.get(rank, 0, exprs)


def _iterators(kinds: Sequence[str]) -> ir.ArrayAttr:
    return ir.ArrayAttr.get([ir.Attribute.parse(f"#linalg.iterator_type<{k}>") for k in kinds])


def generic(inputs: Sequence[tuple[ir.Value, ir.AffineMap]],
            inits: Sequence[tuple[ir.Value, ir.AffineMap]],
            iterators: Sequence[str],
            body: Callable[[list[ir.Value], list[ir.Value]], Sequence[ir.Value]]) -> list[ir.Value]:
    """A linalg.generic; `body(input_elements, accumulator_elements)` returns the yielded values."""
    maps = ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for _, m in list(inputs) + list(inits)])
    op = linalg.GenericOp(
        [v.type for v, _ in inits], [v for v, _ in inputs], [v for v, _ in inits],
        maps, _iterators(iterators))
    block = op.regions[0].blocks.append(*[elem_of(v) for v, _ in list(inputs) + list(inits)])
    args = list(block.arguments)
    with ir.InsertionPoint(block):
        linalg.YieldOp(list(body(args[:len(inputs)], args[len(inputs):])))
    return list(op.results)


Operand = ir.Value | ScalarConst | tuple[ir.Value, ir.AffineMap]


def parallel(operands: Sequence[Operand], out_shape: Shape, out_elem: ir.Type,
             body: Callable[[list[ir.Value]], ir.Value]) -> ir.Value:
    """One all-parallel linalg.generic over `out_shape`. A bare tensor operand broadcasts to it
    with NumPy's rules through its indexing map (nothing is materialised); a (tensor, map) pair
    uses that map; a ScalarConst becomes an arith.constant inside the body.
    `body(elements)` gets one scalar per operand, in order, and returns the result element."""
    out_shape = tuple(out_shape)
    tensors = []
    for v in operands:
        if isinstance(v, tuple):
            tensors.append(v)
        elif not isinstance(v, ScalarConst):
            tensors.append((v, broadcast_map(shape_of(v), out_shape)))

    def inner(elems: list[ir.Value], _acc: list[ir.Value]) -> list[ir.Value]:
        it = iter(elems)
        scalars = [scalar(v.value, element_type(v.dtype)) if isinstance(v, ScalarConst) else next(it)
                   for v in operands]
        return [body(scalars)]

    rank = len(out_shape)
    (out,) = generic(tensors, [(empty(out_shape, out_elem), identity_map(rank))], ["parallel"] * rank, inner)
    return out


def reduction(operands: Sequence[tuple[ir.Value, ir.AffineMap]], space: Shape, axes: Sequence[int],
              init: float | int, elem: ir.Type,
              combine: Callable[[list[ir.Value], ir.Value], ir.Value]) -> ir.Value:
    """A linalg.generic over the iteration space `space` reducing `axes` into an accumulator
    filled with `init`; the result has the kept dims only. `combine(elements, acc)` -> new acc."""
    rank = len(space)
    kept = [i for i in range(rank) if i not in axes]
    acc = fill(init, [space[i] for i in kept], elem)
    iters = ["reduction" if i in axes else "parallel" for i in range(rank)]
    (out,) = generic(operands, [(acc, dims_map(rank, kept))], iters,
                     lambda xs, accs: [combine(xs, accs[0])])
    return out


def kept_map(rank: int, axes: Sequence[int]) -> ir.AffineMap:
    """How an operand reduced over `axes` is read back inside the full iteration space."""
    return dims_map(rank, [i for i in range(rank) if i not in axes])


# ---- reshapes --------------------------------------------------------------------------

def reassociation(long: Shape, short: Shape) -> list[list[int]] | None:
    """Contiguous groups of `long`'s dims whose products are `short`'s dims, or None.
    The reassociation of a collapse (long -> short) or an expand (short -> long)."""
    if not short:
        return [] if all(d == 1 for d in long) else None
    groups: list[list[int]] = []
    i = 0
    for d in short:
        if i >= len(long):
            return None
        group, prod = [i], long[i]
        i += 1
        while prod != d:
            if i >= len(long) or prod > d:
                return None
            prod *= long[i]
            group.append(i)
            i += 1
        groups.append(group)
    rest = list(range(i, len(long)))
    if any(long[j] != 1 for j in rest):
        return None
    groups[-1].extend(rest)
    return groups


def _reassoc_attr(groups: list[list[int]]) -> ir.ArrayAttr:
    i64 = ir.IntegerType.get_signless(64)
    return ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(i64, i) for i in g]) for g in groups])


def collapse(value: ir.Value, shape: Shape, groups: list[list[int]]) -> ir.Value:
    return tensor.CollapseShapeOp(tensor_type(shape, elem_of(value)), value, _reassoc_attr(groups)).result


def expand(value: ir.Value, shape: Shape, groups: list[list[int]]) -> ir.Value:
    return tensor.ExpandShapeOp(tensor_type(shape, elem_of(value)), value, _reassoc_attr(groups),
                                _run_time_sizes(shape), list(shape)).result


def reshape(value: ir.Value, shape: Shape) -> ir.Value:
    """Same elements, new static shape: one collapse_shape or expand_shape when the dims group
    contiguously, otherwise a collapse to 1-D followed by an expand (never tensor.reshape, whose
    shape operand hides the static shape from later passes)."""
    src = shape_of(value)
    shape = tuple(shape)
    if src == shape:
        return value
    if len(shape) < len(src) and (groups := reassociation(src, shape)) is not None:
        return collapse(value, shape, groups)
    if len(shape) > len(src) and (groups := reassociation(shape, src)) is not None:
        return expand(value, shape, groups)
    n = 1
    for d in src:
        n *= d
    flat = collapse(value, (n,), [list(range(len(src)))]) if len(src) != 1 else value
    return expand(flat, shape, [list(range(len(shape)))]) if len(shape) != 1 else flat
