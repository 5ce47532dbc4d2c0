"""Elementwise kernels on the GPU: 4 consecutive f32 a thread along the contiguous axis, each
access one 16-byte load or store (emit/vector.py), warps inside one row, no trailing barrier."""
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import fusec
from fusec.compiler.options import CompileOptions
from fusec.compiler.pipeline import compile_source
from fusec.compiler.report import ptx
from fusec.runtime import reference
from fusec.runtime.compare import compare

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EW = "chain ew(x: f32[M, N], b: f32[N]) -> f32[M, N] { return tanh(x + b) * x + 0.5 }"


def build(path, chain, binding):
    text = open(os.path.join(ROOT, path)).read() if path.endswith(".fdsl") else path
    st = compile_source(text, path if path.endswith(".fdsl") else "<string>", chain, binding,
                        options=CompileOptions(target="gpu"))
    return st.texts["plan"], st.texts["kernels"]


@pytest.mark.parametrize("path, chain, binding, tiles", [
    ("bench/fdsl/ew_chain.fdsl", "ew_chain", {"M": 4096, "N": 4096}, "block tile [8, 128], thread tile [1, 4], threads [8, 32]"),
    ("bench/fdsl/bias_gelu_res.fdsl", "bias_gelu_res", {"M": 8192, "N": 3072},
     "block tile [8, 128], thread tile [1, 4], threads [8, 32]"),
    # 250 runs of 4 a row: a block per row, not (25, 8) threads whose warps straddle two rows
    ("bench/fdsl/ew_chain.fdsl", "ew_chain", {"M": 1000, "N": 1000}, "block tile [1, 1000], thread tile [1, 4], threads [1, 250]"),
], ids=["ew_chain", "bias_gelu_res", "ew_chain-1000"])
def test_bench_elementwise_kernels_take_4_f32_a_thread_in_16_byte_accesses(path, chain, binding, tiles):
    plan, src = build(path, chain, binding)
    assert tiles in plan
    body = src.split("def k0(")[1].split("\ndef ")[0]
    loads = re.findall(r"= _ld4_f32\((\w+), \(", body)
    assert len(loads) == len(set(loads)) >= 1 and "_st4_f32(alloc" in body
    assert not re.search(r"^\s+\w+\[.*\] = ", body, re.M)            # no scalar store left
    assert "cuda.syncthreads()" not in body                          # nothing after it needed one


def test_a_small_grid_keeps_a_point_a_thread():
    plan, src = build("bench/fdsl/ew_chain.fdsl", "ew_chain", {"M": 64, "N": 128})
    assert "thread tile [1, 1]" in plan and "_ld4_f32(" not in src       # 32 blocks: too few to take 4 a thread


def test_the_16_byte_accesses_reach_the_sass():
    """PTX through NVVM (child process) and ptxas: ld/st.global.v4.f32, LDG.E.128 and STG.E.128
    (cuobjdump beside ptxas), besides the scalar path taken where an address is not 16-byte aligned."""
    _, src = build("bench/fdsl/bias_gelu_res.fdsl", "bias_gelu_res", {"M": 8192, "N": 3072})
    out = ptx.ptx_of(src, (9, 0))
    assert out["errors"] == {}
    text = out["ptx"]["k0"]
    assert text.count("ld.global.v4.f32") == 3 and text.count("st.global.v4.f32") == 1    # x, the bias, the residual
    exe = ptx.ptxas_path()
    cuobjdump = os.path.join(os.path.dirname(exe), "cuobjdump")
    with tempfile.TemporaryDirectory() as tmp:
        open(os.path.join(tmp, "k.ptx"), "w").write(text)
        subprocess.run([exe, "-arch=sm_90", os.path.join(tmp, "k.ptx"), "-o", os.path.join(tmp, "k.cubin")], check=True)
        sass = subprocess.run([cuobjdump, "-sass", os.path.join(tmp, "k.cubin")], capture_output=True, text=True,
                              check=True).stdout
    assert len(re.findall(r"\bLDG\.E\.128\b", sass)) == 3 and len(re.findall(r"\bSTG\.E\.128\b", sass)) == 1


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic-M"])
def test_vectorized_kernels_are_right_under_the_simulator(tmp_path, dynamic):
    """M = 2,109 rows of 128 (a [N] bias read in runs of 4 too): 264 blocks of 8 rows, enough to
    take 4 f32 a thread; only the first, a middle and the last (clamped when M is taken at run
    time) blocks run, every row they write checked against the reference."""
    launches = sys.modules["fusec_tests_launches"]
    f = tmp_path / "c.fdsl"
    f.write_text(EW + "\n")
    prog = fusec.compile(str(f), target="cuda-sim", options={"dynamic": ["M"]} if dynamic else {}, cache=False)
    chain = prog.chains["ew"]
    m, n = 2109, 128
    plan, src = chain.stages({"M": m, "N": n})["plan"], chain.stages({"M": m, "N": n})["kernels"]
    assert "thread tile [1, 4]" in plan and src.count("= _ld4_f32(") == 2 and "_st4_f32(" in src
    rows = int(re.search(r"block tile \[(\d+), \d+\]", plan).group(1))
    inputs = reference.random_inputs(chain.typed, {"M": m, "N": n}, 0)
    picked = []

    def pick(grid):
        ys = sorted({0, grid[1] // 2, grid[1] - 1})
        picked.extend(ys)
        return [(x, y, 0) for x in range(grid[0]) for y in ys]

    with launches.only_blocks(pick):
        got = np.asarray(chain(*inputs))
    want = reference.run_chain(chain.typed, inputs, {"M": m, "N": n})[0]
    assert picked
    for b in picked:
        part = slice(b * rows, min(m, (b + 1) * rows))
        assert compare(got[part], want[part], "f32").ok
