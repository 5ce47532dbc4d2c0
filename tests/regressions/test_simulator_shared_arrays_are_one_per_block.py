"""numba-cuda's simulator created a block's `cuda.shared.array` on the first thread's call
without a lock; two threads could each create one and the writes into the replaced one were
lost (under load, special-values' `min` of a row read uninitialised memory: -1.05e-26 for -2).
Selecting cuda-sim makes the lookup thread-safe (runtime/simulator.py: _thread_safe_shared_arrays)."""
import threading
import time

import numpy as np

from fusec.runtime.targets import select


def test_threads_of_a_block_get_one_shared_array_per_line(monkeypatch):
    select("cuda-sim")
    from numba.cuda.simulator import kernelapi
    shared = kernelapi.FakeCUDAShared(0)
    got = []
    start = threading.Barrier(8)
    empty = np.empty

    def slow_empty(*a, **k):      # widen the window between looking the array up and storing it
        time.sleep(0.05)
        return empty(*a, **k)

    def thread():
        start.wait()
        got.append(shared.array((4,), np.float64))     # one line: one array for all threads

    monkeypatch.setattr(np, "empty", slow_empty)
    threads = [threading.Thread(target=thread) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    monkeypatch.undo()
    assert len(got) == 8 and all(a is got[0] for a in got)
    assert shared.array((2,), np.float64) is not got[0]   # another line: another array
