"""The pieces the kernel templates hold (emit/template_values.py, emit/mma.py, emit/gemm.py):
affine index text, the element load, the accumulator layouts against the PTX fragment table,
and the rule that the emitter's modules share only public names."""
from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import fusec.compiler.emit as emit_pkg
from fusec.compiler.emit.gemm import Grid, Tile
from fusec.compiler.emit.mma import LDSM_HELPERS, Fragments, SwizzledTile, mma_helpers
from fusec.compiler.emit.template_values import affine, dims_of_map, is_identity, load_element, pure_dim
from fusec.compiler.mlir import ir


def test_emit_modules_import_no_private_names_from_each_other():
    """A helper two templates share is public where it lives (no `from .gemm import _maps`)."""
    found = []
    for path in sorted(Path(emit_pkg.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level >= 1:
                found += [f"{path.name}: from {'.' * node.level}{node.module} import {a.name}"
                          for a in node.names if a.name.startswith("_")]
    assert not found, found


def test_affine_index_text_evaluates_as_the_map():
    with ir.Context():
        m = ir.AffineMapAttr(ir.Attribute.parse(
            "affine_map<(d0, d1, d2) -> (d0 * 4 + d1 floordiv 2, d1 mod 3, d2)>")).value
        text = [affine(e, ["i", "j", "k"]) for e in m.results]
        for i, j, k in [(0, 0, 0), (3, 5, 7), (2, 11, 1)]:
            assert [eval(t, {"i": i, "j": j, "k": k}) for t in text] == [i * 4 + j // 2, j % 3, k]
        assert dims_of_map(m) == {0, 1, 2}
        assert [pure_dim(e) for e in m.results] == [None, None, 2] and not is_identity(m)
        assert is_identity(ir.AffineMapAttr(ir.Attribute.parse("affine_map<(d0, d1) -> (d0, d1)>")).value)


@pytest.mark.parametrize("mlir,storage,compute,want", [("f16", "float16", "float32", "np.float32(x[i, j])"),
                                                       ("f32", "float32", "float32", "x[i, j]"),
                                                       ("bf16", "uint16", "float32", "_bf16_f32(x[i, j])"),
                                                       ("bf16", "float32", "float32", "x[i, j]")])
def test_an_element_is_loaded_in_its_compute_type(mlir, storage, compute, want):
    """f16 widens; a bf16 array's 16 bits (cuda) move to an f32's top half, its f32 copy (cpu,
    shared and local arrays) is read as it lies."""
    view = SimpleNamespace(at=lambda idx: f"x[{', '.join(idx)}]",
                           array=SimpleNamespace(storage=storage, elem=SimpleNamespace(compute=compute, mlir=mlir)))
    assert load_element(view, ["i", "j"]) == want


@pytest.mark.parametrize("rows_k,rows,width", [(False, 64, 16), (False, 32, 32), (True, 32, 128),
                                              (True, 16, 64), (False, 16, 8), (True, 16, 48)])
def test_swizzled_tiles_hold_each_element_once_and_read_rows_conflict_free(rows_k, rows, width):
    """A tensor-core staging tile (emit/mma.py): every element at its own half-word, the 8 halves
    of a 16-byte chunk together, and any 8 consecutive rows of one chunk column (an ldmatrix
    matrix) at 8 distinct 16-byte positions of a 128-byte line (all 32 banks)."""
    t = SwizzledTile("H", 64, rows_k, rows, width)
    at = {}
    for r in range(rows):
        for c in range(width):
            k, x = (r, c) if rows_k else (c, r)
            at[r, c] = eval(t.flat(str(k), "x"), {"x": x})
    assert len(set(at.values())) == rows * width and 64 <= min(at.values()) and max(at.values()) < 64 + t.halves
    for (r, c), i in at.items():
        assert i - at[r, c - c % 8] == c % 8 and at[r, c - c % 8] % 8 == 0
    for r0 in range(rows - 7):
        for c in range(0, width, 8):
            assert len({(at[r, c] // 8) % 8 for r in range(r0, r0 + 8)}) == 8, (r0, c)
    assert Tile("Qs").at("k", "x") == "Qs[k, x]"


def test_the_ldmatrix_intrinsics_are_defined_off_the_simulator_only():
    assert LDSM_HELPERS[0].startswith("if _CUDASIM:") and "    _ldsm_x4 = _ldsm_x4_t = _ldsm_x2 = _ldsm_x2_t = _smem_base = None" in LDSM_HELPERS
    text = "\n".join(LDSM_HELPERS)
    assert "ldmatrix.sync.aligned.m8n8.x" in text and ".trans" in text and "cvta.to.shared" in text
    compile(text, "<ldmatrix helpers>", "exec")


def test_a_thread_grid_strides_its_accumulators_across_the_block():
    g = Grid("ty", 4, "tx", 8)
    assert [eval(g.row(i), {"ty": 3}) for i in range(3)] == [3, 7, 11]
    assert [eval(g.col(j), {"tx": 5}) for j in range(3)] == [5, 13, 21]


def test_fragments_hold_the_accumulators_the_ptx_table_gives_each_lane():
    """mma.m16n8k16 .f32 C/D: lane 4 g + t holds c0..c3 at (g, 2t), (g, 2t+1), (g+8, 2t),
    (g+8, 2t+1) of each 16x8 tile; the template passes accumulators (2mi + h, 2ni + e) as c(2h+e)
    of tile (mi, ni), whose rows start at 16 mi and columns at 8 ni (warp 0: qb = g, pb = 2t)."""
    table = [(0, 0), (0, 1), (8, 0), (8, 1)]
    for lane in range(32):
        g, t = divmod(lane, 4)
        f = Fragments("qb", "pb")
        env = {"qb": g, "pb": 2 * t}
        for mi in range(2):
            for ni in range(3):
                for c, (dr, dc) in enumerate(table):
                    h, e = divmod(c, 2)
                    i, j = 2 * mi + h, 2 * ni + e
                    assert (eval(f.row(i), env), eval(f.col(j), env)) == (16 * mi + g + dr, 8 * ni + 2 * t + dc)


@pytest.mark.parametrize("kind", ["f16", "bf16"])
def test_the_intrinsics_are_defined_off_the_simulator_only(kind):
    lines = mma_helpers(kind)
    assert lines[0].startswith("if _CUDASIM:") and f"    _pack_{kind}x2 = _mma_{kind} = None" in lines
    text = "\n".join(lines)
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32" in text and f"cvt.rn.{kind}x2.f32" in text
    compile(text, "<mma helpers>", "exec")
