"""gemm-kernels: hand a contraction kernel's block to the emitter's GEMM template (stage `gpu`).

After the kernel's forall is a gpu.launch, its block-level linalg ops on memrefs are not lowered
to loops: all but the fills are generalized, the contraction is marked `fusec.gemm_contraction`,
the root `fusec.block_gemm` with the tiles and loop sides (`fusec.gemm_tiles`, `gemm_sides`,
`gemm_root_loops`, and `gemm_mma`, `gemm_prefetch` where the config asks), and every other op
and every buffer only they use is `fusec.absorbed`. compiler/emit/gemm.py writes the kernel at
the root. See docs/ARCHITECTURE.md, "GPU kernels: how a plan becomes CUDA" (contraction kernels).
"""
from __future__ import annotations

from ..errors import CompilerInternalError
from ..mlir import ir
from ..plan.gemm import gemm_kernel, gemm_shape
from ..plan.templates import ContractionConfig, groups_of
from ..plan.kernels import FusionPlan, Kernel
from .script import ANY, Step, apply_script, script_text, tag_of
from ..marks import ABSORBED, BLOCK_GEMM, CONTRACTION, GEMM_MARKS, GEMM_MMA, GEMM_PREFETCH, GEMM_ROOT_LOOPS, GEMM_SIDES, GEMM_STAGES, GEMM_TILES, TAG

_VIEWS = ("memref.subview", "memref.expand_shape", "memref.collapse_shape", "memref.cast")


def _i64_array(values) -> ir.Attribute:
    return ir.DenseI64ArrayAttr.get([int(v) for v in values])


def _tagged(module: ir.Module) -> dict[int, "ir.Operation"]:
    found = {}

    def visit(op):
        if TAG in op.attributes and op.name.startswith("linalg."):
            found.setdefault(ir.IntegerAttr(op.attributes[TAG]).value, []).append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


def mark_gemm_kernels(module: ir.Module, plans: dict[str, FusionPlan], target: str = "gpu") -> int:
    """Generalize and mark the contraction kernels' ops; returns how many kernels."""
    groups = groups_of(plans, ContractionConfig)
    if not groups:
        return 0
    with module.context, ir.Location.unknown():
        steps = []
        for plan, g in groups:
            gk = gemm_kernel(plan.info, g.ops, g.root)
            if isinstance(gk, str):
                raise CompilerInternalError("gpu", f"kernel {g.id} is planned as a contraction kernel but {gk}")
            steps += generalize_steps(plan, g, "c")
        apply_script(module, script_text(steps), "gpu")
        tagged = _tagged(module)
        for plan, g in groups:
            _mark(plan, g, tagged)
    return len(groups)


def generalize_steps(plan: FusionPlan, g: Kernel, prefix: str) -> list[Step]:
    """Steps that make every op of kernel `g` but its fills and views a linalg.generic (matmul,
    conv, transpose...: explicit indexing maps and body for an emitter template)."""
    steps = []
    for m in g.ops:
        if plan.info.op(m).kind in ("fill", "view"):
            continue
        name = f"{prefix}{g.id}_{m}"
        steps.append(Step(f'%{name} = transform.structured.match attributes {{"{TAG}" = '
                          f'{tag_of(g.id, m)} : i64}} in %root : ({ANY}) -> {ANY}'))
        steps.append(Step(f"%{name}_g = transform.structured.generalize %{name} : ({ANY}) -> {ANY}"))
    return steps


def _one(tagged: dict, tag: int, what: str, g: Kernel, stage: str = "gpu") -> "ir.Operation":
    ops = tagged.get(tag, [])
    if len(ops) != 1:
        raise CompilerInternalError(stage, f"kernel {g.id}: {len(ops)} ops are its {what} after bufferization")
    return ops[0]


def _mark(plan: FusionPlan, g: Kernel, tagged: dict) -> None:
    info = plan.info
    gk = gemm_kernel(info, g.ops, g.root)
    shape = gemm_shape(info, gk, g.root, g.block_tiles, g.config.steps)
    c = _one(tagged, tag_of(g.id, gk.contraction), "contraction", g)
    root = _one(tagged, tag_of(g.id, g.root), "root", g)
    c.attributes[CONTRACTION] = ir.UnitAttr.get()
    root.attributes[BLOCK_GEMM] = _i64_array(g.config.steps)
    root.attributes[GEMM_TILES] = _i64_array(shape.tiles)
    root.attributes[GEMM_SIDES] = ir.ArrayAttr.get([ir.StringAttr.get(s) for s in gk.sides])
    root.attributes[GEMM_ROOT_LOOPS] = _i64_array(gk.root_loops)
    if g.config.mma:
        root.attributes[GEMM_MMA] = ir.StringAttr.get(g.config.mma)
    if g.config.prefetch:
        root.attributes[GEMM_PREFETCH] = ir.UnitAttr.get()
    if getattr(g.config, "stages", 0):
        root.attributes[GEMM_STAGES] = _i64_array((g.config.stages,))
    block = root.block
    if c.block != block:
        raise CompilerInternalError("gpu", f"kernel {g.id}: its contraction and root are in different blocks")
    members = {c, root}
    for m in g.ops:
        for op in tagged.get(tag_of(g.id, m), []):
            if op not in members:
                if op.block != block:
                    raise CompilerInternalError("gpu", f"kernel {g.id}: %{m} is not at the block level")
                op.attributes[ABSORBED] = ir.UnitAttr.get()
                members.add(op)
    for op in block.operations:
        op = op.operation
        if op.name == "memref.alloc" and _only_used_by(op.results[0], members):
            op.attributes[ABSORBED] = ir.UnitAttr.get()


def _only_used_by(v: "ir.Value", members: set) -> bool:
    """Every use of `v` (through views) is by one of `members`."""
    uses = list(v.uses)
    if not uses:
        return False
    for use in uses:
        owner = use.owner.operation if hasattr(use.owner, "operation") else use.owner
        if owner in members:
            continue
        if owner.name in _VIEWS and _only_used_by(owner.results[0], members):
            continue
        return False
    return True
