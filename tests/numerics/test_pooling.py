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


SPECIAL = """\
chain special(x: f32[1, 2, 4, 4]) -> (f32[1, 2, 2, 2], f32[1, 2, 4, 4], f32[1, 2, 2, 2], f32[1, 2, 1, 1]) {
    return max_pool2d(x, 2), relu(max_pool2d(x, 3, stride=1, padding=1)), avg_pool2d(x, 2), adaptive_avg_pool2d(x, 1)
}
"""


def _special_input() -> np.ndarray:
    x = np.zeros((1, 2, 4, 4), np.float32)
    x[0, 0] = [[np.nan, 1.0, -0.0, -0.0],        # window (0, 0): a NaN wins over 1 and 7
               [7.0, 2.0, -0.0, 0.0],            # window (0, 1): -0 and +0: +0
               [-np.inf, -np.inf, np.inf, 3.0],  # window (1, 0): only -inf
               [-np.inf, -np.inf, 5.0, -1.0]]    # window (1, 1): +inf
    x[0, 1] = [[-0.0, -0.0, 1.0, np.inf],
               [-0.0, -0.0, 2.0, -np.inf],       # window (0, 1): +inf and -inf: the sum is NaN
               [4.0, np.nan, 3.0, 3.0],
               [1.0, 1.0, 3.0, 3.0]]
    return x


def test_the_reference_follows_ieee_maximum_in_max_pool():
    c = fusec.check(SPECIAL).chain("special")
    mx, _, avg, gap = reference.run_chain(c, [_special_input()], {})
    assert np.isnan(mx[0, 0, 0, 0]) and np.isnan(mx[0, 1, 1, 0])
    assert mx[0, 0, 0, 1] == 0 and not np.signbit(mx[0, 0, 0, 1])        # +0 over -0
    assert mx[0, 1, 0, 0] == 0 and np.signbit(mx[0, 1, 0, 0])            # only -0: -0
    assert mx[0, 0, 1, 0] == -np.inf and mx[0, 0, 1, 1] == np.inf
    assert np.isnan(avg[0, 1, 0, 1]) and avg[0, 0, 1, 1] == np.inf and np.isnan(gap).all()


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_special_values_match_the_reference(target, fast_simulator):
    _check(SPECIAL, "special", target, [_special_input()], unfused=target == "cuda-sim")


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_variants_match_the_reference(target, fast_simulator):
    _check(VARIANTS, "variants", target, unfused=False)


@pytest.mark.slow
@pytest.mark.parametrize("chain", ["stem", "epilogue", "head"])
@pytest.mark.parametrize("target", TARGETS)
def test_fused_and_unfused_builds_match_the_reference(target, chain, fast_simulator):
    _check(FUSION, chain, target, unfused=target == "cuda-sim")


@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_an_elementwise_epilogue_and_the_padding_fuse_into_the_pool(target):
    from fusec.compiler.calibrate import hardware_profile
    from fusec.compiler.options import CompileOptions
    from fusec.compiler.pipeline import compile_typed
    src = ("chain p(x: f32[2, 8, 16, 16], b: f32[8, 1, 1]) -> f32[2, 8, 8, 8] {\n"
           "    return relu(max_pool2d(x, 3, stride=2, padding=1) + b)\n}\n")
    st = compile_typed(fusec.check(src).chain("p"), {}, options=CompileOptions(target=target, hardware=hardware_profile(None, target)),
                       until="plan")
    (k,) = st.plan.kernels
    kinds = {st.plan.info.op(m).kind for m in k.ops}
    assert kinds >= {"elementwise", "pad", "reduction"}, st.plan.format()


def test_the_references_are_pytorch():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 7, 8)).astype(np.float32)
    c = fusec.check(VARIANTS).chain("variants")
    got = reference.run_chain(c, [x, np.zeros((1, 2, 6, 6), np.float16)], {})
    t = torch.from_numpy(x)
    want = [F.max_pool2d(t, 3, 2, 1), F.max_pool2d(t, 2, ceil_mode=True),
            F.max_pool2d(t, (2, 3), (2, 3), 1, (2, 1), ceil_mode=True), F.avg_pool2d(t, 3, 2, 1),
            F.avg_pool2d(t, (3, 2), 2, 1, ceil_mode=True, count_include_pad=False),
            F.avg_pool2d(t, 2, ceil_mode=True), F.adaptive_avg_pool2d(t, 1), F.adaptive_avg_pool2d(t, (3, 5))]
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == tuple(w.shape) and np.allclose(g, w.numpy(), rtol=1e-6, atol=1e-6), k
