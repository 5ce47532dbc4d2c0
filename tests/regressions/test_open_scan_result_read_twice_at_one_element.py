"""Open bug (found by the torch oracle, tests/differential seed 40041, not fixed yet): on
cuda-sim, a cumsum over an axis of one element whose result a fused kernel reads twice (an
argmin over it, and the value itself) comes out wrong: erfc(t1) + t0 is 1.242 where the
reference has 1.028 (x = -1.1408). The same shape of bug as
test_row_kernel_root_does_not_write_over_its_input.py (a result applied twice), on another
path. Strict xfail: the test starts failing (passing) the day it is fixed, and then the marker
goes."""
import numpy as np
import pytest

import fusec
from fusec.runtime import reference

SRC = """\
chain r(p1: f64[N]) -> (f64[N], f64[N]) {
    t0 = cumsum(p1, axis=-1) * 0.25
    t1 = t0 + cast(argmin(t0, axis=0, keepdims=true), f64)
    return erfc(t1) + t0, t1
}
"""


@pytest.mark.xfail(strict=True, reason="open: cuda-sim applies the scan's consumer twice at N=1 (seed 40041)")
def test_scan_read_twice_at_one_element_on_cuda_sim():
    x = np.array([-1.14081253])
    prog = fusec.compile(SRC, target="cuda-sim", options={"baseline": False})
    want = reference.run_chain(prog.r.typed, [x], {"N": 1})
    got = prog.r(x)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
