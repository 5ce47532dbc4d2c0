"""What GPT-2 at the bench's widths showed on the cpu after matmul-rows (issue 39): a product that
stays a contraction generic runs as scalar loops and is priced so (plan/cost_cpu.py:
LOOP_CONTRACTION_FLOPS), so the attention before the head merge's permute is the online-softmax
template with the permute a kernel of its own after it (plan/attention_merge.py), and the tanh
GELU's pow(x, 3.0) is a product, not a powf call per element."""
import re

from fusec.compiler.plan.cost_cpu import LOOP_CONTRACTION_FLOPS

from .stages import CPU, compile_, run_matches, texts

# both sides batched over two dims: no named op, no matmul on rows, a contraction generic
BATCHED = """chain f(q: f32[2, 2, 64, 32], k: f32[2, 2, 32, 64]) -> f32[2, 2, 64, 64] {
    return exp(q) @ k
}"""
# an attention and the head merge before the output projection, as torch.compile hands GPT-2's over
HEADS = """chain f(q: f32[1, 4, 128, 32], k: f32[1, 4, 128, 32], v: f32[1, 4, 128, 32], w: f32[128, 128]) -> f32[1, 128, 128] {
    s = q * 0.42 @ permute(k, [0, 1, 3, 2]) * 0.42
    p = softmax(s, axis=-1)
    o = permute(p @ v, [0, 2, 1, 3])
    return reshape(o, [1, 128, 128]) @ w
}"""
CUBE = """chain f(x: f32[64, 96]) -> f32[64, 96] {
    return x * 0.5 * (tanh((x + pow(x, 3.0) * 0.044715) * 0.7978845608028654) + 1.0) + pow(x, 2.0) - pow(x, 2.5)
}"""


def test_a_contraction_generic_is_priced_as_loops_not_blas():
    plan = compile_(BATCHED, {}, until="plan").plan
    (k,) = [c for g, c in zip(plan.kernels, plan.costs) if any(
        plan.info.op(m).name == "linalg.generic" and plan.info.op(m).kind == "contraction" for m in g.ops)]
    # at least the products at the loops' rate (the exp, computed again per product, on top)
    macs = 2 * 4 * 64 * 64 * 32
    assert k.time_s >= macs / (LOOP_CONTRACTION_FLOPS * CPU.units) * 0.99
    assert k.time_s > 20 * macs / CPU.peak(4)
    run_matches(BATCHED, {}, "cpu")


def test_the_attention_before_a_permute_is_one_kernel_and_the_permute_one_after_it():
    st = compile_(HEADS, {}, until="plan")
    text = st.plan.format()
    kinds = [g.template for g in st.plan.kernels]
    assert kinds.count("attention") == 1, text
    at = kinds.index("attention")
    after = st.plan.kernels[at + 1]
    assert [st.plan.info.op(m).label for m in after.ops if st.plan.info.op(m).kind != "fill"] == ["copy"], text
    assert re.search(r"attention: %\d+\.\.%\d+ as one online-softmax kernel .*%\d+ copy a kernel of its own after "
                     r"it", text), text
    # and the head merge's product a matmul on rows (BLAS), not loops
    assert "_sgemm(" in texts(HEADS, {}, until="kernels")["kernels"]
    run_matches(HEADS, {}, "cpu")


def test_a_float_to_a_constant_2_or_3_is_a_product():
    linalg = texts(CUBE, {}, until="linalg")["linalg"]
    assert len(re.findall(r"math\.powf", linalg)) == 1          # the 2.5 alone
    run_matches(CUBE, {}, "cpu")
