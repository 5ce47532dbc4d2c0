"""cpu convolution algorithms (plan/conv.py chooses, emit/conv.py writes): one GEMM per image for
1x1, im2col + GEMM, Winograd F(2x2, 3x3), direct loops. The model's choice is pinned for the
shapes a user meets (1x1, 3x3 stride 1, 3x3 stride 2, 7x7), and every algorithm, forced, matches
the reference with odd sizes, padding and dilation (an accumulating conv into a strided output:
tests/emit/test_cpu_blas.py)."""
import pytest

import fusec
from fusec.compiler.plan.conv import ConvShape, not_applicable, seconds
from fusec.compiler.plan.kernels import PlanError
from helpers import options, stages


def _conv_chain(c, f, k, h, w, stride=1, padding=0, dilation=1):
    pad = padding if isinstance(padding, list) else [padding] * 2
    dil = dilation if isinstance(dilation, list) else [dilation] * 2
    st = stride if isinstance(stride, list) else [stride] * 2
    oh = (h + 2 * pad[0] - dil[0] * (k - 1) - 1) // st[0] + 1
    ow = (w + 2 * pad[1] - dil[1] * (k - 1) - 1) // st[1] + 1
    return (f"chain c(x: f32[B, {c}, {h}, {w}], w: f32[{f}, {c}, {k}, {k}], g: f32[{f}]) -> f32[B, {f}, {oh}, {ow}] {{\n"
            f"    return relu(conv2d(x, w, stride={stride}, padding={padding}, dilation={dilation}) + "
            f"reshape(g, [{f}, 1, 1]))\n}}\n")


# the algorithm the model picks for shapes of a ResNet and an image filter (the suite's fixed cpu
# profile, tests/data/cpu-profile.json); each is the fastest measured on the development machine
# (bench/results/conv-algorithms-*.json)
PINNED = [
    ("1x1", (64, 64, 1, 28, 28), {}, 8, "gemm"),
    ("3x3 stride 1", (64, 64, 3, 56, 56), {"padding": 1}, 8, "winograd4"),
    ("3x3 stride 1 14x14", (256, 256, 3, 14, 14), {"padding": 1}, 8, "winograd"),
    ("3x3 stride 2", (64, 128, 3, 56, 56), {"padding": 1, "stride": 2}, 8, "im2col"),
    ("7x7 stride 2 stem", (3, 64, 7, 224, 224), {"padding": 3, "stride": 2}, 2, "im2col"),
    ("7x7 single filter", (1, 1, 7, 128, 128), {"padding": 3}, 4, "direct"),
    # ResNet-18's last stage at a 64x64 input: 2x2 outputs, rows too short for direct's vector loop
    # (it took 21 ms where im2col took 1.2: bench/torch_models.py's resnet18, issue 39)
    ("3x3 512 channels 2x2", (512, 512, 3, 2, 2), {"padding": 1}, 2, "im2col"),
]


@pytest.mark.parametrize("what, dims, kw, batch, algo", PINNED, ids=[p[0] for p in PINNED])
def test_the_model_picks_the_algorithm_per_shape(what, dims, kw, batch, algo):
    plan = stages(_conv_chain(*dims, **kw), {"B": batch}, target="cpu").plan
    (g,) = [g for g in plan.kernels if g.template == "conv"]
    assert g.config.algorithm == algo
    (note,) = [d for d in plan.decisions if " conv " in d]
    assert f"kernel {g.id}: %" in note and "predicted" in note      # --explain says why, with the other predictions
    assert plan.summary()["groups"][g.id]["conv"] == algo


@pytest.mark.slow
def test_winograd_f4x4_is_picked_in_f32_too_and_within_the_tolerance():
    """F(4x4, 3x3) at its better-conditioned points: picked where predicted fastest in f32 as in
    f64, and its f32 output passes the numerics check (three seeds) at 64 channels."""
    src = _conv_chain(64, 64, 3, 56, 56, padding=1)
    f32 = stages(src, {"B": 8}, target="cpu").plan
    f64 = stages(src.replace("f32", "f64"), {"B": 8}, target="cpu").plan
    assert [g.config.algorithm for g in f32.kernels if g.template == "conv"] == [g.config.algorithm for g in f64.kernels if g.template == "conv"] == ["winograd4"]
    (note,) = [d for d in f32.decisions if " conv " in d]
    assert "as Winograd F(4x4, 3x3): predicted" in note and "f64 only" not in note
    prog = fusec.compile(_conv_chain(64, 64, 3, 40, 40, padding=1), target="cpu", options={"baseline": False})
    assert [g["conv"] for g in prog.c.plan({"B": 1})["groups"] if g["conv"]] == ["winograd4"]
    assert all(prog.c.check(binding={"B": 1}, seed=seed)[0].ok for seed in range(3))


