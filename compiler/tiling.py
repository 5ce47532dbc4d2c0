"""Tile and fuse a graph-stage module by its FusionPlan, then lower to the emitter's closed set.

The transform script is data: a list of `Step`s built from the plan and printed into one
transform-dialect named sequence, applied by MLIR's interpreter. Per kernel: tile the root
with `tile_using_forall` (GPU blocks), fuse its producers into the forall, consumers first,
then (gpu) tile again to threads and fuse the producers there too. After one-shot
bufferization each kernel's forall is wrapped in an `scf.execute_region` so that
`map_forall_to_blocks generate_gpu_launch` sees exactly one forall, and gets its own launch.
Kernels with no loop to split (full reductions to a scalar) run on one thread.
"""
from __future__ import annotations

from dataclasses import dataclass

from .analysis import ID_ATTR, payload_ops
from .errors import CompilerInternalError
from .mlir import PassManager, interpreter, ir, scf
from .plan import FusionPlan, Group
from .transforms.cpu_library_calls import hoist_whole_contractions, loops_script, mark_library_calls
from .transforms.pad_to_generic import pad_to_generic

TAG = "fusec.tag"
GROUP = "fusec.group"
# Run one pass at a time: as a single nested pipeline this sequence has been seen to leave
# a store whose operand does not dominate it (nll at B=2, C=8); pass by pass it does not.
GPU_CLEANUP = ("func.func(convert-linalg-to-loops)", "canonicalize", "cse", "lower-affine", "canonicalize", "cse")
CPU_CLEANUP = ("func.func(scf-forall-to-parallel)",) + GPU_CLEANUP
ANY = "!transform.any_op"


@dataclass(frozen=True)
class Step:
    """One transform op: `results = op(args) attrs`, printed as MLIR text."""
    text: str


def _tag(group: int, op: int) -> int:
    return group * 10000 + op


def _i64(v: int) -> ir.IntegerAttr:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v)


def tag_groups(func_op, plan: FusionPlan) -> None:
    """Tag each op with (group, op); give every group its own copy of a shared fill or pad."""
    ops = {ir.IntegerAttr(op.attributes[ID_ATTR]).value: op for op in payload_ops(func_op)}
    for g in plan.groups:
        for m in g.ops:
            op = ops[m]
            if TAG in op.attributes:          # a fill/pad already claimed by another group: copy it
                clone = op.clone(ip=ir.InsertionPoint(op))
                clone.attributes[TAG] = _i64(_tag(g.id, m))
                members = {ops[k] for k in g.ops if k != m}
                for use in list(op.results[0].uses):
                    if use.owner in members:
                        use.owner.operands[use.operand_number] = clone.results[0]
            else:
                op.attributes[TAG] = _i64(_tag(g.id, m))


def transform_script(plan: FusionPlan) -> list[Step]:
    """The tile-and-fuse script for a plan, as data."""
    steps: list[Step] = []
    gpu = plan.target == "gpu"
    for g in plan.groups:
        if g.serial:
            continue
        k = g.id
        steps.append(_match(f"r{k}", _tag(k, g.root)))
        mapping = _mapping(g, "block") if gpu else ""
        steps.append(Step(f"%t{k}, %f{k}_0 = transform.structured.tile_using_forall %r{k} tile_sizes "
                          f"{list(g.block_tiles)}{mapping} : ({ANY}) -> ({ANY}, {ANY})"))
        producers = [m for m in sorted(g.ops, reverse=True) if m != g.root]
        loop = f"f{k}_0"
        for n, p in enumerate(producers):
            steps.append(_match(f"p{k}_{n}", _tag(k, p)))
            steps.append(Step(f"%q{k}_{n}, %f{k}_{n + 1} = transform.structured.fuse_into_containing_op "
                              f"%p{k}_{n} into %{loop} : ({ANY}, {ANY}) -> ({ANY}, {ANY})"))
            loop = f"f{k}_{n + 1}"
        steps.append(Step(f"%g{k} = transform.param.constant {k} : i64 -> !transform.param<i64>"))
        steps.append(Step(f'transform.annotate %{loop} "{GROUP}" = %g{k} : {ANY}, !transform.param<i64>'))
        if gpu and any(g.thread_tiles):
            steps.append(Step(f"%tt{k}, %h{k}_0 = transform.structured.tile_using_forall %t{k} tile_sizes "
                              f"{list(g.thread_tiles)}{_mapping(g, 'thread')} : ({ANY}) -> ({ANY}, {ANY})"))
            loop = f"h{k}_0"
            for n in range(len(producers)):
                steps.append(Step(f"%qq{k}_{n}, %h{k}_{n + 1} = transform.structured.fuse_into_containing_op "
                                  f"%q{k}_{n} into %{loop} : ({ANY}, {ANY}) -> ({ANY}, {ANY})"))
                loop = f"h{k}_{n + 1}"
    steps.append(Step(f'%fn = transform.structured.match ops{{["func.func"]}} in %root : ({ANY}) -> {ANY}'))
    steps.append(Step(f"transform.apply_patterns to %fn {{ transform.apply_patterns.canonicalization }} : {ANY}"))
    steps.append(Step(f"transform.apply_cse to %fn : {ANY}"))
    steps.append(Step(f"%buf = transform.bufferization.one_shot_bufferize %root {{bufferize_function_boundaries = "
                      f"true, function_boundary_type_conversion = 1 : i32}} : ({ANY}) -> {ANY}"))
    return steps


