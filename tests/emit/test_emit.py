"""The emitter: lowered MLIR -> Numba source, run on the CUDA simulator and the CPU and compared
with NumPy; key lines pinned with FileCheck; kernels compiled to PTX (no GPU needed) to check
that Numba's real CUDA typing accepts them and keeps f32 in f32."""
from __future__ import annotations

import importlib.util
import math
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from fusec.compiler.emit import EmitError, emit
from fusec.compiler.transforms.script import run_passes
from fusec.compiler.transforms.to_target import CPU_CLEANUP, GPU_CLEANUP
from fusec.compiler.errors import CompilerInternalError
from fusec.compiler.mlir import interpreter, ir

GOLDEN = Path(__file__).parent / "golden"
RNG = np.random.default_rng(0)

# ----------------------------------------------------------------------------- linalg sources

EW_CHAIN = r"""
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @ew(%a: tensor<16x32xf32>, %b: tensor<16x32xf32>) -> tensor<16x32xf32> {
  %half = arith.constant 0.5 : f32
  %one = arith.constant 1.0 : f32
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16x32xf32>
  %r = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%a, %b : tensor<16x32xf32>, tensor<16x32xf32>) outs(%e : tensor<16x32xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %0 = arith.mulf %x, %y : f32
    %1 = arith.addf %0, %half : f32
    %2 = math.tanh %1 : f32
    %3 = arith.maximumf %x, %zero : f32
    %4 = math.exp %y : f32
    %5 = arith.addf %4, %one : f32
    %6 = arith.divf %3, %5 : f32
    %7 = arith.subf %2, %6 : f32
    %8 = math.rsqrt %5 : f32
    %9 = arith.cmpf ogt, %x, %y : f32
    %10 = arith.select %9, %7, %8 : f32
    %11 = math.erf %10 : f32
    linalg.yield %11 : f32
  } -> tensor<16x32xf32>
  return %r : tensor<16x32xf32>
}
"""

EW_TILE = """
    %g = transform.structured.match ops{["linalg.generic"]} in %root : (!transform.any_op) -> !transform.any_op
    %t, %blk = transform.structured.tile_using_forall %g tile_sizes [8, 16] (mapping = [#gpu.block<y>, #gpu.block<x>]) : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %t2, %thr = transform.structured.tile_using_forall %t tile_sizes [1, 4] (mapping = [#gpu.thread<y>, #gpu.thread<x>]) : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
"""

SOFTMAX = r"""
#id = affine_map<(d0, d1) -> (d0, d1)>
#red = affine_map<(d0, d1) -> (d0)>
func.func @softmax(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %ninf = arith.constant 0xFF800000 : f32
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<8xf32>
  %m0 = linalg.fill ins(%ninf : f32) outs(%e1 : tensor<8xf32>) -> tensor<8xf32>
  %m = linalg.generic {indexing_maps = [#id, #red], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<8x16xf32>) outs(%m0 : tensor<8xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %r = arith.maximumf %a, %acc : f32
    linalg.yield %r : f32
  } -> tensor<8xf32>
  %e2 = tensor.empty() : tensor<8x16xf32>
  %ex = linalg.generic {indexing_maps = [#id, #red, #id], iterator_types = ["parallel", "parallel"]} ins(%x, %m : tensor<8x16xf32>, tensor<8xf32>) outs(%e2 : tensor<8x16xf32>) {
  ^bb0(%a: f32, %mm: f32, %o: f32):
    %d = arith.subf %a, %mm : f32
    %e = math.exp %d : f32
    linalg.yield %e : f32
  } -> tensor<8x16xf32>
  %s0 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<8xf32>) -> tensor<8xf32>
  %s = linalg.generic {indexing_maps = [#id, #red], iterator_types = ["parallel", "reduction"]} ins(%ex : tensor<8x16xf32>) outs(%s0 : tensor<8xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %r = arith.addf %a, %acc : f32
    linalg.yield %r : f32
  } -> tensor<8xf32>
  %y = linalg.generic {indexing_maps = [#id, #red, #id], iterator_types = ["parallel", "parallel"]} ins(%ex, %s : tensor<8x16xf32>, tensor<8xf32>) outs(%e2 : tensor<8x16xf32>) {
  ^bb0(%a: f32, %ss: f32, %o: f32):
    %d = arith.divf %a, %ss : f32
    linalg.yield %d : f32
  } -> tensor<8x16xf32>
  return %y : tensor<8x16xf32>
}
"""

_FUSE = "transform.structured.fuse_into_containing_op {p} into {loop} : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)"

# Four rows per block, one row per thread; every producer fused at both levels.
SOFTMAX_TILE = f"""
    %all = transform.structured.match ops{{["linalg.generic"]}} in %root : (!transform.any_op) -> !transform.any_op
    %g1, %g2, %g3, %last = transform.split_handle %all : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
    %fills = transform.structured.match ops{{["linalg.fill"]}} in %root : (!transform.any_op) -> !transform.any_op
    %f1, %f2 = transform.split_handle %fills : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %t, %l0 = transform.structured.tile_using_forall %last tile_sizes [4] (mapping = [#gpu.block<x>]) : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %a, %l1 = {_FUSE.format(p="%g3", loop="%l0")}
    %b, %l2 = {_FUSE.format(p="%f2", loop="%l1")}
    %c, %l3 = {_FUSE.format(p="%g2", loop="%l2")}
    %d, %l4 = {_FUSE.format(p="%g1", loop="%l3")}
    %e, %l5 = {_FUSE.format(p="%f1", loop="%l4")}
    %t2, %m0 = transform.structured.tile_using_forall %t tile_sizes [1] (mapping = [#gpu.thread<x>]) : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %a2, %m1 = {_FUSE.format(p="%a", loop="%m0")}
    %b2, %m2 = {_FUSE.format(p="%b", loop="%m1")}
    %c2, %m3 = {_FUSE.format(p="%c", loop="%m2")}
    %d2, %m4 = {_FUSE.format(p="%d", loop="%m3")}
    %e2, %m5 = {_FUSE.format(p="%e", loop="%m4")}
"""

