"""Stages as data: the ordered stage list, per-chain deterministic text, dump files, errors."""
from __future__ import annotations

import pytest

from chainbuild import ChainBuilder
from fusec.compiler import pipeline
from fusec.compiler.errors import CompilerInternalError
from fusec.compiler.options import CompileOptions
from fusec.compiler.lowering.registry import RULES
from fusec.compiler.lowering.builder import parallel
from fusec.compiler.mlir import arith, ir
from fusec.dsl.typed import TypedModule


def two_chains() -> TypedModule:
    b1, b2 = ChainBuilder("first"), ChainBuilder("second")
    c1 = b1.build(b1.op("softmax", b1.param("x", "f32", ["M", 8])))
    c2 = b2.build(b2.op("add", b2.param("a", "f64", [3]), b2.param("b", "f64", [3])))
    return TypedModule(b1.file, (c1, c2))


def test_stage_list():
    assert pipeline.STAGE_NAMES == ("ast", "typed", "linalg", "graph", "plan", "tiled", "gpu", "kernels")
    for s in pipeline.STAGES:
        assert s.why and callable(s.run)


SOURCE = """const scale = 0.5
chain first(x: f32[M, 8]) -> f32[M, 8] { return softmax(x * scale) }
chain second(a: f64[3], b: f64[3]) -> f64[3] { return a + b }
"""


def test_a_compile_from_source_runs_every_stage_from_ast(tmp_path):
    stages = pipeline.run_source_stages(SOURCE, "two.fdsl", ["first", "second"], {"first": {"M": 2}},
                                        dump_dir=tmp_path)
    assert list(stages) == list(pipeline.STAGE_NAMES)
    names = sorted(p.name for p in tmp_path.iterdir())
    per_chain = ["00-ast.txt", "01-typed.txt", "02-linalg.mlir", "03-graph.mlir", "04-plan.txt", "05-tiled.mlir",
                 "06-gpu.mlir", "07-kernels.py"]
    assert names == [f"{c}.{s}" for c in ("first", "second") for s in per_chain]
    first_ast = (tmp_path / "first.00-ast.txt").read_text()
    assert "(const scale" in first_ast and "(chain first" in first_ast and "second" not in first_ast
    assert (tmp_path / "second.01-typed.txt").read_text().startswith("chain second(a: f64[3], b: f64[3])")
    ast_first, ast_second = stages["ast"].split("// -----")
    assert "(chain first" in ast_first and "(chain second" in ast_second


def test_a_compile_from_source_reports_user_errors_at_their_place():
    from fusec.dsl.diagnostics import FdslError
    with pytest.raises(FdslError, match="bad.fdsl:1:39: error: unknown name .y."):
        pipeline.compile_source("chain f(x: f32[4]) -> f32[4] { return y }", "bad.fdsl", "f")


def test_run_stages_text_per_stage_and_chain():
    stages = pipeline.run_stages(two_chains(), {"first": {"M": 2}}, until="graph")
    assert list(stages) == ["linalg", "graph"]
    for text in stages.values():
        first, second = text.split("// -----")
        assert "func.func @first(%arg0: tensor<2x8xf32>)" in first and "@second" not in first
        assert "func.func @second" in second


def test_until_stops_early():
    assert list(pipeline.run_stages(two_chains(), {"first": {"M": 2}}, until="linalg")) == ["linalg"]
    with pytest.raises(ValueError, match="unknown stage 'tiledx'"):
        pipeline.run_stages(two_chains(), {"first": {"M": 2}}, until="tiledx")


def test_missing_binding_is_a_value_error():
    with pytest.raises(ValueError, match="no extent bound for symbol.*M"):
        pipeline.run_stages(two_chains(), {})


def test_dump_dir_has_one_file_per_stage_and_chain(tmp_path):
    stages = pipeline.run_stages(two_chains(), {"first": {"M": 2}}, dump_dir=tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())    # from a typed chain: the stages after `typed`
    per_chain = ["02-linalg.mlir", "03-graph.mlir", "04-plan.txt", "05-tiled.mlir", "06-gpu.mlir", "07-kernels.py"]
    assert names == [f"{c}.{s}" for c in ("first", "second") for s in per_chain]
    assert (tmp_path / "second.03-graph.mlir").read_text() in stages["graph"]
    assert (tmp_path / "first.07-kernels.py").read_text() in stages["kernels"]


