"""The differential layer: random chains (tests/differential/gen.py) through fusec's targets and
through an independent PyTorch translation of the same FDSL (tests/differential/torch_oracle.py),
compared with runtime/compare.py's tolerances (tests/differential/harness.py).

- 300 chains through `--target reference` against torch, in the chains' dtypes and in float64;
- 20 more through cuda-sim (fused and unfused) and mlir-jit, 2 through cpu (fused and unfused);
- the oracle and the generator themselves: a wrong meaning of an op is caught, and the chains
  reach the widened grammar (every dtype, slices, gathers, scans, keepdims, special values).

Every run checks the same chains; FUSEC_EXPLORE=1 draws new seeds (printed with any failure).
Long runs: `python -m tests.differential -n 10000 --targets reference,cuda-sim,mlir-jit`.
"""
import collections
import os
import time

import pytest
import torch

from tests.differential import torch_oracle
from tests.differential.gen import chain_case
from tests.differential.harness import check

BASE = int(time.time()) % 1_000_000 * 1000 if os.environ.get("FUSEC_EXPLORE") == "1" else 0
REFERENCE_BATCHES, BATCH = 6, 50
COMPILED = 20
CPU_SEEDS = (7000, 7002)       # a cpu build is a Numba compile of each kernel: seconds per chain


def _report(results) -> str:
    return "\n\n".join(f"{r.case.describe()}" + "\n".join(r.problems) for r in results)


@pytest.mark.parametrize("batch", range(REFERENCE_BATCHES))
def test_reference_agrees_with_torch(batch):
    seeds = range(BASE + batch * BATCH, BASE + (batch + 1) * BATCH)
    results = [check(chain_case(s)) for s in seeds]
    bad = [r for r in results if r.status in ("disagree", "invalid")]
    assert not bad, _report(bad)
    # most chains are defined (a float cast to an integer of NaN is not) and every one ran
    assert sum(r.status == "agree" for r in results) >= BATCH * 0.9
    assert all("reference" in r.ran for r in results if r.status == "agree")


@pytest.mark.parametrize("k", range(COMPILED))
def test_cuda_sim_and_mlir_jit_agree_with_torch(k):
    case = chain_case(BASE + 5000 + k)
    r = check(case, ("reference", "cuda-sim", "mlir-jit"))
    assert r.status in ("agree", "undefined"), _report([r])
    if r.status == "agree":
        assert "mlir-jit/fused" in r.ran
        assert {"cuda-sim/fused", "cuda-sim/unfused"} <= set(r.ran)


@pytest.mark.parametrize("seed", CPU_SEEDS)
def test_cpu_agrees_with_torch(seed):
    case = chain_case(BASE + seed)
    r = check(case, ("reference", "cpu"))
    assert r.status in ("agree", "undefined"), _report([r])


@pytest.mark.slow
@pytest.mark.parametrize("k", range(20))      # 20 more seeds (40 took 360 s of the slow tier on 2 cores)
def test_more_chains_on_cpu(k):
    r = check(chain_case(BASE + 8000 + k), ("reference", "cpu"))
    assert r.status in ("agree", "undefined"), _report([r])


def test_a_wrong_meaning_is_caught(monkeypatch):
    """The layer fails when the two sides read an op differently: `maximum` as torch's fmax
    (NaN-ignoring, which FDSL says it is not), `tanh` as `sin`."""
    def statuses(n):
        return collections.Counter(check(chain_case(s)).status for s in range(n))
    monkeypatch.setitem(torch_oracle.BINARY, "maximum", torch.fmax)
    assert statuses(300)["disagree"] >= 1
    monkeypatch.setitem(torch_oracle.BINARY, "maximum", torch.maximum)
    monkeypatch.setitem(torch_oracle.UNARY, "tanh", torch.sin)
    assert statuses(100)["disagree"] >= 10


def test_the_chains_reach_the_widened_grammar():
    import fusec
    ops, dtypes, keep, neg_axis, specials = collections.Counter(), collections.Counter(), 0, 0, 0
    for s in range(300):
        case = chain_case(s)
        typed = fusec.check(case.source).chains[0]
        for n in typed.nodes:
            ops[n.op] += 1
            if n.attr("keepdims"):
                keep += 1
        dtypes[case.dtype] += 1
        neg_axis += "axis=-" in case.source
        specials += case.specials
    for op in ("slice", "concat", "gather", "embedding", "take_along_axis", "cumsum", "cumprod", "argmax", "argmin",
               "matmul", "softmax", "log_softmax", "layernorm", "rmsnorm", "where", "clamp", "cast", "any", "all",
               "prod", "transpose", "permute", "reshape", "broadcast_to", "full", "full_like", "arange", "pow"):
        assert ops[op], f"no chain uses {op}"
    assert set(dtypes) == {"f16", "bf16", "f32", "f64", "i32", "i64"}
    assert keep > 30 and neg_axis > 30 and 100 < specials < 200


@pytest.mark.parametrize("target", ["reference", "mlir-jit", "cuda-sim"])
def test_layernorm_of_a_row_whose_variance_overflows(target):
    """docs/FDSL.md ("NaN and special values", layernorm): the formula's scale 1 / sqrt(inf) is 0,
    so the row is beta where x - mean is finite; PyTorch's layer_norm gives NaN for that row,
    so the oracle computes FDSL's formula (found by the oracle, seed 100096)."""
    import numpy as np
    import torch.nn.functional as F

    import fusec
    src = "chain r(x: f32[2, 4], g: f32[4], b: f32[4]) -> f32[2, 4] {\n    return layernorm(x, g, b)\n}\n"
    x = np.array([[0.5, 1.0, -1.0, 2.0], [3.4e36, 1.0, -1.0, 2.0]], np.float32)
    g = np.full(4, 2.0, np.float32)
    b = np.array([0.1, 0.2, 0.3, 0.4], np.float32)
    got = fusec.compile(src, target=target).r(x, g, b)
    np.testing.assert_array_equal(got[1], b)
    assert np.isfinite(got[0]).all()
    assert torch.isnan(F.layer_norm(torch.from_numpy(x), (4,))[1]).all()
