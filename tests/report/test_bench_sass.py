"""Issue 36's done-when, read from the SASS of the GPU bench kernels at bench sizes (no GPU, no
kernel run): bench/sass_census.py compiles each workload for the H200, and every check it makes
must hold. The checks: innermost-loop math share of the contractions and attention (>= 70% mlp and
a 4096^3 matmul, >= 60% conv, >= 50% attention) with LDS.128 operands; 0 wraparound selects in any
innermost loop; 0 local memory and spills; >= 4 loads in flight in every phase of the row kernels
and 16-byte global loads and stores (blocked-cyclic rows); 16-byte global loads in the elementwise
kernels. cuobjdump and nvdisasm come with the dev extra. The contractions' 64-bit multiplies (PTX
`mul.lo.s64`, whole kernel) are held under ceilings, the figures the template reaches: 38 -> 6 -> 21
(mlp), 11 -> 7 -> 9 (matmul), 83 -> 72 -> 49 (conv); the 16-byte loaders compute a run's address as
its row times the run-time row stride, which LLVM leaves in the K loop, and the conv's 1-D offsets
multiply by static strides that ptxas narrows. A change that raises one has to say why. Issue 37's
f16 tensor-core contractions (matmul4096_f16, mlp_f16, bmm_f16, bmm_bcast_f16 and the
channels-last conv_f16): ldmatrix and 16-byte cp.async in the K loop, no scalar shared loads
there, instructions per HMMA under a ceiling (3), every shared
access conflict-free; the same for bf16 (matmul4096_bf16, mlp_bf16, conv_bf16: its global arrays
hold the 16 bits, issue 37 item 5); f16 and bf16 attention on tensor cores (D = 64, 128, causal):
HMMA in both products, LDSM, P never in shared memory, cp.async for K and V, the causal key
loop's bound."""
from __future__ import annotations

import pytest

from bench import sass_census

pytestmark = pytest.mark.slow     # ~10-30 s a workload: NVVM on kernels written out whole


MUL64 = {"mlp": 21, "matmul4096": 9, "conv_bn_relu": 49, "attention_f16": 22, "attention_f16_d128": 50,
         "attention_f16_causal": 22}


@pytest.mark.parametrize("case", sass_census.CASES, ids=[c[0] for c in sass_census.CASES])
def test_bench_kernel_sass_meets_the_done_when(case):
    name, src, chain, binding, kind = case
    reports, predicted = sass_census.kernels_of(src, chain, binding)
    rows = [sass_census.row(r) for r in reports]
    assert rows and all("math_share" in k for k in rows), f"{name}: SASS not measured: {[k['unmeasured'] for k in rows]}"
    unmet = [what for what, ok in sass_census.checks(kind, rows) if not ok]
    assert not unmet, f"{name}: {unmet}"
    for k in rows:
        assert k["mul64"] <= MUL64.get(name, k["mul64"]), f"{name} {k['kernel']}: {k['mul64']} 64-bit multiplies"
    assert predicted["model_s"] > 0 and predicted["measured_s"] > 0