def test_the_model_prices_what_it_chooses():
    """The kernel's predicted time carries the chosen algorithm's own prediction: Winograd's
    fewer multiplies make the 3x3 kernel cheaper than the same kernel forced to im2col."""
    src = _conv_chain(64, 64, 3, 56, 56, padding=1)
    auto = stages(src, {"B": 8}, target="cpu").plan
    ops = [o.id for o in auto.info.ops if o.is_compute]
    forced = stages(src, {"B": 8}, target="cpu", plan={"groups": [
        {"ops": ops, "block_tiles": list(auto.kernels[0].block_tiles), "conv": "im2col"}]}).plan
    assert forced.kernels[0].config.algorithm == "im2col"
    assert auto.predicted_s < 0.8 * forced.predicted_s
    assert any("(the plan says so)" in d for d in forced.decisions)
    assert not any("(the plan says so)" in d for d in auto.decisions)


def test_winograd_is_cheaper_only_with_enough_channels():
    wide = ConvShape(1, 64, 58, 58, 64, 3, 3, 56, 56)
    narrow = ConvShape(1, 2, 58, 58, 2, 3, 3, 56, 56)
    hw = options("cpu").hardware
    assert seconds(wide, "winograd", hw) < seconds(wide, "im2col", hw)
    assert seconds(narrow, "direct", hw) < min(seconds(narrow, a, hw) for a in ("winograd", "im2col"))


def test_direct_pays_for_rows_shorter_than_a_vector():
    """Direct's row loop is its vector loop: a row of 2 costs what a row of DIRECT_ROW costs, so
    the same multiplies over short rows are dearer, and long rows are priced by their multiplies."""
    from fusec.compiler.plan.conv import DIRECT_ROW
    hw = options("cpu").hardware
    long_rows = ConvShape(1, 8, 66, 66, 8, 3, 3, 64, 64)
    short_rows = ConvShape(1, 8, 2050, 4, 8, 3, 3, 2048, 2)          # the same multiplies
    assert long_rows.macs == short_rows.macs
    assert seconds(short_rows, "direct", hw) == pytest.approx(seconds(long_rows, "direct", hw) * DIRECT_ROW / 2)
    wide = ConvShape(1, 8, 66, 2 * DIRECT_ROW + 2, 8, 3, 3, 64, 2 * DIRECT_ROW)
    assert seconds(wide, "direct", hw) == pytest.approx(seconds(long_rows, "direct", hw) * 2 * DIRECT_ROW / 64)


def test_a_deep_layers_im2col_columns_match_its_weights():
    """Each im2col block is one ?gemm call, which packs all of the chunk's weights again: a block
    holds IM2COL_BLOCK bytes of columns or as many as the chunk's weights, so ResNet-18's last
    3x3 conv at batch 1 (256 filters a chunk, 4608 taps, 7x7 outputs) is one call of 49 columns,
    not two of 28 and 21, while the stem's few taps keep 512 KiB blocks."""
    from fusec.compiler.plan.conv import IM2COL_BLOCK, im2col_rows
    deep = ConvShape(1, 512, 9, 9, 256, 3, 3, 7, 7)
    assert deep.f * deep.ckk * 4 > IM2COL_BLOCK > deep.ckk * deep.ow * 4 * 4
    assert im2col_rows(deep) == 7
    stem = ConvShape(1, 3, 230, 230, 64, 7, 7, 112, 112, 2, 2)
    assert im2col_rows(stem) == IM2COL_BLOCK // (147 * 112 * 4) == 7
    few_filters = ConvShape(1, 512, 9, 9, 16, 3, 3, 7, 7)         # weights smaller than the block: 4 rows
    assert im2col_rows(few_filters) == IM2COL_BLOCK // (4608 * 7 * 4) == 4
    kernels = stages(_conv_chain(512, 512, 3, 7, 7, padding=1), {"B": 1}, target="cpu").emitted.source
    (call,) = [line for line in kernels.splitlines() if "# cblas: linalg.conv_2d_nchw_fchw" in line]
    assert ", _r" in call and "* 7, 4608," in call
    assert "range(0, 7, 7)" in kernels                              # one block of output rows


