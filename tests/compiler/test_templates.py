"""Kernel templates (compiler/plan/templates.py): one config per template, one registry.

- every registry entry names stages that exist;
- the hand-plan round trip (compiler/plan/handplan.py): a plan written as a hand plan
  (`to_spec`) and planned from it (`plan_from_dict`, the `--plan` path) has the same groups, over
  plans with every template;
- the registry is the only dispatch on the kind of kernel in compiler/plan, compiler/transforms
  and compiler/emit: a branch on a template's config (isinstance, its name) or on the fields
  Kernel and Tiling used to carry elsewhere fails here.
"""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import fusec
from fusec.compiler.options import CompileOptions
from fusec.compiler.pipeline import compile_typed
from fusec.compiler.plan import templates
from fusec.compiler.plan.handplan import to_spec
from fusec.compiler.plan.hardware import GPUS
from fusec.compiler.plan.templates import TEMPLATES

ROOT = Path(__file__).resolve().parents[2]
H200 = GPUS["h200"]
F16 = "chain t(a: f16[M, K], b: f16[K, N], c: f16[N]) -> f16[M, N] { return relu(a @ b + c) }"
F64 = F16.replace("f16", "f64")


def test_every_registered_stage_resolves():
    for name, t in TEMPLATES.items():
        assert t.config.name == name
        for stage in ("search", "valid", "resolve", "cost", "grid", "mark", "emit"):
            ref = t.emit[1] if stage == "emit" else getattr(t, stage)
            assert bool(ref) == (t.stage(stage) is not None), (name, stage)
            assert t.stage(stage) is None or callable(t.stage(stage)), (name, stage)


def _options(target: str, plans=()):
    from fusec.compiler.calibrate import cpu_profile
    return CompileOptions.make(target=target, hardware=cpu_profile() if target == "cpu" else H200,
                               plans=dict(plans))


# (source, chain, binding, target): together every template (checked below)
CASES = [
    ("examples/ew_chain.fdsl", "ew_chain", {"M": 64, "N": 128}, "gpu"),                     # elementwise
    ("examples/ew_chain.fdsl", "ew_chain", {"M": 64, "N": 128}, "cpu"),
    ("examples/softmax.fdsl", "softmax_rows", {"M": 64, "N": 512}, "gpu"),                  # row
    ("examples/softmax.fdsl", "softmax_rows", {"M": 64, "N": 512}, "cpu"),
    ("examples/mlp.fdsl", "mlp", {"M": 128, "D": 64, "H": 256, "O": 64}, "gpu"),             # contraction
    ("examples/mlp.fdsl", "mlp", {"M": 4096, "D": 1024, "H": 4096, "O": 1024}, "gpu"),      # ... cp.async stages
    (F64, "t", {"M": 4096, "K": 1024, "N": 4096}, "gpu"),                                    # ... double-buffered (no cp.async for f64)
    ("examples/mlp.fdsl", "mlp", {"M": 128, "D": 64, "H": 256, "O": 64}, "cpu"),
    (F16, "t", {"M": 512, "K": 1024, "N": 4096}, "gpu"),                                     # ... on tensor cores
    ("examples/attention.fdsl", "attention", {"B": 2, "S": 128}, "gpu"),                    # attention
    ("examples/attention.fdsl", "attention", {"B": 2, "S": 128}, "cpu"),
    ("examples/scans.fdsl", "causal_mean", {"B": 2, "S": 64}, "gpu"),                        # scan
    ("examples/scans.fdsl", "causal_mean", {"B": 2, "S": 64}, "cpu"),
    ("examples/conv_bn_relu.fdsl", "conv_bn_relu", {"B": 2}, "cpu"),                         # conv
]


def _plan(src: str, chain: str, binding: dict, target: str, plans=()):
    text = (ROOT / src).read_text() if src.startswith("examples/") else src
    c = fusec.check(text).chain(chain)
    return compile_typed(c, binding, options=_options(target, plans), until="plan").plan


@pytest.fixture(scope="module")
def plans():
    return [(case, _plan(*case)) for case in CASES]


def test_the_cases_hold_every_template(plans):
    seen = {g.template for _, p in plans for g in p.kernels}
    assert seen == set(TEMPLATES), seen
    configs = [g.config for _, p in plans for g in p.kernels]
    assert any(getattr(c, "prefetch", False) for c in configs) and any(getattr(c, "mma", "") for c in configs)
    assert any(getattr(c, "stages", 0) for c in configs)