def _match(name: str, tag: int) -> Step:
    return Step(f'%{name} = transform.structured.match attributes {{"{TAG}" = {tag} : i64}} in %root '
                f': ({ANY}) -> {ANY}')


def _mapping(g: Group, level: str) -> str:
    dims = "zyx"[3 - len(g.mapped):]
    return " (mapping = [" + ", ".join(f"#gpu.{level}<{d}>" for d in dims) + "])"


def script_text(steps: list[Step]) -> str:
    body = "\n".join("    " + s.text for s in steps)
    return ("module attributes {transform.with_named_sequence} {\n"
            f"  transform.named_sequence @__transform_main(%root: {ANY} {{transform.consumed}}) {{\n"
            f"{body}\n    transform.yield\n  }}\n}}\n")


def _apply(module: ir.Module, text: str, stage: str) -> None:
    script = ir.Module.parse(text, context=module.context)
    try:
        interpreter.apply_named_sequence(module.operation, script.body.operations[0], script)
    except Exception as e:   # the interpreter reports failures as ValueError with MLIR diagnostics
        raise CompilerInternalError(stage, f"transform script failed: {e}") from None


def tile_and_fuse(module: ir.Module, plans: dict[str, FusionPlan]) -> None:
    """Apply every chain's plan to its func (tensor level), then bufferize. Stage `tiled`."""
    with module.context, ir.Location.unknown():
        pad_to_generic(module)
        steps = []
        for f in module.body.operations:
            plan = plans[ir.StringAttr(f.attributes["sym_name"]).value]
            tag_groups(f, plan)
            steps += transform_script(plan)[:-4]
        steps += transform_script(FusionPlan("", "cpu", True, (), (), None))  # the shared tail
        _apply(module, script_text(steps), "tiled")


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
        _apply(module, script_text(steps), "gpu")
        _run_passes(module, GPU_CLEANUP, "gpu")


def to_cpu(module: ir.Module) -> None:
    """Foralls become scf.parallel loops (the emitter's prange); float contractions stay linalg
    ops that the emitter hands to BLAS (transforms/cpu_library_calls.py); the rest loops."""
    with module.context:
        _run_passes(module, CPU_CLEANUP[:1], "cpu")
        with ir.Location.unknown():
            hoist_whole_contractions(module)
            mark_library_calls(module)
            _apply(module, loops_script(), "cpu")
        _run_passes(module, GPU_CLEANUP[1:], "cpu")


def _run_passes(module: ir.Module, passes: tuple[str, ...], stage: str) -> None:
    for p in passes:
        try:
            PassManager.parse(f"builtin.module({p})").run(module.operation)
        except Exception as e:
            raise CompilerInternalError(stage, f"pass {p} failed: {e}") from None


def _wrap_in_region(op, gid: int) -> None:
    with ir.InsertionPoint(op), op.location:
        region = scf.ExecuteRegionOp([])
        region.attributes[GROUP] = _i64(gid)
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
    tags = {_tag(g.id, m) for m in g.ops}
    ops = list(body.operations)
    idx = [i for i, op in enumerate(ops) if TAG in op.attributes and ir.IntegerAttr(op.attributes[TAG]).value in tags]
    if not idx:
        raise CompilerInternalError("gpu", f"kernel {g.id}: its ops were not found after bufferization")
    moving = [op for op in ops[idx[0]: idx[-1] + 1] if op.operation.name not in _STAY_ON_HOST]
    last = ops[idx[-1]]
    with ir.InsertionPoint(last), last.location:
        mapping = ir.ArrayAttr.get([ir.Attribute.parse("#gpu.block<x>")])
        loop = scf.ForallOp([0], [1], [1], mapping=mapping)
        loop.attributes[GROUP] = _i64(g.id)
        block = loop.regions[0].blocks[0]
        with ir.InsertionPoint(block):
            end = scf.InParallelOp()
    for op in moving:
        op.move_before(end)
