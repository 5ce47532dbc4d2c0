"""bench/accuracy.py: its sampling covers each range by bit pattern with the edges dense, its
ulp measure gives 0.5 for a correctly rounded result and sees a one-ulp slip, a flushed subnormal
and a lost sign of zero, and a small run records each contender or why it was skipped."""
import numpy as np

from bench import accuracy as acc

F32 = np.float32


def test_the_sample_spans_the_range_by_bit_pattern_with_every_pattern_near_the_edges():
    fn = acc.FUNCTIONS["tanh"]
    x = acc.sample(fn, stride=65521, window=16)
    assert x.dtype == F32 and np.unique(x.view(np.uint32)).size == x.size
    assert (x >= F32(fn.lo)).all() and (x <= F32(fn.hi)).all()
    assert (x < 0).any() and (x > 0).any() and (np.abs(x[x != 0]) < 1e-30).any()   # every binade
    near = np.array([F32(0.0004)]).view(np.uint32)[0]
    have = set(x.view(np.uint32).tolist())
    assert all(int(b) in have for b in range(near - 16, near + 17))


def test_the_ulp_measure():
    fn = acc.FUNCTIONS["exp"]
    x = np.concatenate([np.linspace(-100, 88, 20001, dtype=F32), np.array([np.inf, -np.inf, np.nan], F32)])
    with np.errstate(all="ignore"):
        right = np.exp(x.astype(np.float64)).astype(F32)
    r = acc.errors(fn, x, right)
    assert r["max_ulp"] <= 0.5 and r["exact"]["wrong"] == 0 and r["subnormal"]["zeroed"] == 0
    slipped = right.copy()
    i = int(np.flatnonzero(x == F32(1.0))[0]) if (x == F32(1.0)).any() else 10000
    slipped[i] = np.nextafter(slipped[i], np.inf)
    r = acc.errors(fn, x, slipped)
    assert 0.5 < r["max_ulp"] <= 1.5 and r["worst_x"] == float(x[i]) and r["over_1_ulp"] <= 1
    flushed = np.where(np.abs(right) < np.finfo(F32).tiny, F32(0), right)
    r = acc.errors(fn, x, flushed)
    assert r["subnormal"]["zeroed"] == r["subnormal"]["points"] > 0 and r["max_ulp"] <= 0.5
    t = acc.FUNCTIONS["tanh"]
    z = np.array([-0.0, 0.0, 0.5], F32)
    r = acc.errors(t, z, np.abs(np.tanh(z)))
    assert r["exact"]["wrong"] == 1 and r["exact"]["examples"][0][0] == 0.0


def test_a_small_run_records_each_contender_or_why_not():
    res = acc.measure_accuracy(["exp", "erf"], ["numpy", "fusec accurate"], stride=1 << 20, window=8,
                               log=lambda *_: None)
    for name in ("numpy", "fusec accurate"):
        entry = res["contenders"][name]
        assert "skipped" not in entry, entry
        assert entry["exp"]["points"] > 1000 and entry["exp"]["max_ulp"] <= 3
    assert res["contenders"]["fusec accurate"]["exp"]["max_ulp"] <= 1.0
    assert res["functions"]["erf"]["range"] == [acc.FUNCTIONS["erf"].lo, acc.FUNCTIONS["erf"].hi]
