"""The benchmark suite's plumbing at tiny sizes: workloads agree with the reference, the timing
loop interleaves, results have the documented shape, the table of docs/PERFORMANCE.md comes from
JSON, the scaling benchmark fits an exponent. Nothing here asserts a timing."""
import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import fusec
from bench import anchors, gpu, machine, scaling, table, timing
from bench.suite import run_suite, write_results
from bench.workloads import NUMPY, WORKLOADS

HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize("w", WORKLOADS, ids=lambda w: w.name)
def test_numpy_anchor_matches_the_fdsl_chain(w):
    binding = w.binding("tiny")
    inputs = w.make_inputs(binding)
    typed = fusec.check(str(w.fdsl))
    chain = next(c for c in typed.chains if c.name == w.chain)
    want = fusec.reference(chain, inputs, binding, compute_f64=True)[0]
    got = NUMPY[w.name](*inputs)
    assert got.dtype == np.float32 and got.shape == w.output_shape(binding)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_inputs_are_seeded_and_bytes_count_every_array():
    w = WORKLOADS[1]
    b = w.binding("tiny")
    a, c = w.make_inputs(b, seed=3), w.make_inputs(b, seed=3)
    assert all(np.array_equal(x, y) for x, y in zip(a, c))
    assert w.bytes(b) == sum(x.nbytes for x in a) + 4 * int(np.prod(w.output_shape(b)))


def test_measure_interleaves_rounds_and_gives_slow_calls_fewer_runs():
    now = [0.0]
    order = []

    def call(name, cost):
        def f():
            order.append(name)
            now[0] += cost
        return f
    s = timing.measure({"fast": call("fast", 0.001), "slow": call("slow", 0.1)},
                       timing.Budget(seconds=0.5, min_runs=3, max_runs=20, warmup=1, quiesce=0), clock=lambda: now[0])
    assert len(s["fast"].seconds) == 20 and len(s["slow"].seconds) == 5
    timed = order[2:]                        # after one warm-up call each
    assert timing.paired_ratio(s["fast"], s["slow"]) == pytest.approx(0.01)
    # rounds are shuffled, reproducibly: with three calls each follows each of the others
    now[0], order[:] = 0.0, []
    calls = {n: call(n, 0.001) for n in "abc"}
    timing.measure(calls, timing.Budget(seconds=1.0, min_runs=30, max_runs=30, warmup=1, quiesce=0), clock=lambda: now[0])
    rounds = [order[3 + 3 * r: 6 + 3 * r] for r in range(30)]
    assert all(sorted(r) == ["a", "b", "c"] for r in rounds)
    follows = {(x, y) for r in rounds for x, y in zip(r, r[1:])}
    assert follows == {(x, y) for x in "abc" for y in "abc" if x != y}
    first = list(order)
    now[0], order[:] = 0.0, []
    timing.measure(calls, timing.Budget(seconds=1.0, min_runs=30, max_runs=30, warmup=1, quiesce=0), clock=lambda: now[0])
    assert order == first
    assert timed[:2] in (["fast", "slow"], ["slow", "fast"])


def test_missing_anchor_is_skipped_with_a_note(monkeypatch):
    monkeypatch.setattr(anchors, "_have", lambda module: False)
    w = WORKLOADS[0]
    inputs = w.make_inputs(w.binding("tiny"))
    for a in ("torch", "torch.compile", "jax.jit", "cupy"):
        with pytest.raises(anchors.Skip, match="not installed"):
            anchors.prepare(a, w, inputs)


