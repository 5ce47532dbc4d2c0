"""Launch bounds reach ptxas: an emitted kernel's `**_bounds(threads)` becomes `.maxntid` in its
PTX (the kernel report's compile_ptx gets the jit options), and ptxas keeps the kernel's
registers within what a block of that many threads can have (65,536 / threads, in 8s)."""
import os
import re

import pytest

from fusec.compiler.options import CompileOptions
from fusec.compiler.pipeline import compile_source
from fusec.compiler.report import ptx

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_a_kernel_bounded_to_1024_threads_gets_at_most_64_registers():
    """The bench mlp's GEMM (168 registers at 128 threads before launch bounds) as emitted, and
    the same kernel bounded to 1,024 threads a block."""
    path = os.path.join("bench", "fdsl", "mlp.fdsl")
    src = compile_source(open(os.path.join(ROOT, path)).read(), path, "mlp", {"M": 512, "K": 1024, "N": 4096},
                         options=CompileOptions(target="gpu")).texts["kernels"]
    (threads,) = {int(t) for t in re.findall(r"\*\*_bounds\((\d+)\)", src)}
    wide = src.replace(f"**_bounds({threads})", "**_bounds(1024)")
    got = {}
    for name, text in (("emitted", src), ("1024", wide)):
        out = ptx.ptx_of(text, (9, 0))
        assert out["errors"] == {} and set(out["ptx"]) == {"k0"}
        got[name] = out["ptx"]["k0"], ptx.resources(out["ptx"]["k0"], "sm_90")
    assert f".maxntid {threads}, 1, 1" in got["emitted"][0]
    assert ".maxntid 1024, 1, 1" in got["1024"][0]
    assert got["emitted"][1].registers > 64                # the tile wants more than a 1,024-thread block has
    assert got["1024"][1].registers <= 64
