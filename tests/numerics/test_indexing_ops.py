"""Issue 17's ops (slice, concat, gather, embedding, cumsum, cumprod, argmax, argmin; split is
slices) on the compiled targets, cpu and cuda-sim, against the reference (runtime/compare.py).

- The per-op matrix: the cases the mlir-jit matrix runs (tests/compiler/opcases.py), packed as
  the outputs of a few chains, one compile each. On cuda-sim every case in every dtype Numba
  runs (bf16 is not one); on the cpu, where Numba compiles each kernel as a parallel loop (about
  0.4 s each, more in a long function), every f32 case in a chain per op and one case per op in
  the dtypes whose code differs (CPU_DTYPES). Each output is one op on parameters, so its fused
  build is its unfused one but for the arg-reductions; the fusion chains below run both.
- The fusion chains: the new ops among elementwise ops, reductions, a matmul and each other
  (RoPE, embedding + layernorm, the router, a running sum and a cache append, gathers at
  computed indices, split parts), both builds of the default options (fused and unfused).
- The GPU paths at tiny row counts: argmax/argmin over rows of 256 (a row kernel, a thread per
  element, the partials combined across the block: ties, NaN, signed zeros and infinities placed
  in different threads), a cumsum over a row of 1100 (several chunks of the block scan and a
  carry), and integer, f16 and product scans over rows of 64 and 40 (a block as wide as the row,
  and wider).
"""
from __future__ import annotations

import os
import sys
import zlib

import numpy as np
import pytest

import fusec
from fusec.dsl.typed import TypedModule
from fusec.program import Program
from fusec.target_options import compile_options
from fusec.runtime import reference
from fusec.runtime.compare import compare
from fusec.runtime.targets import select

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "compiler"))
from opcases import INDEXING_CASES, build, dtypes_of  # noqa: E402

TARGETS = ("cpu", "cuda-sim")
NUMBA_DTYPES = ("f32", "f64", "f16", "i32", "i64", "bool")       # bf16: Numba has no arithmetic for it
MOVES = ("slice", "concat", "gather", "embedding", "take_along_axis", "gather_nd", "index")
SCANS = ("cumsum", "cumprod", "argmax", "argmin")
# the case of each op the cpu runs in the dtypes other than f32 (the richest one)
SWEEP = {"slice": 0, "concat": 0, "gather": 1, "embedding": 1, "take_along_axis": 1, "gather_nd": 1, "index": 1,
         "cumsum": 2, "cumprod": 2, "argmax": 1, "argmin": 2}


def _items(ops, dtypes, only_sweep: bool = False) -> list[tuple]:
    out = []
    for dtype in dtypes:
        for op in ops:
            cases = INDEXING_CASES[op]
            chosen = [cases[SWEEP[op]]] if only_sweep else cases
            out += [(op, c, dtype) for c in chosen if dtype in dtypes_of(op, c)]
    return out


# the cpu's other dtypes: those whose code differs from f32's (f16 computes in f32 and rounds,
# i32 wraps around, bool is a byte); f64 and i64 are f32's and i32's code at another width
CPU_DTYPES = {"moves": ("f16", "bool"), "scans": ("f16", "i32")}
PARTS = {  # on the cpu, chains of 5 to 8 kernels: Numba's compile of a host function grows faster than its loops
    **{("cpu", f"f32 {op}"): _items((op,), ("f32",)) for op in MOVES + SCANS},
    **{("cpu", f"other dtypes, {kind}"): _items(ops, CPU_DTYPES[kind], only_sweep=True)
       for kind, ops in (("moves", MOVES), ("scans", SCANS))},
    **{("cuda-sim", dtype): _items(MOVES + SCANS, (dtype,)) for dtype in NUMBA_DTYPES},
}


def test_the_parts_hold_every_case():
    """cuda-sim: every case in every dtype; cpu: every f32 case, and each op in its other dtypes."""
    def ran(target):
        return {(op, id(c), d) for (t, _), items in PARTS.items() if t == target for op, c, d in items}
    every = {(op, id(c), d) for op in MOVES + SCANS for c in INDEXING_CASES[op] for d in dtypes_of(op, c)
             if d in NUMBA_DTYPES}
    assert ran("cuda-sim") == every
    assert {x for x in every if x[2] == "f32"} <= ran("cpu")
    for op in MOVES + SCANS:
        kind = "moves" if op in MOVES else "scans"
        assert {d for o, _, d in ran("cpu") if o == op} == {"f32", *CPU_DTYPES[kind]}, op


def _typed_program(chain, target: str, options=None) -> Program:
    tgt = select(target)
    return Program(TypedModule(chain.span.file, (chain,)), tgt, compile_options(tgt, options), "", None)


def _mismatches(labels, got, want, types) -> list[str]:
    bad = []
    for label, g, w, t in zip(labels, got, want, types):
        g = np.asarray(g)
        if g.shape != w.shape or g.dtype != w.dtype:
            bad.append(f"{label}: {g.dtype}{list(g.shape)} where the reference has {w.dtype}{list(w.shape)}")
            continue
        c = compare(g, w, t.dtype.name)
        if not c.ok:
            bad.append(f"{label}: {c.describe()}")
    return bad


