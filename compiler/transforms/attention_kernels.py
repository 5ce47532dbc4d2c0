"""attention-kernels: hand an attention kernel's ops to the emitter's online-softmax template.

An attention kernel (plan/attention.py) is not tiled by MLIR. Its ops are bufferized whole,
generalized (all but the fills), and marked with their roles (`fusec.attention_role`,
`fusec.attention_z`, `fusec.attention_v`, and `fusec.attention_guard` = [C, K] on the output
contraction when P sits in the fully-masked-row guard where(M == C, K, P)); the root gets
`fusec.block_attention` and the scores' loops; every other op, and every buffer and copy only
the kernel uses, is `fusec.absorbed`, so no S x S buffer is allocated. compiler/emit/attention.py
writes the kernel at the root. See docs/ARCHITECTURE.md, "GPU kernels: how a plan becomes CUDA" (attention kernels).
"""
from __future__ import annotations

from ..errors import CompilerInternalError
from ..mlir import ir
from ..plan.attention import NotAttention, attention_kernel
from ..plan.templates import AttentionConfig, groups_of
from ..plan.kernels import FusionPlan, Kernel
from ..marks import (ABSORBED, ATTENTION_BATCH, ATTENTION_MMA, ATTENTION_GUARD, ATTENTION_LOOPS, ATTENTION_MARKS, ATTENTION_ROLE,
                     ATTENTION_V, ATTENTION_Z, BLOCK_ATTENTION)
from .gemm_kernels import _i64_array, _one, _only_used_by, _tagged, generalize_steps
from .script import apply_script, script_text, tag_of



def attention_groups(plans: dict[str, FusionPlan]) -> list[tuple[FusionPlan, Kernel]]:
    return groups_of(plans, AttentionConfig)


def grid(plan: FusionPlan, g: Kernel) -> tuple[int, int]:
    """(query blocks, batch·heads) of an attention kernel."""
    a = attention_kernel(plan.info, g.ops)
    if isinstance(a, NotAttention):
        raise CompilerInternalError("gpu", f"kernel {g.id} is planned as attention but {a}")
    return -(-a.sq // g.config.block_q), a.batch


def mark_attention_kernels(module: ir.Module, plans: dict[str, FusionPlan], stage: str) -> int:
    """Generalize and mark the attention kernels' ops; returns how many kernels."""
    groups = attention_groups(plans)
    if not groups:
        return 0
    with module.context, ir.Location.unknown():
        steps = [s for plan, g in groups for s in generalize_steps(plan, g, "a")]
        apply_script(module, script_text(steps), stage)
        tagged = _tagged(module)
        for plan, g in groups:
            _mark(plan, g, tagged, stage)
    return len(groups)


def _mark(plan: FusionPlan, g: Kernel, tagged: dict, stage: str) -> None:
    a = attention_kernel(plan.info, g.ops)
    if isinstance(a, NotAttention):
        raise CompilerInternalError(stage, f"kernel {g.id} is planned as attention but {a}")
    roles = {"scores": a.scores, "max": a.max, "exp": a.exp, "sum": a.sum, "out": a.out}
    if a.norm is not None:
        roles["norm"] = a.norm
    root = _one(tagged, tag_of(g.id, g.root), "root", g, stage)
    # every attribute is set before an op joins `members`: an ir.Operation hashes by its
    # attributes too, so an op given one later is no longer found in the set
    i64 = ir.IntegerType.get_signless(64)
    _one(tagged, tag_of(g.id, a.exp), "exp", g, stage).attributes[ATTENTION_Z] = ir.IntegerAttr.get(i64, a.z_operand)
    out = _one(tagged, tag_of(g.id, a.out), "out", g, stage)
    out.attributes[ATTENTION_V] = ir.IntegerAttr.get(i64, a.v_operand)
    if a.guard is not None:             # the fully-masked-row guard: the template writes it (emit/attention.py)
        out.attributes[ATTENTION_GUARD] = ir.DenseF64ArrayAttr.get(list(a.guard))
    role_ops = []
    for role, m in roles.items():
        op = _one(tagged, tag_of(g.id, m), role, g, stage)
        op.attributes[ATTENTION_ROLE] = ir.StringAttr.get(role)
        role_ops.append(op)
    root.attributes[BLOCK_ATTENTION] = _i64_array([g.config.block_q, g.config.block_kv])
    root.attributes[ATTENTION_LOOPS] = _i64_array([a.q_loop, a.k_loop, a.d_loop])
    root.attributes[ATTENTION_BATCH] = _i64_array(a.batch_loops)
    if g.config.mma:                    # on tensor cores (emit/attention_mma.py)
        root.attributes[ATTENTION_MMA] = ir.StringAttr.get(g.config.mma)
    members = set(role_ops) | {root}
    block = root.block
    for m in g.ops:
        for op in tagged.get(tag_of(g.id, m), []):
            if op.block != block and op.name == "linalg.fill":
                # this kernel's copy of a fill CSE shared between kernels, left among another
                # kernel's ops: it writes a buffer only this kernel's (absorbed) ops read
                op.move_before(root)
            if op.block != block:
                raise CompilerInternalError(stage, f"kernel {g.id}: %{m} is not in its root's block")
            if op not in members:
                op.attributes[ABSORBED] = ir.UnitAttr.get()
                members.add(op)
    # the kernel's buffers, and the copies bufferization put into them (a fill shared by both
    # contractions), belong to the template; a copy that writes a buffer used elsewhere (the
    # result) does not
    blocks = [block]
    parent = root.parent
    while parent is not None and parent.name != "builtin.module":
        blocks.append(parent.operation.block if hasattr(parent, "operation") else parent.block)
        if parent.name == "func.func":
            break
        parent = parent.parent
    changed = True
    while changed:
        changed = False
        for op in [o.operation for b in blocks for o in b.operations]:
            if op in members:
                continue
            if op.name == "memref.alloc" and _only_used_by(op.results[0], members):
                op.attributes[ABSORBED] = ir.UnitAttr.get()
                members.add(op)
                changed = True
            elif op.name == "memref.copy" and _only_used_by(op.operands[1], members | {op}):
                # it writes a buffer only the template reads (the scores' init from a fill that
                # both contractions share): what the copy would write is never read from memory
                op.attributes[ABSORBED] = ir.UnitAttr.get()
                members.add(op)
                changed = True

