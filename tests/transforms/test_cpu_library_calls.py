"""cpu-library-calls (compiler/transforms/cpu_library_calls.py): on the cpu target float contractions
stay linalg ops marked fusec.cpu_call ("zero" when a +0.0 fill of their output directly precedes
them, the fill dropped; else "acc") for the emitter's BLAS calls, every other linalg op is marked
for loops; a transpose copy feeding a matmul becomes a memref.transpose view; the row tiles of a
zero-filled matmul become one whole call before the loop; convs carry the plan's algorithm.
The calls' numbers (a Numba compile of the BLAS prelude each, many seconds) are in
tests/emit/test_cpu_blas.py and tests/emit/test_emit_cpu.py."""
import json

import pytest

from fusec.compiler.marks import CONV_ALGORITHM, CPU_CALL, TO_LOOPS
from fusec.compiler.mlir import PassManager, ir, parse_module, print_ir
from fusec.compiler.transforms.cpu_library_calls import (fold_transposed_operands, hoist_whole_contractions,
                                                         mark_library_calls)

from .stages import compile_

CALLS = """
func.func @f(%a: memref<4x3xf32>, %b: memref<3x5xf32>, %c: memref<4x5xf32>, %d: memref<4x5xf32>,
             %e: memref<4x5xf32>, %i: memref<4x3xi32>, %j: memref<3x5xi32>, %k: memref<4x5xi32>) {
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  linalg.fill {n = "zero fill"} ins(%zero : f32) outs(%c : memref<4x5xf32>)
  linalg.matmul {n = "after a zero fill"} ins(%a, %b : memref<4x3xf32>, memref<3x5xf32>) outs(%c : memref<4x5xf32>)
  linalg.matmul {n = "accumulating"} ins(%a, %b : memref<4x3xf32>, memref<3x5xf32>) outs(%d : memref<4x5xf32>)
  linalg.fill {n = "one fill"} ins(%one : f32) outs(%e : memref<4x5xf32>)
  linalg.matmul {n = "after a fill of one"} ins(%a, %b : memref<4x3xf32>, memref<3x5xf32>) outs(%e : memref<4x5xf32>)
  linalg.matmul {n = "integer"} ins(%i, %j : memref<4x3xi32>, memref<3x5xi32>) outs(%k : memref<4x5xi32>)
  return
}
"""