MATMUL_BIAS_RELU = r"""
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
func.func @mm(%A: tensor<8x16xf32>, %B: tensor<16x32xf32>, %bias: tensor<32xf32>) -> tensor<8x32xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x32xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<8x32xf32>) -> tensor<8x32xf32>
  %mm = linalg.matmul ins(%A, %B : tensor<8x16xf32>, tensor<16x32xf32>) outs(%z : tensor<8x32xf32>) -> tensor<8x32xf32>
  %r = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%mm, %bias : tensor<8x32xf32>, tensor<32xf32>) outs(%e : tensor<8x32xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.addf %a, %b : f32
    %m = arith.maximumf %s, %zero : f32
    linalg.yield %m : f32
  } -> tensor<8x32xf32>
  return %r : tensor<8x32xf32>
}
"""

# 4x16 output tiles per block, 2x2 per thread (block of 8 x 2 threads).
MATMUL_TILE = f"""
    %gen = transform.structured.match ops{{["linalg.generic"]}} in %root : (!transform.any_op) -> !transform.any_op
    %mm = transform.structured.match ops{{["linalg.matmul"]}} in %root : (!transform.any_op) -> !transform.any_op
    %fill = transform.structured.match ops{{["linalg.fill"]}} in %root : (!transform.any_op) -> !transform.any_op
    %t, %blk = transform.structured.tile_using_forall %gen tile_sizes [4, 16] (mapping = [#gpu.block<y>, #gpu.block<x>]) : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %mm1, %blk1 = {_FUSE.format(p="%mm", loop="%blk")}
    %fl1, %blk2 = {_FUSE.format(p="%fill", loop="%blk1")}
    %t2, %thr = transform.structured.tile_using_forall %t tile_sizes [2, 2] (mapping = [#gpu.thread<y>, #gpu.thread<x>]) : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %mm2, %thr1 = {_FUSE.format(p="%mm1", loop="%thr")}
    %fl2, %thr2 = {_FUSE.format(p="%fl1", loop="%thr1")}
"""

CASES = {  # name -> (source, tiling, block_dims)
    "ew_chain": (EW_CHAIN, EW_TILE, "[4, 8, 1]"),
    "softmax": (SOFTMAX, SOFTMAX_TILE, "[4, 1, 1]"),
    "matmul_bias_relu": (MATMUL_BIAS_RELU, MATMUL_TILE, "[8, 2, 1]"),
}


def transform_script(tiling: str, block_dims: str, target: str) -> str:
    """The tile-and-fuse sequence, then bufferization and (for cuda) the GPU mapping."""
    tail = """
    %f = transform.structured.match ops{["func.func"]} in %root : (!transform.any_op) -> !transform.any_op
    transform.apply_patterns to %f { transform.apply_patterns.canonicalization } : !transform.any_op
    transform.apply_cse to %f : !transform.any_op
    %bb = transform.bufferization.one_shot_bufferize %root {bufferize_function_boundaries = true, function_boundary_type_conversion = 1 : i32} : (!transform.any_op) -> !transform.any_op
"""
    if target == "cuda":
        tail += f"""
    %fb = transform.structured.match ops{{["func.func"]}} in %bb : (!transform.any_op) -> !transform.any_op
    %gl = transform.gpu.map_forall_to_blocks %fb generate_gpu_launch : (!transform.any_op) -> !transform.any_op
    %gl2 = transform.gpu.map_nested_forall_to_threads %gl block_dims = {block_dims} : (!transform.any_op) -> !transform.any_op
"""
    else:
        tiling = re.sub(r"\(mapping = \[[^\]]*\]\) ", "", tiling)
    return ("module attributes {transform.with_named_sequence} {\n"
            "  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.consumed}) {"
            + tiling + tail + "    transform.yield\n  }\n}\n")


def lowered(case, target: str):
    """Emit a case (a name, or (source, tiling, block_dims)) after tile-and-fuse and the cleanup
    pipeline; also returns the IR text."""
    if isinstance(case, str):
        case = HALF_CASE if case == "half" else CASES[case]
    src, tiling, block_dims = case
    with ir.Context():
        module = ir.Module.parse(src)
        script = ir.Module.parse(transform_script(tiling, block_dims, target))
        interpreter.apply_named_sequence(module.operation, script.body.operations[0], script)
        run_passes(module, GPU_CLEANUP if target == "cuda" else CPU_CLEANUP, "test")
        return emit(module, target), str(module)


def emit_text(mlir: str, target: str):
    with ir.Context():
        return emit(ir.Module.parse(mlir), target)


_LOADED: dict[str, object] = {}


def load(source: str, tmp_path_factory, stem: str):
    """Import generated source from a file, as the runtime does."""
    if source not in _LOADED:
        path = tmp_path_factory.mktemp("gen") / f"{stem}.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(f"fusec_gen_{stem}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _LOADED[source] = mod
    return _LOADED[source]


@pytest.fixture(scope="session")
def sim():
    from numba import cuda
    from numba.cuda.core import config
    if not config.ENABLE_CUDASIM:
        pytest.skip("numba.cuda was imported without NUMBA_ENABLE_CUDASIM=1 before these tests")
    return cuda


def run_cuda(cuda, fn, *args):
    outs = fn(*(cuda.to_device(a) if isinstance(a, np.ndarray) else a for a in args))
    return [o.copy_to_host() for o in outs]


def references(case: str, rng=RNG):
    if case == "ew_chain":
        a = rng.standard_normal((16, 32)).astype(np.float32)
        b = rng.standard_normal((16, 32)).astype(np.float32)
        e5 = np.exp(b) + 1
        sel = np.where(a > b, np.tanh(a * b + 0.5) - np.maximum(a, 0) / e5, 1 / np.sqrt(e5))
        return (a, b), np.vectorize(math.erf)(sel).astype(np.float32)
    if case == "softmax":
        x = rng.standard_normal((8, 16)).astype(np.float32)
        ex = np.exp(x - x.max(1, keepdims=True))
        return (x,), ex / ex.sum(1, keepdims=True)
    a = rng.standard_normal((8, 16)).astype(np.float32)
    b = rng.standard_normal((16, 32)).astype(np.float32)
    bias = rng.standard_normal(32).astype(np.float32)
    return (a, b, bias), np.maximum(a @ b + bias, 0)


HOST = {"ew_chain": "run_ew", "softmax": "run_softmax", "matmul_bias_relu": "run_mm"}


# ----------------------------------------------------------------------------- pipelines, run

@pytest.mark.parametrize("case", list(CASES))
def test_pipeline_cuda_matches_numpy(case, sim, tmp_path_factory):
    em, _ = lowered(case, "cuda")
    mod = load(em.source, tmp_path_factory, f"{case}_cuda")
    args, want = references(case)
    (got,) = run_cuda(sim, getattr(mod, HOST[case]), *args)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("case", list(CASES))
