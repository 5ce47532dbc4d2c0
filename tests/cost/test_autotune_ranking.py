"""--autotune (measured tile choice, cached) and the ranking logic the measurement script uses.

The timing-dependent comparison of predicted and measured rankings is tests/cost/measure_model.py
(not in the suite: it takes minutes and depends on the machine's load)."""
import json
import os

import pytest

import fusec
from fusec.compiler.plan.autotune import tuning_key, kendall_tau, machine, top_candidates, tune
from fusec.compiler.plan.handplan import plan_from_dict
from fusec.compiler.plan.planner import plan_chain, signatures
from model_helpers import CPU, cpu, info_of

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOFTMAX = "chain s(x: f32[M, N]) -> f32[M, N] { return softmax(x) }"
MLP = "chain m(x: f32[M, D], w: f32[D, H], b: f32[H]) -> f32[M, H] { return gelu(x @ w + b) }"
BMM = "chain b(x: f32[B, M, K], w: f32[B, K, N], r: f32[B, M, N]) -> f32[B, M, N] { return gelu(x @ w) + r }"


def test_kendall_tau():
    assert kendall_tau({1: 3.0, 2: 2.0, 3: 1.0}, {1: 30.0, 2: 20.0, 3: 10.0}) == 1.0
    assert kendall_tau({1: 3.0, 2: 2.0, 3: 1.0}, {1: 10.0, 2: 20.0, 3: 30.0}) == -1.0
    assert kendall_tau({1: 3.0, 2: 2.0, 3: 1.0}, {1: 30.0, 2: 10.0, 3: 20.0}) == pytest.approx(1 / 3)


@pytest.mark.parametrize("src,binding,ops,loops", [(BMM, {"B": 12, "M": 256, "K": 256, "N": 256}, [1, 2], 3),
                                                   (SOFTMAX, {"M": 3072, "N": 2048}, [1, 2, 4, 5], 2)])
def test_model_ranks_chunkings_by_balance_then_cache(src, binding, ops, loops):
    # the candidates the measurement script times (BLAS on one thread per call): 1 chunk (one
    # core), 3 (a core idle half of the second round), 6 (balanced, tiles that fit the caches)
    one_blas_thread = cpu(blas_threads=1)
    info = info_of(src, binding, target="cpu")
    extent = binding[next(iter(binding))]
    predicted = {}
    for chunks in (1, 3, 6):
        tiles = [extent // chunks] + [0] * (loops - 1)
        p = plan_from_dict(info, "cpu", {"groups": [{"ops": ops, "block_tiles": tiles}]}, hw=one_blas_thread)
        predicted[chunks] = p.predicted_s
    assert sorted(predicted, key=predicted.get) == [6, 3, 1]
    assert predicted[1] > 1.3 * predicted[6]
    assert kendall_tau(predicted, {1: 3.0, 3: 2.0, 6: 1.0}) == 1.0


def test_a_whole_matmul_before_the_chunk_loop_does_not_depend_on_the_chunks():
    # the cpu lowering calls BLAS once for a zero-filled 2-D matmul whose row tiles make the
    # whole product; only its epilogue is split into chunks
    info = info_of(MLP, {"M": 768, "D": 256, "H": 512}, target="cpu")
    t = {c: plan_from_dict(info, "cpu", {"groups": [{"ops": [1, 2], "block_tiles": [768 // c, 0]}]}, hw=CPU)
         .predicted_s for c in (1, 6)}
    assert t[1] == pytest.approx(t[6], rel=0.05)


def test_tune_keeps_the_fastest_measured_candidate_and_caches_it():
    info = info_of(SOFTMAX, {"M": 3072, "N": 2048}, target="cpu")
    plan = plan_chain(info, "cpu", hw=CPU)
    cands = top_candidates(plan, 0, 3)
    assert len(cands) == 3 and cands[0][1] <= cands[1][1] <= cands[2][1]
    slowest_by_model = cands[-1][0]
    calls = []

    def measure(tuned):
        (tiles,) = tuned.values()
        calls.append(tiles["block"])
        return 1.0 if tiles["block"] == list(slowest_by_model.block) else 2.0   # the model's last is fastest

    cache = {}
    tuned, trials = tune(plan, measure, k=3, cache=cache, save=False)
    assert len(calls) == 3
    (sig,) = signatures(plan)
    assert tuned[sig]["block"] == list(slowest_by_model.block)
    entry = cache[tuning_key(sig, machine(plan), "cpu")]
    assert len(entry["trials"]) == 3 and all("predicted_s" in t and "measured_s" in t for t in entry["trials"])
    # a second compile reuses the cached choice without timing anything
    again, _ = tune(plan, lambda tuned: pytest.fail("timed again"), cache=cache, save=False)
    assert again == tuned
    # and the planner takes it, saying so
    tuned_plan = plan_chain(info, "cpu", hw=CPU, tuned=tuned)
    assert tuned_plan.kernels[0].block_tiles == slowest_by_model.block
    assert any("measured fastest (--autotune)" in d for d in tuned_plan.decisions)


@pytest.mark.slow
def test_autotune_option_end_to_end(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path))
    from fusec.compiler import calibrate
    monkeypatch.setattr(calibrate, "_CPU", CPU)              # a fixed profile, not this machine's
    prog = fusec.compile(SOFTMAX, target="cpu", options={"autotune": True, "baseline": False})
    compiled = prog.s.compiled({"M": 256, "N": 64})
    assert any("(--autotune)" in d for d in compiled.plan["decisions"])
    cache = json.loads((tmp_path / "autotune.json").read_text())
    (entry,) = cache.values()
    assert entry["tiles"]["block"] == compiled.plan["groups"][0]["block_tiles"]
    assert [t["tiles"]["block"] for t in entry["trials"]]
    x = __import__("numpy").random.default_rng(0).standard_normal((256, 64)).astype("float32")
    assert prog.s.check([x])[0].ok