def test_stage_text_is_deterministic(tmp_path):
    opts = CompileOptions(locations=True)
    a = pipeline.run_stages(two_chains(), {"first": {"M": 2}}, options=opts)
    b = pipeline.run_stages(two_chains(), {"first": {"M": 2}}, options=opts)
    assert a == b
    assert 'loc("test.fdsl"' in a["graph"]


def test_compile_chain_keeps_the_last_module():
    chain = two_chains().chains[1]
    out = pipeline.compile_typed(chain)
    assert out.chain == "second" and set(out.texts) == set(pipeline.STAGE_NAMES) - {"ast", "typed"}
    assert out.module is not None and out.module.operation.verify()
    assert out.plan.kernel_count == 1 and "def run_second(" in out.emitted.source


def _bad_exp(ctx, node):
    """A broken lowering: a generic yielding i1 into an f32 tensor (does not verify)."""
    x = ctx.tensor(node.inputs[0])
    i1 = ir.IntegerType.get_signless(1)
    return parallel([x], ctx.shape(node), ctx.elem(node), lambda xs: arith.constant(i1, ir.IntegerAttr.get(i1, 1)))


def test_lowering_that_does_not_verify_is_an_internal_error_with_dump(monkeypatch, tmp_path):
    monkeypatch.setitem(RULES, "exp", _bad_exp)
    b = ChainBuilder("bad")
    tm = b.module(b.op("exp", b.param("x", "f32", [4])))
    with pytest.raises(CompilerInternalError) as info:
        pipeline.run_stages(tm, dump_dir=tmp_path)
    assert info.value.stage == "linalg"
    assert info.value.dump_path == str(tmp_path / "bad.02-linalg.failed.mlir")
    assert "linalg.yield" in (tmp_path / "bad.02-linalg.failed.mlir").read_text()


def test_lowering_that_builds_the_wrong_type_is_an_internal_error(monkeypatch):
    monkeypatch.setitem(RULES, "exp", lambda ctx, node: parallel([], (2, 2), ctx.elem(node),
                                                                 lambda xs: arith.constant(ctx.elem(node), 0.0)))
    b = ChainBuilder("wrong")
    tm = b.module(b.op("exp", b.param("x", "f32", [4])))
    with pytest.raises(CompilerInternalError, match="lowered to tensor<2x2xf32>, but the typed chain says tensor<4xf32>"):
        pipeline.run_stages(tm)


def test_a_kernel_script_that_fails_dumps_the_whole_function(monkeypatch, tmp_path):
    # each kernel is tiled in a scratch module of its own (tile_and_fuse._apply_alone); when its
    # script fails, the kernel's ops are back in the chain's function for the dump
    from fusec.compiler.transforms import tile_and_fuse
    from fusec.compiler.transforms.script import ANY, Step
    steps = tile_and_fuse.group_steps
    monkeypatch.setattr(tile_and_fuse, "group_steps", lambda plan, g: steps(plan, g) + [
        Step(f'%bad = transform.structured.match ops{{["scf.forall"]}} in %root : ({ANY}) -> {ANY}'),
        Step(f"%bad2 = transform.loop.fuse_sibling %bad into %bad : ({ANY}, {ANY}) -> {ANY}")])
    with pytest.raises(CompilerInternalError) as info:
        pipeline.compile_source(SOURCE, "<test>", "first", {"M": 16}, options=CompileOptions(target="gpu"),
                                dump_dir=tmp_path)
    assert info.value.stage == "tiled"
    text = (tmp_path / "first.05-tiled.failed.mlir").read_text()
    assert "scf.forall" in text and "linalg.generic" in text and "func.func @first" in text, text
    assert "@kernel" not in text and "unrealized_conversion_cast" not in text, text
