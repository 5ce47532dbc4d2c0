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


def _plan(src, binding, threads, rows=1, runs=None):
    info = stages(src, binding).plan.info
    ops = [o.id for o in info.ops if o.is_compute and o.kind != "fill"]
    loops = len(info.op(ops[-1]).loops)
    group = {"ops": ops, "block_tiles": [rows] + [0] * (loops - 1), "row_threads": threads,
             "thread_tiles": [1] + [0] * (loops - 1)}
    return {"groups": [dict(group, row_runs=runs) if runs else group]}


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


def _ldg(ins: list[str]) -> dict[str, int]:
    """Global loads by opcode, predicates dropped ({"LDG.E.128": 1, "LDG.E": 4})."""
    out: dict = {}
    for t in ins:
        op = re.sub(r"^@!?P\w+\s+", "", t).split()[0]
        if op.startswith("LDG"):
            out[op] = out.get(op, 0) + 1
    return out


@pytest.mark.parametrize("src,runs,loads", [  # the quick tier keeps the runs of 4
    pytest.param(SOFTMAX, 1, {"LDG.E": 4}, marks=pytest.mark.slow),
    pytest.param(LAYERNORM, 1, {"LDG.E": 12}, marks=pytest.mark.slow),
    # runs of 4: one 16-byte load per run (x; layernorm adds gamma and beta), each with its
    # fallback of 4 scalar loads for an address not 16-byte aligned (ptxas predicates both)
    (SOFTMAX, 4, {"LDG.E.128": 1, "LDG.E": 4}), (LAYERNORM, 4, {"LDG.E.128": 3, "LDG.E": 12})])
def test_a_row_is_read_once_with_its_loads_in_flight(src, runs, loads):
    """softmax and layernorm over [64, 1024] rows, 256 threads per row (4 elements each): x is
    loaded once (4 LDG, not one per phase; layernorm adds gamma and beta), every phase that loads
    has its 4 loads in flight (issued before the first use); cyclic (runs 1) and blocked-cyclic
    (runs 4)."""
    binding = dict(M=64, N=1024)
    source = stages(src, binding, plan=_plan(src, binding, 256, runs=runs)).emitted.source
    assert ("_ld4_f32(" in source) == (runs == 4)
    (ins,) = sass_of(source).values()
    assert _ldg(ins) == loads
    flight = loads_in_flight(ins)
    assert flight and min(flight) >= 4, flight


RUN_CASES = [(64, 4, 1, 9), (128, 8, 2, 6),       # 16 elements a thread: 4 runs (q and v unrolled), 1 or 2 rows a block
             (64, 16, 1, 5), (96, 24, 3, 9),      # one run a thread: the v loop alone
             (96, 8, 3, 6)]                       # 3 runs a thread, 3 rows a block


@pytest.mark.parametrize("src", [SOFTMAX, LOGSOFTMAX, LAYERNORM, RMAX])
@pytest.mark.parametrize("n,threads,rows,m", RUN_CASES)
def test_runs_of_4_keep_the_numbers(src, n, threads, rows, m):
    """Blocked-cyclic rows (plan/rows.py: row_layout, RUN = 4): thread t holds 4t + {0..3} +
    4T*q; the reductions combine in another order than the cyclic split's, within the unfused
    reference's tolerance, special values (NaN, inf, signed zeros) included."""
    binding = dict(M=m, N=n)
    plan = _plan(src, binding, threads, rows)          # row_runs left to the planner: 4T divides N
    prog = fusec.compile(src, target="cuda-sim", options={"plans": {"s": plan}, "baseline": False})
    compiled = prog.s.compiled(binding)
    assert compiled.plan["groups"][0]["row_runs"] == 4
    k0 = _kernel(stages(src, binding, plan=plan).emitted.source)
    assert k0.count("_ld4_f32(arg0") == n // (4 * threads)
    if src != RMAX:
        assert k0.count("_st4_f32(") == n // (4 * threads)
    inputs = reference.random_inputs(prog.s.typed, binding, seed=7)
    inputs[0] = _special(inputs[0] * 4)
    want = reference.run_chain(prog.s.typed, inputs, binding)
    for got, w in zip(compiled.fused(*inputs), want):
        c = compare(got, w, "f32")
        assert c.ok, c.describe()
        assert np.array_equal(np.isnan(got), np.isnan(w))


@pytest.mark.parametrize("n,threads,why", [(72, 12, "4 x 12 threads do not divide a 72-element row"),
                                           (70, 14, "4 x 14 threads do not divide a 70-element row")])
