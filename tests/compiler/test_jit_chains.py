"""The MLIR CPU JIT on whole chains: several outputs, rank-0 and bool boundaries, aliasing
outputs, symbol bindings, input checks."""
from __future__ import annotations

import numpy as np
import pytest

from chainbuild import ChainBuilder, random_input
from fusec.compiler.jit import infer_binding, jit_compile, jit_run
from fusec.runtime.compare import compare
from fusec.runtime.reference import run_chain


def check(chain, inputs, binding=None, disabled=()):
    got = jit_run(chain, chain.name, inputs, binding, disabled_passes=disabled)
    want = run_chain(chain, inputs, binding)
    assert len(got) == len(want)
    for g, w, t in zip(got, want, chain.output_types):
        assert g.shape == w.shape and g.dtype == w.dtype
        c = compare(g, w, t.dtype.name)
        assert c.ok, c.describe()
    return got


def test_multi_output_chain_with_symbols():
    b = ChainBuilder("multi")
    x, w, bias = b.param("x", "f32", ["M", 8]), b.param("w", "f32", [8, "N"]), b.param("b", "f32", ["N"])
    h = b.op("gelu", b.op("add", b.op("matmul", x, w), bias))
    stats = b.op("mean", h, axis=-1, keepdims=True)
    total = b.op("sum", h)
    chain = b.build(h, stats, total, b.op("gt", h, b.const(0.0, "f32")))
    rng = np.random.default_rng(1)
    inputs = [random_input(rng, "f32", s) for s in ((5, 8), (8, 3), (3,))]
    got = check(chain, inputs, {"M": 5, "N": 3})
    assert [g.shape for g in got] == [(5, 3), (5, 1), (), (5, 3)]
    assert got[3].dtype == np.bool_


def test_binding_is_inferred_from_inputs():
    b = ChainBuilder("infer")
    x = b.param("x", "f64", ["B", "S"])
    chain = b.build(b.op("softmax", x))
    x0 = np.random.default_rng(2).standard_normal((3, 7))
    assert infer_binding(chain, [x0]) == {"B": 3, "S": 7}
    check(chain, [x0])
    x1 = np.random.default_rng(3).standard_normal((2, 4))
    check(chain, [x1])          # a second binding compiles a second function


def test_bool_inputs_and_outputs_cross_the_boundary():
    b = ChainBuilder("bools")
    c, x = b.param("c", "bool", [2, 5]), b.param("x", "f32", [2, 5])
    d = b.param("d", "bool", [5])
    both = b.op("eq", c, d)
    chain = b.build(b.op("where", c, x, b.op("neg", x)), both, b.op("cast", c, dtype="f32"),
                    b.op("cast", x, dtype="bool"))
    rng = np.random.default_rng(4)
    x0 = rng.standard_normal((2, 5)).astype(np.float32)
    x0[0, 0] = 0.0
    check(chain, [rng.random((2, 5)) < 0.5, x0, rng.random(5) < 0.5])


def test_rank0_inputs_and_outputs():
    b = ChainBuilder("scalars")
    s, x = b.param("s", "f32", []), b.param("x", "f32", [3])
    chain = b.build(b.op("mul", s, s), b.op("sum", b.op("mul", x, s)), b.op("add", b.const(1.5, "f32"), s))
    got = check(chain, [np.float32(2.5), np.arange(3, dtype=np.float32)])
    assert got[0].shape == () and float(got[0]) == 6.25


def test_outputs_that_alias_inputs_or_each_other():
    b = ChainBuilder("alias")
    x = b.param("x", "f32", [2, 3])
    r = b.op("reshape", x, shape=[3, 2])
    chain = b.build(x, r, r, b.op("transpose", x))
    x0 = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = check(chain, [x0])
    got[0][0, 0] = 100.0            # outputs are fresh arrays, never views of the inputs
    assert x0[0, 0] == 0.0


def test_a_constant_only_output():
    b = ChainBuilder("const")
    x = b.param("x", "i32", [2])
    chain = b.build(b.op("add", x, b.const(3, "i32")), b.const(7, "i32"))
    got = check(chain, [np.array([1, 2], np.int32)])
    assert got[1].shape == () and int(got[1]) == 7


def test_f16_and_bf16_chain():
    for dt in ("f16", "bf16"):
        b = ChainBuilder(f"half_{dt}")
        x, g = b.param("x", dt, [4, 16]), b.param("g", dt, [16])
        y = b.op("rmsnorm", x, g)
        chain = b.build(b.op("softmax", b.op("silu", y)), b.op("matmul", y, b.op("transpose", x)))
        rng = np.random.default_rng(5)
        check(chain, [random_input(rng, dt, (4, 16)), random_input(rng, dt, (16,))])


def test_every_pass_disabled_gives_the_same_numbers():
    b = ChainBuilder("nopass")
    x, m, v = b.param("x", "f32", [2, 3, 4, 4]), b.param("m", "f32", [3]), b.param("v", "f32", [3])
    chain = b.build(b.op("relu", b.op("batchnorm", b.op("exp", x), m, v, m, m)))
    rng = np.random.default_rng(6)
    inputs = [random_input(rng, "f32", (2, 3, 4, 4)), random_input(rng, "f32", (3,)),
              random_input(rng, "f32", (3,), positive=True)]
    from fusec.compiler.transforms.graph import PASS_NAMES
    check(chain, inputs, disabled=PASS_NAMES)


def test_compiled_chains_are_cached():
    b = ChainBuilder("cached")
    chain = b.build(b.op("exp", b.param("x", "f32", [2])))
    assert jit_compile(chain, "cached", {}) is jit_compile(chain, "cached", {})
    assert jit_compile(chain, "cached", {}) is not jit_compile(chain, "cached", {}, disabled_passes=["cse"])


def test_inputs_are_checked():
    b = ChainBuilder("strict")
    chain = b.build(b.op("exp", b.param("x", "f32", [2, 3])))
    with pytest.raises(ValueError, match="takes 1 inputs, got 2"):
        jit_run(chain, "strict", [np.zeros((2, 3), np.float32)] * 2, {})
    with pytest.raises(ValueError, match="input x must be f32, got NumPy float64"):
        jit_run(chain, "strict", [np.zeros((2, 3))], {})
    with pytest.raises(ValueError, match=r"input x must have shape \[2, 3\], got \[3, 2\]"):
        jit_run(chain, "strict", [np.zeros((3, 2), np.float32)], {})


def test_non_contiguous_inputs_are_accepted():
    b = ChainBuilder("strided")
    chain = b.build(b.op("neg", b.param("x", "f32", [3, 2])))
    x = np.arange(6, dtype=np.float32).reshape(2, 3).T
    (got,) = jit_run(chain, "strided", [x], {})
    np.testing.assert_array_equal(got, -x)
