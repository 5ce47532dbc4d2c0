"""Regression: a row kernel's root wrote over the buffer of an input it reads. Elementwise fusion
and CSE leave one `tensor.empty` for all values of a shape, and bufferization wrote the root
into the buffer of another kernel's result it reads (in place, element by element: right for one
thread). A root at block level is computed by every thread of the row (here a row of one element
under a sum of two): each thread read the element the previous one had written, and
`t + s` came out as `(t + s) * 0.25 + s`. The root of a row kernel now gets a buffer of its own
(compiler/transforms/tile_and_fuse.py: own_destinations). Found by the torch oracle
(tests/differential, seed 1113)."""
import numpy as np
import pytest

import fusec
from fusec.runtime import reference
from fusec.runtime.compare import compare

SCAN = """\
chain r(p1: f32[1, N]) -> f32[1, N] {
    t0 = cumsum(p1, axis=0) * 0.25
    return t0 + sum(concat([t0[..., :1], t0[..., -1:] * 0.5], axis=-1), axis=-1, keepdims=true)
}
"""

@pytest.mark.parametrize("n", [1, 2])
def test_row_kernel_root_matches_the_reference(n):
    src = SCAN
    prog = fusec.compile(src, target="cuda-sim", options={"baseline": False})
    typed = prog.r.typed
    for seed in range(3):
        xs = reference.random_inputs(typed, {"N": n}, seed)
        want = reference.run_chain(typed, xs, {"N": n})
        got = prog.r(*xs)
        got = got if isinstance(got, tuple) else (got,)
        for g, w in zip(got, want):
            c = compare(g, w, "f32")
            assert c.ok, f"{c.describe()}\n{xs}"


def test_scan_result_and_output_are_two_buffers():
    x = np.array([[-0.976016]], np.float32)
    got = fusec.compile(SCAN, target="cuda-sim", options={"baseline": False}).r(x)
    t = x * 0.25
    np.testing.assert_allclose(got, t + t * 1.5, rtol=1e-6)