def test_a_row_that_runs_of_4_do_not_divide_stays_cyclic_and_right(n, threads, why):
    """N = 72 over 12 threads (6 each: N a multiple of 4, not of 4T) and N = 70 over 14 (N not
    a multiple of 4): cyclic, and a hand plan asking for runs of 4 is refused with the reason."""
    binding = dict(M=5, N=n)
    st = stages(LAYERNORM, binding, plan=_plan(LAYERNORM, binding, threads))
    (g,) = st.plan.kernels
    assert g.config.runs == 1 and "_ld4_f32(" not in st.emitted.source
    with pytest.raises(fusec.compiler.plan.kernels.PlanError, match=re.escape(why)):
        stages(LAYERNORM, binding, plan=_plan(LAYERNORM, binding, threads, runs=4))
    prog = fusec.compile(LAYERNORM, target="cuda-sim", options={"plans": {"s": _plan(LAYERNORM, binding, threads)},
                                                                "baseline": False})
    inputs = reference.random_inputs(prog.s.typed, binding, seed=3)
    want = reference.run_chain(prog.s.typed, inputs, binding)
    for got, w in zip(prog.s.compiled(binding).fused(*inputs), want):
        c = compare(got, w, "f32")
        assert c.ok, c.describe()


def test_an_input_at_an_offset_runs_of_4_still_right():
    """A row input whose base is 4 bytes past a 16-byte boundary (a slice of a larger buffer): on
    a GPU each run's address fails the intrinsic's alignment test and takes the 4 scalar loads
    (the SASS has both paths); under the simulator the same kernel reads the view. Right either way."""
    binding = dict(M=6, N=128)
    plan = _plan(SOFTMAX, binding, 32)
    prog = fusec.compile(SOFTMAX, target="cuda-sim", options={"plans": {"s": plan}, "baseline": False})
    compiled = prog.s.compiled(binding)
    assert compiled.plan["groups"][0]["row_runs"] == 4
    buf = np.random.default_rng(1).standard_normal(6 * 128 + 1).astype(np.float32)
    x = buf[1:].reshape(6, 128)                         # C-contiguous, base pointer + 4 bytes
    assert x.flags.c_contiguous and x.ctypes.data % 16 != 0
    (got,) = compiled.fused(x)
    want = reference.run_chain(prog.s.typed, [x.copy()], binding)[0]
    c = compare(got, want, "f32")
    assert c.ok, c.describe()


F16_SOFTMAX = "chain s(x: f16[M, N]) -> f16[M, N] { return softmax(x) }"


@pytest.mark.parametrize("src,binding,threads,columns,runs,why", [
    (SOFTMAX, dict(M=8, N=1024), 256, False, 4, "runs of 4 f32"),
    (LAYERNORM, dict(M=8, N=768), 64, False, 4, "runs of 4 f32"),
    (LAYERNORM, dict(M=8, N=768), 128, False, 1, "4 x 128 threads do not divide a 768-element row"),
    (SOFTMAX, dict(M=8, N=70), 14, False, 1, "4 x 14 threads do not divide a 70-element row"),
    (SOFTMAX, dict(M=8, N=1024), 32, False, 1, "32 elements per thread: the phases stay loops"),
    (F16_SOFTMAX, dict(M=8, N=1024), 256, False, 1, "is read along the row as f16, not f32"),
    (SOFTMAX, dict(M=8, N=1024), 256, True, 1, "a column kernel's threads walk the strided axis"),
])
def test_the_layout_is_runs_of_4_only_where_they_fit(src, binding, threads, columns, runs, why):
    """plan/rows.py: row_layout says runs of 4 (blocked-cyclic) or 1 (cyclic) and why."""
    from fusec.compiler.plan.rows import row_layout
    st = stages(src, binding, plan=_plan(src, binding, threads))
    info = st.plan.info
    (g,) = st.plan.kernels
    got, reason = row_layout(info, g.ops, g.root, threads, columns)
    assert (got, why in reason) == (runs, True), reason


