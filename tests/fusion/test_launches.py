"""Launch safety on the GPU: every grid within CUDA's limits (2^31-1, 65535, 65535) by
construction, at any size, and every kernel with launch bounds from its block size. Emit only:
these shapes are never run here (tests/runtime/test_dynamic_gpu.py runs a grid-strided dynamic
build under the simulator, whose every launch tests/tools/launches.py checks)."""
import math
import os
import re

import pytest

from fusec.cli import main
from fusec.compiler.options import CompileOptions
from fusec.compiler.pipeline import compile_source
from fusec.dsl.parser import parse_text

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIMITS = (2**31 - 1, 65535, 65535)
KERNEL = re.compile(r"^# (k\d+): .*?, grid \((.*?)\), block \((\d+), (\d+), (\d+)\)(?: \(grid-stride on ([xyz, ]+)\))?\n"
                    r"@cuda\.jit\((.*)\)\ndef \1\(", re.M)


def kernels(source: str) -> list[dict]:
    """Each kernel of an emitted cuda module: its launch's grid as written, block, jit options."""
    out = []
    for m in KERNEL.finditer(source):
        out.append({"name": m.group(1), "grid": re.findall(r"min\(\w+, \d+\)|\d+", m.group(2)),
                    "block": tuple(int(m.group(i)) for i in (3, 4, 5)), "strided": m.group(6) or "",
                    "jit": m.group(7)})
    assert source.count('@cuda.jit("void(') == len(out), "a kernel without its launch comment"
    return out


def assert_within_limits(k: dict, source: str) -> None:
    """A grid axis is a number within its limit or `min(count, limit)` (grid-strided)."""
    for axis, g, lim in zip("xyz", k["grid"], LIMITS):
        if g.isdigit():
            assert 1 <= int(g) <= lim, (k, lim)
        else:
            assert g.startswith("min(") and g.endswith(f", {lim})"), k
            assert axis in k["strided"], k
    for axis in k["strided"].replace(",", " ").split():
        assert re.search(rf"for block_{axis}\w* in range\(\(cuda\.blockIdx\.{axis} & 0x[0-9a-f]+\), \w+, "
                         rf"\(cuda\.gridDim\.{axis} & 0x[0-9a-f]+\)\):", source), k


def build(path: str, chain: str, binding: dict, dynamic=()) -> str:
    text = open(os.path.join(ROOT, path)).read() if not path.startswith("chain") else path
    opts = CompileOptions(target="gpu", dynamic=tuple(dynamic))
    return compile_source(text, path if not path.startswith("chain") else "<string>", chain, binding,
                          options=opts).texts["kernels"]


def _example_chains():
    for d in ("examples", os.path.join("bench", "fdsl")):
        for f in sorted(os.listdir(os.path.join(ROOT, d))):
            if f.endswith(".fdsl"):
                path = os.path.join(d, f)
                text = open(os.path.join(ROOT, path)).read()
                for c in parse_text(text, path).chains:
                    sig = re.search(rf"chain\s+{c.name}\s*\((.*?)\{{", text, re.S).group(1)
                    yield path, c.name, {s: 32 for s in sorted(set(re.findall(r"\b[A-Z]\w*\b", sig)))}


@pytest.mark.slow
def test_every_kernel_of_the_examples_has_launch_bounds_from_its_block():
    """Every kernel of every example and bench chain (each symbol 32, fused, for the H200) is
    decorated with its block's threads as launch bounds, and its grid is within the limits."""
    seen = 0
    for path, chain, binding in _example_chains():
        src = build(path, chain, binding)
        assert "def _bounds(threads):" in src
        for k in kernels(src):
            assert k["jit"].endswith(f"cache=NUMBA_CACHE, **_bounds({math.prod(k['block'])})"), (path, chain, k)
            assert_within_limits(k, src)
            seen += 1
    assert seen >= 40


HUGE = [  # (source, chain, binding, the axis that would have been over its limit)
    ("bench/fdsl/ew_chain.fdsl", "ew_chain", {"M": 1048576, "N": 64}, "y"),
    ("chain mm(x: f32[M, K], w: f32[K, N], b: f32[N]) -> f32[M, N] { return relu(x @ w + b) }",
     "mm", {"M": 8388608, "K": 16, "N": 1024}, "y"),                      # M/BM on y
    ("chain bmm(a: f32[B, M, K], c: f32[B, K, N]) -> f32[B, M, N] { return a @ c }",
     "bmm", {"B": 131072, "M": 256, "K": 16, "N": 256}, "y"),             # the batch on y
    ("examples/attention.fdsl", "attention", {"B": 131072, "S": 64}, "y"),  # the batch on y
]


@pytest.mark.parametrize("path, chain, binding, axis", HUGE, ids=[h[1] for h in HUGE])
def test_a_static_grid_over_an_axis_limit_is_grid_strided(path, chain, binding, axis):
    src = build(path, chain, binding)
    ks = kernels(src)
    assert any(axis in k["strided"] for k in ks), ks
    for k in ks:
        assert_within_limits(k, src)


@pytest.mark.parametrize("source, chain, binding", [
    ("chain rows(x: f32[M, N]) -> f32[M, N] { return softmax(x, axis=-1) }", "rows", {"M": 4194304, "N": 64}),
    ("chain scan(x: f32[M, N]) -> f32[M, N] { return cumsum(x, axis=-1) }", "scan", {"M": 4194304, "N": 16}),
    ("chain scan0(x: f32[M, N]) -> f32[M, N] { return cumsum(x, axis=0) }", "scan0", {"M": 16, "N": 4194304}),
], ids=["row-kernel", "scan-rows", "scan-columns"])
def test_row_kernels_and_scans_put_their_rows_on_x(source, chain, binding):
    for k in kernels(build(source, chain, binding)):
        assert int(k["grid"][0]) > 65535 and k["grid"][1:] == ["1", "1"] and not k["strided"], k


def test_a_dynamic_extent_is_grid_strided_on_its_axis():
    src = build("examples/attention.fdsl", "attention", {"B": 4, "S": 16}, dynamic=["B"])
    (k,) = kernels(src)
    assert k["strided"] == "y" and k["grid"][1].startswith("min(")
    assert_within_limits(k, src)


def test_the_cli_emits_ew_chain_at_a_million_rows(capsys):
    assert main([os.path.join(ROOT, "bench", "fdsl", "ew_chain.fdsl"), "--target", "cuda",
                 "--bind", "M=1048576,N=64", "--emit", "kernels"]) == 0
    src = capsys.readouterr().out
    (k,) = kernels(src)
    assert k["grid"][1] == "65535" and k["strided"] == "y"
    assert "for block_y in range((cuda.blockIdx.y & 0xffff), 131072, (cuda.gridDim.y & 0xffff)):" in src
