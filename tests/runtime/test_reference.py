"""The NumPy reference: each op against hand-computed or independently computed values."""
import math

import numpy as np
import pytest

import fusec
from fusec.dsl.ops import OPS
from fusec.runtime.reference import random_inputs, run_chain


def run(src: str, *inputs, name=None, **kw):
    mod = fusec.check(src)
    chain = mod.chain(name) if name else mod.chains[0]
    return run_chain(chain, [np.asarray(x) for x in inputs], **kw)


def one(src, *inputs, **kw):
    (out,) = run(src, *inputs, **kw)
    return out


X = np.array([[-2.0, -0.5, 0.0], [0.5, 1.0, 3.0]], dtype=np.float32)


def unary(name):
    return one(f"chain f(x: f32[2, 3]) -> f32[2, 3] {{ return {name}(x) }}", X)


@pytest.mark.parametrize("name,fn", [
    ("neg", lambda v: -v), ("abs", abs), ("exp", math.exp), ("tanh", math.tanh),
    ("sigmoid", lambda v: 1 / (1 + math.exp(-v))), ("relu", lambda v: max(v, 0.0)),
    ("silu", lambda v: v / (1 + math.exp(-v))), ("erf", math.erf), ("sin", math.sin), ("cos", math.cos),
    ("floor", math.floor), ("ceil", math.ceil), ("square", lambda v: v * v),
    ("gelu", lambda v: 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))),
])
def test_unary_ops_match_scalar_math(name, fn):
    want = np.vectorize(fn)(X.astype(np.float64))
    got = unary(name)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_positive_domain_ops():
    p = np.array([0.25, 1.0, 4.0], dtype=np.float32)
    src = "chain f(x: f32[3]) -> (f32[3], f32[3], f32[3], f32[3]) { return log(x), sqrt(x), rsqrt(x), reciprocal(x) }"
    log, sqrt, rsqrt, rec = run(src, p)
    np.testing.assert_allclose(log, [math.log(0.25), 0.0, math.log(4.0)], rtol=1e-6)
    np.testing.assert_allclose(sqrt, [0.5, 1.0, 2.0])
    np.testing.assert_allclose(rsqrt, [2.0, 1.0, 0.5])
    np.testing.assert_allclose(rec, [4.0, 1.0, 0.25])


