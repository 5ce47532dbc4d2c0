"""Planning decisions (plan/decisions.py): values whose kernels are named by their final numbers
once the plan is made; and the attention matcher's reasons (plan/attention.py: NotAttention),
which the planner tests by kind, not by wording."""
from fusec.compiler.plan.attention import Mismatch, NotAttention, find_attention
from fusec.compiler.plan.decisions import Decision, KernelNames, KernelRef
from helpers import stages


def test_a_decision_names_its_kernels_by_their_final_numbers():
    names = KernelNames(4)            # grown last kernel first: ids 0..3, kernel id 3 runs first
    d = Decision("not fused", "%1 map(exp)", ("kernel ", KernelRef(2), " is a scan"), (1,), (2,), " into kernel")
    assert d.text(names.number) == "not fused: %1 map(exp) into kernel 1: kernel 1 is a scan"
    names.merged(2, 0)                # kernel id 2 became part of kernel id 0
    assert names.ids == [0, 1, 3] and names.number(2) == names.number(0) == 2
    assert d.text(names.number) == "not fused: %1 map(exp) into kernel 2: kernel 2 is a scan"
    assert d.named() == (2, 2)


def test_a_decision_without_a_subject_is_its_verdict_and_reason():
    assert Decision("not fused horizontally", "", "asked not to").text() == "not fused horizontally: asked not to"


def test_a_decision_names_several_kernels_and_what_follows_them():
    d = Decision("recomputed", "%4 map(mulf)", "saves its kernel", (4,), (0, 1), " in kernels", ", never written",
                 (("time_s", -1e-6),))
    assert d.text(lambda k: 5 - k) == "recomputed: %4 map(mulf) in kernels 5, 4, never written: saves its kernel"


RETURNED_P = """chain f(q: f32[B, S, 32], k: f32[B, S, 32], v: f32[B, S, 32]) -> (f32[B, S, 32], f32[B, S, S]) {
    p = softmax(q @ transpose(k) / 4.0)
    return p @ v, p
}"""


def test_the_matcher_says_why_with_a_kind_and_the_plan_says_only_the_near_misses():
    plan = stages(RETURNED_P, dict(B=4, S=64)).plan
    found = [find_attention(plan.info, o.id) for o in plan.info.ops if o.kind == "contraction"]
    assert all(isinstance(a, NotAttention) for a in found)
    # q @ kᵀ reads no softmax: not the pattern at all; p @ v is, but p is returned too
    assert sorted(a.kind.value for a in found) == ["unfit", "unlike"]
    (unfit,) = [a for a in found if a.kind is Mismatch.UNFIT]
    assert unfit.text.startswith("the normalised scores are also used by the output")
    said = [d for d in plan.decisions if d.startswith("not attention")]
    assert len(said) == 1 and said[0].endswith(unfit.text), plan.decisions