def test_pipeline_cpu_matches_numpy(case, tmp_path_factory):
    em, ir_text = lowered(case, "cpu")
    assert "scf.parallel" in ir_text and "gpu.launch" not in ir_text
    assert "numba.prange(" in em.source
    mod = load(em.source, tmp_path_factory, f"{case}_cpu")
    args, want = references(case)
    (got,) = getattr(mod, HOST[case])(*args)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


def test_partial_tiles_cpu(tmp_path_factory):
    """10x20 in 8x16 tiles: dynamic sizes (min), dynamic trip counts and index division."""
    em, _ = lowered((EW_CHAIN.replace("16x32", "10x20"), EW_TILE, "[4, 8, 1]"), "cpu")
    assert "min(" in em.source and "for arg4 in range(v4):" in em.source
    mod = load(em.source, tmp_path_factory, "ew_partial_cpu")
    (a, b), _ = references("ew_chain")
    a, b = a[:10, :20].copy(), b[:10, :20].copy()
    (got,) = mod.run_ew(a, b)
    e5 = np.exp(b) + 1
    sel = np.where(a > b, np.tanh(a * b + 0.5) - np.maximum(a, 0) / e5, 1 / np.sqrt(e5))
    np.testing.assert_allclose(got, np.vectorize(math.erf)(sel), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("case", list(CASES))
def test_golden_lines(case):
    """Key lines of the generated source, as FileCheck patterns in golden/<case>.cuda.check."""
    em, _ = lowered(case, "cuda")
    check = GOLDEN / f"{case}.cuda.check"
    proc = subprocess.run([sys.executable, "-m", "filecheck", str(check)], input=em.source,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr + "\n--- source ---\n" + em.source


def test_entries_describe_the_host_functions():
    em, _ = lowered("matmul_bias_relu", "cuda")
    entry = em.entries["mm"]
    assert entry.host == "run_mm" and entry.kernels == ("k0",)
    assert entry.arg_types == ("f32[8,16]", "f32[16,32]", "f32[32]")
    assert entry.result_types == ("f32[8,32]",)
    cpu, _ = lowered("matmul_bias_relu", "cpu")
    assert cpu.entries["mm"].kernels == () and cpu.entries["mm"].host == "run_mm"


def test_output_is_deterministic():
    assert lowered("softmax", "cuda")[0].source == lowered("softmax", "cuda")[0].source


@pytest.mark.parametrize("target", ["cuda", "cpu"])
def test_f32_stays_f32(target):
    """No float64 and no bare float literal: on a GPU either turns f32 math into f64."""
    for case in CASES:
        src = lowered(case, target)[0].source
        assert "float64" not in src, case
        code = [line for line in src.splitlines()
                if not re.match(r"_f32_\w+ = np\.float32\(", line) and '"""' not in line
                and not line.lstrip().startswith("#")]
        bare = [line for line in code if re.search(r"(?<![\w.])\d+\.\d*|\bnp\.(inf|nan)\b", line)]
        assert not bare, bare


# ----------------------------------------------------------------------------- hand-written GPU IR

ROWSUM = r"""
func.func @rowsum(%x: memref<4x8xf32>) -> (memref<4xf32>, memref<2x16xf32>, memref<f32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %zero = arith.constant 0.0 : f32
  %copy = memref.alloc() : memref<4x8xf32>
  memref.copy %x, %copy : memref<4x8xf32> to memref<4x8xf32>
  %out = memref.alloc() : memref<4xf32>
  %total = memref.alloc() : memref<f32>
  gpu.launch blocks(%bx, %by, %bz) in (%gx = %c4, %gy = %c1, %gz = %c1) threads(%tx, %ty, %tz) in (%sx = %c8, %sy = %c1, %sz = %c1) {
    %sh = memref.alloc() : memref<8xf32, #gpu.address_space<workgroup>>
    %row = memref.subview %copy[%bx, 0] [1, 8] [1, 1] : memref<4x8xf32> to memref<8xf32, strided<[1], offset: ?>>
    %v = memref.load %row[%tx] : memref<8xf32, strided<[1], offset: ?>>
    memref.store %v, %sh[%tx] : memref<8xf32, #gpu.address_space<workgroup>>
    gpu.barrier
    %first = arith.cmpi eq, %tx, %c0 : index
    scf.if %first {
      %s = scf.for %i = %c0 to %c8 step %c1 iter_args(%acc = %zero) -> (f32) {
        %e = memref.load %sh[%i] : memref<8xf32, #gpu.address_space<workgroup>>
        %n = arith.addf %acc, %e : f32
        scf.yield %n : f32
      }
      memref.store %s, %out[%bx] : memref<4xf32>
    }
    gpu.terminator
  }
  gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1) threads(%tx, %ty, %tz) in (%sx = %c1, %sy = %c1, %sz = %c1) {
    %s = scf.for %i = %c0 to %c4 step %c1 iter_args(%acc = %zero) -> (f32) {
      %e = memref.load %out[%i] : memref<4xf32>
      %n = arith.addf %acc, %e : f32
      scf.yield %n : f32
    }
    memref.store %s, %total[] : memref<f32>
    gpu.terminator
  }
  %flat = memref.collapse_shape %copy [[0, 1]] : memref<4x8xf32> into memref<32xf32>
  %re = memref.expand_shape %flat [[0, 1]] output_shape [2, 16] : memref<32xf32> into memref<2x16xf32>
  return %out, %re, %total : memref<4xf32>, memref<2x16xf32>, memref<f32>
}
"""

VIEWS = r"""
func.func @views(%x: memref<4x8xf32>, %off: index) -> (memref<2x8xf32>, memref<2xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c8 = arith.constant 8 : index
  %zero = arith.constant 0.0 : f32
  %out = memref.alloc() : memref<2x8xf32>
  %sums = memref.alloc() : memref<2xf32>
  %rows = memref.subview %x[%off, 0] [2, 8] [1, 1] : memref<4x8xf32> to memref<2x8xf32, strided<[8, 1], offset: ?>>
  gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1) threads(%tx, %ty, %tz) in (%sx = %c2, %sy = %c1, %sz = %c1) {
    %row = memref.subview %rows[%tx, 0] [1, 8] [1, 1] : memref<2x8xf32, strided<[8, 1], offset: ?>> to memref<8xf32, strided<[1], offset: ?>>
    %buf = memref.alloca() : memref<8xf32>
    memref.copy %row, %buf : memref<8xf32, strided<[1], offset: ?>> to memref<8xf32>
    %grid = memref.expand_shape %buf [[0, 1]] output_shape [2, 4] : memref<8xf32> into memref<2x4xf32>
    %flat = memref.collapse_shape %grid [[0, 1]] : memref<2x4xf32> into memref<8xf32>
    %orow = memref.subview %out[%tx, 0] [1, 8] [1, 1] : memref<2x8xf32> to memref<8xf32, strided<[1], offset: ?>>
    scf.for %j = %c0 to %c8 step %c1 {
      %v = memref.load %flat[%j] : memref<8xf32>
      %jm = arith.remui %j, %c2 : index
      %even = arith.cmpi eq, %jm, %c0 : index
      %w = scf.if %even -> (f32) {
        %d = arith.addf %v, %v : f32
        scf.yield %d : f32
      } else {
        scf.yield %v : f32
      }
      memref.store %w, %orow[%j] : memref<8xf32, strided<[1], offset: ?>>
    }
    %odd = memref.subview %grid[0, 1] [2, 2] [1, 2] : memref<2x4xf32> to memref<2x2xf32, strided<[4, 2], offset: 1>>
    %s = scf.parallel (%a, %b) = (%c0, %c0) to (%c2, %c2) step (%c1, %c1) init (%zero) -> f32 {
      %e = memref.load %odd[%a, %b] : memref<2x2xf32, strided<[4, 2], offset: 1>>
      scf.reduce(%e : f32) {
      ^bb0(%l: f32, %r: f32):
        %t = arith.addf %l, %r : f32
        scf.reduce.return %t : f32
      }
    }
    memref.store %s, %sums[%tx] : memref<2xf32>
    gpu.terminator
  }
  return %out, %sums : memref<2x8xf32>, memref<2xf32>
}
"""


def test_shared_memory_barrier_host_copy_and_views(sim, tmp_path_factory):
    em = emit_text(ROWSUM, "cuda")
    src = em.source
    assert "cuda.shared.array((8,), numba.float32)" in src
    assert "cuda.syncthreads()" in src
    assert em.entries["rowsum"].kernels == ("k0", "k1", "k2")  # the host copy is k0
    assert "k0[(1, 1, 1), (256, 1, 1)](arg0, alloc)" in src  # memref.copy %x -> %copy
    assert "return (alloc_0, alloc.reshape((32,)).reshape((2, 16)), alloc_1.reshape(()))" in src
    mod = load(src, tmp_path_factory, "rowsum")
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    sums, re2, total = run_cuda(sim, mod.run_rowsum, x)
    np.testing.assert_allclose(sums, x.sum(1), rtol=1e-5)
    np.testing.assert_array_equal(re2, x.reshape(2, 16))
    assert total.shape == () and np.isclose(total, x.sum(), rtol=1e-5)


def test_kernel_views_scalars_and_structured_control_flow(sim, tmp_path_factory):
    em = emit_text(VIEWS, "cuda")
    src = em.source
    assert '@cuda.jit("void(float32[:, ::1], int64, float32[:, ::1], float32[::1])", cache=NUMBA_CACHE, **_bounds(2))' in src
    assert "k0[(1, 1, 1), (2, 1, 1)](arg0, arg1, alloc, alloc_0)" in src
    mod = load(src, tmp_path_factory, "views")
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    out, sums = run_cuda(sim, mod.run_views, x, 1)
    rows = x[1:3]
    np.testing.assert_allclose(out, rows * np.where(np.arange(8) % 2 == 0, 2, 1), rtol=1e-6)
    np.testing.assert_allclose(sums, rows[:, 1::2].sum(1), rtol=1e-5)


# A block-level buffer the block fills cooperatively (each thread its element, by thread id)
# and then reads whole after a barrier, as tiled tensor.pad leaves it: it must be shared.
PAD = r"""
func.func @pad(%x: memref<2x4xf32>) -> memref<2x6xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %c6 = arith.constant 6 : index
  %zero = arith.constant 0.0 : f32
  %seven = arith.constant 7.0 : f32
  %out = memref.alloc() : memref<2x6xf32>
  gpu.launch blocks(%bx, %by, %bz) in (%gx = %c2, %gy = %c1, %gz = %c1) threads(%tx, %ty, %tz) in (%sx = %c6, %sy = %c1, %sz = %c1) {
    %buf = memref.alloc() : memref<6xf32>
    %lo = arith.cmpi uge, %tx, %c1 : index
    %hi = arith.cmpi ule, %tx, %c4 : index
    %in = arith.andi %lo, %hi : i1
    %v = scf.if %in -> (f32) {
      %i = arith.subi %tx, %c1 : index
      %e = memref.load %x[%bx, %i] : memref<2x4xf32>
      scf.yield %e : f32
    } else {
      scf.yield %zero : f32
    }
    %dst = memref.subview %buf[%tx] [1] [1] : memref<6xf32> to memref<1xf32, strided<[1], offset: ?>>
    memref.store %v, %dst[%c0] : memref<1xf32, strided<[1], offset: ?>>
    gpu.barrier
    %uniform = arith.cmpi ult, %bx, %c2 : index
    %sel = scf.if %uniform -> (memref<6xf32>) {
      scf.yield %buf : memref<6xf32>
    } else {
      %other = memref.alloc() : memref<6xf32>
      scf.for %j = %c0 to %c6 step %c1 {
        memref.store %seven, %other[%j] : memref<6xf32>
      }
      scf.yield %other : memref<6xf32>
    }
    %orow = memref.subview %out[%bx, 0] [1, 6] [1, 1] : memref<2x6xf32> to memref<6xf32, strided<[1], offset: ?>>
    memref.copy %sel, %orow : memref<6xf32> to memref<6xf32, strided<[1], offset: ?>>
    gpu.terminator
  }
  return %out : memref<2x6xf32>
}
"""


def test_block_level_buffer_addressed_by_thread_id_is_shared(sim, tmp_path_factory):
    src = emit_text(PAD, "cuda").source
    assert "alloc_1 = cuda.shared.array((6,), numba.float32)" in src
    assert "alloc_3 = cuda.local.array((6,), numba.float32)" in src  # the other branch's buffer
    mod = load(src, tmp_path_factory, "pad")
    x = RNG.standard_normal((2, 4)).astype(np.float32)
    (got,) = run_cuda(sim, mod.run_pad, x)
    np.testing.assert_array_equal(got, np.pad(x, ((0, 0), (1, 1))))


def test_block_level_buffer_without_a_clear_owner_is_refused():
    # every thread also zero-fills the whole buffer: shared would race, private is wrong
    racy = PAD.replace("    %lo = arith.cmpi", "    scf.for %j = %c0 to %c6 step %c1 {\n"
                       "      memref.store %zero, %buf[%j] : memref<6xf32>\n    }\n    %lo = arith.cmpi", 1)
    with pytest.raises(EmitError, match="per thread or per block"):
        emit_text(racy, "cuda")


# ----------------------------------------------------------------------------- scalar op battery

X = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -1.7, 0.3, 1.2, -0.9, 2.2, -2.1, 0.75, -0.25,
              1.9, -1.1], np.float32)