@pytest.mark.parametrize("m", [2, 4])
def test_the_winograd_weight_transform_is_g_g_gt(m):
    """The emitted weight transform (blocks of WEIGHT_BLOCK filters, a tail block, its planes
    copied out per block) equals G g G^T for every filter, at the points of MATRICES."""
    import numba
    import numpy as np
    from fractions import Fraction
    from fusec.compiler.emit.conv import MATRICES, WEIGHT_BLOCK, _constants, _weights_text
    nf, nc = 3, 100                                                 # 300 filters: a whole block and a tail
    assert nf * nc > WEIGHT_BLOCK and nf * nc % WEIGHT_BLOCK
    ns = {"numba": numba, "np": np}
    exec("\n".join(_weights_text("_weights", m)), ns)
    w = np.random.default_rng(m).standard_normal((nf, nc, 3, 3))
    size = m + 2
    u = np.full((size * size, nf, nc), np.nan)
    ns["_weights"](w, u, *[float(v) for v in _constants(m)])
    g = np.array([[float(Fraction(c)) for c in row] for row in MATRICES[m]["G"]])
    want = np.einsum("ir,fcrj,lj->ilfc", g, w, g).reshape(size * size, nf, nc)
    np.testing.assert_allclose(u, want, rtol=1e-12, atol=1e-12)


def test_a_batch_1_conv_may_be_split_by_output_rows():
    """At batch 1 a conv kernel's first loop is its filters, and a filter chunk gathers the whole
    input's im2col columns again: the cpu search also tries chunks of output rows, and the
    stem takes them where the model finds them cheaper. A kernel without a conv searches its
    first loop only."""
    stem = _conv_chain(3, 64, 7, 224, 224, padding=3, stride=2)
    plan = stages(stem, {"B": 1}, target="cpu").plan
    (g,) = [g for g in plan.kernels if g.template == "conv"]
    assert g.block_tiles[1] == 0 and g.block_tiles[2] > 0
    assert g.config.algorithm == "im2col"
    filters = stages(stem, {"B": 1}, target="cpu", plan={"groups": [
        {"ops": list(g.ops), "block_tiles": [0, 32, 0, 0]}]}).plan       # the filter split it did before
    assert filters.predicted_s > plan.predicted_s * 1.05
    deep = stages(_conv_chain(512, 512, 3, 7, 7, padding=1), {"B": 1}, target="cpu").plan
    (d,) = [g for g in deep.kernels if g.template == "conv"]
    assert d.block_tiles[1] > 0                                     # weights dominate: filter chunks
    rows = stages("chain r(x: f32[4, 64, 32]) -> f32[4, 64, 32] {\n    return exp(x) * 2.0\n}\n", {},
                  target="cpu").plan
    for c in rows.summary()["groups"][0]["candidates"]:
        assert not any(c["block_tiles"][1:])


@pytest.mark.parametrize("algo, kw, why", [
    ("winograd", {"stride": 2}, "needs a 3x3 window with stride 1"),
    ("gemm", {}, "needs a 1x1 window"),
    ("direct", {"stride": 2}, "needs stride 1"),
    ("winograd4", {"dilation": 2}, "needs a 3x3 window with stride 1 and no dilation"),
    ("fft", {}, "is not one of gemm, im2col, winograd, winograd4, direct"),
])
def test_a_hand_plan_cannot_force_an_algorithm_that_does_not_fit(algo, kw, why):
    src = _conv_chain(8, 8, 3, 12, 12, padding=1, **kw)
    ops = [o.id for o in stages(src, {"B": 2}, target="cpu").plan.info.ops if o.is_compute]
    with pytest.raises(PlanError, match=why):
        stages(src, {"B": 2}, target="cpu", plan={"groups": [{"ops": ops, "block_tiles": [1, 0, 0, 0], "conv": algo}]})
    assert not_applicable(ConvShape(1, 8, 12, 12, 8, 3, 3, 10, 10), "winograd") is None


