"""Sibling loops fused on the cpu target (compiler/emit/siblings.py): loops over one range join
when iteration i of the later one touches only what iteration i of the earlier touched, and
stay apart otherwise. Each case is emitted, run, and checked against NumPy."""
import importlib.util

import numpy as np
import pytest

from fusec.compiler.emit import emit
from fusec.compiler.mlir import ir

HEAD = """
func.func @f(%x: memref<4x16xf32>, %y: memref<4x16xf32>) -> (memref<4x16xf32>, memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c15 = arith.constant 15 : index
  %c16 = arith.constant 16 : index
  %zero = arith.constant 0.0 : f32
  %e = memref.alloc() : memref<4x16xf32>
  %s = memref.alloc() : memref<4xf32>
  scf.for %r = %c0 to %c4 step %c1 {
    scf.for %j = %c0 to %c16 step %c1 {
      %v = memref.load %x[%r, %j] : memref<4x16xf32>
      %w = math.exp %v : f32
      memref.store %w, %e[%r, %j] : memref<4x16xf32>
    }
    BETWEEN
    scf.for %j = %c0 to %c16 step %c1 {
      SECOND
    }
  }
  return %e, %s : memref<4x16xf32>, memref<4xf32>
}
"""
INIT = "memref.store %zero, %s[%r] : memref<4xf32>"
SUM_SAME = """%v = memref.load %e[%r, %j] : memref<4x16xf32>
      %a = memref.load %s[%r] : memref<4xf32>
      %t = arith.addf %v, %a : f32
      memref.store %t, %s[%r] : memref<4xf32>"""
SUM_MIRRORED = SUM_SAME.replace("%v = memref.load %e[%r, %j]", "%k = arith.subi %c15, %j : index\n      %v = memref.load %e[%r, %k]")
# the second loop writes over the first's input at i's element: i's read came first, so it may join
DOUBLE_INPUT = """%v = memref.load %e[%r, %j] : memref<4x16xf32>
      %a = memref.load %s[%r] : memref<4xf32>
      %t = arith.addf %v, %a : f32
      memref.store %t, %s[%r] : memref<4xf32>
      %d = arith.addf %v, %v : f32
      memref.store %d, %x[%r, %j] : memref<4x16xf32>"""


def _run(tmp_path, second, between=INIT):
    src = HEAD.replace("SECOND", second).replace("BETWEEN", between)
    with ir.Context():
        code = emit(ir.Module.parse(src), "cpu").source
    path = tmp_path / "m.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(f"siblings_{abs(hash(src))}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
    y = np.zeros((4, 16), np.float32)
    e, s = mod.run_f(x.copy(), y)
    return code, x, e, s


def _fused(code):
    return code.count("loops over one range, fused")


def test_a_sum_of_what_the_first_loop_wrote_joins_it(tmp_path):
    code, x, e, s = _run(tmp_path, SUM_SAME)
    assert _fused(code) == 1, code
    np.testing.assert_allclose(e, np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(s, np.exp(x).sum(1), rtol=1e-5)


def test_a_read_of_another_iterations_element_keeps_the_loops_apart(tmp_path):
    code, x, e, s = _run(tmp_path, SUM_MIRRORED)
    assert _fused(code) == 0, code
    np.testing.assert_allclose(s, np.exp(x).sum(1), rtol=1e-5)      # every element written first


def test_a_loop_reading_an_accumulator_the_first_one_finishes_stays_apart(tmp_path):
    # the first loop sums into s[r]; the second scales by the finished sum at every j
    src_first = """%v = memref.load %e[%r, %j] : memref<4x16xf32>
      %a = memref.load %s[%r] : memref<4xf32>
      %t = arith.divf %v, %a : f32
      memref.store %t, %e[%r, %j] : memref<4x16xf32>"""
    code, x, e, s = _run(tmp_path, src_first, between=INIT + """
    scf.for %j = %c0 to %c16 step %c1 {
      """ + SUM_SAME + """
    }""")
    assert _fused(code) == 1, code                     # exp and sum join; the divide does not
    ex = np.exp(x)
    np.testing.assert_allclose(e, ex / ex.sum(1, keepdims=True), rtol=1e-5)


def test_an_op_between_that_writes_what_the_first_loop_reads_keeps_them_apart(tmp_path):
    code, x, e, s = _run(tmp_path, SUM_SAME, between=INIT + "\n    memref.store %zero, %x[%r, %c15] : memref<4x16xf32>")
    assert _fused(code) == 0, code
    np.testing.assert_allclose(e, np.exp(x), rtol=1e-6)                  # read before it was zeroed


def test_a_store_to_a_caller_array_at_the_same_element_may_join(tmp_path):
    code, x, e, s = _run(tmp_path, DOUBLE_INPUT)
    assert _fused(code) == 1, code
    np.testing.assert_allclose(s, np.exp(x).sum(1), rtol=1e-5)


@pytest.mark.parametrize("index", ["%c0", "%k"])
def test_a_store_to_a_caller_array_elsewhere_keeps_them_apart(tmp_path, index):
    other = DOUBLE_INPUT.replace("memref.store %d, %x[%r, %j]", f"memref.store %d, %x[%r, {index}]")
    if index == "%k":
        other = "%k = arith.subi %c15, %j : index\n      " + other
    code, x, e, s = _run(tmp_path, other)
    assert _fused(code) == 0, code
    np.testing.assert_allclose(e, np.exp(x), rtol=1e-6)
