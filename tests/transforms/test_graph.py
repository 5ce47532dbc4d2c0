"""The graph-pass pipeline: names, order, switching passes off, and elementwise fusion."""
from __future__ import annotations

import pytest

from chainbuild import ChainBuilder, filecheck
from fusec.compiler.transforms import graph as passes
from fusec.compiler.errors import CompilerInternalError
from fusec.compiler.lowering.lower import lower_chain
from fusec.compiler.mlir import ir
from fusec.compiler.options import CompileOptions
from fusec.compiler.pipeline import run_stages


def six_op_chain() -> ChainBuilder:
    b = ChainBuilder("ew6")
    x, y = b.param("x", "f32", [4, 8]), b.param("y", "f32", [8])
    t = b.op("add", x, y)
    t = b.op("mul", t, b.const(0.5, "f32"))
    t = b.op("exp", t)
    t = b.op("sub", t, x)
    t = b.op("relu", t)
    b.out = b.op("tanh", t)
    return b


def test_pass_names_are_kebab_case_and_ordered():
    assert passes.PASS_NAMES == ("fold-batchnorm", "canonicalize", "cse", "linalg-fuse-elementwise-ops",
                                 "inline-indexed-reads", "hoist-reshapes", "fold-unit-reshapes", "matmul-rows",
                                 "split-reductions",
                                 "mark-scans", "symbol-dce")
    for p in passes.GRAPH_PASSES:
        assert p.name == p.name.lower() and " " not in p.name and "_" not in p.name
        assert p.why


def test_six_op_elementwise_chain_is_one_generic_after_graph():
    b = six_op_chain()
    stages = run_stages(b.module(b.out))
    assert stages["linalg"].count("linalg.generic") == 6
    filecheck(stages["graph"], """
CHECK: linalg.generic
CHECK-SAME: iterator_types = ["parallel", "parallel"]
CHECK-SAME: ins(%arg0, %arg1 : tensor<4x8xf32>, tensor<8xf32>)
CHECK: arith.addf
CHECK: arith.mulf
CHECK: math.exp
CHECK: arith.subf
CHECK: arith.maximumf
CHECK: math.tanh
CHECK: linalg.yield
CHECK-NOT: linalg.generic
""")
    assert stages["graph"].count("linalg.generic") == 1


def test_disabling_fusion_keeps_six_generics():
    b = six_op_chain()
    graph = run_stages(b.module(b.out), options=CompileOptions(disabled_passes=["linalg-fuse-elementwise-ops"]))["graph"]
    assert graph.count("linalg.generic") == 6


def test_disabling_every_pass_leaves_the_linalg_stage():
    b = six_op_chain()
    stages = run_stages(b.module(b.out), options=CompileOptions(disabled_passes=passes.PASS_NAMES))
    assert stages["graph"] == stages["linalg"]


def test_unknown_pass_name_is_a_value_error():
    b = six_op_chain()
    with pytest.raises(ValueError, match="unknown pass 'no-such-pass'.*fold-batchnorm"):
        run_stages(b.module(b.out), options=CompileOptions(disabled_passes=["no-such-pass"]))


def test_run_graph_passes_reports_what_ran():
    b = six_op_chain()
    module = lower_chain(b.build(b.out))
    ran = passes.run_graph_passes(module, disabled=["cse"])
    assert "cse" not in ran and ran[0] == "fold-batchnorm" and ran[-1] == "symbol-dce"


def test_dead_code_is_removed():
    b = ChainBuilder("dead")
    x = b.param("x", "f32", [4])
    b.op("exp", x)                      # unused
    keep = b.op("neg", x)
    stages = run_stages(b.module(keep))
    assert "math.exp" in stages["linalg"]
    assert "math.exp" not in stages["graph"]


class _BreakIR:
    """A pass that leaves IR which does not verify: a func.return with the wrong operand types."""
    name = "break-ir"
    why = "test"

    def apply(self, module, hw=None):
        with module.context, ir.Location.unknown():
            f = module.body.operations[0]
            ret = f.regions[0].blocks[0].operations[-1]
            ret.operation.erase()
            with ir.InsertionPoint(f.regions[0].blocks[0]):
                ir.Operation.create("func.return", operands=[])


def test_a_pass_that_breaks_the_ir_is_an_internal_error_naming_stage_pass_and_dump(monkeypatch, tmp_path):
    monkeypatch.setattr(passes, "GRAPH_PASSES", passes.GRAPH_PASSES[:2] + (_BreakIR(),))
    monkeypatch.setattr(passes, "PASS_NAMES", passes.PASS_NAMES + ("break-ir",))
    b = six_op_chain()
    with pytest.raises(CompilerInternalError) as info:
        run_stages(b.module(b.out), dump_dir=tmp_path)
    e = info.value
    assert e.stage == "graph"
    assert "break-ir" in e.message
    assert e.dump_path == str(tmp_path / "ew6.03-graph.failed.mlir")
    assert (tmp_path / "ew6.02-linalg.mlir").exists()
    assert "func.return" in (tmp_path / "ew6.03-graph.failed.mlir").read_text()
    assert "internal compiler error in stage 'graph'" in str(e)


def test_internal_error_without_dump_dir_still_dumps(monkeypatch):
    monkeypatch.setattr(passes, "GRAPH_PASSES", (_BreakIR(),))
    monkeypatch.setattr(passes, "PASS_NAMES", ("break-ir",))
    b = six_op_chain()
    with pytest.raises(CompilerInternalError) as info:
        run_stages(b.module(b.out))
    assert info.value.dump_path and info.value.dump_path.endswith("ew6.03-graph.failed.mlir")