def test_conv_algorithms_are_the_cpu_targets():
    src = _conv_chain(8, 8, 3, 12, 12, padding=1)
    ops = [o.id for o in stages(src, {"B": 2}, target="cpu").plan.info.ops if o.is_compute]
    with pytest.raises(PlanError, match="the cpu target's"):
        stages(src, {"B": 2}, target="gpu", plan={"groups": [{"ops": ops, "block_tiles": [0, 1, 1, 1],
                                                             "thread_tiles": [0, 1, 1, 1], "conv": "winograd"}]})


# ---- numerics: every algorithm, forced by a hand plan, against the reference -----------------

CHUNKS, WHOLE = [1, 0, 0, 0], [0, 0, 0, 0]   # conv + epilogue a chunk per image; the conv alone, images in a prange
ROWS3 = [0, 0, 3, 0]                         # conv + epilogue a chunk per 3 output rows (each pads its own rows)
ODD = (5, 6, 3, 9, 11, 1, 1, 1)              # (c, f, k, h, w, stride, padding, dilation): Winograd's tails
ONE = (6, 7, 1, 7, 9, 1, 0, 1)
# (Winograd's builds take Numba 8-17 s each: its even sizes, whole tiles only, are the
# accumulating test's rows below)
RUNS = [(ODD, "im2col", CHUNKS), (ODD, "winograd", CHUNKS), (ODD, "winograd", WHOLE), (ODD, "winograd4", CHUNKS),
        (ODD, "direct", CHUNKS), (ODD, "direct", WHOLE),
        ((4, 3, 3, 13, 9, 1, [2, 1], [2, 1]), "direct", CHUNKS),          # dilation, uneven padding
        ((4, 3, 3, 13, 9, 1, [2, 1], [2, 1]), "im2col", CHUNKS),
        (ONE, "gemm", CHUNKS), (ONE, "gemm", WHOLE),
        ((6, 7, 1, 7, 9, 1, 1, 1), "gemm", CHUNKS),                       # 1x1 over a padded input
        ((3, 4, 7, 15, 12, 1, 3, 1), "direct", CHUNKS),                   # 7x7
        ((3, 4, 3, 11, 12, 2, 1, 1), "im2col", CHUNKS),                   # stride 2
        ((3, 4, 3, 11, 12, 2, 1, 1), "im2col", ROWS3),                    # stride 2, by output rows
        (ODD, "winograd", ROWS3)]                                         # Winograd's tiles by output rows


@pytest.mark.slow
@pytest.mark.parametrize("case, algo, tiles", RUNS,
                         ids=[f"{'x'.join(map(str, c[:5]))}-s{c[5]}-p{c[6]}-d{c[7]}-{a}-"
                              f"{'chunks' if t[0] else 'rows' if any(t) else 'whole'}" for c, a, t in RUNS])
def test_every_algorithm_matches_the_reference(case, algo, tiles):
    c, f, k, h, w, stride, padding, dilation = case
    src = _conv_chain(c, f, k, h, w, stride, padding, dilation)
    ops = [o.id for o in stages(src, {"B": 3}, target="cpu").plan.info.ops if o.is_compute]
    if any(tiles):        # conv + epilogue in one kernel, a chunk per image or per block of output rows
        groups = [{"ops": ops, "block_tiles": tiles, "conv": algo}]
    else:                 # the conv a kernel of its own, untiled: its images in a prange
        info = stages(src, {"B": 3}, target="cpu").plan.info
        conv = [o.id for o in info.ops if o.name.endswith("conv_2d_nchw_fchw")]
        rest = [o.id for o in info.ops if o.kind == "elementwise"]
        groups = [{"ops": conv, "conv": algo}, {"ops": rest, "block_tiles": [1, 0, 0, 0]}]
    prog = fusec.compile(src, target="cpu", options={"baseline": False, "plans": {"c": {"groups": groups}}})
    compiled = prog.c.compiled({"B": 3})
    assert [g["conv"] for g in compiled.plan["groups"] if g["conv"]] == [algo]
    kernels = prog.c.stages({"B": 3})["kernels"]
    if algo != "direct":
        assert "# cblas: linalg.conv_2d_nchw_fchw" in kernels
    assert ("_winograd2_input" in kernels) == (algo == "winograd")
    assert ("_winograd4_input" in kernels) == (algo == "winograd4")
    assert ("_conv_direct" in kernels) == (algo == "direct")
    (check,) = prog.c.check(binding={"B": 3})
    assert check.ok, check.describe()
