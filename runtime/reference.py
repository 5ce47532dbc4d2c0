"""The NumPy reference executor: runs a typed chain op by op with the op table's semantics.

This is the oracle every compiled kernel is checked against. Values are stored in the chain's
dtypes (16-bit floats are computed in f32 and rounded after every op, as GPU code does);
`compute_f64=True` runs every floating-point value in float64 to measure true error.
"""
from __future__ import annotations

import zlib

import numpy as np

from fusec.dsl.binding import check_binding
from fusec.dsl.diagnostics import Diagnostic, FdslError
from fusec.dsl.ops import OPS, IndexRangeError
from fusec.dsl.ops.indexing import gather_nd_positions, wrap_indices
from fusec.dsl.typed import TypedChain
from fusec.dsl.types import DType, F64, dtype_of_numpy


def _storage(dtype: DType, f64: bool) -> np.dtype:
    return np.dtype(np.float64) if (f64 and dtype.is_float) else dtype.np


def _work(x: np.ndarray) -> np.ndarray:
    """16-bit floats compute in f32."""
    if x.dtype.kind in "fV" and x.dtype.itemsize == 2 or x.dtype.name == "bfloat16":
        return x.astype(np.float32)
    return x


def bind_symbols(chain: TypedChain, inputs: list[np.ndarray], binding: dict[str, int] | None = None) -> dict[str, int]:
    """Bind every symbol of the chain from the inputs' shapes (and an explicit binding);
    raise FdslError at the parameter's declaration when an input does not fit, and at a
    slice that the binding makes misfit (dsl/binding.py)."""
    bound = dict(binding or {})
    errors = []
    params = chain.param_nodes
    if len(inputs) != len(params):
        raise FdslError([Diagnostic(chain.span, f"chain '{chain.name}' takes {len(params)} inputs, got {len(inputs)}")])
    for p, x in zip(params, inputs):
        x = np.asarray(x)
        want = p.type
        dt = dtype_of_numpy(x.dtype)
        if dt != want.dtype:
            errors.append(Diagnostic(p.span, f"input '{p.name}' has dtype {dt or x.dtype} but is declared {want}"))
            continue
        if x.ndim != want.rank:
            errors.append(Diagnostic(p.span, f"input '{p.name}' has shape {tuple(x.shape)} (rank {x.ndim}) "
                                     f"but is declared {want}"))
            continue
        for axis, (d, n) in enumerate(zip(want.shape, x.shape)):
            if isinstance(d, int):
                if d != n:
                    errors.append(Diagnostic(p.span, f"input '{p.name}' has shape {tuple(x.shape)} but is "
                                             f"declared {want} ({n} vs {d} at axis {axis})"))
                    break
            elif n < 1:
                errors.append(Diagnostic(p.span, f"input '{p.name}' has shape {tuple(x.shape)}, so {d} = {n}; "
                                         "sizes must be positive"))
                break
            elif bound.setdefault(d, n) != n:
                errors.append(Diagnostic(p.span, f"input '{p.name}' has shape {tuple(x.shape)}, so {d} = {n}, "
                                         f"but {d} = {bound[d]} already"))
                break
    if errors:
        raise FdslError(errors)
    missing = [s for s in chain.symbols if s not in bound]
    if missing:
        raise FdslError([Diagnostic(chain.span, f"chain '{chain.name}': no size for symbol "
                                    f"{', '.join(missing)}; bind it with --bind {missing[0]}=64")])
    binding = {s: bound[s] for s in chain.symbols}
    check_binding(chain, binding)
    return binding


def run_chain(chain: TypedChain, inputs: list[np.ndarray], binding: dict[str, int] | None = None,
              compute_f64: bool = False) -> list[np.ndarray]:
    """Run a typed chain on NumPy inputs; returns its outputs in order. Each value is dropped
    after its last use (runtime/memory.py estimates a run's memory the same way)."""
    binding = bind_symbols(chain, inputs, binding)
    vals: dict[int, np.ndarray] = {}
    last = {n.id: n.id for n in chain.nodes}
    for n in chain.nodes:
        for i in n.inputs:
            last[i] = max(last[i], n.id)
    for i in chain.outputs:
        last[i] = len(chain.nodes)
    params = iter(inputs)
    with np.errstate(all="ignore"):
        for n in chain.nodes:
            store = _storage(n.type.dtype, compute_f64)
            if n.op == "param":
                vals[n.id] = np.asarray(next(params)).astype(store)
                continue
            if n.op == "constant":
                vals[n.id] = np.asarray(n.attr("value"), dtype=store)
                continue
            op = OPS[n.op]
            xs = [_work(vals[i]) for i in n.inputs]
            if n.op == "conv2d" and not n.attr("has_bias"):
                xs.append(None)
            shape = n.type.concrete(binding)
            try:
                out = np.asarray(op.ref(xs, {**dict(n.attrs), "binding": binding}, shape)).astype(store)
            except IndexRangeError as e:
                raise FdslError([Diagnostic(n.span or chain.span, f"{n.op}: {e}")]) from None
            if out.shape != shape:
                raise AssertionError(f"reference for {n.op} produced {out.shape}, type says {shape}")
            vals[n.id] = out
            for i in set(n.inputs):
                if last[i] == n.id:
                    del vals[i]
    return [vals[i] for i in chain.outputs]