def _marks(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if 'n = "' in line:
            name = line.split('n = "')[1].split('"')[0]
            out[name] = line
    return out


def test_float_contractions_are_calls_and_everything_else_loops():
    m = parse_module(CALLS)
    with m.context, ir.Location.unknown():
        assert mark_library_calls(m) == 3
    marks = _marks(print_ir(m))
    assert "zero fill" not in marks                                  # dropped: the call writes C = A B
    assert f'{CPU_CALL} = "zero"' in marks["after a zero fill"]
    assert f'{CPU_CALL} = "acc"' in marks["accumulating"]
    assert f'{CPU_CALL} = "acc"' in marks["after a fill of one"]     # C = 1 + A B: the fill stays, as loops
    assert TO_LOOPS in marks["one fill"] and CPU_CALL not in marks["one fill"]
    assert TO_LOOPS in marks["integer"] and CPU_CALL not in marks["integer"]   # no integer BLAS
    for name in ("after a zero fill", "accumulating", "after a fill of one"):
        assert TO_LOOPS not in marks[name]


MLP_T = "chain m(x: f32[M, K], w: f32[N, K], b: f32[N]) -> f32[M, N] { return relu(x @ transpose(w) + b) }"
B = dict(M=64, K=8, N=32)


def test_in_the_gpu_stage_a_call_per_chunk_reads_w_through_a_transpose_view():
    st = compile_(MLP_T, B, "cpu", until="gpu")
    gpu = st.texts["gpu"]
    (view,) = [l for l in gpu.splitlines() if "memref.transpose %arg1" in l]
    assert "memref<8x32xf32, strided<[1, 8]>>" in view
    loop = gpu[gpu.index("scf.parallel"):]
    (call,) = [l for l in loop.splitlines() if "linalg." in l]          # everything else is loops
    assert call.strip().startswith(f'linalg.matmul {{{CPU_CALL} = "zero"') and "%transpose" in call
    assert "linalg.fill" not in gpu


def test_fold_transposed_operands_counts_the_copies_it_removes():
    st = compile_(MLP_T, B, "cpu", until="tiled")
    m = parse_module(st.texts["tiled"])
    with m.context, ir.Location.unknown():
        PassManager.parse("builtin.module(func.func(scf-forall-to-parallel))").run(m.operation)
        before = print_ir(m)
        assert "memref.transpose" not in before          # w is copied, transposed, in each chunk
        assert fold_transposed_operands(m) == 1
        assert fold_transposed_operands(m) == 0
    assert "memref.transpose %arg1" in print_ir(m)


TILED_MATMUL = """
#m = affine_map<(d0) -> (d0 * 4)>
func.func @f(%a: memref<8x3xf32>, %b: memref<3x5xf32>) -> memref<8x5xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %z = arith.constant 0.0 : f32
  %c = memref.alloc() : memref<8x5xf32>
  scf.parallel (%i) = (%c0) to (%c2) step (%c1) {
    %o = affine.apply #m(%i)
    %at = memref.subview %a[%o, 0] [4, 3] [1, 1] : memref<8x3xf32> to memref<4x3xf32, strided<[3, 1], offset: ?>>
    %ct = memref.subview %c[%o, 0] [4, 5] [1, 1] : memref<8x5xf32> to memref<4x5xf32, strided<[5, 1], offset: ?>>
    linalg.fill ins(%z : f32) outs(%ct : memref<4x5xf32, strided<[5, 1], offset: ?>>)
    linalg.matmul ins(%at, %b : memref<4x3xf32, strided<[3, 1], offset: ?>>, memref<3x5xf32>) outs(%ct : memref<4x5xf32, strided<[5, 1], offset: ?>>)
    STORE
    scf.reduce
  }
  return %c : memref<8x5xf32>
}
"""


@pytest.mark.parametrize("store, hoisted", [("", 1), ("memref.store %z, %a[%c0, %c0] : memref<8x3xf32>", 0)])
def test_row_tiles_of_a_matmul_become_one_call_unless_the_loop_writes_an_input(store, hoisted):
    # (moved here from tests/emit/test_emit_cpu.py)
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(TILED_MATMUL.replace("STORE", store))
        assert hoist_whole_contractions(module) == hoisted
        module.operation.verify()
        text = str(module)
    if hoisted:
        head = text.split("scf.parallel")[0]
        assert 'linalg.matmul {fusec.cpu_call = "zero"} ins(%arg0, %arg1' in head and "outs(%alloc" in head
        assert "linalg.fill" not in text
    else:
        assert "linalg.fill" in text.split("scf.parallel")[1]


@pytest.mark.parametrize("algorithm", ["im2col", "direct", "winograd"])
def test_a_conv_carries_its_planned_algorithm(algorithm):
    src = """chain c(x: f32[N, 2, 6, 6], w: f32[4, 2, 3, 3]) -> f32[N, 4, 6, 6] {
        return conv2d(x, w, padding=1)
    }"""
    plan = {"groups": [{"ops": [0, 1, 2], "block_tiles": [0, 1, 0, 0, 0, 0, 0], "conv": algorithm}]}
    st = compile_(src, dict(N=1), "cpu", until="gpu", plans=(("c", json.dumps(plan)),))
    (conv,) = [l for l in st.texts["gpu"].splitlines() if "linalg.conv_2d_nchw_fchw" in l]
    assert f'{CONV_ALGORITHM} = "{algorithm}"' in conv and f'{CPU_CALL} = "zero"' in conv, conv
