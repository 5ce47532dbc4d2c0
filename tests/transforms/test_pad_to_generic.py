"""pad-to-generic (compiler/transforms/pad_to_generic.py): at the start of the tiled stage a
tensor.pad becomes an all-parallel linalg.generic over the padded shape that gathers its source
(zero outside it), keeping the pad's fusec.id, so it tiles and fuses into a conv's tiles."""
import pytest

from fusec.compiler.marks import OP_ID
from fusec.compiler.mlir import ir, parse_module, print_ir, verify
from fusec.compiler.transforms.pad_to_generic import pad_to_generic

from .stages import compile_, filecheck, run_matches

CONV = """chain f(x: f32[N, 2, 5, 5], w: f32[3, 2, 3, 3]) -> f32[N, 3, 5, 7] {
    return relu(conv2d(x, w, padding=[1, 2]))
}"""
B = dict(N=1)


def _plan_stage():
    """The module as the tiled stage receives it (ops tagged with their fusec.id)."""
    return compile_(CONV, B, "cpu", until="plan")


def test_the_pad_becomes_a_gather_generic_keeping_its_id():
    st = _plan_stage()
    (pad_id,) = [o.id for o in st.plan.info.ops if o.kind == "pad"]
    m = parse_module(print_ir(st.module))
    assert "tensor.pad" in print_ir(m)
    with m.context, ir.Location.unknown():
        assert pad_to_generic(m) == 1
    verify(m, "tiled")
    out = print_ir(m)
    assert "tensor.pad" not in out
    filecheck(out, f"""
CHECK: %[[E:.+]] = tensor.empty() : tensor<1x2x7x9xf32>
CHECK: %[[P:.+]] = linalg.generic {{{{.*}}}}iterator_types = ["parallel", "parallel", "parallel", "parallel"]}} outs(%[[E]] : tensor<1x2x7x9xf32>) attrs = {{{OP_ID} = {pad_id} : i64}}
CHECK: linalg.index 2
CHECK: arith.subi
CHECK: arith.cmpi sge
CHECK: arith.cmpi slt
CHECK: linalg.index 3
CHECK: tensor.extract %arg0
CHECK: arith.select
CHECK: linalg.yield
CHECK: linalg.conv_2d_nchw_fchw {{{{.*}}}}ins(%[[P]]
""")
    with m.context, ir.Location.unknown():
        assert pad_to_generic(m) == 0


@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_the_gather_is_fused_into_the_conv_tile(target):
    st = compile_(CONV, B, target, until="tiled")
    (pad_id,) = [o.id for o in st.plan.info.ops if o.kind == "pad"]
    assert st.plan.kernel_count == 1
    tiled = st.texts["tiled"]
    assert "tensor.pad" not in tiled
    loop = tiled[tiled.index("scf.forall"):]
    (gather,) = [l for l in loop.splitlines() if f"{OP_ID} = {pad_id} : i64" in l]
    assert "linalg.generic" in gather, tiled              # the pad's gather, inside the kernel's loop
    assert "memref.load %arg0" in loop                       # reading x where it is needed


def test_padded_the_numbers_are_the_references():
    run_matches(CONV, dict(N=2), "cuda-sim")
