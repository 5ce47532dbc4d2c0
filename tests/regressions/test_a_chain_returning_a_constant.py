"""Regression (issue 42, found by `python -m tests.fuzz --targets ...`): a chain that returns a
literal (`return 3`, minimised from a fuzz case whose result was `exp(3)`) was an internal error
on cuda-sim and cuda (`KeyError: '__constant_xf32'` in stage gpu): the constant is a
memref.global beside the chain's function, and to_gpu looked up a fusion plan for every
operation of the module. On cpu the same chain returned Numba's frozen module array itself, a
read-only output. Now the gpu stage plans only the function, and a cpu result that is a
constant is a copy."""
import numpy as np
import pytest

import fusec
from fusec.cli import main

SRC = """\
chain g(p2: i64[1]) -> f32 {
    return 3
}

chain two(p: f32[M, 1], q: f32[N]) -> (f32[M, 1], f32, f32) {
    return p, 1, exp(1.5)
}
"""


@pytest.mark.parametrize("target", ["cpu", "cuda-sim", "mlir-jit"])
def test_a_constant_result_is_right_and_writable(target):
    prog = fusec.compile(SRC, target=target, options={"baseline": False})
    out = prog.g(np.zeros(1, np.int64))
    assert out.shape == () and out.dtype == np.float32 and out == 3
    out[...] = 7                                     # the caller's array, not the module's constant
    assert prog.g(np.zeros(1, np.int64)) == 3
    p = np.arange(3, dtype=np.float32).reshape(3, 1)
    a, b, c = prog.two(p, np.ones(2, np.float32))
    assert np.array_equal(a, p) and b == 1 and c == np.float32(np.exp(1.5))


def test_the_fuzz_case_runs_on_cuda_sim(tmp_path, capsys):
    path = tmp_path / "min.fdsl"
    path.write_text(SRC)
    assert main([str(path), "--target", "cuda-sim", "--chain", "g", "--no-fallback", "-q"]) == 0
    assert "out 0 f32: max abs err 0" in capsys.readouterr().out
