"""Coalescing traced under the simulator: a kernel with known answers, and real fusec compiles
(an elementwise kernel is ideal; a one-thread-per-row softmax reads across rows)."""
import os
import textwrap

import pytest

import fusec
from fusec.compiler.emitted import Entry, Launch
from fusec.compiler.options import CompileOptions
from fusec.compiler.pipeline import compile_typed
from fusec.compiler.plan.hardware import GPUS
from fusec.compiler.report import ptx, report_kernels, trace

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
H200 = GPUS["h200"]

KNOWN = textwrap.dedent('''
    import numpy as np
    from numba import cuda, float32

    @cuda.jit("void(float32[::1], float32[::1], float64[::1], float32[:, ::1], float32[::1])")
    def k(a, b, d, m, out):
        t = cuda.threadIdx.x
        s = cuda.shared.array(64, float32)          # shared: never counted
        s[t] = a[t]                                 # contiguous f32: 4 sectors, ideal 4
        cuda.syncthreads()
        x = a[t * 2]                                # stride 8 B: 8 sectors, ideal 4
        y = a[t + 1]                                # misaligned: 5 sectors, ideal 4
        z = d[t]                                    # contiguous f64: 8 sectors, ideal 8
        w = m[t, 3]                                 # a column of a 32x32 matrix: 32 sectors, ideal 4
        row = m[np.int64(t)]                        # a view: no access by itself
        v = row[-1]                                 # through the view, negative index: 32, ideal 4
        u = m[0, 0]                                 # a broadcast: 1 sector, ideal 1
        if t < 8:
            out[t] = x                              # 8 lanes: 1 sector, ideal 1
        b[t] = x + y + np.float32(z) + w + v + u + s[t]

    def run_k(a, b, d, m, out):
        k[(1, 1, 1), (32, 1, 1)](a, b, d, m, out)
        return (b,)
''')

EXPECTED = {  # expression -> (kind, sectors/request, ideal sectors/request, lanes/request)
    "a[t]": ("load", 4, 4, 32), "a[t * 2]": ("load", 8, 4, 32), "a[t + 1]": ("load", 5, 4, 32),
    "d[t]": ("load", 8, 8, 32), "m[t, 3]": ("load", 32, 4, 32), "row[-1]": ("load", 32, 4, 32),
    "m[0, 0]": ("load", 1, 1, 32), "out[t]": ("store", 1, 1, 8), "b[t]": ("store", 4, 4, 32),
}
KNOWN_TYPES = ("f32[128]", "f32[64]", "f64[64]", "f32[32,32]", "f32[8]")


def test_sectors_per_request_of_known_accesses():
    (rec,) = trace.trace_here(KNOWN, "run_k", KNOWN_TYPES, ["first"], 32)
    assert rec["kernel"] == "k" and rec["blocks_traced"] == [(0, 0, 0)] and rec["verified"] is True
    got = {s["expr"]: (s["kind"], s["sectors"] / s["requests"], s["ideal_sectors"] / s["requests"],
                       s["lanes"] / s["requests"]) for s in rec["sites"]}
    assert got == EXPECTED
    lines = {s["expr"]: s["line"] for s in rec["sites"]}
    source = KNOWN.splitlines()
    assert all(expr in source[line - 1] for expr, line in lines.items())
    # sector-weighted: ideal sectors / sectors over all sites (each site made one request)
    sectors = sum(v[1] for v in EXPECTED.values())
    ideal = sum(v[2] for v in EXPECTED.values())
    assert rec["summary"]["efficiency"] == pytest.approx(ideal / sectors)
    assert rec["summary"]["efficiency_by_requests"] == pytest.approx(
        sum(v[2] / v[1] for v in EXPECTED.values()) / len(EXPECTED))


