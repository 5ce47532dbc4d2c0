"""--autotune (measured tile choice, cached) and the ranking logic the measurement script uses.

The timing-dependent comparison of predicted and measured rankings is tests/cost/measure_model.py
(not in the suite: it takes minutes and depends on the machine's load)."""
import json
import os

import pytest

import fusec
from fusec.compiler.autotune import cache_key, kendall_tau, machine, top_candidates, tune
from fusec.compiler.plan import plan_chain, plan_from_dict, signatures
from model_helpers import CPU, info_of

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOFTMAX = "chain s(x: f32[M, N]) -> f32[M, N] { return softmax(x) }"
MLP = "chain m(x: f32[M, D], w: f32[D, H], b: f32[H]) -> f32[M, H] { return gelu(x @ w + b) }"


def test_kendall_tau():
    assert kendall_tau({1: 3.0, 2: 2.0, 3: 1.0}, {1: 30.0, 2: 20.0, 3: 10.0}) == 1.0
    assert kendall_tau({1: 3.0, 2: 2.0, 3: 1.0}, {1: 10.0, 2: 20.0, 3: 30.0}) == -1.0
    assert kendall_tau({1: 3.0, 2: 2.0, 3: 1.0}, {1: 30.0, 2: 10.0, 3: 20.0}) == pytest.approx(1 / 3)


@pytest.mark.parametrize("src,binding,ops", [(MLP, {"M": 768, "D": 256, "H": 512}, [1, 2]),
                                             (SOFTMAX, {"M": 3072, "N": 2048}, [1, 2, 4, 5])])
def test_model_ranks_chunkings_by_balance_then_cache(src, binding, ops):
    # the candidates the measurement script times: 1 chunk (one core), 3 (a core idle half of the
    # second round), 6 (balanced, tiles that fit the caches)
    info = info_of(src, binding, target="cpu")
    rows = binding["M"]
    predicted = {}
    for chunks in (1, 3, 6):
        p = plan_from_dict(info, "cpu", {"groups": [{"ops": ops, "block_tiles": [rows // chunks, 0]}]}, hw=CPU)
        predicted[chunks] = p.predicted_s
    assert sorted(predicted, key=predicted.get) == [6, 3, 1]
    assert kendall_tau(predicted, {1: 3.0, 3: 2.0, 6: 1.0}) == 1.0


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
    entry = cache[cache_key(sig, machine(plan), "cpu")]
    assert len(entry["trials"]) == 3 and all("predicted_s" in t and "measured_s" in t for t in entry["trials"])
    # a second compile reuses the cached choice without timing anything
    again, _ = tune(plan, lambda tuned: pytest.fail("timed again"), cache=cache, save=False)
    assert again == tuned
    # and the planner takes it, saying so
    tuned_plan = plan_chain(info, "cpu", hw=CPU, tuned=tuned)
    assert tuned_plan.groups[0].block_tiles == slowest_by_model.block
    assert any("measured fastest (--autotune)" in d for d in tuned_plan.decisions)


def test_autotune_option_end_to_end(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path))
    from fusec.compiler import hardware
    monkeypatch.setattr(hardware, "_CPU", CPU)               # a fixed profile, not this machine's
    prog = fusec.compile(SOFTMAX, target="cpu", options={"autotune": True, "baseline": False})
    compiled = prog.s.compiled({"M": 256, "N": 64})
    assert any("(--autotune)" in d for d in compiled.plan["decisions"])
    cache = json.loads((tmp_path / "autotune.json").read_text())
    (entry,) = cache.values()
    assert entry["tiles"]["block"] == compiled.plan["groups"][0]["block_tiles"]
    assert [t["tiles"]["block"] for t in entry["trials"]]
    x = __import__("numpy").random.default_rng(0).standard_normal((256, 64)).astype("float32")
    assert prog.s.check([x])[0].ok