@pytest.mark.slow
@pytest.mark.parametrize("target,part", sorted(PARTS), ids=[f"{t}-{p}" for t, p in sorted(PARTS)])
def test_per_op_cases_match_the_reference(target, part, fast_simulator):
    items = PARTS[(target, part)]
    rng = np.random.default_rng(zlib.crc32(f"{target}/{part}".encode()))
    chain, inputs = build("ops", items, None, rng)
    want = reference.run_chain(chain, inputs)
    got = _typed_program(chain, target, {"baseline": False}).chains["ops"](*inputs)
    got = got if isinstance(got, tuple) else (got,)
    labels = [f"{op} {dtype} {case.args} {case.attrs}" for op, case, dtype in items]
    bad = _mismatches(labels, got, want, chain.output_types)
    assert not bad, f"{target} {part}: {len(bad)} of {len(items)} outputs differ:\n" + "\n".join(bad)


# ---- the new ops among others: fused and unfused builds ---------------------------------------

FUSION = """\
const half = 4

chain transformer(q: f32[1, 2, 3, 8], cos: f32[3, 8], sin: f32[3, 8], table: f32[7, 16], ids: i32[2, 3],
                  g: f32[16], b: f32[16], x: f32[5, 16], wg: f32[16, 6])
        -> (f32[1, 2, 3, 8], f32[2, 3, 16], i64[5], f32[5]) {
    q_rot = concat([-q[..., half:], q[..., :half]], axis=-1)       # RoPE's rotate_half
    p = softmax(x @ wg, axis=-1)                                    # the router
    return q * cos + q_rot * sin, layernorm(embedding(table, ids) * 4.0, g, b), argmax(p, axis=-1), max(p, axis=-1)
}

chain scans(x: f32[2, 5, 8], cache: f32[2, 7, 8], t: f32[6, 5], y: f32[4, 6], i: i64[3])
        -> (f32[2, 5, 8], f32[2, 8, 8], f32[2, 5, 8], f32[4, 5], f32[3, 5], f32[4, 3]) {
    running = cumsum(x * 2.0, axis=1) + 1.0
    rows = gather(exp(t), argmax(y, axis=-1), axis=0) * 0.5          # indices computed in the chain
    return running, concat([cache, x[:, -1:]], axis=1), cumprod(sigmoid(x), axis=-1), rows, gather(t, i) - 1.0, (y * 2.0)[:, ::-2] + y[0, 1::2]
}

chain parts(x: f32[N, 9], y: f32[9], k: i32[4, 6], m: bool[2, 6], i: i32[5])
        -> (f32[N, 4], f32[N, 9], i64[N], f32[2, 9], i32[6, 6], bool[5, 6], i32[4, 6], i64[6]) {
    a, b, c = split(x, [4, 4, -1], axis=-1)
    joined = concat([k * 3, cast(m, i32)], axis=0)
    return a * b, concat([c, b, a], axis=1) * y, argmin(x - y, axis=-1), x[-2:] + x[:2], joined, gather(m, i), cumsum(k + 1, axis=0), argmax(k, axis=0)
}

chain lookups(x: f32[N, 6], i: i64[N, 3], t: f32[5, 4, 8], j: i32[3, 2], y: f32[N, 6], r: i32[2, 1])
        -> (f32[N, 3], f32[N, 1], f32[3, 8], f32[3, 8], f32[N, 3], f32[2, 3, 4]) {
    picked = take_along_axis(exp(x) * 0.5, i, axis=1) + 1.0          # an elementwise producer of x
    best = take_along_axis(x, argmax(y, axis=-1, keepdims=true), axis=-1)   # indices computed in the chain
    rows = gather_nd(sigmoid(t), j) * 2.0
    lookup = index(t * 0.5, [r, j[:, 1] - 1], axes=[0, 2]) + 1.0                              # t[r, :, j - 1]
    return picked, best, rows, gather_nd(t, j - 1), take_along_axis(y, -1 - i, axis=-1), lookup   # -1 - i: from the end
}
"""
FUSION_CHAINS = ("transformer", "scans", "parts", "lookups")
_PROGRAMS: dict = {}


def _fusion_program(target: str):
    if target not in _PROGRAMS:
        _PROGRAMS[target] = fusec.compile(FUSION, target=target)     # the unfused build made when asked for
    return _PROGRAMS[target]


@pytest.mark.slow
@pytest.mark.parametrize("chain", FUSION_CHAINS)
@pytest.mark.parametrize("target", TARGETS)
def test_fused_and_unfused_builds_match_the_reference(target, chain, fast_simulator):
    c = _fusion_program(target).chains[chain]
    binding = {s: 5 for s in c.typed.symbols}
    inputs = reference.random_inputs(c.typed, binding, seed=1)
    want = reference.run_chain(c.typed, inputs, binding)
    compiled = c.compiled(binding)
    labels = [f"out {k}" for k in range(len(want))]
    bad = []
    # the cpu's cost is Numba's compile of each build: its unfused build is the cuda-sim one's ops
    builds = (("fused", compiled.fused),) + ((("unfused", compiled.unfused),) if target == "cuda-sim" else ())
    for name, build_ in builds:
        bad += [f"{name} {m}" for m in _mismatches(labels, build_(*inputs), want, c.typed.output_types)]
    assert not bad, f"{target} {chain}:\n" + "\n".join(bad)


