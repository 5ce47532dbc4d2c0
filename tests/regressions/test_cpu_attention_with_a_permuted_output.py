"""Regression: examples/attention.fdsl's multihead (`permute(p @ v, [1, 0, 2])` after the
attention) was an internal error in stage emit on cpu ("a fusec.block_gemm epilogue reads the
contraction's result at another element than its own") whenever the measured cpu profile made
the model pick the online-softmax kernel at S=64: the cpu template evaluates the epilogue on each
output at its own element, a permute reads it elsewhere. On the cpu the permute is a kernel of its
own after the attention kernel (a hand plan asking for the two in one is refused); the gpu
template stages its outputs through shared memory and keeps it."""
import json
import os

import pytest

import fusec
from fusec.compiler.pipeline import compile_typed
from fusec.compiler.plan.handplan import to_spec
from fusec.compiler.plan.kernels import PlanError
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fusion"))
from helpers import options  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = open(os.path.join(ROOT, "examples", "attention.fdsl")).read()


def _hand(plan) -> dict:
    """The cpu plan as a hand plan, its attention's kernels (the scores product's and the rest
    up to the permute) one group asking for the attention template: the projections before it
    keep their own kernels (matmul-rows makes them matmuls on the cpu, so their op numbers are
    not the gpu's)."""
    spec = to_spec(plan)
    first = next(i for i, g in enumerate(plan.kernels) if plan.info.op(g.root).name == "linalg.batch_matmul")
    att = sorted(o for g in spec["groups"][first:] for o in g["ops"])
    return {"groups": spec["groups"][:first] + [{"ops": att, "attention": [64, 64]}]}


def test_the_cpu_attention_kernel_never_holds_the_permute():
    """On the cpu the permute is a kernel of its own after the attention kernel, the two weighed
    against the kernels apart (plan/attention_merge.py: _tail); at S=64 the kernels apart win."""
    chain = fusec.check(SRC).chain("multihead")
    plan = compile_typed(chain, {"S": 64}, options=options("cpu"), until="plan").plan
    assert any(d.startswith("not attention") and "as one online-softmax kernel against" in d
               for d in plan.decisions), plan.format()
    big = compile_typed(chain, {"S": 1024}, options=options("cpu"), until="plan").plan
    (at,) = [k for k, g in enumerate(big.kernels) if g.template == "attention"]
    assert big.info.op(big.kernels[at].root).kind == "contraction", big.format()
    assert [big.info.op(m).label for m in big.kernels[at + 1].ops if big.info.op(m).kind != "fill"] == ["copy"]
    assert any("a kernel of its own after it" in d for d in big.decisions), big.format()
    gpu = compile_typed(chain, {"S": 2048}, options=options("gpu"), until="plan").plan
    assert any(g.template == "attention" for g in gpu.kernels), gpu.format()


def test_a_hand_plan_asking_for_it_on_the_cpu_is_refused():
    chain = fusec.check(SRC).chain("multihead")
    hand = _hand(compile_typed(chain, {"S": 64}, options=options("cpu"), until="plan").plan)
    assert len(hand["groups"]) == 4 and len(hand["groups"][-1]["ops"]) >= 9, hand
    with pytest.raises(PlanError, match="another element than its own"):
        compile_typed(chain, {"S": 64}, options=options("cpu", plans=(("multihead", json.dumps(hand)),)))

# its numbers on the cpu: examples/attention.fdsl's golden file (tests/fusion/test_run.py)
