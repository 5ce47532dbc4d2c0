"""Shape-polymorphic builds (--dynamic, options.dynamic): one build runs every extent of a
symbol, checked against the reference each time; the plan says which size class it was made
for; what cannot take an extent at run time is a user error at the op."""
import os
import re
import textwrap

import numpy as np
import pytest

import fusec
from fusec.cli import main
from fusec.compiler.dynamic import bucket, size_class
from fusec.compiler.lowering.builder import Dyn, DynamicUnsupported
from fusec.compiler.options import OptionsError
from fusec.dsl.diagnostics import FdslError
from fusec.runtime import reference
from fusec.runtime.compare import compare

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")

ROWS = """\
chain rows(x: f32[M, N], g: f32[N]) -> f32[M, N] {
    return softmax(x * g, axis=-1) + x
}
"""
MLP = """\
chain mlp(x: f32[M, D], w1: f32[D, H], b1: f32[H], w2: f32[H, D]) -> f32[M, D] {
    return gelu(x @ w1 + b1) @ w2 + x
}
"""


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return str(p)


def checked(chain, binding, seed=0):
    """Run the chain on seeded inputs at `binding`; every output matches the reference."""
    inputs = reference.random_inputs(chain.typed, binding, seed)
    got = chain(*inputs)
    got = got if isinstance(got, tuple) else (got,)
    want = reference.run_chain(chain.typed, inputs, binding)
    for g, w, t in zip(got, want, chain.typed.output_types):
        assert g.shape == w.shape
        assert compare(g, w, t.dtype.name).ok


def test_size_classes_are_power_of_two_buckets():
    assert [bucket(n) for n in (1, 2, 3, 33, 64, 65, 1000, 1024, 1025)] == [1, 2, 4, 64, 64, 128, 1024, 1024, 2048]
    assert size_class(600) == "513..1024" and size_class(1) == "1" and size_class(2) == "2..2"


@pytest.mark.slow
@pytest.mark.parametrize("source, name, fixed", [(ROWS, "rows", {"N": 48}), (MLP, "mlp", {"D": 24, "H": 40})],
                         ids=["row-kernel", "blas"])
def test_three_extents_run_from_one_build(tmp_path, source, name, fixed):
    prog = fusec.compile(write(tmp_path, "c.fdsl", source), target="cpu", options={"dynamic": ["M"]}, cache=False)
    chain = prog.chains[name]
    for m in (40, 51, 64):                       # one size class: 33..64
        checked(chain, dict(fixed, M=m))
    assert len(chain._builds) == 1
    (build,) = chain._builds.values()
    assert build.binding["M"] == 64
    assert build.plan["dynamic"] == {"M": 64}
    static = fusec.compile(write(tmp_path, "c.fdsl", source), target="cpu", cache=False).chains[name]
    # the model's figures are the static build's at the class top, the op-by-op baseline too
    # (its rejected fusions may differ)
    figures = [{k: v for k, v in p["model"].items() if k != "rejected"}
               for p in (build.plan, static.plan(dict(fixed, M=64)))]
    assert figures[0] == figures[1] and figures[0]["big_transfers"]["eager"] > 0
    assert build.fused.jit_s is not None         # Numba compiled it once, for the first extent
    checked(chain, dict(fixed, M=7))             # another class: planned again, for 5..8
    assert sorted(b.binding["M"] for b in chain._builds.values()) == [8, 64]


def test_the_kernels_read_the_extent_and_the_plan_says_the_class(tmp_path, capsys):
    f = write(tmp_path, "c.fdsl", ROWS)
    assert main([f, "--target", "cpu", "--dynamic", "M", "--bind", "M=600,N=32", "--emit", "kernels"]) == 0
    src = capsys.readouterr().out
    assert "arg0.shape[0]" in src and "1024" not in src
    assert main([f, "--target", "cpu", "--dynamic", "M", "--bind", "M=600,N=32", "--emit", "plan"]) == 0
    plan = capsys.readouterr().out
    assert "dynamic: the kernels read M (tiles chosen for the size class M in 513..1024, planned at M = 1024)" in plan
    assert main([f, "--target", "cpu", "--bind", "M=600,N=32", "--emit", "plan"]) == 0
    assert "dynamic" not in capsys.readouterr().out        # static stays the default


