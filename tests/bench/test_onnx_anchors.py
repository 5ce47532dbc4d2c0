"""The onnxruntime and TVM anchors of `python -m bench` on the seven micro workloads at tiny size
(their ONNX forms, bench/onnx_forms.py, agree with fusec's float64 reference), and the memory-
equalised mode: fusec's fresh outputs, torch's out=, onnxruntime's preallocated outputs, the
child process with huge pages, both timings in the JSON and the table. onnxruntime and torch are
in the dev extra: those tests always run. TVM (apache-tvm, the bench extra only) is skipped
where it is not installed (pytest.importorskip, only for tvm). Nothing here asserts a timing."""
import json

import numpy as np
import pytest

import fusec
from bench import __main__ as bench_main
from bench import anchors, table, timing
from bench.suite import run_suite
from bench.workloads import WORKLOADS


def _oracle(w, inputs):
    typed = fusec.check(str(w.fdsl))
    chain = next(c for c in typed.chains if c.name == w.chain)
    return np.asarray(fusec.reference(chain, inputs, w.binding("tiny"), compute_f64=True)[0])


def _agrees(impl, want):
    impl.call()
    got = impl.result()
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("w", WORKLOADS, ids=lambda w: w.name)
def test_onnxruntime_anchor_agrees_in_both_memory_modes(w):
    inputs = w.make_inputs(w.binding("tiny"))
    want = _oracle(w, inputs)
    for memory in anchors.MEMORY_MODES:
        impl = anchors.prepare("onnxruntime", w, inputs, memory)
        _agrees(impl, want)
        _agrees(impl, want)                   # a second call: the bound outputs rewritten
        assert impl.notes[0] == "torch.onnx.export(dynamo=True)" and impl.cold_s > 0
        assert impl.detail["preallocated"] is (memory == "equalised")
        assert any("spinning off" in n for n in impl.notes)


@pytest.mark.parametrize("w", WORKLOADS, ids=lambda w: w.name)
def test_tvm_anchor_agrees(w):      # needs apache-tvm (the bench extra); skipped without it
    pytest.importorskip("tvm")
    inputs = w.make_inputs(w.binding("tiny"))
    impl = anchors.prepare("tvm", w, inputs)
    _agrees(impl, _oracle(w, inputs))
    assert impl.detail["tuned"] is False and impl.detail["build_s"] > 0
    assert any(n.startswith("untuned TVM: MetaSchedule") for n in impl.notes)


def test_onnx_anchors_missing_are_skipped_with_a_note(monkeypatch):
    monkeypatch.setattr(anchors, "_have", lambda module: False)
    w = WORKLOADS[0]
    inputs = w.make_inputs(w.binding("tiny"))
    for a in ("onnxruntime", "tvm"):
        with pytest.raises(anchors.Skip, match="not installed"):
            anchors.prepare(a, w, inputs)


@pytest.mark.parametrize("name", ["ew_chain", "bias_gelu_res", "softmax", "mlp", "conv_bn_relu", "layernorm"])
def test_equalised_torch_writes_into_one_preallocated_output_where_the_last_op_allows(name):
    w = next(x for x in WORKLOADS if x.name == name)
    inputs = w.make_inputs(w.binding("tiny"))
    impl = anchors.prepare("torch", w, inputs, "equalised")
    first = impl.call()
    _agrees(impl, _oracle(w, inputs))
    if name == "layernorm":                 # layer_norm takes no out=: a fresh output, said so
        assert "no out=" in impl.notes[0]
        held = [impl.call() for _ in range(3)]
        assert len({t.data_ptr() for t in held + [first]}) == 4
    else:
        assert "preallocated output (out=)" in impl.notes[0]
        assert impl.call().data_ptr() == first.data_ptr()


@pytest.mark.slow
def test_equalised_fusec_hands_back_a_fresh_output_each_call():
    """Default: the planned pool (outputs dropped at once come back from its two buffers);
    equalised: Executable.fresh_outputs, a new array every call (held: all distinct)."""
    w = next(x for x in WORKLOADS if x.name == "softmax")
    inputs = w.make_inputs(w.binding("tiny"))
    want = _oracle(w, inputs)
    default = anchors.fusec_impls(w, w.binding("tiny"), inputs, "cpu", "default")[0]
    _agrees(default, want)
    assert len({default.call()[0].ctypes.data for _ in range(6)}) <= 2
    fresh = anchors.fusec_impls(w, w.binding("tiny"), inputs, "cpu", "equalised")[0]
    _agrees(fresh, want)
    kept = [fresh.call()[0] for _ in range(6)]
    assert len({k.ctypes.data for k in kept}) == 6