def test_the_planner_takes_runs_of_4_for_the_bench_rows_and_says_so():
    """softmax [8192, 1024] and layernorm [16384, 768] as the model plans them: runs of 4, in the
    plan text; a hand plan that forces 1 keeps the cyclic split (and the plan text says nothing)."""
    for src, binding in ((SOFTMAX, dict(M=8192, N=1024)), (LAYERNORM, dict(M=16384, N=768))):
        st = stages(src, binding)
        (g,) = st.plan.kernels
        assert g.config.runs == 4 and (binding["N"] // g.config.threads) % 4 == 0
        assert "in runs of 4 (blocked-cyclic" in st.texts["plan"]
    cyclic = stages(SOFTMAX, dict(M=64, N=1024), plan=_plan(SOFTMAX, dict(M=64, N=1024), 256, runs=1))
    assert cyclic.plan.kernels[0].config.runs == 1 and "in runs of" not in cyclic.texts["plan"]


def test_a_row_read_through_a_collapse_stays_cyclic():
    """mean over all of [2048, 2048]: split-reductions reads x as [512, 8192] rows through a
    collapse_shape (then an expand_shape); the collapse's div/mod hides that a run's 4 addresses
    are consecutive, so runs of 4 would be 4 scalar loads 16 bytes apart: cyclic, with the reason
    (tests/report/test_reduction_kernels.py checks the kernel's coalescing)."""
    from fusec.compiler.plan.rows import row_layout
    st = stages("chain mean_all(x: f32[M, N]) -> f32 { return mean(x) }", dict(M=2048, N=2048))
    g = next(g for g in st.plan.kernels if g.config.threads and 8192 % (4 * g.config.threads) == 0)
    assert g.config.runs == 1
    runs, why = row_layout(st.plan.info, g.ops, g.root, g.config.threads)
    assert runs == 1 and "through %1 collapse_shape" in why, why
    assert "_ld4_f32(" not in st.emitted.source


def test_argmax_in_runs_of_4_finds_the_first_largest():
    """argmax's position along the row is q*4T + 4t + v with runs (split_rows: _split_index); ties
    (the largest value several times in a row, across threads and runs) give the first index."""
    src = "chain s(x: f32[M, N]) -> i64[M] { return argmax(x, axis=-1) }"
    binding = dict(M=6, N=64)
    plan = _plan(src, binding, 4)                       # 16 a thread: 4 runs of 4
    prog = fusec.compile(src, target="cuda-sim", options={"plans": {"s": plan}, "baseline": False})
    compiled = prog.s.compiled(binding)
    assert compiled.plan["groups"][0]["row_runs"] == 4
    x = np.random.default_rng(2).standard_normal((6, 64)).astype(np.float32)
    x[1, [5, 21, 63]] = 9.0                             # threads 1, 1 (next run), 3
    x[2, [62, 3]] = 9.0
    x[3, [17, 18]] = 9.0                                # one run
    x[4, :] = 1.0                                       # all equal: 0
    (got,) = compiled.fused(x)
    assert got.tolist() == np.argmax(x, axis=-1).tolist()


@pytest.mark.parametrize("src", ["chain s(x: f32[M, 40]) -> f32[M, 32] { return softmax(x[:, 1:33]) }",
                                 "chain s(x: f32[M, 64]) -> f32[M, 32] { return softmax(x[:, ::2]) }"])
def test_a_row_read_through_a_slice_is_no_row_kernel_and_right(src):
    """A slice along the row (d1 + 1, d1 * 2 into a wider dim) fused in: split_rows splits only
    whole dims indexed by the row loop alone, so such a kernel read x[r, 1] in every thread of
    the row (a wrong kernel the runtime's check replaced by the unfused build). plan/rows.py
    refuses it now, with the reason; the kernel is right."""
    from fusec.compiler.plan.rows import row_kernel
    binding = dict(M=6)
    st = stages(src, binding)
    (g,) = st.plan.kernels
    why = row_kernel(st.plan.info, g.ops, g.root)
    assert isinstance(why, str) and "elements of a" in why and "dim along the row (a slice)" in why, why
    assert not g.config.splits_rows
    prog = fusec.compile(src, target="cuda-sim", options={"baseline": False})
    inputs = reference.random_inputs(prog.s.typed, binding, seed=4)
    want = reference.run_chain(prog.s.typed, inputs, binding)
    for got, w in zip(prog.s.compiled(binding).fused(*inputs), want):
        c = compare(got, w, "f32")
        assert c.ok, c.describe()


def test_a_gather_along_the_row_stays_cyclic():
    """layernorm(embedding(table, ids)): the table's row is read at computed indices (the
    gather's index arithmetic), which the emitter leaves as 4-byte loads; in runs of 4 a warp's
    load would touch 4 times the sectors. Cyclic, with the reason."""
    from fusec.compiler.plan.rows import row_layout
    src = """chain embed(table: f32[V, 256], ids: i32[B, S], g: f32[256], b: f32[256]) -> f32[B, S, 256] {
        return layernorm(embedding(table, ids) * 16.0, g, b)
    }"""
    st = stages(src, dict(V=128, B=4, S=32))
    (g,) = st.plan.kernels
    assert g.config.splits_rows and g.config.runs == 1 and "_ld4_f32(" not in st.emitted.source
    for threads in (16, 32, 64):
        runs, why = row_layout(st.plan.info, g.ops, g.root, threads)
        assert runs == 1 and "at computed indices (a gather)" in why, why