# ---- the GPU paths: row kernels and the block scan, at tiny row counts ---------------------------

ROWS = """\
chain rows(x: f32[4, 256], h: f16[2, 64], y: f32[1, 1100], z: i32[1, 64], w: f16[2, 64], v: f32[2, 40])
        -> (i64[4], i64[4], i64[2, 1], f32[1, 1100], i32[1, 64], f16[2, 64], f32[2, 40]) {
    scans = cumsum(y)
    return argmax(x, axis=-1), argmin(x, axis=-1), argmax(h, keepdims=true), scans, cumsum(z), cumsum(w), cumprod(v)
}
"""


def _rows_inputs():
    rng = np.random.default_rng(17)
    x = np.empty((4, 256), np.float32)
    x[0] = rng.integers(-3, 4, 256) / 2                     # many ties of the largest and the smallest
    x[1] = rng.standard_normal(256)
    x[1, [137, 201]] = np.nan                                # the first NaN wins both
    x[2] = np.where(rng.random(256) < 0.5, -0.0, 0.0)        # -0 equals +0: position 0 both
    x[3] = -np.inf
    x[3, [77, 180]] = np.inf                                 # argmax 77, argmin 0
    h = (rng.integers(-8, 9, (2, 64)) / 4).astype(np.float16)
    h[1, 63] = np.nan
    y = rng.standard_normal((1, 1100)).astype(np.float32)
    z = rng.integers(-2 ** 28, 2 ** 30, (1, 64)).astype(np.int32)      # the running sum wraps around
    w = (rng.standard_normal((2, 64)) * 100).astype(np.float16)
    w[0, 10:15] = [30000, 30000, 30000, -30000, -30000]     # sums in f32: inf at 12 only, as rounded
    w[1] = np.abs(w[1]) * 30                                # beyond f16's range from somewhere on
    v = (1 + rng.standard_normal((2, 40)) * 0.2).astype(np.float32)
    v[1, 25] = np.nan
    return [x, h, y, z, w, v]


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_row_kernels_and_the_block_scan_match_the_reference(target, fast_simulator):
    prog = fusec.compile(ROWS, target=target, options={"baseline": False})
    inputs = _rows_inputs()
    compiled = prog.rows.compiled({})
    got = compiled.fused(*inputs)
    want = fusec.compile(ROWS, target="reference").rows(*inputs)
    assert [int(a) for a in want[0]] == [int(np.argmax(inputs[0][0])), 137, 0, 77]
    assert [int(a) for a in want[1]] == [int(np.argmin(inputs[0][0])), 137, 0, 0]
    assert np.iinfo(np.int32).max < np.abs(np.cumsum(inputs[3], dtype=np.int64)).max()      # it wraps
    assert np.isinf(want[5][0]).sum() == 1 and np.isinf(want[5][1, -1]) and np.isfinite(inputs[4]).all()
    bad = _mismatches([f"out {k}" for k in range(len(want))], got, want, prog.rows.typed.output_types)
    assert not bad, f"{target}:\n" + "\n".join(bad)
    if target == "cuda-sim":
        groups = compiled.plan["groups"]
        assert any(g["row_threads"] >= 128 for g in groups), "argmax over 256: several threads per row"
        assert 0 < max(g["scan"] for g in groups) < 1100, "the row of 1100 takes several chunks of the block scan"


# ---- take_along_axis and gather_nd move special values as they are ---------------------------

SPECIAL = """\
chain special(x: f32[2, 4], i: i32[2, 6], h: f16[3, 4], j: i64[5, 2]) -> (f32[2, 6], f16[5]) {
    return take_along_axis(x, i, axis=1), gather_nd(h, j)
}
"""


@pytest.mark.parametrize("target", TARGETS)
def test_take_along_axis_and_gather_nd_move_special_values_bit_for_bit(target, fast_simulator):
    x = np.array([[np.nan, -0.0, np.inf, -np.inf], [1e-45, -1e38, 0.0, -np.nan]], np.float32)
    h = np.array([[np.nan, -0.0, np.inf, 65504], [-np.inf, 6e-8, 0.0, 1], [2, 3, 4, 5]], np.float16)
    i = np.array([[0, 1, 2, 3, -1, -4], [3, 2, 1, 0, -3, -2]], np.int32)
    j = np.array([[0, 0], [0, -3], [-3, 1], [1, 1], [0, 3]], np.int64)
    got = fusec.compile(SPECIAL, target=target, options={"baseline": False}).special(x, i, h, j)
    want = fusec.compile(SPECIAL, target="reference").special(x, i, h, j)
    assert np.array_equal(want[0].view(np.uint32), np.take_along_axis(x, i % 4, axis=1).view(np.uint32))
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and np.array_equal(np.asarray(g).view(f"u{g.itemsize}"), w.view(f"u{w.itemsize}"))
