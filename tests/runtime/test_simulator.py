"""runtime/simulator.py: the block runner fusec gives numba-cuda's simulator waits between its
looks at the block's threads, and keeps the upstream loop's meaning: every thread runs, a
barrier is released once every live thread waits at it (also after some threads have ended), and
an exception in one thread stops the launch with that exception."""
import os

import numpy as np
import pytest

from fusec.runtime import simulator
from fusec.runtime.targets import select

pytestmark = pytest.mark.skipif(os.environ.get("NUMBA_ENABLE_CUDASIM") != "1",
                                reason="this session runs a real GPU (FUSEC_TEST_GPU=1); the simulator is process-wide")
if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
    select("cuda-sim")
    from numba import cuda          # a global: the simulator gives a kernel its own `cuda` through its globals


def _cuda():
    from numba.cuda.simulator import kernel
    assert kernel.BlockManager._fusec_yields and kernel.BlockManager.run.__module__ == simulator.__name__
    return cuda


def test_a_block_reduction_through_barriers_is_right():
    _cuda()

    @cuda.jit
    def block_sum(x, out):
        s = cuda.shared.array(64, np.float64)
        t = cuda.threadIdx.x
        s[t] = x[cuda.blockIdx.x * 64 + t]
        cuda.syncthreads()
        step = 32
        while step > 0:
            if t < step:
                s[t] += s[t + step]
            cuda.syncthreads()
            step //= 2
        if t == 0:
            out[cuda.blockIdx.x] = s[0]

    x = np.arange(3 * 64, dtype=np.float64)
    out = np.zeros(3)
    block_sum[3, 64](x, out)
    assert out.tolist() == x.reshape(3, 64).sum(axis=1).tolist()


def test_a_barrier_after_some_threads_returned_is_released():
    _cuda()

    @cuda.jit
    def half_return(out):
        t = cuda.threadIdx.x
        if t >= 16:
            return
        cuda.syncthreads()
        out[t] = t + 1

    out = np.zeros(32)
    half_return[1, 32](out)
    assert out.tolist() == [t + 1 for t in range(16)] + [0] * 16


def test_an_exception_in_one_thread_stops_the_launch_with_it():
    _cuda()

    @cuda.jit
    def out_of_range(x):
        t = cuda.threadIdx.x
        if t == 5:
            x[100] = 1.0
        cuda.syncthreads()
        x[t] = 2.0

    with pytest.raises(IndexError):
        out_of_range[1, 8](np.zeros(8))