def test_inputs_from_argument_types():
    a, s, i, flags = trace.make_inputs(("f32[4,8]", "f64[]", "i32[16]", "i1[8]"))
    assert a.shape == (4, 8) and a.dtype.name == "float32" and 0.5 <= a.min() and a.max() < 1.5
    assert s.shape == () and s.dtype.name == "float64"
    assert i.dtype.name == "int32" and i.min() >= 0 and i.max() < 8
    assert flags.dtype.name == "bool"
    with pytest.raises(trace.MeasureError, match="static shape"):
        trace.make_inputs(("f32[?,8]",))


def _compiled(path, chain, binding, plan=None):
    options = CompileOptions.make({"target": "gpu", "plans": {chain: plan} if plan else ()})
    st = compile_typed(fusec.check(path).chain(chain), binding, options=options)
    return st.emitted.source, st.emitted.entries[chain]


def test_an_emitted_elementwise_kernel_is_coalesced():
    source, entry = _compiled(os.path.join(EXAMPLES, "ew_chain.fdsl"), "ew_chain", {"M": 64, "N": 256})
    (r,) = report_kernels(source, entry, H200)
    assert r.kind == "launch" and r.group == 0 and r.unmeasured == ()
    assert r.registers > 0 and r.spill_store_bytes == 0 and r.blocks_per_sm > 0 and r.waves > 0
    c = r.coalescing
    assert c.verified is True and len(c.blocks_traced) == 2 and c.requests > 0
    assert c.efficiency >= 0.99 and c.lanes_per_request == 32
    assert {s.kind for s in c.sites} == {"load", "store"}
    assert all(s.efficiency >= 0.99 for s in c.sites)


# today's softmax plan, pinned by hand: one thread per row, 32 rows per block
ROW_PER_THREAD = {"groups": [{"ops": [1, 2, 4, 5], "block_tiles": [32, 0], "thread_tiles": [1, 0]}]}


@pytest.mark.slow
def test_a_one_thread_per_row_softmax_is_poorly_coalesced():
    source, entry = _compiled(os.path.join(EXAMPLES, "softmax.fdsl"), "softmax_rows", {"M": 64, "N": 256},
                              ROW_PER_THREAD)
    (r,) = report_kernels(source, entry, H200)
    assert r.grid == (2, 1, 1) and r.block == (32, 1, 1) and r.threads_per_block == 32
    # the exponentials go through the output's row (bufferized in place; the copies fused per use
    # are merged at once), not through a per-thread local array of the row
    assert r.stack_frame_bytes == 0
    assert r.limited_by == ("blocks",) and r.occupancy == 0.5 and r.waves < 0.01
    c = r.coalescing
    # a warp's 32 lanes read 32 rows: 32 sectors where 4 would hold the 128 bytes
    assert c.efficiency == pytest.approx(0.125) and c.sectors_per_request == 32 and c.ideal_sectors_per_request == 4
    assert all(s.efficiency == pytest.approx(0.125) for s in c.sites)
    assert {s.array for s in c.sites} == {"arg0", "alloc"}


FAILS = textwrap.dedent('''
    import math
    import numpy as np
    from numba import cuda

    @cuda.jit("void(float32[::1], float32[::1])")
    def k0(a, b):
        i = cuda.blockIdx.x * 32 + cuda.threadIdx.x
        b[i] = a[i]

    @cuda.jit("void(float32[::1], float32[::1])")
    def k1(a, b):
        i = cuda.blockIdx.x * 32 + cuda.threadIdx.x
        b[i] = np.float32(math.log(a[i] - a[i]))

    def run_f(a):
        b = cuda.device_array((128,), np.float32)
        k0[(4, 1, 1), (32, 1, 1)](a, b)
        k1[(4, 1, 1), (32, 1, 1)](a, b)
        return (b,)
''')


