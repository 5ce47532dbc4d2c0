"""Lower the tiled, bufferized module to the emitter's closed op set (stage `gpu`).

gpu: each kernel's forall is wrapped in an `scf.execute_region` so that `map_forall_to_blocks
generate_gpu_launch` sees exactly one forall and gives it its own gpu.launch; nested foralls
map to threads; kernels with no loop to split (full reductions to a scalar) run in a
one-iteration forall on one thread. cpu: foralls become scf.parallel loops (the emitter's
prange), float contractions stay linalg ops the emitter hands to BLAS
(cpu_library_calls.py). Both end with linalg lowered to loops and affine to arith.
"""
from __future__ import annotations

from ..errors import CompilerInternalError
from ..mlir import ir, scf
from ..plan.planner import FusionPlan, Group
from .cpu_library_calls import hoist_whole_contractions, loops_script, mark_library_calls
from .script import ANY, GROUP, TAG, Step, apply_script, i64, run_passes, script_text, tag_of

# Run one pass at a time: as a single nested pipeline this sequence has been seen to leave
# a store whose operand does not dominate it (nll at B=2, C=8); pass by pass it does not.
GPU_CLEANUP = ("func.func(convert-linalg-to-loops)", "canonicalize", "cse", "lower-affine", "canonicalize", "cse")
CPU_CLEANUP = ("func.func(scf-forall-to-parallel)",) + GPU_CLEANUP


def to_gpu(module: ir.Module, plans: dict[str, FusionPlan]) -> None:
    """Give each kernel its own gpu.launch, map its foralls to blocks and threads, lower the rest
    to loops. Stage `gpu`: afterwards only func, gpu, scf, memref, arith and math remain."""
    with module.context, ir.Location.unknown():
        steps = []
        for f in module.body.operations:
            plan = plans[ir.StringAttr(f.attributes["sym_name"]).value]
            body = f.regions[0].blocks[0]
            for g in plan.groups:
                if g.serial:
                    _wrap_serial(body, g, gpu=True)
            for op in list(body.operations):
                if op.operation.name == "scf.forall" and GROUP in op.attributes:
                    gid = ir.IntegerAttr(op.attributes[GROUP]).value
                    _wrap_in_region(op, gid)
            for g in plan.groups:
                threads = list(reversed(g.threads())) if g.mapped else [1]
                threads += [1] * (3 - len(threads))
                steps.append(Step(f'%e{g.id} = transform.structured.match ops{{["scf.execute_region"]}} '
                                  f'attributes {{"{GROUP}" = {g.id} : i64}} in %root : ({ANY}) -> {ANY}'))
                steps.append(Step(f"%l{g.id} = transform.gpu.map_forall_to_blocks %e{g.id} generate_gpu_launch : "
                                  f"({ANY}) -> {ANY}"))
                steps.append(Step(f"%m{g.id} = transform.gpu.map_nested_forall_to_threads %l{g.id} block_dims = "
                                  f"{threads} : ({ANY}) -> {ANY}"))
            if len(module.body.operations) > 1:
                raise CompilerInternalError("gpu", "one chain per module is expected at the gpu stage")
        apply_script(module, script_text(steps), "gpu")
        run_passes(module, GPU_CLEANUP, "gpu")


def to_cpu(module: ir.Module) -> None:
    """Foralls become scf.parallel loops (the emitter's prange); float contractions stay linalg
    ops that the emitter hands to BLAS (transforms/cpu_library_calls.py); the rest loops."""
    with module.context:
        run_passes(module, CPU_CLEANUP[:1], "cpu")
        with ir.Location.unknown():
            hoist_whole_contractions(module)
            mark_library_calls(module)
            apply_script(module, loops_script(), "cpu")
        run_passes(module, GPU_CLEANUP[1:], "cpu")


def _wrap_in_region(op, gid: int) -> None:
    with ir.InsertionPoint(op), op.location:
        region = scf.ExecuteRegionOp([])
        region.attributes[GROUP] = i64(gid)
        block = region.regions[0].blocks.append()
        with ir.InsertionPoint(block):
            end = scf.YieldOp([])
        op.move_before(end)


_STAY_ON_HOST = ("memref.alloc", "memref.alloca", "memref.subview", "memref.expand_shape", "memref.collapse_shape",
                 "memref.cast", "memref.reinterpret_cast", "arith.constant", "scf.forall", "scf.execute_region")


def _wrap_serial(body, g: Group, gpu: bool) -> None:
    """Move a serial kernel's (bufferized) ops into a one-iteration forall mapped to one block.

    Everything between the kernel's first and last op moves with it (bufferization puts copies
    of its buffers there), except allocations and views, which stay on the host before the
    kernel (later kernels may read the same view), and other kernels' loops, which do not
    depend on this kernel's partial results."""
    tags = {tag_of(g.id, m) for m in g.ops}
    ops = list(body.operations)
    idx = [i for i, op in enumerate(ops) if TAG in op.attributes and ir.IntegerAttr(op.attributes[TAG]).value in tags]
    if not idx:
        raise CompilerInternalError("gpu", f"kernel {g.id}: its ops were not found after bufferization")
    moving = [op for op in ops[idx[0]: idx[-1] + 1] if op.operation.name not in _STAY_ON_HOST]
    last = ops[idx[-1]]
    with ir.InsertionPoint(last), last.location:
        mapping = ir.ArrayAttr.get([ir.Attribute.parse("#gpu.block<x>")])
        loop = scf.ForallOp([0], [1], [1], mapping=mapping)
        loop.attributes[GROUP] = i64(g.id)
        block = loop.regions[0].blocks[0]
        with ir.InsertionPoint(block):
            end = scf.InParallelOp()
    for op in moving:
        op.move_before(end)