def random_inputs(chain: TypedChain, binding: dict[str, int], seed: int = 0) -> list[np.ndarray]:
    """Seeded inputs for a chain: normal floats (positive where an op's domain needs it),
    small integers (an index of a gather or embedding from 0 to the extent it indexes, less
    one), random bools. The same chain, binding and seed give the same arrays."""
    rng = np.random.default_rng([seed, zlib.crc32(chain.name.encode())])
    positive = positive_params(chain)
    indices = index_params(chain, binding)
    out = []
    for p in chain.param_nodes:
        shape, dt = p.type.concrete(binding), p.type.dtype
        if dt.is_float:
            x = rng.standard_normal(shape)
            x = np.abs(x) + 0.5 if p.id in positive else x
        elif p.id in indices:
            x = rng.integers(0, indices[p.id], size=shape)
        elif dt.is_int:
            x = rng.integers(1 if p.id in positive else -8, 9, size=shape)
        else:
            x = rng.random(shape) < 0.5
        out.append(np.asarray(x).astype(dt.np))
    return out


def positive_params(chain: TypedChain) -> set[int]:
    """Parameters that feed an argument whose domain is positive (log's x, batchnorm's var...)."""
    pos = set()
    for n in chain.nodes:
        op = OPS.get(n.op)
        if op is None:
            continue
        for arg, i in zip(op.tensor_args, n.inputs):
            if arg.positive and chain.nodes[i].op == "param":
                pos.add(i)
    return pos


# Ops that move an index tensor's values without changing them: an index read through them is
# still an index (a cast between integer dtypes too, see _moves_values).
_MOVES_VALUES = frozenset({"slice", "reshape", "permute", "transpose", "broadcast_to", "concat"})
_INDEXING = frozenset({"gather", "embedding", "take_along_axis", "gather_nd", "index"})


def _index_reads(chain: TypedChain, n, binding: dict[str, int]) -> list[tuple[int, int, object]]:
    """The index inputs of an indexing node: (input id, the smallest extent it indexes, a check
    raising IndexRangeError for a value outside its axis or axes)."""
    table_shape = chain.nodes[n.inputs[0]].type.concrete(binding)
    if n.op == "index":
        return [(i, table_shape[d], lambda v, d=d: wrap_indices(v, table_shape[d], d))
                for i, d in zip(n.inputs[1:], n.attr("axes"))]
    if n.op == "gather_nd":
        b, k = n.attr("batch_dims"), chain.nodes[n.inputs[1]].type.concrete(binding)[-1]
        return [(n.inputs[1], min(table_shape[b:b + k]), lambda v: gather_nd_positions(table_shape, v, b))]
    axis = n.attr("axis")
    if n.op == "take_along_axis":
        return [(n.inputs[1], table_shape[axis], lambda v: wrap_indices(v, table_shape[axis], axis))]
    shape = [1] * len(table_shape)
    shape[axis] = table_shape[axis]
    table_like = np.lib.stride_tricks.as_strided(np.zeros((), np.int8), shape, [0] * len(shape))   # no memory
    return [(n.inputs[1], table_shape[axis], lambda v: OPS[n.op].ref([table_like, v], {"axis": axis}, None))]


def _moves_values(chain: TypedChain, n) -> bool:
    if n.op == "cast":
        return n.type.dtype.is_int and chain.nodes[n.inputs[0]].type.dtype.is_int
    return n.op in _MOVES_VALUES


def _index_sources(chain: TypedChain, i: int) -> tuple[set[int], bool]:
    """The nodes an index value is moved from, through _moves_values ops: (the parameters
    among them, whether all of them are parameters)."""
    params, only_params, seen, stack = set(), True, set(), [i]
    while stack:
        n = chain.nodes[stack.pop()]
        if n.id in seen:
            continue
        seen.add(n.id)
        if n.op == "param":
            params.add(n.id)
        elif _moves_values(chain, n):
            stack += n.inputs
        else:
            only_params = False
    return params, only_params


def index_params(chain: TypedChain, binding: dict[str, int]) -> dict[int, int]:
    """Parameters whose values index an indexing op (gather, embedding, take_along_axis,
    gather_nd, index), directly or moved there by slices, reshapes, permutes, transposes,
    broadcasts, concats, integer casts: parameter id -> the extent of the axis it indexes (the
    smallest, when it indexes several)."""
    out: dict[int, int] = {}
    for n in chain.nodes:
        if n.op not in _INDEXING:
            continue
        for i, extent, _ in _index_reads(chain, n, binding):
            for p in _index_sources(chain, i)[0]:
                out[p] = min(out.get(p, extent), extent)
    return out


def check_index_inputs(chain: TypedChain, inputs: list[np.ndarray], binding: dict[str, int]) -> None:
    """Refuse inputs that give an indexing op (gather, embedding, take_along_axis, gather_nd,
    index) an index outside its axis, as the reference would (an FdslError at the op), before a
    compiled chain runs. Checked: every
    index moved from the parameters alone (see index_params), computed here with the
    reference's own ops; an index computed inside the chain is not (a compiled target clamps
    it)."""
    params = {p.id: np.asarray(x) for p, x in zip(chain.param_nodes, inputs)}
    vals: dict[int, np.ndarray] = {}

    def value(i: int) -> np.ndarray:
        if i in vals:
            return vals[i]
        n = chain.nodes[i]
        if n.op == "param":
            vals[i] = params[i]
        else:
            xs = [value(j) for j in n.inputs]
            vals[i] = np.asarray(OPS[n.op].ref(xs, {**dict(n.attrs), "binding": binding}, n.type.concrete(binding)))
        return vals[i]

    for n in chain.nodes:
        if n.op not in _INDEXING:
            continue
        for i, _, check in _index_reads(chain, n, binding):
            if not _index_sources(chain, i)[1]:
                continue
            try:
                check(value(i))
            except IndexRangeError as e:
                raise FdslError([Diagnostic(n.span or chain.span, f"{n.op}: {e}")]) from None
