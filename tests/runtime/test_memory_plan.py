"""Memory planning of the host functions (compiler/emit/memplan.py): intermediates whose
lifetimes do not overlap share an arena allocated once, outputs come from a pool reused once the
caller drops them, so repeated calls allocate nothing; the figures reach the report."""
import json
import os
import re
import tracemalloc

import numpy as np
import pytest

import fusec
from fusec.compiler.emit.memplan import ALIGN, plan_memory
from fusec.compiler.mlir import ir
from fusec.compiler.pipeline import compile_typed
from fusec.cli import main

import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "fusion"))
from helpers import options  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MLP = os.path.join(ROOT, "examples", "mlp.fdsl")
LAYERNORM = os.path.join(ROOT, "examples", "layernorm.fdsl")
CHAIN3 = """chain three(x: f32[M, N], w: f32[N, N]) -> f32[M, N] {
    a = relu(x @ w)
    b = tanh(a @ w)
    c = exp(b @ w)
    return c @ w
}"""


def _build(src, chain, binding, target="gpu", fuse=False):
    c = fusec.check(open(src).read() if os.path.exists(src) else src).chain(chain)
    return compile_typed(c, binding, options=options(target, fuse=fuse))


def _host(st, chain):
    src = st.emitted.source
    # the planned function itself (its _par form where a wrapper runs its BLAS on one thread)
    name = f"def __run_{chain}_planned_par(" if f"def __run_{chain}_planned_par(" in src else f"def _run_{chain}_planned("
    planned = src[src.index(name):]
    return planned[:planned.index("\n\n\n")]


@pytest.mark.parametrize("target", ["gpu", "cpu"])
def test_intermediates_whose_lifetimes_do_not_overlap_share_the_arena(target):
    st = _build(CHAIN3, "three", dict(M=64, N=32), target)
    host = _host(st, "three")
    new = "cuda.device_array" if target == "gpu" else "np.empty"
    assert new not in host                                   # every top-level buffer is planned
    slices = re.findall(r"_arena_float32\[(\d+):(\d+)\]", host)
    # a and c: each activation is written over its product (in_place.py), and b's product is
    # the output buffer, which bufferization reuses for it
    assert len(slices) == 2, host
    offsets = [int(a) for a, _ in slices]
    assert all(o % ALIGN == 0 for o in offsets)
    assert len(set(offsets)) == 1, host                      # each is dead before the next is written
    memory = dict(st.emitted.entries["three"].memory)
    assert memory["intermediates"] == 2 and memory["outputs"] == 1
    assert memory["planned_bytes"] == 64 * 32 * 4 < memory["intermediate_bytes"] == 2 * 64 * 32 * 4


COPIES = """
func.func @f(%a: memref<4xf32>) -> memref<4xf32> {
  %0 = memref.alloc() : memref<4xf32>
  %1 = memref.alloc() : memref<4xf32>
  %2 = memref.alloc() : memref<4xf32>
  %3 = memref.alloc() : memref<2x2xf32>
  %out = memref.alloc() : memref<4xf32>
  %v = memref.expand_shape %0 [[0, 1]] output_shape [2, 2] : memref<4xf32> into memref<2x2xf32>
  memref.copy %a, %0 : memref<4xf32> to memref<4xf32>
  memref.copy %0, %1 : memref<4xf32> to memref<4xf32>
  memref.copy %1, %2 : memref<4xf32> to memref<4xf32>
  memref.copy %v, %3 : memref<2x2xf32> to memref<2x2xf32>
  memref.copy %2, %out : memref<4xf32> to memref<4xf32>
  return %out : memref<4xf32>
}
"""


def test_the_plan_keeps_buffers_apart_while_both_live():
    module = ir.Module.parse(COPIES, context=ir.Context())
    block = module.body.operations[0].regions[0].blocks[0]
    plan = plan_memory(block, lambda mt, op: "float32")
    allocs = [o.operation.results[0] for o in block.operations if o.operation.name == "memref.alloc"]
    s0, s1, s2, s3, out = (plan.slots[a] for a in allocs)
    assert out.kind == "output" and plan.outputs == [((4,), "float32")]
    # %0 lives until its view is read (4th copy): %1 and %2 overlap it; %3 starts once %1 is dead
    assert {s0.offset, s1.offset, s2.offset} == {0, ALIGN, 2 * ALIGN}
    assert s3.offset == s1.offset
    assert plan.arenas == {"float32": 3 * ALIGN}
    assert plan.intermediate_bytes == 4 * 16 and plan.arena_bytes == 3 * ALIGN * 4