@pytest.mark.slow
def test_suite_writes_the_documented_json(tmp_path):
    w = [x for x in WORKLOADS if x.name in ("ew_chain", "softmax")]
    budget = timing.Budget(seconds=0.01, min_runs=2, max_runs=3, warmup=1)
    r = run_suite(tuple(w), "tiny", ("numpy", "no-such-anchor"), budget, log=lambda s: None,
                  bandwidth={"gbps": 10.0}, gemm={"gflops": 10.0})
    assert r["schema"] == 1 and r["size"] == "tiny" and r["target"] == "cpu"
    assert r["fusec_cached"] == "numba-cache"
    for entry in r["workloads"]:
        assert set(entry["impls"]) == {"fusec fused", "fusec unfused", "fusec dynamic", "numpy"}
        assert entry["skipped"] == {"no-such-anchor": "unknown anchor 'no-such-anchor'"}
        for impl in entry["impls"].values():
            assert impl["agreement"]["ok"], impl
            assert impl["runs"] >= 2 and impl["min_ms"] <= impl["median_ms"]
        assert entry["impls"]["fusec fused"]["cold_s"] > 0
        fused = entry["impls"]["fusec fused"]
        # a later process's start: the artifact and Numba's cached code loaded, nothing compiled
        assert 0 < fused["cached_s"] < fused["cold_s"] / 5
        assert set(entry["ratios"]) == {"fusec unfused", "fusec dynamic", "numpy", "floor"}
        assert entry["impls"]["fusec dynamic"]["detail"]["planned_at"] == 8       # M=8: its size class's top
        assert entry["floor"]["bound"] in ("memory", "compute")
    section = table.render_result(dict(r, _file="r.json"))
    assert "| fusec dynamic |" in section.splitlines()[2] and " dynamic / static |" in section.splitlines()[2]
    path = write_results(r, tmp_path)
    assert path.name.endswith("-tiny.json") and json.loads(path.read_text())["machine"] == r["machine"]


