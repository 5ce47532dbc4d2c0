"""Issue 18's edge chains (edge.fdsl) through the command line, with their special-value inputs
given by --inputs, on all four targets: each exits 0, says how many NaN and infinities each
output holds, and every target has the reference's NaN and infinities, position by position."""
from __future__ import annotations

import contextlib
import io
import os

import numpy as np
import pytest

from fusec.cli import main
from fusec.runtime import npz
from specialvalues import fast_simulator

# fusec/cli.py prints sum= and mean|x|= of every output of a reference target: NumPy warns that
# inf + -inf is invalid there (the report's own arithmetic, not the chain's)
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered in reduce:RuntimeWarning")

HERE = os.path.dirname(os.path.abspath(__file__))
EDGE = os.path.join(HERE, "edge.fdsl")
TARGETS = ("reference", "mlir-jit", "cpu", "cuda-sim")

X = np.array([0.0, -0.0, 1e-45, -1e-45, 1e-40, 1.0, -1.0, 10.0, -10.0, 20.0, -20.0, 80.0, -80.0,
              88.7, 88.8, -87.3, -104.0, 1e4, -1e4, np.inf, -np.inf, np.nan, 3.4e38, -3.4e38], np.float32)
INF, NAN = np.inf, np.nan
ROWS = np.array([
    [0.5, -1.0, 2.0, 3.0, -0.5, 0.0, 1.0, -2.0],            # finite
    [0.5, NAN, 2.0, 3.0, -0.5, 0.0, 1.0, -2.0],             # a NaN
    [0.5, -1.0, 2.0, INF, -0.5, 0.0, 1.0, -2.0],            # +inf
    [0.5, -1.0, 2.0, -INF, -0.5, 0.0, 1.0, -INF],           # -inf
    [-INF] * 8,                                             # only -inf
    [INF, -INF, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0],              # both infinities
    [80.0, -80.0, 88.8, -104.0, 1e4, -1e4, 3.4e38, -3.4e38],   # huge logits
    [NAN, INF, -INF, 0.0, -0.0, 1e-45, 1.0, -1.0],          # NaN among infinities
], np.float32)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    path = tmp_path_factory.mktemp("edge") / "in.npz"
    npz.save(str(path), {"edge": ({"x": X}, []), "rows": ({"r": ROWS}, [])})
    return str(path)


@pytest.fixture(scope="module")
def runs(inputs, tmp_path_factory):
    """target -> (exit status, printed report, saved outputs by chain), from `fusec edge.fdsl
    --target T --inputs in.npz --save out.npz` (in this process, which runs the simulator)."""
    out = {}
    for target in TARGETS:
        saved = str(tmp_path_factory.mktemp(target) / "out.npz")
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed), fast_simulator():
            status = main([EDGE, "--target", target, "--inputs", inputs, "--save", saved])
        out[target] = status, printed.getvalue(), npz.load_npz(saved)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_every_target_exits_0_with_the_references_nan_and_inf(runs, target):
    status, printed, saved = runs[target]
    assert status == 0, printed
    ref = runs["reference"][2]
    for chain in ("edge", "rows"):
        for k, want in ref[chain]["out"].items():
            got = saved[chain]["out"][k]
            assert np.array_equal(np.isnan(got), np.isnan(want)), (target, chain, k, got, want)
            assert np.array_equal(np.isposinf(got), np.isposinf(want)), (target, chain, k, got, want)
            assert np.array_equal(np.isneginf(got), np.isneginf(want)), (target, chain, k, got, want)
            finite = np.isfinite(want)
            np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-30, err_msg=f"{target} {chain} {k}")


@pytest.mark.slow
def test_the_report_counts_nan_and_inf(runs):
    printed = runs["cpu"][1]
    assert "out 0 f32[24]: max abs err" in printed
    assert "NaN 1, inf 4 as the reference -> ok" in printed         # exp: NaN, inf, inf, inf(1e4), inf
    assert "out 0 f32[8, 8]:" in printed and "-> ok" in printed
    sim = runs["cuda-sim"][1]
    assert "MISMATCH" not in sim and sim.count("as the reference -> ok") == 8


def test_the_rows_are_what_the_language_reference_says(runs):
    """docs/FDSL.md: softmax is NaN along a slice holding a NaN, an inf (inf - inf), or only -inf;
    max is NaN where the slice holds a NaN."""
    softmax, _, mx = (runs["reference"][2]["rows"]["out"][k] for k in ("0", "1", "2"))
    assert np.isfinite(softmax[[0, 3, 6]]).all() and np.isnan(softmax[[1, 2, 4, 5, 7]]).all()
    np.testing.assert_allclose(softmax[3].sum(), 1, rtol=1e-6)
    assert np.isnan(mx[[1, 7]]).all() and mx[2] == INF and mx[4] == -INF and mx[5] == INF
