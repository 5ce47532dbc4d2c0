"""generic (compiler/transforms/generic.py): the helpers the loop-changing rewrites share: reading a
linalg.generic's maps and iterators, a tensor.empty like a value (run-time extents read with
tensor.dim), the reassociation that splits one dim in two, and `rebuild`, which moves an op's body
into a generic with new operands and keeps its attributes."""
from fusec.compiler.lowering.builder import elem_of
from fusec.compiler.mlir import ir, parse_module, print_ir
from fusec.compiler.transforms.generic import (empty_like, is_dim, iterator_attr, iterators, map_attr, maps, rebuild,
                                               split_groups, type_shape)

ROW_SUM = """
#in = affine_map<(d0, d1) -> (d0, d1)>
#out = affine_map<(d0, d1) -> (d0)>
func.func @f(%x: tensor<?x6xf32>, %init: tensor<?xf32>) -> tensor<?xf32> {
  %0 = linalg.generic {indexing_maps = [#in, #out], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<?x6xf32>) outs(%init : tensor<?xf32>) attrs = {fusec.id = 7 : i64} {
  ^bb0(%a: f32, %acc: f32):
    %s = arith.addf %a, %acc : f32
    linalg.yield %s : f32
  } -> tensor<?xf32>
  return %0 : tensor<?xf32>
}
"""


def _generic(m):
    block = m.body.operations[0].regions[0].blocks[0]
    return next(o.operation for o in block.operations if o.operation.name == "linalg.generic")


def test_reading_a_generic():
    m = parse_module(ROW_SUM)
    with m.context:
        g = _generic(m)
        assert iterators(g) == ["parallel", "reduction"]
        assert [str(a) for a in maps(g)] == ["(d0, d1) -> (d0, d1)", "(d0, d1) -> (d0)"]
        assert is_dim(maps(g)[0].results[1], 1) and not is_dim(maps(g)[0].results[1], 0)
        x = g.operands[0]
        assert type_shape(x)[1] == 6 and ir.ShapedType(x.type).is_dynamic_dim(0)
        assert str(elem_of(x)) == "f32"


def test_split_groups():
    assert split_groups(3, 1) == [[0], [1, 2], [3]]           # [A, B, C] -> [A, B1, B2, C]
    assert split_groups(1, 0) == [[0, 1]]
    assert split_groups(2, 1) == [[0], [1, 2]]


def test_empty_like_reads_run_time_extents():
    m = parse_module(ROW_SUM)
    with m.context, ir.Location.unknown():
        g = _generic(m)
        with ir.InsertionPoint(g):
            e = empty_like(g.operands[0])
        assert str(e.type) == "tensor<?x6xf32>"
    text = print_ir(m)
    assert "tensor.dim %arg0, %c0 : tensor<?x6xf32>" in text and "tensor.empty(%dim) : tensor<?x6xf32>" in text


def test_rebuild_moves_the_body_and_keeps_the_attributes():
    m = parse_module(ROW_SUM)
    with m.context, ir.Location.unknown():
        g = _generic(m)
        ins = [(g.operands[0], maps(g)[0])]
        outs = [(g.operands[1], maps(g)[1])]
        new = rebuild(g, ins, outs, ["parallel", "reduction"])
        g.results[0].replace_all_uses_with(new.results[0])
        g.erase()
        assert m.operation.verify()
    text = print_ir(m)
    assert text.count("linalg.generic") == 1 and "fusec.id = 7 : i64" in text and "arith.addf" in text
    with m.context:
        assert str(iterator_attr(["parallel", "reduction"])) == \
            "[#linalg.iterator_type<parallel>, #linalg.iterator_type<reduction>]"
        assert len(map_attr(maps(_generic(m)))) == 2