def test_gelu_erf_form():
    got = one('chain f(x: f32[2, 3]) -> f32[2, 3] { return gelu(x, approximate="none") }', X)
    want = np.vectorize(lambda v: 0.5 * v * (1 + math.erf(v / math.sqrt(2))))(X.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_binary_ops_and_broadcasting_corners():
    a = np.array([[1.0], [2.0]], dtype=np.float32)           # [2, 1]
    b = np.array([1.0, 2.0, 4.0], dtype=np.float32)          # [3]
    s = np.float32(3.0)                                       # scalar input
    src = """chain f(a: f32[2, 1], b: f32[3], s: f32) -> (f32[2, 3], f32[2, 3], f32[2, 3], f32[2, 3], f32[2, 3], f32[2, 3], f32[2, 1]) {
        return a + b, a - b, a * b, a / b, maximum(a, b), minimum(a, b), a ** 2 + s
    }"""
    add, sub, mul, div, mx, mn, pw = run(src, a, b, s)
    assert add.tolist() == [[2, 3, 5], [3, 4, 6]]
    assert sub.tolist() == [[0, -1, -3], [1, 0, -2]]
    assert mul.tolist() == [[1, 2, 4], [2, 4, 8]]
    assert div.tolist() == [[1, 0.5, 0.25], [2, 1, 0.5]]
    assert mx.tolist() == [[1, 2, 4], [2, 2, 4]]
    assert mn.tolist() == [[1, 1, 1], [1, 2, 2]]
    assert pw.tolist() == [[4], [7]]


def test_comparisons_where_clamp_cast():
    x = np.array([-1.5, 0.0, 2.5], dtype=np.float32)
    src = """chain f(x: f32[3]) -> (bool[3], bool[3], bool[3], bool[3], bool[3], bool[3], f32[3], f32[3], i32[3]) {
        return x == 0, x != 0, x < 0, x <= 0, x > 0, x >= 0, where(x > 0, x, -x), clamp(x, -1, 1), cast(x, i32)
    }"""
    eq, ne, lt, le, gt, ge, wh, cl, ca = run(src, x)
    assert eq.tolist() == [False, True, False] and ne.tolist() == [True, False, True]
    assert lt.tolist() == [True, False, False] and le.tolist() == [True, True, False]
    assert gt.tolist() == [False, False, True] and ge.tolist() == [False, True, True]
    assert wh.tolist() == [1.5, 0.0, 2.5]
    assert cl.tolist() == [-1.0, 0.0, 1.0]
    assert ca.dtype == np.int32 and ca.tolist() == [-1, 0, 2]


def test_reductions_axes_negative_and_keepdims():
    x = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    src = """chain f(x: f64[2, 3, 4]) -> (f64, f64[2, 3], f64[1, 3, 1], f64[3], f64[2, 4], f64[2]) {
        return sum(x), mean(x, axis=-1), max(x, axis=[0, -1], keepdims=true), min(x, axis=[2, 0]), prod(x, axis=1), sum(x, axis=[-1, -2])
    }"""
    total, mean, mx, mn, prod, s2 = run(src, x)
    assert total == 276.0
    np.testing.assert_array_equal(mean, x.mean(axis=2))
    np.testing.assert_array_equal(mx, [[[15.0], [19.0], [23.0]]])
    np.testing.assert_array_equal(mn, [0.0, 4.0, 8.0])
    np.testing.assert_array_equal(prod, x.prod(axis=1))
    np.testing.assert_array_equal(s2, [66.0, 210.0])


def test_softmax_and_log_softmax_by_hand():
    x = np.array([[1.0, 2.0, 3.0]], dtype=np.float64)
    e = np.exp([1.0, 2.0, 3.0])
    sm, lsm, sm0 = run("chain f(x: f64[1, 3]) -> (f64[1, 3], f64[1, 3], f64[1, 3]) "
                       "{ return softmax(x), log_softmax(x, axis=-1), softmax(x, axis=0) }", x)
    np.testing.assert_allclose(sm[0], e / e.sum(), rtol=1e-14)
    np.testing.assert_allclose(lsm[0], np.log(e / e.sum()), rtol=1e-14)
    np.testing.assert_array_equal(sm0, [[1.0, 1.0, 1.0]])


def test_layernorm_rmsnorm_batchnorm_by_hand():
    x = np.array([[1.0, 2.0, 3.0, 6.0]])
    g = np.array([1.0, 2.0, 1.0, 1.0])
    b = np.array([0.0, 0.0, 1.0, 0.0])
    ln, rms = run("chain f(x: f64[1, 4], g: f64[4], b: f64[4]) -> (f64[1, 4], f64[1, 4]) "
                  "{ return layernorm(x, g, b, eps=0.0), rmsnorm(x, g, eps=0.0) }", x, g, b)
    mu, sd = 3.0, math.sqrt((4 + 1 + 0 + 9) / 4)
    np.testing.assert_allclose(ln[0], [(1 - mu) / sd, 2 * (2 - mu) / sd, 1.0, (6 - mu) / sd], rtol=1e-14)
    r = math.sqrt((1 + 4 + 9 + 36) / 4)
    np.testing.assert_allclose(rms[0], [1 / r, 4 / r, 3 / r, 6 / r], rtol=1e-14)
    xb = np.arange(2 * 3 * 2 * 2, dtype=np.float64).reshape(2, 3, 2, 2)
    m, v = np.array([1.0, 2.0, 3.0]), np.array([4.0, 1.0, 0.25])
    gm, bt = np.array([1.0, 2.0, 3.0]), np.array([0.5, 0.0, -1.0])
    bn = one("chain f(x: f64[2, 3, 2, 2], m: f64[3], v: f64[3], g: f64[3], b: f64[3]) -> f64[2, 3, 2, 2] "
             "{ return batchnorm(x, m, v, g, b, eps=0.0) }", xb, m, v, gm, bt)
    assert bn[1, 2, 1, 0] == pytest.approx((xb[1, 2, 1, 0] - 3.0) / 0.5 * 3.0 - 1.0)
    assert bn[0, 0, 0, 1] == pytest.approx((1.0 - 1.0) / 2.0 * 1.0 + 0.5)


def test_matmul_2d_and_batched_with_broadcast_batch_dims():
    a = np.arange(2 * 1 * 2 * 3, dtype=np.float64).reshape(2, 1, 2, 3)
    b = np.arange(3 * 3 * 2, dtype=np.float64).reshape(3, 3, 2)
    c2 = one("chain f(a: f64[2, 3], b: f64[3, 2]) -> f64[2, 2] { return a @ b }", a[0, 0], b[0])
    assert c2.tolist() == [[10.0, 13.0], [28.0, 40.0]]
    cb = one("chain f(a: f64[2, 1, 2, 3], b: f64[3, 3, 2]) -> f64[2, 3, 2, 2] { return a @ b }", a, b)
    for i in range(2):
        for j in range(3):
            np.testing.assert_array_equal(cb[i, j], a[i, 0] @ b[j])


def _conv_naive(x, w, stride, pad, dil):
    n, c, h, wd = x.shape
    f, _, kh, kw = w.shape
    ho = (h + 2 * pad[0] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (wd + 2 * pad[1] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, f, ho, wo))
    for b in range(n):
        for o in range(f):
            for i in range(ho):
                for j in range(wo):
                    acc = 0.0
                    for ci in range(c):
                        for p in range(kh):
                            for q in range(kw):
                                y = i * stride[0] + p * dil[0] - pad[0]
                                z = j * stride[1] + q * dil[1] - pad[1]
                                if 0 <= y < h and 0 <= z < wd:
                                    acc += x[b, ci, y, z] * w[o, ci, p, q]
                    out[b, o, i, j] = acc
    return out


@pytest.mark.parametrize("stride,pad,dil", [((1, 1), (0, 0), (1, 1)), ((2, 1), (1, 2), (1, 1)),
                                            ((1, 2), (2, 0), (2, 1)), ((3, 2), (1, 1), (2, 2))])
def test_conv2d_against_a_naive_loop(stride, pad, dil):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 9, 8))
    w = rng.standard_normal((4, 3, 3, 2))
    bias = rng.standard_normal(4)
    want = _conv_naive(x, w, stride, pad, dil)
    ho, wo = want.shape[2:]
    src = (f"chain f(x: f64[2, 3, 9, 8], w: f64[4, 3, 3, 2], b: f64[4]) -> f64[2, 4, {ho}, {wo}] "
           f"{{ return conv2d(x, w, bias=b, stride=[{stride[0]}, {stride[1]}], padding=[{pad[0]}, {pad[1]}], "
           f"dilation=[{dil[0]}, {dil[1]}]) }}")
    got = one(src, x, w, bias)
    np.testing.assert_allclose(got, want + bias.reshape(1, 4, 1, 1), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("groups,cin,f", [(3, 3, 3), (3, 3, 6), (2, 4, 6)])
def test_grouped_conv2d_is_each_group_convolved_apart(groups, cin, f):
    """groups=G: filters k*F/G.. see input channels k*C/G.. only (PyTorch's semantics), each
    group a dense conv of its own slices."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, cin, 9, 8))
    w = rng.standard_normal((f, cin // groups, 3, 2))
    bias = rng.standard_normal(f)
    stride, pad, dil = (2, 1), (1, 2), (1, 2)
    fg, cg = f // groups, cin // groups
    want = np.concatenate([_conv_naive(x[:, k * cg:(k + 1) * cg], w[k * fg:(k + 1) * fg], stride, pad, dil)
                           for k in range(groups)], axis=1)
    ho, wo = want.shape[2:]
    src = (f"chain f(x: f64[2, {cin}, 9, 8], w: f64[{f}, {cg}, 3, 2], b: f64[{f}]) -> f64[2, {f}, {ho}, {wo}] "
           f"{{ return conv2d(x, w, bias=b, stride=[2, 1], padding=[1, 2], dilation=[1, 2], groups={groups}) }}")
    got = one(src, x, w, bias)
    np.testing.assert_allclose(got, want + bias.reshape(1, f, 1, 1), rtol=1e-12, atol=1e-12)


def test_shape_ops():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    src = """chain f(x: f32[2, 3]) -> (f32[3, 2], f32[3, 2], f32[3, 2], f32[4, 2, 3]) {
        return transpose(x), permute(x, [-1, 0]), reshape(x, [-1, 2]), broadcast_to(x, [4, 2, 3])
    }"""
    t, p, r, b = run(src, x)
    assert t.tolist() == x.T.tolist() and p.tolist() == x.T.tolist()
    assert r.tolist() == [[0, 1], [2, 3], [4, 5]]
    assert b.shape == (4, 2, 3) and (b == x).all()


def test_f16_stores_each_intermediate_in_f16_and_f64_mode_does_not():
    x = np.array([1000.0], dtype=np.float16)
    src = "chain f(x: f16[1]) -> f16[1] { return (x + 0.3) - x }"
    (lo,) = run(src, x)
    (hi,) = run(src, x, compute_f64=True)
    assert lo.dtype == np.float16 and lo[0] == 0.5      # 1000.3 rounds to 1000.5 in f16
    assert hi.dtype == np.float64 and hi[0] == pytest.approx(0.3)


def test_bf16_round_trips():
    import ml_dtypes
    x = np.array([1.0, 2.0], dtype=ml_dtypes.bfloat16)
    (y,) = run("chain f(x: bf16[2]) -> bf16[2] { return x * 3 }", x)
    assert y.dtype == ml_dtypes.bfloat16 and y.astype(np.float32).tolist() == [3.0, 6.0]


def test_integer_ops_stay_integer():
    i = np.array([3, -4], dtype=np.int32)
    s, m = run("chain f(i: i32[2]) -> (i32, i32[2]) { return sum(i), abs(i) * 2 }", i)
    assert s.dtype == np.int32 and s == -1
    assert m.tolist() == [6, 8]


def test_symbols_bind_from_inputs_and_mismatch_is_reported_at_the_parameter():
    mod = fusec.check("chain f(x: f32[M, 2], y: f32[M]) -> f32[M, 2] {\n return x + reshape(y, [M, 1]) }")
    ok = run_chain(mod.chains[0], [np.ones((5, 2), np.float32), np.ones(5, np.float32)])
    assert ok[0].shape == (5, 2)
    with pytest.raises(fusec.FdslError) as info:
        run_chain(mod.chains[0], [np.ones((5, 2), np.float32), np.ones(4, np.float32)])
    d = info.value.diagnostics[0]
    assert (d.span.line, d.span.col) == (1, 23)
    assert d.message == "input 'y' has shape (4,), so M = 4, but M = 5 already"


def test_random_inputs_are_seeded_and_respect_domains():
    mod = fusec.check("chain f(x: f32[4, 8], v: f32[8]) -> f32[4, 8] { return log(v) + x }")
    a = random_inputs(mod.chains[0], {}, seed=3)
    b = random_inputs(mod.chains[0], {}, seed=3)
    c = random_inputs(mod.chains[0], {}, seed=4)
    assert all((p == q).all() for p, q in zip(a, b))
    assert not (a[0] == c[0]).all()
    assert (a[1] > 0).all() and (a[0] < 0).any()


def test_every_op_has_reference_semantics_and_a_doc():
    for op in OPS.values():
        assert callable(op.ref) and op.doc, op.name