@pytest.mark.slow
def test_the_main_job_checks_a_dynamic_build_at_the_bound_extent(tmp_path, capsys):
    f = write(tmp_path, "c.fdsl", MLP)
    assert main([f, "--target", "cpu", "--dynamic", "M", "--bind", "M=37,D=16,H=24"]) == 0
    out = capsys.readouterr().out
    assert "chain mlp [M=37, D=16, H=24] on cpu" in out
    assert "dynamic: the kernels read M (tiles chosen for the size class M in 33..64" in out
    assert "out 0 f32[37, 16]" in out and "-> ok" in out


def test_a_second_program_loads_the_class_from_the_compile_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("FUSEC_NO_CACHE", raising=False)
    root = tmp_path / "cache"
    f = write(tmp_path, "c.fdsl", ROWS)
    first = fusec.compile(f, target="cpu", options={"dynamic": ["M"]}, cache_dir=str(root)).chains["rows"]
    checked(first, {"M": 40, "N": 16})
    second = fusec.compile(f, target="cpu", options={"dynamic": ["M"]}, cache_dir=str(root)).chains["rows"]
    checked(second, {"M": 60, "N": 16})
    assert [b.cache for b in first._builds.values()] == ["miss"]
    assert [b.cache for b in second._builds.values()] == ["hit"]


@pytest.mark.parametrize("source, where, what", [
    ("chain f(x: f32[M, N]) -> f32[N, M] {\n    return reshape(x, [N, M]) * 2.0\n}\n", "2:12",
     "reshape cannot take M at run time (--dynamic M): its lowering needs the extent as a number"),
    ("chain f(x: f32[M, N]) -> f32[4, N] {\n    return x[-4:] * 2.0\n}\n", "2:12",
     "slice cannot take M at run time (--dynamic M): the axis it cuts (or a bound it names) must be static"),
    ("chain f(t: f32[M, 8], ids: i32[N]) -> f32[N, 8] {\n    return embedding(t, ids)\n}\n", "2:12",
     "embedding cannot take M at run time (--dynamic M): the table's indexed axis must be static"),
    ("chain f(x: f32[M, 3, 8, 8], w: f32[4, 3, 3, 3]) -> f32[M, 4, 6, 6] {\n    return relu(conv2d(x, w))\n}\n",
     "2:17", "conv2d cannot take M at run time (--dynamic M): its convolution algorithms are chosen"),
])
def test_an_op_that_needs_the_extent_is_a_user_error_at_the_op(tmp_path, capsys, source, where, what):
    f = write(tmp_path, "c.fdsl", source)
    assert main([f, "--target", "cpu", "--dynamic", "M", "--bind", "M=8,N=8" if "N" in source else "M=8"]) == 1
    err = capsys.readouterr().err
    assert f"{f}:{where}: error: {what}" in err and "bind M statically" in err
    assert "Traceback" not in err and "internal error" not in err


def test_dynamic_options_that_name_nothing_or_another_target_are_refused(tmp_path, capsys):
    f = write(tmp_path, "c.fdsl", ROWS)
    assert main([f, "--target", "cpu", "--dynamic", "Q"]) == 1
    assert "--dynamic Q: no chain of this file has the symbol Q (its symbols: M, N)" in capsys.readouterr().err
    assert main([f, "--target", "reference", "--dynamic", "M"]) == 1    # cuda/cuda-sim: test_dynamic_gpu.py
    assert "--dynamic works on the compiled targets (cpu, cuda, cuda-sim), not reference" in capsys.readouterr().err
    assert main([f, "--dynamic", "M,2x"]) == 1
    assert "expected symbol names separated by commas" in capsys.readouterr().err
    with pytest.raises(OptionsError, match=r"compiled targets \(cpu, cuda, cuda-sim\), not mlir-jit"):
        fusec.compile(f, target="mlir-jit", options={"dynamic": ["M"]})
    with pytest.raises(OptionsError, match="has the symbol Q"):
        fusec.compile(f, target="cpu", options={"dynamic": ["Q"]})


