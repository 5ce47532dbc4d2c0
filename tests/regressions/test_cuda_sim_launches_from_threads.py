"""Regression (issue 42, the soak): one cuda-sim chain called from 4 threads at once failed in
most calls with `AttributeError: 'Thread' object has no attribute 'blockIdx'`: the simulator
keeps the running kernel's context in a module global, so a second host thread's launch was
taken for a device-function call inside the first and ran its body on the host thread.
runtime/simulator.py now lets one launch run at a time (`_one_launch_at_a_time`)."""
import threading

import numpy as np

import fusec

SOURCE = "chain f(x: f32[M, 32], g: f32[32]) -> f32[M, 32] {\n    return softmax(x * g, axis=-1) + x\n}\n"


def test_calls_from_four_threads_at_once_are_right():
    chain = fusec.compile(SOURCE, target="cuda-sim", cache=False, options={"baseline": False}).f
    rng = np.random.default_rng(0)
    g = rng.standard_normal(32).astype(np.float32)
    xs = [rng.standard_normal((4, 32)).astype(np.float32) for _ in range(4)]
    chain(xs[0], g)                                      # built once, before the threads
    go, errors, out = threading.Barrier(len(xs)), [], {}

    def calls(i):
        go.wait()
        try:
            out[i] = [chain(xs[i], g) for _ in range(2)]
        except Exception as e:                           # noqa: BLE001 (the assertion says what)
            errors.append(repr(e))
    threads = [threading.Thread(target=calls, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for i, x in enumerate(xs):
        z = x * g
        e = np.exp(z - z.max(axis=-1, keepdims=True))
        want = e / e.sum(axis=-1, keepdims=True) + x
        for y in out[i]:
            np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
