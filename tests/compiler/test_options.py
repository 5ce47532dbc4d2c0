"""The one options object of a compile: frozen, keyword-only, a stable hash of everything in it."""
import dataclasses

import pytest

from fusec.compiler.options import CompileOptions, OptionsError
from fusec.compiler.plan.hardware import GPUS


def test_options_are_frozen_and_keyword_only():
    o = CompileOptions(target="cpu", fuse=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.fuse = True
    with pytest.raises(TypeError):
        CompileOptions("cpu")                      # noqa: the point is that this is refused


def test_the_key_is_stable_and_changes_with_every_field():
    base = CompileOptions(hardware=GPUS["h200"])
    assert base.key() == CompileOptions(hardware=GPUS["h200"]).key()
    variants = [dict(target="cpu"), dict(hardware=GPUS["h100"]), dict(fuse=False), dict(baseline=False),
                dict(disabled_passes=frozenset({"cse"})), dict(plans=(("f", "{}"),)), dict(autotune=True),
                dict(tuned="{}"), dict(locations=True), dict(kernel_report=True),
                dict(dynamic=("M",)), dict(math="accurate"), dict(conv_layout="nchw")]
    keys = {dataclasses.replace(base, **v).key() for v in variants}
    assert len(keys) == len(variants) and base.key() not in keys
    names = {k for v in variants for k in v}
    assert names == {f.name for f in dataclasses.fields(CompileOptions)}, "a field the key test does not vary"


def test_make_takes_a_dict_with_plans_by_chain_and_refuses_unknown_keys():
    o = CompileOptions.make({"plans": {"f": {"groups": [{"ops": [1]}]}}, "disabled_passes": ["cse"]}, fuse=False)
    assert o.plan_for("f") == {"groups": [{"ops": [1]}]} and o.plan_for("g") is None
    assert o.disabled_passes == frozenset({"cse"}) and not o.fuse
    assert CompileOptions.make(o) is o
    with pytest.raises(OptionsError, match="unknown option fusion; known: autotune, baseline"):
        CompileOptions.make({"fusion": False})
    with pytest.raises(OptionsError, match="unknown compile target 'cuda'"):
        CompileOptions(target="cuda")


def test_dynamic_symbols_are_sorted_names_and_a_comma_list_is_split():
    assert CompileOptions.make({"dynamic": "S, M"}).dynamic == ("M", "S")
    assert CompileOptions.make({"dynamic": ["M", "M"]}).dynamic == ("M",)
    with pytest.raises(OptionsError, match="'2x' is not a symbol name"):
        CompileOptions.make({"dynamic": ["2x"]})


def test_the_math_mode_is_fast_or_accurate_and_the_default_keeps_the_keys_it_had():
    assert CompileOptions().math == "fast" and "math" not in CompileOptions().as_dict()
    assert CompileOptions(math="accurate").as_dict()["math"] == "accurate"
    assert CompileOptions.make({"math": "fast"}).key() == CompileOptions().key()
    with pytest.raises(OptionsError, match="math: unknown mode 'precise'; expected one of fast, accurate"):
        CompileOptions.make({"math": "precise"})


def test_the_conv_layout_is_priced_by_default_and_a_fixed_form_is_checked():
    assert CompileOptions().conv_layout == "auto" and "conv_layout" not in CompileOptions().as_dict()
    assert CompileOptions.make({"conv_layout": "auto"}).key() == CompileOptions().key()
    assert CompileOptions(conv_layout="channels-last").key() != CompileOptions(conv_layout="nchw").key()
    with pytest.raises(OptionsError, match="conv_layout: unknown layout 'nhwc'; expected one of auto, "
                                           "channels-last, nchw"):
        CompileOptions.make({"conv_layout": "nhwc"})
