"""What fusec mends in numba-cuda 0.30's CUDA simulator when a process selects `cuda-sim`
(`mend()`, once per process): a block's shared arrays made thread-safe, a block's runner that
yields while it waits for its threads, and one launch at a time when several host threads
launch. None changes what a kernel computes."""
from __future__ import annotations

import sys
import threading
import time

import numpy as np

POLL_S = 0.0005        # the block runner's wait between looks at its threads


def mend() -> None:
    _thread_safe_shared_arrays()
    _yielding_block_runner()
    _one_launch_at_a_time()


def _one_launch_at_a_time() -> None:
    """The simulator keeps the running kernel's context in a module global: while one host
    thread's launch runs, another host thread's launch is taken for a device-function call
    made inside it and runs its kernel body on the host thread (`AttributeError: 'Thread'
    object has no attribute 'blockIdx'`; seen calling one cuda-sim chain from 4 threads). A
    launch from a host thread (not one of the simulator's block threads, whose calls are device
    functions) now waits for the one running; the kernels run as Python under one GIL anyway."""
    from numba.cuda.simulator import kernel

    cls = kernel.FakeCUDAKernel
    if getattr(cls, "_fusec_serial", False):
        return
    original = cls.__call__
    lock = threading.RLock()

    def call(self, *args):
        if self._device or isinstance(threading.current_thread(), kernel.BlockThread):
            return original(self, *args)
        with lock:
            return original(self, *args)

    cls.__call__ = call
    cls._fusec_serial = True


def _thread_safe_shared_arrays() -> None:
    """The simulator gives a block's threads one array per `cuda.shared.array` line, created by
    the first thread that gets there, without a lock: two threads that both find none each
    create one, and the writes of the thread whose array the other replaced are lost (a row's
    combine then reads uninitialised memory; seen under load as a garbage `min` of a row). The
    same lookup, keyed by the caller's file and line as the simulator does, under a lock."""
    from numba.cuda.simulator import kernelapi
    from numba.np import numpy_support
    from numba.core import types

    cls = kernelapi.FakeCUDAShared
    if getattr(cls, "_fusec_locked", False):
        return
    original = cls.array
    lock = threading.Lock()

    def array(self, shape, dtype, alignment=None):
        if alignment is not None or shape == 0:      # errors and dynamic shared memory: as before
            return original(self, shape, dtype, alignment)
        if isinstance(dtype, types.Type):
            dtype = numpy_support.as_dtype(dtype)
        frame = sys._getframe(1)
        caller = (frame.f_code.co_filename, frame.f_lineno)
        with lock:
            res = self._allocations.get(caller)
            if res is None:
                res = np.empty(shape, dtype)
                self._allocations[caller] = res
        return res

    cls.array = array
    cls._fusec_locked = True


def _yielding_block_runner() -> None:
    """The simulator runs a block as one Python thread per CUDA thread and watches them from the
    launching thread in a loop that never waits: under the GIL that loop takes a share of every
    switch interval from the threads it watches, and a kernel runs about half as fast as it
    could. The same loop (numba-cuda 0.30's BlockManager.run: start every thread; release the
    barrier once every live thread waits at it; re-raise a thread's exception), pausing POLL_S
    between looks while some thread still runs."""
    from numba.cuda.simulator import kernel

    cls = kernel.BlockManager
    if getattr(cls, "_fusec_yields", False):
        return

    def run(self, grid_point, *args):
        threads, live, blocked = set(), set(), set()
        for block_point in np.ndindex(*self._block_dim):
            def target():
                self._f(*args)

            t = kernel.BlockThread(target, self, grid_point, block_point, self._debug)
            t.start()
            threads.add(t)
            live.add(t)
        while live:
            for t in live:
                if t.syncthreads_blocked:
                    blocked.add(t)
                elif t.exception:
                    for other in threads:           # stop the block's other threads, as upstream
                        other.abort = True
                        other.syncthreads_blocked = False
                        other.syncthreads_event.set()
                    raise t.exception[0].with_traceback(t.exception[1])
            if live == blocked:                      # every live thread waits at the barrier
                for t in blocked:
                    t.syncthreads_blocked = False
                    t.syncthreads_event.set()
                blocked = set()
            live = {t for t in live if t.is_alive()}
            if live and live != blocked:
                time.sleep(POLL_S)
        for t in threads:
            if t.exception:
                raise t.exception[0].with_traceback(t.exception[1])

    cls.run = run
    cls._fusec_yields = True