def test_a_run_time_extent_refuses_arithmetic_and_compares_by_symbol():
    m, s = Dyn("M"), Dyn("S")
    assert m == Dyn("M") and m != s and m != 1 and m != 64
    for op in (lambda: m * 2, lambda: 2 * m, lambda: m + 1, lambda: 1 - m, lambda: m // 2, lambda: m < 4):
        with pytest.raises(DynamicUnsupported):
            op()


@pytest.mark.slow
def test_the_examples_that_take_their_rows_at_run_time(capsys):
    """The row chains of the examples run with their row symbol dynamic, at an extent off the class."""
    for f, chain, bind in [("layernorm.fdsl", "layernorm_builtin", "T=45"),
                           ("attention.fdsl", "attention", "B=3,S=50")]:
        sym = bind.split("=")[0]
        assert main([os.path.join(EXAMPLES, f), "--chain", chain, "--target", "cpu", "--dynamic", sym,
                     "--bind", bind]) == 0, capsys.readouterr().err
        out = capsys.readouterr().out
        assert f"dynamic: the kernels read {sym}" in out and "-> ok" in out and "FAIL" not in out


def test_a_mean_and_a_norm_over_the_run_time_axis_divide_by_its_extent(tmp_path):
    """The divisor of a mean (and of layernorm's statistics) along a dynamic axis is read at run time."""
    src = ("chain f(x: f32[M, N], g: f32[M], b: f32[M]) -> f32[N, M] {\n"
           "    return transpose(x - mean(x, axis=0, keepdims=true)) + layernorm(transpose(x), g, b)\n}\n")
    chain = fusec.compile(write(tmp_path, "c.fdsl", src), target="cpu", options={"dynamic": ["M"]}, cache=False).f
    for m in (20, 27, 32):
        checked(chain, {"M": m, "N": 8})
    assert len(chain._builds) == 1


def test_a_reshape_that_keeps_the_run_time_dim_alone_runs(tmp_path):
    src = ("chain f(x: f32[S, 32], w: f32[32, 32]) -> f32[4, S, 8] {\n"
           "    return permute(reshape(x @ w, [S, 4, 8]), [1, 0, 2]) * 0.5\n}\n")
    chain = fusec.compile(write(tmp_path, "c.fdsl", src), target="cpu", options={"dynamic": ["S"]}, cache=False).f
    for s_ in (9, 13, 16):
        checked(chain, {"S": s_})
    assert len(chain._builds) == 1
    # matmul-rows (static shapes only) left out of both the dynamic module and its static twin
    assert any(d.startswith("matmul-rows not run: S is taken at run time")
               for d in chain.compiled({"S": 9}).plan["decisions"])


@pytest.mark.slow
def test_the_output_buffer_is_reused_and_follows_the_extent(tmp_path):
    """A dynamic build's output comes from the build's pool like a static one's: the same array
    again once dropped, a new one of the new shape when the extent changes."""
    chain = fusec.compile(write(tmp_path, "c.fdsl", ROWS), target="cpu", options={"dynamic": ["M"]}, cache=False).rows
    small = reference.random_inputs(chain.typed, {"M": 40, "N": 16}, 0)
    big = reference.random_inputs(chain.typed, {"M": 60, "N": 16}, 0)
    address = chain(*small).ctypes.data                  # dropped at once
    assert chain(*small).ctypes.data == address
    kept = chain(*small)
    assert chain(*small).ctypes.data != kept.ctypes.data  # a result held is never written over
    assert chain(*big).shape == (60, 16)
    assert chain.compiled({"M": 40, "N": 16}).memory["fused"]["outputs"] == 1


def test_attention_keeps_its_template_over_a_run_time_batch_and_not_over_run_time_keys(capsys):
    f = os.path.join(EXAMPLES, "attention.fdsl")
    assert main([f, "--chain", "attention", "--target", "cpu", "--dynamic", "B", "--bind", "B=3,S=512",
                 "--emit", "plan"]) == 0
    plan = capsys.readouterr().out
    assert "-> 1 kernel" in plan and "attention (online softmax)" in plan
    assert main([f, "--chain", "attention", "--target", "cpu", "--dynamic", "S", "--bind", "B=3,S=512",
                 "--emit", "plan"]) == 0
    plan = capsys.readouterr().out
    assert "the online-softmax template is laid out for static queries, keys and head dims, and S is taken" in plan


def test_a_matmul_over_run_time_rows_is_one_blas_call_per_chunk(tmp_path, capsys):
    """As with static rows, each chunk of rows calls BLAS for its rows, however many the run
    brings (the last chunk may be short)."""
    f = write(tmp_path, "c.fdsl", MLP)
    assert main([f, "--target", "cpu", "--dynamic", "M", "--bind", "M=512,D=256,H=1024", "--emit", "kernels"]) == 0
    src = capsys.readouterr().out
    call = re.search(r"_sgemm\(101, 111, 111, (\w+), 1024, 256, _f32_1, arg0\[", src)
    assert call and call.group(1).startswith("v") and src.index(call.group(0)) > src.index("numba.prange(")
    assert re.search(rf"{call.group(1)} = min\(", src)                     # the chunk's rows, taken at run time


@pytest.mark.slow
def test_an_artifact_compiled_dynamic_runs_other_extents_there(tmp_path, capsys):
    f = write(tmp_path, "c.fdsl", ROWS)
    out = str(tmp_path / "art")
    assert main(["compile", f, "--target", "cpu", "--dynamic", "M", "--bind", "M=40,N=16", "-o", out]) == 0
    assert "compiled rows [M=64, N=16]: 1 kernel; M taken at run time (planned for the size class M in 33..64)" in \
        capsys.readouterr().out
    assert main(["run", out, "--bind", "M=37"]) == 0
    text = capsys.readouterr().out
    assert "chain rows [M=37, N=16] on cpu" in text and "out 0 f32[37, 16]" in text and "-> ok" in text
    inputs = tmp_path / "in.npz"
    x = np.random.default_rng(1).standard_normal((90, 16), dtype=np.float32)      # another class, same build
    np.savez(inputs, **{"rows/in/x": x, "rows/in/g": np.ones(16, np.float32)})
    assert main(["run", out, "--inputs", str(inputs)]) == 0
    assert "out 0 f32[90, 16]" in capsys.readouterr().out
    assert main(["run", out, "--bind", "N=8"]) == 1
    assert "was compiled for one extent of N" in capsys.readouterr().err


@pytest.mark.slow
def test_siblings_fuse_horizontally_over_a_run_time_trip_count(capsys):
    """softmax and its logsumexp read one x: with M at run time their tile loops' trip counts
    resolve to the one extent the chain read, and they are one kernel, as with static M."""
    f = os.path.join(EXAMPLES, "by_hand.fdsl")
    assert main([f, "--chain", "softmax_and_logsumexp", "--target", "cuda-sim", "--dynamic", "M",
                 "--bind", "M=5,N=64", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "5 ops -> 1 kernel" in out and "out 1 f32[5, 1]" in out and out.count("-> ok") == 2
    assert "fused horizontally: the kernels of" in out and "not fused horizontally" not in out


def test_siblings_whose_trip_counts_stay_two_values_are_planned_apart(capsys):
    """RoPE's q and k tiled along a run-time S on the GPU: tiling reads S from q for one and
    from k for the other, so the sibling fusion cannot be made; the plan, tried on a copy,
    keeps two kernels and says why, and both outputs check."""
    f = os.path.join(EXAMPLES, "rope.fdsl")
    args = [f, "--chain", "rope", "--target", "cuda-sim", "--dynamic", "S", "--bind", "B=1,H=2,S=5"]
    assert main(args + ["--emit", "plan"]) == 0
    plan = capsys.readouterr().out
    assert "-> 2 kernels" in plan
    assert "not fused horizontally: S is taken at run time, and the kernels' tile loops would not take one " \
           "trip count (operations cannot be fused)" in plan
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "2 ops -> 2 kernels" in out and out.count("-> ok") == 2
    assert main([f, "--chain", "rope", "--target", "cuda-sim", "--bind", "B=1,H=2,S=5", "--emit", "plan"]) == 0
    assert "-> 1 kernel" in capsys.readouterr().out            # static S: one kernel


def test_a_stage_that_cannot_take_a_run_time_extent_is_a_user_error_at_the_chain(tmp_path, monkeypatch, capsys):
    from fusec.compiler import pipeline
    from fusec.compiler.errors import CompilerInternalError

    def refuse(module, plans):
        raise CompilerInternalError("tiled", "transform script failed: Failed to apply named transform sequence.\n"
                                             "Diagnostic message at loc(\"f\":1:1): operations cannot be fused")
    monkeypatch.setattr(pipeline, "tile_and_fuse", refuse)
    f = write(tmp_path, "c.fdsl", ROWS)
    assert main([f, "--target", "cpu", "--dynamic", "M", "--bind", "M=8,N=8", "--emit", "tiled"]) == 1
    err = capsys.readouterr().err
    assert (f"{f}:1:1: error: chain 'rows' cannot be built with M taken at run time (--dynamic M): stage 'tiled': "
            "operations cannot be fused; bind M statically") in err
    assert main([f, "--target", "cpu", "--bind", "M=8,N=8", "--emit", "tiled"]) == 2      # static: still a bug


@pytest.mark.slow
def test_slices_concats_and_gathers_take_run_time_extents_on_the_axes_they_keep(capsys):
    """RoPE's slices and concat cut the head dim, embedding indexes the vocabulary: with the
    sequence (and the batch) at run time both run, at an extent off the class."""
    for chain, dyn, bind in [("rope", "S", "B=2,H=2,S=45"), ("embed", "B,S", "V=100,B=3,S=45")]:
        f = os.path.join(EXAMPLES, "rope.fdsl" if chain == "rope" else "embedding.fdsl")
        assert main([f, "--chain", chain, "--target", "cpu", "--dynamic", dyn, "--bind", bind]) == 0, \
            capsys.readouterr().err
        out = capsys.readouterr().out
        assert "dynamic: the kernels read" in out and "FAIL" not in out
        assert out.count("-> ok") == (2 if chain == "rope" else 1)


def test_threads_lowering_at_once_keep_their_own_run_time_extents():
    # the stack of chains lowering with run-time extents is the thread's own: another thread's
    # chain entering and leaving must not hide or replace this one's (a shared stack let
    # softmax with M taken at run time refuse, now and then, in the soak's threads)
    import threading
    from fusec.compiler.lowering import builder
    entered, left = threading.Event(), threading.Event()
    seen = {}

    def other():
        entered.wait()
        with builder.dynamic_dims() as mine:
            seen["other"] = len(builder._LOWERING.dims), mine
        left.set()
    t = threading.Thread(target=other)
    t.start()
    with builder.dynamic_dims() as dims:
        entered.set()
        left.wait()
        assert builder._LOWERING.dims == [dims]
    t.join()
    assert seen["other"][0] == 1 and seen["other"][1] is not dims
    assert builder._LOWERING.dims == []
