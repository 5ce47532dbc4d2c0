"""The 16-bit conv's layout, a priced plan decision (issue 37 item 2): an f16 or bf16 conv whose
channels make 16-byte runs is lowered and planned both channels-last (the input padded and copied
[N, H, W, C], the weights [F, KH, KW, C], the layout copies priced as kernels of their own or
fused) and NCHW (its tiles fed by a 2-byte window gather), and the plan with the smaller
predicted total is kept (compiler/pipeline.py: _conv_layout), with one decision line naming
both prices. The kept plan and emitted module are those of the form compiled alone
(options.conv_layout), and fused == reference on the simulator in either form."""
from __future__ import annotations

import json
import re

import pytest

import fusec
from fusec.compiler.options import CompileOptions
from fusec.compiler.pipeline import compile_typed
from fusec.compiler.plan.hardware import GPUS

H200 = GPUS["h200"]
LINE = re.compile(r"conv %(\d+): channels-last ([\d.]+) us \((?:layout copies ([\d.]+) us included|its layout "
                  r"copies fused into the conv's kernel)\) vs NCHW ([\d.]+) us: (channels-last|NCHW)$")


def _src(h: int, k: int, t: str = "f16") -> str:
    pad = k // 2
    return (f"chain t(x: {t}[B, C, {h}, {h}], w: {t}[F, C, {k}, {k}]) -> {t}[B, F, {h}, {h}] "
            f"{{ return relu(conv2d(x, w, padding={pad})) }}")


def _compile(src, binding, until=None, **options):
    c = fusec.check(src).chain("t")
    return compile_typed(c, binding, options=CompileOptions(target="gpu", hardware=H200, **options), until=until)


def _decision(plan) -> re.Match:
    (line,) = [d for d in plan.decisions if d.startswith("conv ")]
    m = LINE.match(line)
    assert m, line
    return m


def _form(st) -> str:
    text = st.texts["linalg"]
    if "conv_2d_nchw_fchw" in text:
        assert "channels-last" not in text and "linalg.transpose" not in text
        return "NCHW"
    assert text.count("linalg.transpose") == 2 and text.count("channels-last:") == 2
    return "channels-last"


BIG = {"B": 16, "C": 128, "F": 128}
PLANNED = [  # (kernel side, image side, binding, the form the model keeps): planning only
    # 3x3 at 16x128x56x56 (bench's conv_f16): channels-last 76.06 us (layout copies 26.76 us
    # included) vs NCHW 166.6 us; the NCHW window gather feeds the tensor cores 2 bytes at a time
    (3, 56, BIG, "channels-last"),
    # 1x1 at 16x128x56x56: channels-last 35.03 us (layout copies 14.14 us included) vs NCHW
    # 24.71 us; no window to gather (a 1x1 conv's NCHW input is a matrix per image, K = C by
    # contiguous pixels), so the copies, 12.8 MB each way for the input, cost more than they save
    (1, 56, BIG, "NCHW"),
    # 3x3 at 1x512x7x7: channels-last 39.99 us (layout copies 14.16 us included) vs NCHW
    # 25.82 us: the weights' copy (4.7 MB) for a 7x7 image
    (3, 7, {"B": 1, "C": 512, "F": 512}, "NCHW"),
]


@pytest.mark.parametrize("k,h,binding,kept", PLANNED)
def test_the_plan_keeps_the_cheaper_layout_and_names_both_prices(k, h, binding, kept):
    st = _compile(_src(h, k), binding, until="plan")
    m = _decision(st.plan)
    cl, nchw = float(m.group(2)), float(m.group(4))
    assert m.group(5) == kept == _form(st)
    assert (cl < nchw) == (kept == "channels-last")
    # the prices are the two forms' plans, each compiled alone; the kept plan is its form's
    forced = {f: _compile(_src(h, k), binding, until="plan", conv_layout=f).plan for f in ("channels-last", "nchw")}
    assert f"{forced['channels-last'].predicted_s * 1e6:.4g}" == m.group(2)
    assert f"{forced['nchw'].predicted_s * 1e6:.4g}" == m.group(4)
    alone = forced["channels-last" if kept == "channels-last" else "nchw"]
    assert st.plan.kernels == alone.kernels and st.plan.predicted_s == alone.predicted_s
    assert st.plan.decisions[:-1] == alone.decisions
    copies = sum(c.time_s for g, c in zip(forced["channels-last"].kernels, forced["channels-last"].costs)
                 if forced["channels-last"].info.op(g.root).note.startswith("channels-last"))
    assert m.group(3) == f"{copies * 1e6:.4g}" and copies > 0
    conv = st.plan.info.op(int(m.group(1)))
    assert conv.kind == "contraction" and (conv.name == "linalg.conv_2d_nchw_fchw") == (kept == "NCHW")


SMALL = [  # (image side, binding, the form kept): 1x1 convs small enough for the simulator
    # channels-last 12.07 us (its layout copies fused into the conv's kernel) vs NCHW 12.3 us
    (8, {"B": 1, "C": 8, "F": 8}, "channels-last"),
    # channels-last 12.3 us (its layout copies fused into the conv's kernel) vs NCHW 12.29 us
    (4, {"B": 1, "C": 8, "F": 8}, "NCHW"),
]


@pytest.mark.parametrize("h,binding,kept", SMALL)
def test_the_kept_form_is_emitted_and_agrees_with_the_reference(h, binding, kept):
    src = _src(h, 1)
    st = _compile(src, binding)
    assert _decision(st.plan).group(5) == kept == _form(st)
    alone = {f: _compile(src, binding, conv_layout=f).emitted.source for f in ("channels-last", "nchw")}
    assert alone["channels-last"] != alone["nchw"]
    assert st.emitted.source == alone["channels-last" if kept == "channels-last" else "nchw"]
    prog = fusec.compile(src, target="cuda-sim")
    assert any(d.startswith("conv %") and d.endswith(f": {kept}") for d in prog.t.plan(binding)["decisions"])
    (c,) = prog.t.check(binding=binding, seed=7)
    assert c.ok, c.describe()


def test_a_fixed_form_a_hand_plan_and_the_cpu_are_not_priced():
    binding = {"B": 1, "C": 8, "F": 8}
    for layout in ("channels-last", "nchw"):
        st = _compile(_src(4, 1), binding, until="plan", conv_layout=layout)
        assert not [d for d in st.plan.decisions if d.startswith("conv")]
        assert _form(st) == ("NCHW" if layout == "nchw" else "channels-last")
    hand = {"groups": [{"ops": [0, 1, 2, 3, 4], "block_tiles": [0, 1, 1, 0], "thread_tiles": [0, 0, 0, 0]}]}
    st = _compile(_src(4, 1), binding, until="plan", plans=(("t", json.dumps(hand)),))
    assert _form(st) == "channels-last"
    assert "conv layout: channels-last, fixed: a hand plan names the channels-last form's ops" in st.plan.decisions
    prog = fusec.compile(_src(4, 1), target="cpu")
    assert any(d.startswith("conv layout: channels-last, fixed: the cpu target does not price it")
               for d in prog.t.plan(binding)["decisions"])
    assert "channels-last" in prog.t.stages(binding)["linalg"]
