"""bench/kernel_clock.py: each kernel of a cpu build clocked beside its predicted time."""
import json

import numpy as np

from bench import kernel_clock

MODULE = '''import numba
import numpy as np


@numba.njit(parallel=True)
def _run_f_planned(arg0, _out0):
    """@f (f32[4]) -> (f32[4]) at -:1:1."""
    alloc = _out0
    for i in numba.prange(0, 4):
        alloc[i] = arg0[i] + 1
    t = 2
    for i in numba.prange(0, 4):
        alloc[i] = alloc[i] * t
    return (alloc,)


def run_f(arg0):
    return _run_f_planned(arg0, np.empty(4, np.float32))
'''


def test_each_top_level_loop_is_clocked_and_the_module_still_runs():
    clocked, heads = kernel_clock.instrument(MODULE)
    assert heads == ["for i in numba.prange(0, 4):"] * 2
    assert "def _run_f_planned(arg0, _out0, _KC):" in clocked
    assert "return _run_f_planned(arg0, np.empty(4, np.float32), _KC)" in clocked
    assert clocked.count("_kc_t = _kc_tsc()") == 2 and "_KC[1] += _kc_tsc() - _kc_t" in clocked
    ns = {}
    exec(compile(clocked, "<clocked>", "exec"), ns)
    (out,) = ns["run_f"](np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal(out, [2, 4, 6, 8])
    assert (ns["_KC"][:2] > 0).all()



def test_a_chain_s_kernels_are_timed_beside_their_prediction(tmp_path, capsys):
    src = tmp_path / "two.fdsl"
    src.write_text("chain two(x: f32[M, N], w: f32[N, N]) -> f32[N] {\n"        # 2 kernels: the column
                   "    return sum(softmax(x, axis=-1) @ w, axis=0)\n}\n")      # sum has no row loop left
    assert kernel_clock.main([str(src), "--bind", "M=256,N=128", "--calls", "5", "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("kernel-clock-two-*.json")
    r = json.loads(path.read_text())
    assert r["mapped"] and r["blocks"] == r["plan_kernels"] >= 2
    for k in r["kernels"]:
        assert k["predicted_ms"] > 0 and 0 < k["measured_min_ms"] <= k["measured_median_ms"]
    assert sum(k["measured_min_ms"] for k in r["kernels"]) <= r["wall_median_ms"] * 1.5
    assert "plan kernels" in capsys.readouterr().out


def test_a_bad_binding_is_a_usage_error(tmp_path, capsys):
    src = tmp_path / "one.fdsl"
    src.write_text("chain one(x: f32[M]) -> f32[M] {\n    return exp(x)\n}\n")
    assert kernel_clock.main([str(src), "--bind", "M=x"]) == 1
    assert "--bind" in capsys.readouterr().err
