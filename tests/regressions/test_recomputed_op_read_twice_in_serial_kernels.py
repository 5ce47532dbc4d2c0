"""Regression (found by the torch oracle, tests/differential seed 40041): on cuda-sim, a scan's
scaled result `t0 = cumsum(x) * 0.25`, recomputed in two serial kernels (an argmin over it, and
the value itself), was scaled twice: erfc(t1) + t0 came out 1.242 where the reference has 1.028
(x = -1.1408). tag_groups put the second kernel's copy of the recomputed op before the original,
among the first kernel's ops; bufferization reads program order as run order, so the first
kernel's copy, the last reader in the program, wrote over the scan's buffer that the second
kernel's copy read after it. A copy now sits just before the first op of its kernel that reads
it (compiler/transforms/tile_and_fuse.py: tag_groups)."""
import numpy as np

import fusec
from fusec.runtime import reference

SRC = """\
chain r(p1: f64[N]) -> (f64[N], f64[N]) {
    t0 = cumsum(p1, axis=-1) * 0.25
    t1 = t0 + cast(argmin(t0, axis=0, keepdims=true), f64)
    return erfc(t1) + t0, t1
}
"""


def test_recomputed_scan_consumer_is_applied_once_on_cuda_sim():
    x = np.array([-1.14081253])
    prog = fusec.compile(SRC, target="cuda-sim", options={"baseline": False})
    want = reference.run_chain(prog.r.typed, [x], {"N": 1})
    got = prog.r(x)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