P = np.linspace(0.5, 3, 16, dtype=np.float32)
Y = X.copy()
Y[[3, 5, 7, 11]] = [np.nan, np.inf, -np.inf, -X[11]]
N = np.array([-7, -6, -5, -4, -3, -2, -1, 1, 2, 3, 4, 5, 6, 7, 8, 9], np.int32)
M = np.array([1, 2, 3, 4, 5] * 3 + [2], np.int32)


def _erf(v):
    return np.vectorize(math.erf)(v)


def _round_away(v):
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


# (snippet: `{r}` is the result, `{t}` a prefix for temporaries; reference from X P Y N M)
FLOAT_OPS = [
    ("{r} = arith.addf %x, %p : f32", lambda: X + P),
    ("{r} = arith.subf %x, %p : f32", lambda: X - P),
    ("{r} = arith.mulf %x, %p : f32", lambda: X * P),
    ("{r} = arith.divf %x, %p : f32", lambda: X / P),
    ("{r} = arith.remf %x, %p : f32", lambda: np.fmod(X, P)),
    ("{r} = arith.negf %x : f32", lambda: -X),
    ("{r} = arith.maximumf %x, %y : f32", lambda: np.maximum(X, Y)),
    ("{r} = arith.minimumf %x, %y : f32", lambda: np.minimum(X, Y)),
    ("{r} = arith.maxnumf %x, %y : f32", lambda: np.fmax(X, Y)),
    ("{t}z = arith.constant 0.0 : f32\n{t}n = arith.negf {t}z : f32\n"
     "{r} = arith.maximumf {t}n, {t}z : f32", lambda: np.zeros(16)),
    ("{t}z = arith.constant 0.0 : f32\n{t}n = arith.negf {t}z : f32\n"
     "{r} = arith.minimumf {t}z, {t}n : f32", lambda: np.full(16, -0.0)),
    ("{r} = arith.minnumf %x, %y : f32", lambda: np.fmin(X, Y)),
    # NaN, the infinities and a sign change as the first operand too; each zero order
    ("{r} = arith.maximumf %y, %x : f32", lambda: np.maximum(Y, X)),
    ("{r} = arith.minimumf %y, %x : f32", lambda: np.minimum(Y, X)),
    ("{r} = arith.maxnumf %y, %x : f32", lambda: np.fmax(Y, X)),
    ("{r} = arith.minnumf %y, %x : f32", lambda: np.fmin(Y, X)),
    ("{t}z = arith.constant 0.0 : f32\n{t}n = arith.negf {t}z : f32\n"
     "{r} = arith.maximumf {t}z, {t}n : f32", lambda: np.zeros(16)),
    ("{t}z = arith.constant 0.0 : f32\n{t}n = arith.negf {t}z : f32\n"
     "{r} = arith.minimumf {t}n, {t}z : f32", lambda: np.full(16, -0.0)),
    ("{t}z = arith.constant 0.0 : f32\n{t}n = arith.negf {t}z : f32\n"
     "{r} = arith.maximumf {t}n, {t}n : f32", lambda: np.full(16, -0.0)),
    ("{r} = math.exp %x : f32", lambda: np.exp(X)),
    ("{r} = math.exp2 %x : f32", lambda: np.exp2(X)),
    ("{r} = math.log %p : f32", lambda: np.log(P)),
    ("{r} = math.log2 %p : f32", lambda: np.log2(P)),
    ("{r} = math.log1p %p : f32", lambda: np.log1p(P)),
    ("{r} = math.sqrt %p : f32", lambda: np.sqrt(P)),
    ("{r} = math.rsqrt %p : f32", lambda: 1 / np.sqrt(P)),
    ("{r} = math.tanh %x : f32", lambda: np.tanh(X)),
    ("{r} = math.erf %x : f32", lambda: _erf(X)),
    ("{r} = math.sin %x : f32", lambda: np.sin(X)),
    ("{r} = math.cos %x : f32", lambda: np.cos(X)),
    ("{r} = math.floor %x : f32", lambda: np.floor(X)),
    ("{r} = math.ceil %x : f32", lambda: np.ceil(X)),
    ("{r} = math.trunc %x : f32", lambda: np.trunc(X)),
    ("{r} = math.round %x : f32", lambda: _round_away(X)),
    ("{r} = math.roundeven %x : f32", lambda: np.rint(X)),
    ("{t}q = arith.mulf %x, %p : f32\n{r} = math.roundeven {t}q : f32", lambda: np.rint(X * P)),
    ("{r} = math.absf %x : f32", lambda: np.abs(X)),
    ("{r} = math.powf %p, %x : f32", lambda: P ** X),
    ("{r} = math.copysign %p, %x : f32", lambda: np.copysign(P, X)),
    ("{r} = math.fma %x, %p, %x : f32", lambda: X * P + X),
    ("{r} = math.atan2 %x, %p : f32", lambda: np.arctan2(X, P)),
    ("{r} = math.fpowi %x, %n : f32, i32", lambda: X.astype(np.float64) ** N),
    ("{r} = arith.sitofp %n : i32 to f32", lambda: N),
    ("{r} = arith.uitofp %m : i32 to f32", lambda: M),
    ("{t}c = arith.cmpf olt, %x, %p : f32\n{r} = arith.select {t}c, %x, %p : f32",
     lambda: np.where(X < P, X, P)),
    ("{t}d = arith.extf %x : f32 to f64\n{t}e = arith.mulf {t}d, {t}d : f64\n"
     "{r} = arith.truncf {t}e : f64 to f32", lambda: X.astype(np.float64) ** 2),
]
INT_OPS = [
    ("{r} = arith.addi %n, %m : i32", lambda: N + M),
    ("{r} = arith.subi %n, %m : i32", lambda: N - M),
    ("{r} = arith.muli %n, %m : i32", lambda: N * M),
    ("{r} = arith.divsi %n, %m : i32", lambda: np.sign(N) * (np.abs(N) // M)),
    ("{r} = arith.remsi %n, %m : i32", lambda: np.fmod(N, M)),
    ("{r} = arith.floordivsi %n, %m : i32", lambda: N // M),
    ("{r} = arith.ceildivsi %n, %m : i32", lambda: -(-N // M)),
    ("{r} = arith.maxsi %n, %m : i32", lambda: np.maximum(N, M)),
    ("{r} = arith.minsi %n, %m : i32", lambda: np.minimum(N, M)),
    ("{r} = arith.andi %n, %m : i32", lambda: N & M),
    ("{r} = arith.ori %n, %m : i32", lambda: N | M),
    ("{r} = arith.xori %n, %m : i32", lambda: N ^ M),
    ("{r} = arith.shli %n, %m : i32", lambda: N << M),
    ("{r} = arith.shrsi %n, %m : i32", lambda: N >> M),
    ("{r} = math.absi %n : i32", lambda: np.abs(N)),
    ("{r} = math.ipowi %m, %m : i32", lambda: M ** M),
    ("{t}a = arith.mulf %x, %p : f32\n{r} = arith.fptosi {t}a : f32 to i32",
     lambda: np.trunc(X * P)),
    ("{t}a = arith.index_cast %n : i32 to index\n{t}b = arith.muli {t}a, %k3 : index\n"
     "{r} = arith.index_cast {t}b : index to i32", lambda: N * 3),
    ("{t}a = arith.extsi %n : i32 to i64\n{t}b = arith.muli {t}a, {t}a : i64\n"
     "{r} = arith.trunci {t}b : i64 to i32", lambda: N * N),
    ("{t}c = arith.cmpi slt, %n, %m : i32\n{r} = arith.extui {t}c : i1 to i32",
     lambda: N < M),
]
_PRED_F = ["false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord", "ueq", "ugt", "uge", "ult",
           "ule", "une", "uno", "true"]


def _cmpf_ref(pred):
    nan = np.isnan(X) | np.isnan(Y)
    with np.errstate(invalid="ignore"):
        base = {"eq": X == Y, "gt": X > Y, "ge": X >= Y, "lt": X < Y, "le": X <= Y,
                "ne": (X < Y) | (X > Y)}
    if pred in ("false", "true"):
        return np.full(16, pred == "true")
    if pred == "ord":
        return ~nan
    if pred == "uno":
        return nan
    ordered = base[pred[1:]] & ~nan
    return ordered if pred[0] == "o" else ordered | nan


BOOL_OPS = [(f"{{r}} = arith.cmpf {p}, %x, %y : f32", lambda p=p: _cmpf_ref(p)) for p in _PRED_F]
BOOL_OPS += [(f"{{r}} = arith.cmpi {p}, %n, %m : i32", lambda f=f: f(N, M)) for p, f in [
    ("eq", np.equal), ("ne", np.not_equal), ("slt", np.less), ("sle", np.less_equal),
    ("sgt", np.greater), ("sge", np.greater_equal)]]
BOOL_OPS += [(f"{{t}}a = math.absi %n : i32\n{{r}} = arith.cmpi {p}, %m, {{t}}a : i32",
              lambda f=f: f(M, np.abs(N))) for p, f in [
    ("ult", np.less), ("ule", np.less_equal), ("ugt", np.greater), ("uge", np.greater_equal)]]
BOOL_OPS += [(f"{{t}}a = arith.cmpf olt, %x, %p : f32\n{{t}}b = arith.cmpi slt, %n, %m : i32\n"
              f"{{r}} = arith.{op} {{t}}a, {{t}}b : i1", lambda f=f: f(X < P, N < M))
             for op, f in [("andi", np.logical_and), ("ori", np.logical_or),
                           ("xori", np.logical_xor)]]


def battery_ir(target: str) -> str:
    body = ["%x = memref.load %X[%i] : memref<16xf32>", "%p = memref.load %P[%i] : memref<16xf32>",
            "%y = memref.load %Y[%i] : memref<16xf32>", "%n = memref.load %N[%i] : memref<16xi32>",
            "%m = memref.load %M[%i] : memref<16xi32>"]
    for out, ops, ty in (("F", FLOAT_OPS, "f32"), ("I", INT_OPS, "i32"), ("B", BOOL_OPS, "i1")):
        for k, (snippet, _) in enumerate(ops):
            body += snippet.format(r=f"%{out}{k}", t=f"%{out}{k}_").splitlines()
            body.append(f"memref.store %{out}{k}, %{out}[%k{k}, %i] : memref<{len(ops)}x16x{ty}>")
    consts = [f"%k{k} = arith.constant {k} : index" for k in range(len(FLOAT_OPS))]
    if target == "cuda":
        loop = ["gpu.launch blocks(%bx, %by, %bz) in (%gx = %k1, %gy = %k1, %gz = %k1) "
                "threads(%tx, %ty, %tz) in (%sx = %c16, %sy = %k1, %sz = %k1) {",
                "%i = gpu.thread_id x"] + body + ["gpu.terminator", "}"]
    else:
        loop = ["scf.parallel (%i) = (%k0) to (%c16) step (%k1) {"] + body + ["scf.reduce", "}"]
    shapes = [f"memref<{len(FLOAT_OPS)}x16xf32>", f"memref<{len(INT_OPS)}x16xi32>",
              f"memref<{len(BOOL_OPS)}x16xi1>"]
    lines = (["func.func @battery(%X: memref<16xf32>, %P: memref<16xf32>, %Y: memref<16xf32>, "
              f"%N: memref<16xi32>, %M: memref<16xi32>) -> ({', '.join(shapes)}) {{"]
             + consts + ["%c16 = arith.constant 16 : index"]
             + [f"%{o} = memref.alloc() : {s}" for o, s in zip("FIB", shapes)]
             + loop + [f"return %F, %I, %B : {', '.join(shapes)}", "}"])
    return "\n".join(lines)


def check_battery(outs):
    F, I, B = outs
    with np.errstate(all="ignore"):
        for k, (snippet, ref) in enumerate(FLOAT_OPS):
            want = np.asarray(ref(), np.float32)
            np.testing.assert_allclose(F[k], want, rtol=3e-6, atol=1e-6, equal_nan=True,
                                       err_msg=snippet)
            signed = ~np.isnan(want)
            np.testing.assert_array_equal(np.signbit(F[k])[signed], np.signbit(want)[signed],
                                          err_msg=f"sign of zero: {snippet}")
        for k, (snippet, ref) in enumerate(INT_OPS):
            np.testing.assert_array_equal(I[k], np.asarray(ref()).astype(np.int32), err_msg=snippet)
        for k, (snippet, ref) in enumerate(BOOL_OPS):
            np.testing.assert_array_equal(B[k], ref(), err_msg=snippet)
    assert F.dtype == np.float32 and I.dtype == np.int32 and B.dtype == np.bool_


def test_scalar_ops_cuda(sim, tmp_path_factory):
    em = emit_text(battery_ir("cuda"), "cuda")
    mod = load(em.source, tmp_path_factory, "battery_cuda")
    check_battery(run_cuda(sim, mod.run_battery, X, P, Y, N, M))


def test_scalar_ops_cpu(tmp_path_factory):
    em = emit_text(battery_ir("cpu"), "cpu")
    mod = load(em.source, tmp_path_factory, "battery_cpu")
    check_battery(mod.run_battery(X, P, Y, N, M))


# ----------------------------------------------------------------------------- f16

F16 = r"""
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @half(%a: tensor<8x8xf16>) -> tensor<8x8xf16> {
  %c = arith.constant 0.333 : f16
  %e = tensor.empty() : tensor<8x8xf16>
  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%a : tensor<8x8xf16>) outs(%e : tensor<8x8xf16>) {
  ^bb0(%x: f16, %o: f16):
    %0 = arith.mulf %x, %c : f16
    %1 = math.exp %0 : f16
    linalg.yield %1 : f16
  } -> tensor<8x8xf16>
  return %r : tensor<8x8xf16>
}
"""
HALF_CASE = (F16, EW_TILE.replace("[8, 16]", "[4, 8]").replace("[1, 4]", "[1, 2]"), "[4, 4, 1]")


@pytest.mark.parametrize("target", ["cuda", "cpu"])
def test_f16_computes_in_f32(target, tmp_path_factory, request):
    em, _ = lowered("half", target)
    assert "_f16_0p333 = np.float32(0.333)" in em.source
    mod = load(em.source, tmp_path_factory, f"half_{target}")
    a = RNG.standard_normal((8, 8)).astype(np.float16)
    if target == "cuda":
        assert "np.float32(arg0[" in em.source
        (got,) = run_cuda(request.getfixturevalue("sim"), mod.run_half, a)
    else:
        (got,) = mod.run_half(a)
    want = np.exp(a.astype(np.float32) * np.float32(np.float16(0.333)))
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-3)


# ----------------------------------------------------------------------------- dense constants

CONSTS = r"""
memref.global "private" constant @__constant_8xf32 : memref<8xf32> = dense<[0.5, -1.0, 2.0, 0.25, 3.0, -0.5, 1.5, 0.1]>
memref.global "private" constant @__constant_2xi32 : memref<2xi32> = dense<[3, -4]>
func.func @consts(%x: memref<2x8xf32>, %scale: memref<f32>) -> (memref<2x8xf32>, memref<8xf32>) {
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c8 = arith.constant 8 : index
  %w = memref.get_global @__constant_8xf32 : memref<8xf32>
  %out = memref.alloc() : memref<2x8xf32>
  scf.execute_region {
    gpu.launch blocks(%bx, %by, %bz) in (%gx = %c2, %gy = %c1, %gz = %c1) threads(%tx, %ty, %tz) in (%sx = %c8, %sy = %c1, %sz = %c1) {
      %k = memref.get_global @__constant_2xi32 : memref<2xi32>
      %v = memref.load %x[%bx, %tx] : memref<2x8xf32>
      %s = memref.load %w[%tx] : memref<8xf32>
      %i = memref.load %k[%bx] : memref<2xi32>
      %f = arith.sitofp %i : i32 to f32
      %m = arith.mulf %v, %s : f32
      %r = arith.addf %m, %f : f32
      %sc = memref.load %scale[] : memref<f32>
      %rs = arith.mulf %r, %sc : f32
      memref.store %rs, %out[%bx, %tx] : memref<2x8xf32>
      gpu.terminator
    }
    scf.yield
  }
  return %out, %w : memref<2x8xf32>, memref<8xf32>
}
"""
W8 = np.array([0.5, -1.0, 2.0, 0.25, 3.0, -0.5, 1.5, 0.1], np.float32)


def test_dense_constants_become_module_arrays(sim, tmp_path_factory):
    em = emit_text(CONSTS, "cuda")
    src = em.source
    assert "_g_constant_8xf32 = np.array([0.5, -1, 2, 0.25, 3, -0.5, 1.5, 0.1], np.float32)" in src
    assert "= cuda.to_device(_g_constant_8xf32)" in src          # host-level get_global
    assert "_g_constant_2xi32[(cuda.blockIdx.x & 0x7fffffff)]" in src            # kernel-level: the global
    assert "arg1_1d = arg1.reshape(1)" in src                     # a rank-0 argument
    mod = load(src, tmp_path_factory, "consts")
    x = RNG.standard_normal((2, 8)).astype(np.float32)
    out, w = run_cuda(sim, mod.run_consts, x, np.array(2.5, np.float32))
    want = (x * W8 + np.array([[3], [-4]], np.float32)) * np.float32(2.5)
    np.testing.assert_allclose(out, want, rtol=1e-6)
    np.testing.assert_array_equal(w, W8)


# ----------------------------------------------------------------------------- errors

def test_unknown_op_names_itself_and_its_location():
    src = """
func.func @f(%a: memref<4xf32>) -> memref<4xf32> {
  %0 = memref.alloc() : memref<4xf32>
  %1 = tensor.empty() : tensor<4xf32> loc("chain.fdsl":3:7)
  return %0 : memref<4xf32>
}"""
    with pytest.raises(EmitError) as info:
        emit_text(src, "cuda")
    err = info.value
    assert str(err) == "internal error: the emitter has no rule for 'tensor.empty' (at chain.fdsl:3:7)"
    assert err.op_name == "tensor.empty" and isinstance(err, CompilerInternalError)


@pytest.mark.parametrize("src, target, words", [
    ("""func.func @f(%a: memref<4xi4>) -> memref<4xi4> {
  return %a : memref<4xi4>
}""", "cuda", "no rule for the type 'i4'"),
    ("""func.func @f(%a: memref<4xf32>) -> f32 {
  %c0 = arith.constant 0 : index
  %v = memref.load %a[%c0] : memref<4xf32>
  return %v : f32
}""", "cuda", "no rule for 'memref.load' outside a gpu.launch"),
    ("""func.func @f(%a: memref<4xf32>) {
  %c1 = arith.constant 1 : index
  gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1) threads(%tx, %ty, %tz) in (%sx = %c1, %sy = %c1, %sz = %c1) {
    gpu.terminator
  }
  return
}""", "cpu", "no rule for 'gpu.launch' for the cpu target"),
    ("""func.func @f(%a: i32) -> i32 {
  %0 = math.ctlz %a : i32
  return %0 : i32
}""", "cpu", "no rule for 'math.ctlz'"),
])
def test_outside_the_closed_set_is_an_internal_error(src, target, words):
    with pytest.raises(EmitError, match=re.escape(words)):
        emit_text(src, target)


# ----------------------------------------------------------------------------- real CUDA typing

_PTX_CHECK = textwrap.dedent("""
    import importlib.util, json, sys, types
    from numba import cuda
    import numba.cuda.dispatcher as dispatcher
    # No GPU here: give device functions a compute capability and record each kernel instead
    # of compiling it for a (missing) current device.
    dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=(8, 0))
    real_jit, kernels = cuda.jit, []
    def jit(*args, **kw):
        if args and isinstance(args[0], str) and not kw.get("device"):
            return lambda f: kernels.append((f, args[0])) or f
        return real_jit(*args, **kw)
    cuda.jit = jit
    def probe(a):
        a[0] = 1
    try:  # the CUDA toolkit's NVVM (pip: nvidia-nvvm) must be installed, no GPU needed
        cuda.compile_ptx(probe, "void(float32[::1])", cc=(8, 0))
    except Exception as e:
        print(json.dumps({"skip": f"{type(e).__name__}: {str(e).strip().splitlines()[0]}"}))
        sys.exit(0)
    out = {}
    for i, path in enumerate(sys.argv[1:]):
        spec = importlib.util.spec_from_file_location(f"gen{i}", path)
        mod = importlib.util.module_from_spec(spec)
        kernels.clear()
        spec.loader.exec_module(mod)
        for f, sig in kernels:
            ptx, _ = cuda.compile_ptx(f, sig, cc=(8, 0))
            out[f"{path}:{f.__name__}"] = ".f64" in ptx
    print(json.dumps(out))
""")


def test_kernels_compile_for_a_real_gpu(tmp_path):
    """Numba's CUDA compiler (NVVM, no device needed) accepts every kernel; f32 cases have no
    f64 instruction in their PTX."""
    import json
    paths, f32_only = [], []
    sources = {case: lowered(case, "cuda")[0].source for case in [*CASES, "half"]}
    sources["rowsum"] = emit_text(ROWSUM, "cuda").source
    sources["views"] = emit_text(VIEWS, "cuda").source
    sources["consts"] = emit_text(CONSTS, "cuda").source
    sources["pad"] = emit_text(PAD, "cuda").source
    sources["battery"] = emit_text(battery_ir("cuda"), "cuda").source
    for name, src in sources.items():
        path = tmp_path / f"{name}.py"
        path.write_text(src)
        paths.append(str(path))
        if name != "battery":  # the battery uses f64 (extf) and powf on purpose
            f32_only.append(str(path))
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    proc = subprocess.run([sys.executable, "-c", _PTX_CHECK, *paths], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if "skip" in result:
        pytest.skip(f"no NVVM to compile PTX with: {result['skip']}")
    assert len(result) >= len(paths)
    uses_f64 = [k for k, v in result.items() if v and k.split(":")[0] in f32_only]
    assert not uses_f64


_MINMAX = r"""
func.func @mm(%X: memref<256xf32>, %Y: memref<256xf32>) -> memref<4x256xf32> {
  %c1 = arith.constant 1 : index
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c256 = arith.constant 256 : index
  %O = memref.alloc() : memref<4x256xf32>
  gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
             threads(%tx, %ty, %tz) in (%sx = %c256, %sy = %c1, %sz = %c1) {
    %i = gpu.thread_id x
    %x = memref.load %X[%i] : memref<256xf32>
    %y = memref.load %Y[%i] : memref<256xf32>
    %a = arith.maximumf %x, %y : f32
    %b = arith.minimumf %x, %y : f32
    %c = arith.maxnumf %x, %y : f32
    %d = arith.minnumf %x, %y : f32
    memref.store %a, %O[%c0, %i] : memref<4x256xf32>
    memref.store %b, %O[%c1, %i] : memref<4x256xf32>
    memref.store %c, %O[%c2, %i] : memref<4x256xf32>
    memref.store %d, %O[%c3, %i] : memref<4x256xf32>
    gpu.terminator
  }
  return %O : memref<4x256xf32>
}"""


def test_float_max_and_min_are_branch_free():
    """arith.maximumf / minimumf / maxnumf / minnumf compile to selects: the PTX of a kernel that
    only loads, takes the four and stores has no branch (the helpers used to be `if` chains, whose
    branch regions hold back the loads after them in a row kernel). Their values on NaN, the
    infinities and signed zeros: the scalar battery above."""
    from fusec.compiler.report.ptx import ptx_of
    src = emit_text(_MINMAX, "cuda").source
    for helper in ("_maximumf_f32", "_minimumf_f32", "_maxnumf", "_minnumf"):
        assert f"def {helper}(a, b):" in src
    out = ptx_of(src, (9, 0))
    if not out["ptx"]:
        pytest.skip(f"no NVVM to compile PTX with: {out['errors']}")
    (ptx,) = out["ptx"].values()
    body = ptx[ptx.index(".entry"):]
    assert "max.f32" in body or "setp" in body          # the helpers were inlined and compiled
    assert re.findall(r"^\s*(?:@%p\d+\s+)?bra", body, re.M) == []
