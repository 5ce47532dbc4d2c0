"""The f32 contraction kernels' index arithmetic, read in their PTX (NVVM for sm_90, no GPU) at
the benchmark sizes: no wraparound select (Numba's `i < 0 ? i + dim : i`, a `setp.lt.s64` whose
predicate a `selp.b64` takes), few 64-bit multiplies, and the operands read by 16-byte shared
loads (`ld.shared.v4.f32`, SASS `LDS.128`). The ceilings are the figures the template reaches
(issue 36); a change that raises one has to say why."""
from __future__ import annotations

import os
import re

import pytest

import fusec
from fusec.compiler.options import CompileOptions
from fusec.compiler.pipeline import compile_typed
from fusec.compiler.plan.hardware import GPUS
from fusec.compiler.report.ptx import ptx_of

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MM = "chain mm(a: f32[M, K], b: f32[K, N]) -> f32[M, N] { return a @ b }"
CASES = [  # (file or source, chain, binding, ceiling on 64-bit multiplies in the kernel's PTX)
    # 38 -> 6 -> 21 (mlp), 11 -> 7 -> 9 (mm): the 16-byte loader and cp.async compute each run's
    # address as its row index times the run-time row stride, which LLVM leaves in the K loop
    # (docs/GPU.md, "The global side"; a per-thread offset before the loop took 157 registers)
    ("bench/fdsl/mlp.fdsl", "mlp", {"M": 512, "K": 1024, "N": 4096}, 21),
    (MM, "mm", {"M": 4096, "K": 4096, "N": 4096}, 9),
    ("bench/fdsl/conv_bn_relu.fdsl", "conv_bn_relu", {"B": 8, "C": 64, "F": 64}, 49),   # was 72 (83)
]


def wraparound_selects(ptx: str) -> int:
    """`setp.lt.s64 %p` whose predicate a `selp.b64` within the next three lines takes."""
    lines = ptx.splitlines()
    n = 0
    for i, line in enumerate(lines):
        m = re.search(r"setp\.lt\.s64\s+(%p\d+),", line)
        if m and any("selp.b64" in x and f"{m.group(1)};" in x for x in lines[i + 1:i + 4]):
            n += 1
    return n


def test_the_counter_finds_numbas_wraparound():
    ptx = "\tsetp.lt.s64 \t%p3, %rd7, 0;\n\tadd.s64 \t%rd8, %rd7, %rd2;\n\tselp.b64 \t%rd9, %rd8, %rd7, %p3;\n"
    assert wraparound_selects(ptx) == 1
    assert wraparound_selects(ptx.replace("%p3;", "%p4;")) == 0


@pytest.mark.slow
@pytest.mark.parametrize("src,chain,binding,mul64", CASES, ids=[c[1] for c in CASES])
def test_contraction_kernels_index_arithmetic_in_ptx(src, chain, binding, mul64):
    path = os.path.join(ROOT, src) if src.endswith(".fdsl") else src
    c = fusec.check(path).chain(chain)
    st = compile_typed(c, binding, options=CompileOptions(target="gpu", hardware=GPUS["h200"]))
    out = ptx_of(st.emitted.source, (9, 0))
    assert out["errors"] == {}
    contracting = [g for g in st.plan.kernels if g.template == "contraction"]
    assert contracting
    for g in contracting:
        name = f"k{g.id}"
        ptx = out["ptx"][name]
        assert wraparound_selects(ptx) == 0, f"{chain} {name}: wraparound selects"
        n = len(re.findall(r"mul\.lo\.[su]64", ptx))
        assert n <= mul64, f"{chain} {name}: {n} 64-bit multiplies (at most {mul64})"
        if g.config.tm % 4 == 0 and not g.config.mma:
            assert "ld.shared.v4.f32" in ptx, f"{chain} {name}: no 16-byte shared loads of A"