def test_a_kernel_the_simulator_cannot_run_is_a_reason(monkeypatch):
    monkeypatch.setattr(ptx, "ptx_of", lambda source, cc: {"ptx": {}, "errors": {"k0": "x", "k1": "x"}})
    launches = tuple(Launch(k, "launch", i, ("4", "1", "1"), ("32", "1", "1")) for i, k in enumerate(("k0", "k1")))
    r0, r1 = report_kernels(FAILS, Entry("run_f", ("k0", "k1"), ("f32[128]",), ("f32[128]",), launches), H200,
                            blocks=("first", "last"))
    assert r0.coalescing.blocks_traced == ((0, 0, 0), (3, 0, 0)) and r0.coalescing.efficiency == 1.0
    assert r1.coalescing is None
    why = dict(r1.unmeasured)["coalescing"]
    assert why.startswith("the simulator raised ValueError: tid=[") and "]: math domain error" in why
    assert "(line 14: b[i] = np.float32(math.log(a[i] - a[i])))" in why


TWO_LAUNCHES = textwrap.dedent('''
    import numpy as np
    from numba import cuda

    @cuda.jit("void(float32[::1], float32[::1])")
    def k0(a, b):
        i = cuda.blockIdx.x * 32 + cuda.threadIdx.x
        b[i] = a[i]

    @cuda.jit("void(float32[::1], float32[::1], float32[::1])")
    def k1(a, b, c):
        i = cuda.blockIdx.x * 32 + cuda.threadIdx.x
        if b[(i + 32) % 128] == 0:
            c[i] = a[0]
        else:
            c[i] = a[i]

    def run_two(a):
        b = cuda.device_array((128,), np.float32)
        c = cuda.device_array((128,), np.float32)
        k0[(4, 1, 1), (32, 1, 1)](a, b)
        k1[(4, 1, 1), (32, 1, 1)](a, b, c)
        return (c,)
''')


def test_later_launches_read_the_traced_blocks_results_and_zeros_elsewhere():
    """k0 runs blocks 0 and 3 only; k1's block 0 reads b[32:64] (never written: zeros) and its
    block 3 reads b[0:32] (written by k0's block 0)."""
    r0, r1 = trace.trace_here(TWO_LAUNCHES, "run_two", ("f32[128]",), ["first", "last"], 32)
    assert r0["blocks_traced"] == r1["blocks_traced"] == [(0, 0, 0), (3, 0, 0)]
    loads = {s["expr"]: (s["requests"], s["lanes"]) for s in r1["sites"] if s["kind"] == "load"}
    assert loads == {"b[(i + 32) % 128]": (2, 64), "a[0]": (1, 32), "a[i]": (1, 32)}
    assert r0["verified"] is r1["verified"] is True


RUNS = textwrap.dedent('''
    from numba import cuda

    @cuda.jit("void(float32[:, ::1], float32[:, ::1])")
    def k(a, b):
        t = cuda.threadIdx.x
        v = a[1, t * 4:t * 4 + 4]                   # 16 B a lane, 512 contiguous: 16 sectors, ideal 16
        b[0, t * 4:t * 4 + 4] = v                   # the same, stored
        b[1, t:t + 1] = v[:1]                       # a run of one: 4 sectors, ideal 4

    def run_k(a, b):
        k[(1, 1, 1), (32, 1, 1)](a, b)
        return (b,)
''')


def test_a_run_of_consecutive_elements_is_one_access():
    """emit/vector.py's 16-byte loads and stores run under the simulator as slices of 4 along
    the last axis: one access of their bytes each, as ld.global.v4.f32 is on a GPU."""
    (rec,) = trace.trace_here(RUNS, "run_k", ("f32[2,128]", "f32[2,128]"), ["first"], 32)
    got = {s["expr"]: (s["kind"], s["sectors"] / s["requests"], s["ideal_sectors"] / s["requests"],
                       s["lanes"] / s["requests"]) for s in rec["sites"]}
    assert got == {"a[1, t * 4:t * 4 + 4]": ("load", 16, 16, 32), "b[0, t * 4:t * 4 + 4]": ("store", 16, 16, 32),
                   "b[1, t:t + 1]": ("store", 4, 4, 32)}
