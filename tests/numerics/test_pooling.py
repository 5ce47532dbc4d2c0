"""Pooling (max_pool2d, avg_pool2d, adaptive_avg_pool2d) on the compiled targets, cpu and
cuda-sim, against the reference (runtime/compare.py) and against PyTorch's rules written out by
hand: the variants (stride, padding, dilation, ceil mode and its overhang, count_include_pad,
unequal adaptive windows, a global pool) as the outputs of one chain, the fusion chains
(conv + batchnorm + relu into a max pool, an elementwise epilogue on a pool, a pool feeding a
matmul), special values (NaN wins a max window, -0 and +0, infinities), f16 computed in f32.
"""
from __future__ import annotations

import numpy as np
import pytest

import fusec
from fusec.runtime import reference
from fusec.runtime.compare import compare

TARGETS = ("cpu", "cuda-sim")

VARIANTS = """\
chain variants(x: f32[2, 3, 7, 8], h: f16[1, 2, 6, 6])
        -> (f32[2, 3, 4, 4], f32[2, 3, 4, 4], f32[2, 3, 4, 3], f32[2, 3, 4, 4], f32[2, 3, 4, 5],
            f32[2, 3, 4, 4], f32[2, 3, 1, 1], f32[2, 3, 3, 5], f16[1, 2, 3, 3], f16[1, 2, 2, 2]) {
    a = max_pool2d(x, 3, stride=2, padding=1)
    b = max_pool2d(x, 2, ceil_mode=true)
    c = max_pool2d(x, [2, 3], stride=[2, 3], padding=[1, 1], dilation=[2, 1], ceil_mode=true)
    d = avg_pool2d(x, 3, stride=2, padding=1)
    e = avg_pool2d(x, [3, 2], stride=[2, 2], padding=[1, 1], ceil_mode=true, count_include_pad=false)
    f = avg_pool2d(x, 2, ceil_mode=true)
    return a, b, c, d, e, f, adaptive_avg_pool2d(x, 1), adaptive_avg_pool2d(x, [3, 5]), max_pool2d(h, 2), adaptive_avg_pool2d(h, 2)
}
"""

FUSION = """\
chain stem(x: f32[1, 3, 10, 10], w: f32[8, 3, 3, 3], mean: f32[8], var: f32[8], gamma: f32[8], beta: f32[8])
        -> f32[1, 8, 5, 5] {
    y = relu(batchnorm(conv2d(x, w, padding=1), mean, var, gamma, beta, eps=1e-5))
    return max_pool2d(y, 3, stride=2, padding=1)
}

chain epilogue(x: f32[2, 4, 6, 6], b: f32[4, 1, 1]) -> (f32[2, 4, 3, 3], f32[2, 4, 3, 3]) {
    return relu(max_pool2d(x * 2.0 + b, 2)), sigmoid(avg_pool2d(exp(x), 3, stride=2, padding=1)) - 0.5
}

chain head(x: f32[2, 8, 4, 4], w: f32[8, 5]) -> f32[2, 5] {
    return reshape(adaptive_avg_pool2d(relu(x), 1), [2, 8]) @ w
}
"""


def _mismatches(got, want, types) -> list[str]:
    got = tuple(got) if isinstance(got, (tuple, list)) else (got,)
    bad = []
    for k, (g, w, t) in enumerate(zip(got, want, types)):
        g = np.asarray(g)
        if g.shape != w.shape or g.dtype != w.dtype:
            bad.append(f"out {k}: {g.dtype}{list(g.shape)} where the reference has {w.dtype}{list(w.shape)}")
            continue
        c = compare(g, w, t.dtype.name)
        if not c.ok:
            bad.append(f"out {k}: {c.describe()}")
    return bad


_PROGRAMS: dict = {}


def _program(src: str, target: str):
    if (src, target) not in _PROGRAMS:
        _PROGRAMS[(src, target)] = fusec.compile(src, target=target)
    return _PROGRAMS[(src, target)]


def _check(src: str, name: str, target: str, inputs=None, unfused: bool = True) -> None:
    c = _program(src, target).chains[name]
    inputs = inputs if inputs is not None else reference.random_inputs(c.typed, {}, seed=3)
    want = reference.run_chain(c.typed, inputs, {})
    compiled = c.compiled({})
    builds = [("fused", compiled.fused)] + ([("unfused", compiled.unfused)] if unfused else [])
    bad = [f"{n} {m}" for n, b in builds for m in _mismatches(b(*inputs), want, c.typed.output_types)]
    assert not bad, f"{target} {name}:\n" + "\n".join(bad)