def test_performance_table_is_generated_from_results(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    fixture = json.loads((HERE / "fixture_result.json").read_text())
    (results / "cpu-test-2026-01-01.json").write_text(json.dumps(fixture))
    older = dict(fixture, date="2025-01-01T00:00:00Z")
    older["workloads"] = []
    (results / "cpu-test-2025-01-01.json").write_text(json.dumps(older))
    doc = tmp_path / "PERFORMANCE.md"
    doc.write_text(f"# x\n\nbefore\n{table.START}\nstale\n{table.END}\nafter\n")
    assert table.update_doc(doc, results)
    text = doc.read_text()
    assert text.startswith("# x\n\nbefore\n") and text.endswith(f"{table.END}\nafter\n")
    assert "stale" not in text
    section = text.split(table.START)[1].split(table.END)[0]
    assert "| softmax | 5.5 (5) |" in section            # fusec fused median (min)
    assert "0.50× vs jax.jit" in section                  # fused over the faster compiled anchor
    assert "cpu-test-2026-01-01.json" in section          # the newest result per machine
    assert "Not run: torch.compile (PyTorch is not installed" in section
    assert not table.update_doc(doc, results)              # idempotent
    assert "Numba's jit, which this run did not cache" in section      # a result from before the cache
    assert "Numba's machine code from its cache" in "\n".join(table._compile_table(dict(fixture, fusec_cached="numba-cache")))


def test_scaling_fits_an_exponent():
    assert scaling.fit_exponent([10, 100, 1000], [1.0, 10.0, 100.0]) == pytest.approx(1.0)
    src = scaling.elementwise_chain(10)
    assert src.count("\n    v") == 11 and fusec.check(src).chains[0].name == "scale"
    fusec.check(scaling.mixed_chain(20))
    r = scaling.run_scaling(sizes=(10, 20), kinds=("elementwise",), log=lambda s: None, jit_max=0)
    rows = r["kinds"]["elementwise"]["rows"]
    assert [x["n"] for x in rows] == [10, 20] and "tiled" in rows[0]["stages_s"]
    assert isinstance(r["kinds"]["elementwise"]["exponent"], float)


def test_floor_is_bytes_at_bandwidth_or_flops_at_gemm_rate():
    f = machine.floor_ms(10 ** 9, 10 ** 9, 100.0, 1000.0)
    assert f == {"ms": 10.0, "memory_ms": 10.0, "compute_ms": 1.0, "bound": "memory"}
    assert machine.floor_ms(10 ** 6, 10 ** 12, 100.0, 1000.0)["bound"] == "compute"
    assert machine.machine_id("NVIDIA H200") == "gpu-nvidia-h200"


@pytest.mark.slow
def test_gpu_script_runs_from_artifacts_on_the_simulator(tmp_path):
    """`prepare` compiles for cuda here; `run` needs only the artifacts (checked on cuda-sim)."""
    (tmp_path / "art" / "wheels").mkdir(parents=True)
    for wheel in ("lark-0-py3-none-any.whl", "ml_dtypes-0-py3-none-any.whl"):   # no download
        (tmp_path / "art" / "wheels" / wheel).write_text("")
    gpu.prepare(tmp_path / "art", only=["softmax"], size="tiny")
    assert (tmp_path / "art" / "softmax" / "manifest.json").exists()
    from bench.timing import Budget
    # one timed run per build: each is seconds of simulated threads (the default budget is 16)
    path = gpu.run(tmp_path / "art", tmp_path / "out", target_name="cuda-sim",
                   budget=Budget(seconds=0.0, min_runs=1, max_runs=1, warmup=0))
    doc = json.loads(path.read_text())
    [w] = doc["workloads"]
    assert doc["target"] == "cuda" and w["name"] == "softmax"
    assert w["impls"]["fusec fused"]["agreement"]["ok"] and "cupy" in w["skipped"]
    dynamic = w["impls"]["fusec dynamic"]             # M taken at run time, planned for its class
    assert dynamic["agreement"]["ok"] and dynamic["detail"]["symbol"] == "M"
    assert w["ratios"]["fusec dynamic"]["median"] > 0          # the table's dynamic / static is its inverse
    # the artifact started in two fresh processes (the simulator compiles nothing, so caches nothing)
    start = w["start"]
    assert start["second"]["kernels"] == start["first"]["kernels"] == w["impls"]["fusec fused"]["detail"]["kernels"]
    assert start["second"]["numba_cache"] == {"hits": 0, "misses": 0} and start["first"]["load_s"] > 0
    assert w["impls"]["fusec fused"]["cached_s"] == pytest.approx(start["second"]["load_s"] + start["second"]["call_s"],
                                                                  abs=1e-3)


@pytest.mark.slow
def test_gpu_script_prepares_and_runs_the_tensor_core_workloads(tmp_path):
    """Issue 37's f16/bf16 workloads (GEMM, the mlp, attention D=64/128, plain and causal):
    `prepare` compiles every one for cuda here with its predicted H200 time; `run` times them
    from the artifacts and checks each output (on the simulator: against fusec's reference)."""
    (tmp_path / "art" / "wheels").mkdir(parents=True)
    for wheel in ("lark-0-py3-none-any.whl", "ml_dtypes-0-py3-none-any.whl"):   # no download
        (tmp_path / "art" / "wheels" / wheel).write_text("")
    names = sorted(gpu.TENSOR_CORE)
    assert {n.rsplit("_", 1)[1] for n in names} == {"f16", "bf16"} and len(names) == 12
    gpu.prepare(tmp_path / "art", only=names, size="tiny")
    manifest = json.loads((tmp_path / "art" / "gpu-manifest.json").read_text())
    assert sorted(manifest["tensor_core"]) == names and not manifest["workloads"]
    for name, meta in manifest["tensor_core"].items():
        assert (tmp_path / "art" / name / "manifest.json").exists()
        assert meta["predicted_us"] > 0 and meta["kernels"] >= 1 and meta["hardware"] == "h200", name
    from bench.timing import Budget
    run = ["gemm4096_f16", "attn_d64_causal_bf16"]
    path = gpu.run(tmp_path / "art", tmp_path / "out", only=run, target_name="cuda-sim",
                   budget=Budget(seconds=0.0, min_runs=1, max_runs=1, warmup=0))
    doc = json.loads(path.read_text())
    assert [r["name"] for r in doc["tensor_core"]] == run
    for r in doc["tensor_core"]:
        fused = r["impls"]["fusec fused"]
        assert fused["agreement"]["ok"] and fused["agreement"]["against"] == "fusec reference (float64)"
        assert r["measured_us"] > 0 and r["predicted_us"] == manifest["tensor_core"][r["name"]]["predicted_us"]
        assert "torch.cuda" in r["skipped"] and "torch.compile.cuda" in r["skipped"]


@pytest.mark.parametrize("name", ["gemm4096_bf16", "mlp_f16", "attn_d64_f16", "attn_d128_causal_bf16"])
def test_torch_forms_of_the_tensor_core_workloads_compute_their_chains(name):
    """What bench/gpu.py times PyTorch with (cuBLAS matmul/addmm, SDPA with is_causal and the
    chain's scale) computes each chain: in float32 on the cpu against fusec's reference."""
    torch = pytest.importorskip("torch")
    src, chain, _, tiny, kind, _ = gpu.TENSOR_CORE[name]
    inputs = gpu._tensor_core_inputs(name, tiny)
    want = fusec.reference(fusec.check(src).chain(chain), inputs, tiny, compute_f64=True)[0]
    fn = gpu._torch_tensor_core(torch, kind, tiny.get("D"))
    got = fn(*(torch.from_numpy(x.astype(np.float32)) for x in inputs)).numpy()
    np.testing.assert_allclose(got, np.asarray(want, np.float64), rtol=2e-2, atol=2e-2)


@pytest.mark.slow
def test_blas_epilogue_script_times_each_form_in_its_own_process_and_writes_its_json(tmp_path):
    """Each form is fusec's own build (the whole form planned with the old rule), checked against
    NumPy before it is timed, in a process of its own."""
    from bench import blas_epilogue
    assert blas_epilogue.main(["--sizes", "64,32,128", "--rows", "16,32,48", "--runs", "3",
                               "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("blas-epilogue-*.json")
    r = json.loads(path.read_text())
    forms = {"chunk, the plan's rows"} | {f"{f}, {n} rows" for f in ("chunk", "whole") for n in (16, 32)}
    assert set(r["forms"]) == forms                                  # 48 does not divide 64
    assert all(f["alone"]["runs"] == 3 and f["alone"]["min_ms"] <= f["alone"]["median_ms"] for f in r["forms"].values())


def test_blas_epilogue_builds_the_form_it_is_asked_for(monkeypatch):
    from bench import blas_epilogue
    from fusec.compiler.plan import cost, cost_cpu, planner
    for module in (cost, cost_cpu, planner):          # build("whole") replaces the rule for its process
        monkeypatch.setattr(module, "hoisted_matmuls", module.hoisted_matmuls)
    chunk = blas_epilogue.build("chunk", 16, 64, 32, 128)[1]
    assert chunk.index("_sgemm(101, ") > chunk.index("numba.prange(")      # the call in the loop
    whole = blas_epilogue.build("whole", 16, 64, 32, 128)[1]
    # one call for the whole product before the chunk loop, itself split among the workers
    # (emit/cpu.py: _gemm_chunks): its prange holds the call, the chunk loop's follows it
    first = whole.index("numba.prange(")
    call = whole.index("_sgemm(101, ")
    assert first < call < whole.index("numba.prange(", call) and "_hi" in whole[call:whole.index("\n", call)]


@pytest.mark.slow
def test_transposed_weights_script_writes_its_json(tmp_path):
    from bench import transposed_weights
    assert transposed_weights.main(["--sizes", "16,8,24", "--seconds", "0.01", "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("transposed-weights-*.json")
    r = json.loads(path.read_text())
    assert r["transposed_in_place"] is True                 # w read through BLAS's transpose flag
    assert set(r["impls"]) == {"fusec fused", "numpy x @ w.T", "numpy layer"}
    assert all(i["runs"] >= 10 and i["min_ms"] <= i["median_ms"] for i in r["impls"].values())


def test_quiesce_waits_for_another_thread_to_stop_spinning():
    stop = threading.Event()

    def spin(seconds):
        end = time.perf_counter() + seconds
        while time.perf_counter() < end and not stop.is_set():
            pass
    assert timing.quiesce(1.0)[1] is True                        # nothing else runs: no wait
    t = threading.Thread(target=spin, args=(0.3,))
    t.start()
    t0 = time.perf_counter()
    # 50 ms windows: on a loaded machine (CI's other worker on the second core) a spinner may be
    # off its core for a whole 5 ms window and look idle; over 50 ms it runs its share
    waited, idle = timing.quiesce(5.0, window=0.05)
    assert idle is True and waited >= 0.2 and time.perf_counter() - t0 < 4.0
    t.join()
    t = threading.Thread(target=spin, args=(10.0,))             # one that never stops: the cap
    t.start()
    try:
        waited, idle = timing.quiesce(0.2, window=0.05)
        assert idle is False and 0.2 <= waited < 2.0
    finally:
        stop.set()
        t.join()
    assert timing.quiesce(1.0, probe=lambda: None) == (0.0, None)   # no /proc: nothing to wait for


def test_quiesced_timing_makes_one_untimed_call_right_before_each_timed_one(monkeypatch):
    now, order, waits = [0.0], [], []
    monkeypatch.setattr(timing, "quiesce", lambda cap: (waits.append(cap), (0.01, len(waits) % 4 != 0))[1])

    def call(name):
        def f():
            order.append(name)
            now[0] += {"a": 0.001, "b": 0.002}[name]
        return f
    s = timing.measure({"a": call("a"), "b": call("b")},
                       timing.Budget(seconds=1.0, min_runs=6, max_runs=6, warmup=1, quiesce=0.5),
                       clock=lambda: now[0])
    after = order[2:]                                           # after one warm-up call each
    assert len(after) == 24 and all(after[i] == after[i + 1] for i in range(0, 24, 2))
    assert waits == [0.5] * 12                                  # before each untimed + timed pair
    assert s["a"].seconds == pytest.approx((0.001,) * 6) and s["b"].seconds == pytest.approx((0.002,) * 6)
    assert s["a"].capped + s["b"].capped == 3 and len(s["a"].waits) == 6
    assert s["a"].as_dict()["quiesce"] == {"median_ms": 10.0, "max_ms": 10.0, "capped": s["a"].capped}
    assert "quiesce" not in timing.Samples((0.1,), (0,)).as_dict()


def test_a_settled_run_has_its_own_file_and_table(tmp_path):
    fixture = json.loads((HERE / "fixture_result.json").read_text())
    settled = dict(fixture, budget=dict(fixture.get("budget", {}), settle_s=0.2))
    assert write_results(settled, tmp_path).name.endswith("-settle0.2.json")
    plain = dict(fixture, budget=dict(fixture.get("budget", {}), quiesce_s=0))
    assert write_results(plain, tmp_path).name.endswith("-noquiesce.json")
    assert "`--quiesce 0`" in table.render_result(dict(plain, _file="c.json"))
    quiesced = dict(fixture, budget=dict(fixture.get("budget", {}), quiesce_s=1.0))
    assert "then one untimed call (`--quiesce`)" in table.render_result(dict(quiesced, _file="d.json"))
    assert table.newest_per_machine([dict(fixture, _file="a.json"), dict(plain, _file="c.json"),
                                     dict(quiesced, _file="d.json")], size=fixture["size"])[-1]["_file"] == "d.json"
    chosen = table.newest_per_machine([dict(fixture, _file="a.json"), dict(settled, _file="b.json")],
                                      size=fixture["size"])
    assert [c["_file"] for c in chosen] == ["a.json", "b.json"]              # one table each
    assert "0.2 s idle before each call that follows another implementation's" in table.render_result(
        dict(settled, _file="b.json"))


def test_threads_are_given_to_their_pools_and_the_spinner_shows_in_slow_samples(tmp_path):
    from bench import threads
    # A's pool is thread 1; S's is thread 9, which keeps spinning into some of A's calls; thread 5
    # is a pool A and B share (as Numba and PyTorch share libgomp's)
    samples = [{"impl": "S", "seconds": 0.01, "threads": {"9": 0.01}} for _ in range(5)]
    samples += [{"impl": "A", "seconds": 0.02 if slow else 0.01,
                 "threads": {"1": 0.01, "5": 0.01, **({"9": 0.015} if slow else {})}}
                for slow in (True, False, True, False, False, True, False)]
    samples += [{"impl": "B", "seconds": 0.01, "threads": {"5": 0.01}} for _ in range(5)]
    own = threads.owners(samples)
    assert own == {"1": {"A"}, "9": {"S"}, "5": {"A", "B"}}
    rows = threads.summarise(samples)
    assert rows["A"]["other_threads_ms_slow"] == {"S": 15.0} and rows["A"]["other_threads_ms_fast"] == {}
    assert rows["A"]["median_ms"] == 10.0 and rows["A"]["runs"] == 7
    # the script end to end, at test size
    assert threads.main(["--only", "softmax", "--size", "tiny", "--rounds", "3", "--anchors", "numpy",
                         "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("threads-softmax-*.json")
    r = json.loads(path.read_text())
    assert set(r["impls"]) == {"fusec fused", "fusec unfused", "fusec dynamic", "numpy"}
    assert all(i["runs"] == 3 and i["min_ms"] <= i["median_ms"] for i in r["impls"].values())
    assert threads.main(["--only", "nope"]) == 1


def test_the_suite_refuses_a_negative_quiesce_and_an_unknown_workload(capsys):
    from bench.__main__ import main
    assert main(["--quiesce", "-1", "--no-doc"]) == 1
    assert "--quiesce takes seconds, 0 or more, not -1" in capsys.readouterr().err
    assert main(["--only", "nope", "--no-doc"]) == 1
    assert "unknown workload(s): nope" in capsys.readouterr().err


def test_the_table_goes_into_the_performance_page():
    """`python -m bench table` writes between the markers of docs/PERFORMANCE.md, which has them."""
    from bench.__main__ import _parser
    assert Path(_parser().parse_args([]).doc) == table.DOC
    assert table.DOC.name == "PERFORMANCE.md" and table.DOC.parent.name == "docs"
    text = table.DOC.read_text(encoding="utf-8")
    assert text.count(table.START) == 1 and text.count(table.END) == 1
    assert table.START not in (table.DOC.parents[1] / "README.md").read_text(encoding="utf-8")


def test_each_contender_s_max_ulp_stands_under_its_time(tmp_path):
    """Issue 39: the table states each contender's transcendental accuracy beside its time, from the
    newest `python -m bench.accuracy` result of the same cpu (another cpu's result is not used)."""
    results = tmp_path / "results"
    results.mkdir()
    (results / "cpu-test-2026-01-01.json").write_text((HERE / "fixture_result.json").read_text())

    def acc(date, cpu, fusec_exp):
        return {"date": date, "machine": {"cpu": cpu}, "accuracy": {"functions": {}, "contenders": {
            "fusec": {f: {"max_ulp": u} for f, u in (("exp", fusec_exp), ("tanh", 4.0), ("erf", 0.846))},
            "fusec accurate": {f: {"max_ulp": 0.502} for f in ("exp", "tanh", "erf")},
            "numpy": {f: {"max_ulp": 0.5} for f in ("exp", "tanh", "erf")},
            "jax.jit": {"skipped": "jax not installed"}}}}
    (results / "accuracy-2026-01-01T0000.json").write_text(json.dumps(acc("2026-01-01T00:00:00Z", "Test CPU", 0.9)))
    (results / "accuracy-2026-01-02T0000.json").write_text(json.dumps(acc("2026-01-02T00:00:00Z", "Test CPU", 0.978)))
    (results / "accuracy-2026-01-03T0000.json").write_text(json.dumps(acc("2026-01-03T00:00:00Z", "Other CPU", 7.0)))
    doc = tmp_path / "PERFORMANCE.md"
    doc.write_text(f"{table.START}\n{table.END}\n")
    table.update_doc(doc, results)
    rows = [ln for ln in doc.read_text().splitlines() if ln.startswith("| ")]
    head = [c.strip() for c in rows[0].strip("|").split("|")]
    (ulp,) = [[c.strip() for c in ln.strip("|").split("|")] for ln in rows if ln.startswith("| max ulp")]
    assert len(ulp) == len(head)
    by = dict(zip(head, ulp))
    assert by["fusec fused"] == by["fusec unfused"] == "0.978 / 4 / 0.846"     # newest of this cpu's
    assert by["numpy"] == "0.5 / 0.5 / 0.5" and by["jax.jit"] == "–"          # skipped: not measured
    assert "`--math accurate` gives 0.502 / 0.502 / 0.502 ulp" in doc.read_text()
    assert "accuracy-2026-01-02T0000.json" in doc.read_text()
