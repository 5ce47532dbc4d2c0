"""Regression: examples/attention.fdsl's multihead (`permute(p @ v, [1, 0, 2])` after the
attention) was an internal error in stage emit on cpu ("a fusec.block_gemm epilogue reads the
contraction's result at another element than its own") whenever the measured cpu profile made
the model pick the online-softmax kernel at S=64: the cpu template evaluates the epilogue on each
output at its own element, a permute reads it elsewhere. On the cpu such a kernel is no attention
kernel now (the reason is a plan decision, a hand plan asking for it is refused); the gpu
template stages its outputs through shared memory and keeps it."""
import json
import os

import pytest

import fusec
from fusec.compiler.pipeline import compile_typed
from fusec.compiler.plan.kernels import PlanError
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fusion"))
from helpers import options  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = open(os.path.join(ROOT, "examples", "attention.fdsl")).read()
HAND = {"groups": [{"ops": [3], "block_tiles": [8, 0, 0, 0]}, {"ops": [6], "block_tiles": [8, 0, 0, 0]},
                   {"ops": [9], "block_tiles": [8, 0, 0, 0]},
                   {"ops": [4, 7, 10, 12, 13, 15, 16, 18, 19, 21, 22], "attention": [64, 64]}]}


def test_the_cpu_plan_says_why_it_is_no_attention_kernel():
    chain = fusec.check(SRC).chain("multihead")
    plan = compile_typed(chain, {"S": 64}, options=options("cpu"), until="plan").plan
    assert any(d.startswith("not attention") and "another element than its own" in d for d in plan.decisions), \
        plan.format()
    assert not any(g.template == "attention" for g in plan.kernels)
    gpu = compile_typed(chain, {"S": 2048}, options=options("gpu"), until="plan").plan
    assert any(g.template == "attention" for g in gpu.kernels), gpu.format()


def test_a_hand_plan_asking_for_it_on_the_cpu_is_refused():
    chain = fusec.check(SRC).chain("multihead")
    with pytest.raises(PlanError, match="another element than its own"):
        compile_typed(chain, {"S": 64}, options=options("cpu", plans=(("multihead", json.dumps(HAND)),)))

# its numbers on the cpu: examples/attention.fdsl's golden file (tests/fusion/test_run.py)