@pytest.mark.parametrize("k", range(len(CASES)), ids=[f"{c[1]}-{c[3]}-{i}" for i, c in enumerate(CASES)])
def test_a_plan_given_back_as_a_hand_plan_is_the_same_plan(plans, k):
    case, plan = plans[k]
    spec = to_spec(plan)
    again = _plan(*case, plans=[(case[1], json.dumps(spec))])
    assert again.kernels == plan.kernels, (plan.format(), again.format())
    assert to_spec(again) == spec
    assert to_spec(plan.summary()) == spec            # from a summary (an artifact's plan), as fallback.py does


def test_the_summary_keeps_the_plan_json_fields():
    plan = _plan(*CASES[9])
    (g,) = plan.summary()["groups"]
    assert g["attention"] and g["gemm"] == [] and g["row_threads"] == 0 and g["scan"] == 0 and g["conv"] == ""
    assert list(g)[:17] == ["kernel", "root", "serial", "loops", "block_tiles", "thread_tiles", "threads",
                            "row_threads", "gemm", "tensor_cores", "double_buffered", "attention", "recomputed",
                            "siblings", "scan", "scan_axis", "conv"]


# ---- the registry is the only dispatch on the kind of kernel -------------------------------------

SCANNED = ("compiler/plan", "compiler/transforms", "compiler/emit")
REGISTRY = {"compiler/plan/templates.py", "compiler/plan/handplan.py"}
# functions that are a template's own planning, not a dispatch: each checks its own config
OWN = {
    ("compiler/plan/attention_merge.py", "merge_attention"): "the attention template's merge pass asks "
                                                             "whether its own search found tiles",
    ("compiler/plan/decisions.py", "contraction_note"): "says how a contraction runs: tiled (its config) or not",
}
# the fields Kernel and Tiling had before plan/templates.py (a template's data is its config's)
OLD_FIELDS = {"row_threads", "gemm", "mma", "prefetch", "attention", "conv"}
CONFIGS = {c.__name__ for c in (t.config for t in TEMPLATES.values())} | {"Config"}


def _tests(tree: ast.AST):
    """(function name, expression) of every condition in `tree`: if/elif, while, x if c else y,
    comprehension filters, and the operands of `and`/`or`/`not` inside them."""
    def walk(node, fn):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            fn = node.name
        if isinstance(node, (ast.If, ast.While, ast.IfExp)):
            yield fn, node.test
        if isinstance(node, ast.comprehension):
            for cond in node.ifs:
                yield fn, cond
        for child in ast.iter_child_nodes(node):
            yield from walk(child, fn)
    yield from walk(tree, "")


def _kind_branches(expr: ast.AST) -> list[str]:
    out = []
    for node in ast.walk(expr):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("isinstance", "type"):
            names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | \
                    {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
            if names & CONFIGS:
                out.append(ast.unparse(node))
        elif isinstance(node, ast.Attribute) and node.attr == "template":
            out.append(ast.unparse(node))
        elif (isinstance(node, ast.Attribute) and node.attr == "name" and isinstance(node.value, ast.Attribute)
              and node.value.attr == "config"):
            out.append(ast.unparse(node))
        elif (isinstance(node, ast.Attribute) and node.attr in OLD_FIELDS and
              not (isinstance(node.value, ast.Name) and node.value.id == "self") and     # an emitter's own state
              not (isinstance(node.value, ast.Attribute) and node.value.attr == "config")):   # a config's data
            out.append(ast.unparse(node))
    return out


def test_the_registry_is_the_only_dispatch_on_the_kind_of_kernel():
    found = []
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            if rel in REGISTRY:
                continue
            for fn, expr in _tests(ast.parse(path.read_text(), rel)):
                if (rel, fn) in OWN:
                    continue
                found += [f"{rel}:{expr.lineno} in {fn or 'the module'}: {b}" for b in _kind_branches(expr)]
    assert not found, ("branches on the kind of kernel outside the template registry (plan/templates.py: ask "
                       "TEMPLATES or a property of the config):\n" + "\n".join(found))


def test_the_scan_catches_a_new_branch():
    src = ("def f(g, t):\n    if g.attention:\n        pass\n    x = 1 if isinstance(t.config, RowConfig) else 0\n"
           "    return [h for h in t if h.template == 'scan']\n")
    branches = [b for _, e in _tests(ast.parse(src)) for b in _kind_branches(e)]
    assert branches == ["g.attention", "isinstance(t.config, RowConfig)", "h.template"]


def test_groups_and_tilings_hold_one_config():
    from dataclasses import fields
    from fusec.compiler.plan.cost import Tiling
    from fusec.compiler.plan.kernels import Kernel
    assert not {f.name for f in fields(Kernel)} & (OLD_FIELDS | {"scan"})
    assert not {f.name for f in fields(Tiling)} & (OLD_FIELDS | {"scan"})
    assert {f.name for f in fields(Tiling)} == {"block", "thread", "mapped", "config"}
    with pytest.raises(TypeError):
        templates.RowConfig(256)                     # keyword-only
