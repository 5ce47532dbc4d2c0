"""Row kernels' phase loops (compiler/emit/row_phases.py): unrolled with every global load of a
phase first, a row's elements loaded once and kept in registers for the later phases; numbers on
the simulator with odd sizes, several elements per thread and special values."""
import re

import numpy as np
import pytest

import fusec
from fusec.runtime import reference
from fusec.runtime.compare import compare
from helpers import loads_in_flight, sass_of, stages

SOFTMAX = "chain s(x: f32[M, N]) -> f32[M, N] { return softmax(x) }"
LOGSOFTMAX = "chain s(x: f32[M, N]) -> f32[M, N] { return log_softmax(x) }"
LAYERNORM = "chain s(x: f32[M, N], g: f32[N], b: f32[N]) -> f32[M, N] { return layernorm(x, g, b) }"
RMAX = "chain s(x: f32[M, N]) -> f32[M] { return max(x, axis=1) + min(x, axis=1) }"


def _plan(src, binding, threads, rows=1):
    info = stages(src, binding).plan.info
    ops = [o.id for o in info.ops if o.is_compute and o.kind != "fill"]
    loops = len(info.op(ops[-1]).loops)
    return {"groups": [{"ops": ops, "block_tiles": [rows] + [0] * (loops - 1), "row_threads": threads,
                        "thread_tiles": [1] + [0] * (loops - 1)}]}


def _kernel(source: str) -> str:
    return source[source.index("def k0("):source.index("\n\n\n", source.index("def k0("))]


def _special(x):
    x = x.copy()
    x[0, 3] = np.nan                  # a NaN row: NaN out (max and sum propagate it)
    x[1, :] = -np.inf                 # a row of -inf: NaN, as the unfused softmax
    x[2, 5] = np.inf
    x[3, :] = 0.0
    x[3, 1::2] = -0.0                 # signed zeros: max(-0, +0) = +0
    x[4, 7] = -np.inf
    return x


@pytest.mark.parametrize("src", [SOFTMAX, LOGSOFTMAX, LAYERNORM, RMAX])
@pytest.mark.parametrize("threads,rows,m", [(14, 1, 37), (7, 2, 6), (35, 3, 39)])
def test_phases_unrolled_and_kept_in_registers_keep_the_numbers(src, threads, rows, m):
    binding = dict(M=m, N=70)
    plan = _plan(src, binding, threads, rows)
    prog = fusec.compile(src, target="cuda-sim", options={"plans": {"s": plan}, "baseline": False})
    compiled = prog.s.compiled(binding)
    assert compiled.plan["groups"][0]["row_threads"] == threads
    k0 = _kernel(stages(src, binding, plan=plan).emitted.source)
    assert f"{70 // threads} elements per thread, unrolled" in k0
    inputs = reference.random_inputs(prog.s.typed, binding, seed=5)
    inputs[0] = _special(inputs[0] * 4)
    want = reference.run_chain(prog.s.typed, inputs, binding)
    for got, w in zip(compiled.fused(*inputs), want):
        c = compare(got, w, "f32")
        assert c.ok, c.describe()
        assert np.array_equal(np.isnan(got), np.isnan(w))


@pytest.mark.parametrize("src,loads", [(SOFTMAX, 4), (LAYERNORM, 12)])
def test_a_row_is_read_once_with_its_loads_in_flight(src, loads):
    """softmax and layernorm over [64, 1024] rows, 256 threads per row (4 elements each): x is
    loaded once (4 LDG, not one per phase; layernorm adds gamma and beta), every phase that loads
    has its 4 loads in flight (issued before the first use)."""
    binding = dict(M=64, N=1024)
    source = stages(src, binding, plan=_plan(src, binding, 256)).emitted.source
    (ins,) = sass_of(source).values()
    assert sum(1 for t in ins if t.split()[0].startswith("LDG")) == loads
    flight = loads_in_flight(ins)
    assert flight and min(flight) >= 4, flight