def test_the_equalised_environment_asks_for_huge_pages_and_keeps_other_tunables(monkeypatch):
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=0")
    env = bench_main._equalised_env()
    assert env["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"
    assert env["THP_MEM_ALLOC_ENABLE"] == "1"
    monkeypatch.setenv("GLIBC_TUNABLES", env["GLIBC_TUNABLES"])
    monkeypatch.setenv("THP_MEM_ALLOC_ENABLE", "1")
    assert bench_main._has_equalised_env()


@pytest.mark.slow
def test_both_memory_modes_are_recorded_and_shown(tmp_path):
    """`python -m bench --memory both` at tiny size: the default timing here, the equalised one in
    a child started with huge pages, both in the JSON and in the table, every anchor agreeing."""
    out = tmp_path / "results"
    rc = bench_main.main(["--size", "tiny", "--only", "softmax", "--anchors", "numpy,torch,onnxruntime",
                          "--out", str(out), "--no-doc", "--quiet", "--seconds", "0.01"])
    assert rc == 0
    (path,) = out.glob("*.json")
    r = json.loads(path.read_text())
    assert r["memory"]["mode"] == "default" and "hugetlb=1" not in (r["memory"]["GLIBC_TUNABLES"] or "")
    eq = r["equalised"]
    assert eq["memory"]["mode"] == "equalised" and "glibc.malloc.hugetlb=1" in eq["memory"]["GLIBC_TUNABLES"]
    assert eq["memory"]["THP_MEM_ALLOC_ENABLE"] == "1"
    for res in (r["workloads"][0], eq["workloads"][0]):
        assert {"fusec fused", "numpy", "torch", "onnxruntime"} <= set(res["impls"])
        assert all(e["agreement"]["ok"] for e in res["impls"].values())
    assert eq["workloads"][0]["impls"]["onnxruntime"]["detail"]["preallocated"] is True
    section = table.render_result(dict(r, _file=path.name))
    assert "Memory-equalised" in section and section.count("| softmax |") == 3   # two timings, compile
    assert "| onnxruntime |" in section.split("\n")[4]


def test_the_table_says_tvm_ran_untuned_and_why(tmp_path):
    w = next(x for x in WORKLOADS if x.name == "softmax")
    budget = timing.Budget(seconds=0.01, min_runs=2, max_runs=2, warmup=1, quiesce=0)
    r = run_suite((w,), "tiny", ("onnxruntime",), budget, log=lambda s: None,
                  bandwidth={"gbps": 10.0}, gemm={"gflops": 10.0})
    entry = r["workloads"][0]["impls"]
    assert entry["onnxruntime"]["agreement"]["ok"] and r["memory"]["mode"] == "default"
    entry["tvm"] = dict(entry["onnxruntime"], detail={"tuned": False, "untuned_reason": "crashed (signal 11)"})
    section = table.render_result(dict(r, _file="r.json"))
    assert "TVM ran untuned (DLight's default cpu schedules): MetaSchedule crashed (signal 11)." in section
    assert " tvm |" in section.splitlines()[2] and " onnxruntime |" in section.splitlines()[2]


def test_an_equalised_run_without_its_environment_starts_again_with_it(monkeypatch):
    """The allocators read their settings at process start: `--memory equalised` started without
    them re-executes itself with them (os.execve), the same arguments."""
    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE", raising=False)
    seen = {}

    class Execed(Exception):
        pass

    def fake_execve(path, argv, env):
        seen.update(path=path, argv=argv, env=env)
        raise Execed
    monkeypatch.setattr(bench_main.os, "execve", fake_execve)
    argv = ["--memory", "equalised", "--size", "tiny", "--only", "softmax", "--no-doc"]
    with pytest.raises(Execed):
        bench_main.main(argv)
    assert seen["argv"][1:] == ["-m", "bench", *argv]
    assert "glibc.malloc.hugetlb=1" in seen["env"]["GLIBC_TUNABLES"] and seen["env"]["THP_MEM_ALLOC_ENABLE"] == "1"


def test_an_equalised_run_alone_has_its_own_file_and_table(tmp_path):
    from bench.suite import write_results
    w = next(x for x in WORKLOADS if x.name == "softmax")
    budget = timing.Budget(seconds=0.01, min_runs=2, max_runs=2, warmup=1, quiesce=0)
    r = run_suite((w,), "tiny", ("numpy",), budget, log=lambda s: None, bandwidth={"gbps": 10.0},
                  gemm={"gflops": 10.0}, memory="equalised")
    path = write_results(r, tmp_path)
    assert path.name.endswith("-tiny-equalised-noquiesce.json")
    default = dict(r, memory={"mode": "default"})
    chosen = table.newest_per_machine([dict(r, size="full", _file="a"), dict(default, size="full", _file="b")])
    assert sorted(c["memory"]["mode"] for c in chosen) == ["default", "equalised"]      # neither hides the other
    assert "Memory-equalised run alone" in table.render_result(dict(r, _file=path.name))