def test_repeated_cpu_calls_allocate_nothing_new():
    prog = fusec.compile(LAYERNORM, target="cpu", cache=False)
    f = prog.layernorm_by_hand
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4096, 256)).astype(np.float32)
    g, b = np.ones(256, np.float32), np.zeros(256, np.float32)
    y = f(x, g, b)
    want = y.copy()
    first = y.ctypes.data
    del y
    tracemalloc.start()
    y = f(x, g, b)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert y.ctypes.data == first                            # the dropped output's buffer again
    assert peak < x.nbytes // 100, peak                      # no output, no intermediate allocated
    np.testing.assert_array_equal(y, want)
    z = f(x, g, b)                                           # y is held: z gets a buffer of its own
    assert z.ctypes.data != y.ctypes.data
    np.testing.assert_array_equal(z, y)
    np.testing.assert_array_equal(y, want)
    exe = f.compiled({"T": 4096}).fused
    kept = exe.memory.buffers()[-1]                          # the pool's current output buffer
    exe.release()                                            # the memory goes back; the next call allocates
    assert exe.memory.buffers()[-1] is not kept


def test_a_loop_keeping_the_last_result_alternates_between_two_buffers():
    """`y = f(x)` in a loop: the previous result is still held while the next call runs, so a
    one-buffer pool would allocate (and page-fault) every call; two buffers take turns."""
    prog = fusec.compile(LAYERNORM, target="cpu", cache=False)
    f = prog.layernorm_by_hand
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2048, 256)).astype(np.float32)
    g, b = np.ones(256, np.float32), np.zeros(256, np.float32)
    want = f(x, g, b).copy()
    y = f(x, g, b)
    y = f(x, g, b)
    tracemalloc.start()
    seen = []
    for _ in range(4):
        y = f(x, g, b)
        seen.append(y.ctypes.data)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(set(seen)) == 2 and seen[0] == seen[2] and seen[1] == seen[3], seen
    assert peak < x.nbytes // 100, peak                      # no output allocated in the loop
    np.testing.assert_array_equal(y, want)
    kept = [f(x, g, b) for _ in range(3)]                    # every result held: each a new array
    assert len({k.ctypes.data for k in kept}) == 3
    for k in kept:
        np.testing.assert_array_equal(k, want)


def test_the_fused_build_never_holds_more_than_the_unfused_one():
    for src, chain, binding in [(MLP, "mlp", dict(M=64, D=256, H=1024)), (LAYERNORM, "layernorm_by_hand", dict(T=64)),
                                (CHAIN3, "three", dict(M=64, N=32))]:
        for target in ("gpu", "cpu"):
            fused = dict(_build(src, chain, binding, target, fuse=True).emitted.entries[chain].memory)
            unfused = dict(_build(src, chain, binding, target).emitted.entries[chain].memory)
            assert fused["planned_bytes"] <= unfused["planned_bytes"], (chain, target, fused, unfused)


@pytest.mark.slow
def test_the_report_gives_peak_intermediate_memory(tmp_path, capsys):
    report = tmp_path / "r.json"
    assert main([MLP, "--target", "cpu", "--chain", "mlp", "--bind", "M=64,D=256,H=1024", "--no-cache",
                 "--report", str(report)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"peak intermediate memory: fused \S+ \S+ \(\d+ buffers?, .* unplanned\), unfused", out), out
    data = json.loads(report.read_text())
    (rep,) = [c for c in data["chains"] if c["chain"] == "mlp"]
    assert set(rep["memory"]) == {"fused", "unfused"}
    # unfused: x @ w1 is written over by gelu (in_place.py) and h @ w2 by the epilogue, into the
    # output: h is the one intermediate left
    assert rep["memory"]["unfused"]["planned_bytes"] == rep["memory"]["unfused"]["intermediate_bytes"] == 64 * 1024 * 4
    assert rep["memory"]["unfused"]["intermediates"] == 1


def test_fresh_outputs_hands_back_a_new_array_each_call():
    """Executable.fresh_outputs (bench's memory-equalised timing): the kernel writes each call's
    output into a newly allocated array, as torch and jax hand back fresh outputs; the result is
    the planned build's, and switching back returns to the pool."""
    prog = fusec.compile(LAYERNORM, target="cpu", cache=False)
    exe = prog.layernorm_by_hand.compiled({"T": 512}).fused
    rng = np.random.default_rng(0)
    x = rng.standard_normal((512, 256)).astype(np.float32)
    g, b = np.ones(256, np.float32), np.zeros(256, np.float32)
    args = exe.prepare([x, g, b])
    want = exe.run_prepared(args)[0].copy()
    pool = {id(exe.run_prepared(args)[0]) for _ in range(4)}   # each dropped at once: the pool's buffer
    exe.fresh_outputs = True
    seen, held = set(), []
    for _ in range(4):
        y = exe.run_prepared(args)[0]
        np.testing.assert_array_equal(y, want)
        assert y.ctypes.data not in seen and id(y) not in pool
        seen.add(y.ctypes.data)
        held.append(y)                      # kept alive, so no address can come back
    del held
    tracemalloc.start()
    exe.run_prepared(args)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak >= x.nbytes                 # the output allocated in the call
    exe.fresh_outputs = False
    assert id(exe.run_prepared(args)[0]) in pool
