"""Lower the tiled, bufferized module to the emitter's closed op set (stage `gpu`).

gpu: each kernel's forall becomes its own gpu.launch (wrapped in `scf.execute_region` first),
nested foralls map to threads, a kernel with no loop to split runs as a one-iteration forall.
cpu: foralls become scf.parallel loops, float contractions stay BLAS calls (cpu_library_calls.py).
Both end with linalg lowered to loops and affine to arith. See docs/ARCHITECTURE.md, "GPU kernels: how a plan becomes CUDA".
"""
from __future__ import annotations

from ..errors import CompilerInternalError
from ..mlir import arith, ir, memref, scf
from ..plan.kernels import FusionPlan, Kernel
from ..plan.templates import TEMPLATES, template
from .cpu_library_calls import (fold_transposed_operands, hoist_whole_contractions, linalg_ops,
                                loops_script, mark_library_calls)
from .script import ANY, MEMREF_VIEWS, Step, apply_script, i64, run_passes, script_text, tag_of
from ..plan.analysis import OpInfo
from ..marks import GROUP, TAG, THREADS_OF, TO_LOOPS


def scan_rows(op: OpInfo) -> int:
    """The rows of a scan: its output's elements over the extent of its axis."""
    return op.points // max(1, op.loops[op.scan_axis])


def scan_blocks(op: OpInfo, threads: int) -> int:
    """A scan's blocks on the gpu (emit/scan.py): one per row along the contiguous last axis
    (the row's threads scan it together); otherwise a thread per row, the rows' threads along
    the contiguous axis, so each step's loads are consecutive."""
    rows = scan_rows(op)
    return rows if op.scan_axis == len(op.loops) - 2 else -(-rows // threads)

# Run one pass at a time: as a single nested pipeline this sequence has been seen to leave
# a store whose operand does not dominate it (nll at B=2, C=8); pass by pass it does not.
GPU_CLEANUP = ("func.func(convert-linalg-to-loops)", "canonicalize", "cse", "lower-affine", "canonicalize", "cse")
CPU_CLEANUP = ("func.func(scf-forall-to-parallel)",) + GPU_CLEANUP


def to_gpu(module: ir.Module, plans: dict[str, FusionPlan]) -> None:
    """Give each kernel its own gpu.launch, map its foralls to blocks and threads, lower the rest
    to loops. Stage `gpu`: afterwards only func, gpu, scf, memref, arith and math remain."""
    with module.context, ir.Location.unknown():
        steps = []
        # a chain's constant tensors are memref.globals beside its function (a chain that returns
        # a literal: `return 3`); only the function has kernels
        funcs = [f for f in module.body.operations if f.operation.name == "func.func"]
        for f in funcs:
            plan = plans[ir.StringAttr(f.attributes["sym_name"]).value]
            body = f.regions[0].blocks[0]
            for g in plan.kernels:
                grid = template(g.config).stage("grid")
                if grid is not None:                # not tiled by MLIR: its ops whole, in the template's grid
                    _wrap_serial(body, g, gpu=True, blocks=grid(plan, g))
                elif not any(g.block_tiles):        # one block: serial, or a single-row row kernel
                    _wrap_serial(body, g, gpu=True)
            for op in list(body.operations):
                if op.operation.name == "scf.forall" and GROUP in op.attributes:
                    gid = ir.IntegerAttr(op.attributes[GROUP]).value
                    _wrap_in_region(op, gid)
            grids = [_static_grid(op) for op in body.operations if op.operation.name == "scf.execute_region"]
            for g in plan.kernels:
                threads = block_dims(g)
                steps.append(Step(f'%e{g.id} = transform.structured.match ops{{["scf.execute_region"]}} '
                                  f'attributes {{"{GROUP}" = {g.id} : i64}} in %root : ({ANY}) -> {ANY}'))
                steps.append(Step(f"%l{g.id} = transform.gpu.map_forall_to_blocks %e{g.id} generate_gpu_launch : "
                                  f"({ANY}) -> {ANY}"))
                steps.append(Step(f"%m{g.id} = transform.gpu.map_nested_forall_to_threads %l{g.id} block_dims = "
                                  f"{threads} : ({ANY}) -> {ANY}"))
            if len(funcs) > 1:
                raise CompilerInternalError("gpu", "one chain per module is expected at the gpu stage")
        apply_script(module, script_text(steps), "gpu")
        _run_time_grids(module, grids)
        if any(template(g.config).emit[0] for plan in plans.values() for g in plan.kernels):
            _mark_templates(module, plans, "gpu")
            _lower_all_but_emitter_ops(module)
            run_passes(module, GPU_CLEANUP[1:], "gpu")
        else:
            run_passes(module, GPU_CLEANUP, "gpu")


def _mark_templates(module: ir.Module, plans: dict[str, FusionPlan], target: str) -> None:
    """Each template's marking transform (plan/templates.py), in the registry's order: it marks
    the ops of its kernels that its emitter writes or absorbs."""
    for t in TEMPLATES.values():
        mark = t.stage("mark")
        if mark is not None:
            mark(module, plans, target)


def scan_grid(plan: FusionPlan, g: Kernel) -> tuple[int, int]:
    """A scan kernel's grid: the scan whole, one block per row (or a thread per row: scan_blocks)."""
    return scan_blocks(plan.info.op(g.root), g.config.threads), 1


def _static_grid(region) -> list:
    """Give a kernel's block forall static trip counts, returning the run-time ones it had.

    With an extent taken at run time (--dynamic) the block loop's trip counts are values, and
    map_forall_to_blocks needs numbers. A trip count only sizes the grid: the body indexes with
    the block id and clamps its tile with the extent itself (affine.min), never with the count.
    So each run-time count is replaced by a stand-in constant, mapped, and put back as the
    gpu.launch's grid size (`_run_time_grids`), which the host computes before the launch."""
    loop = region.regions[0].blocks[0].operations[0].operation
    if loop.name != "scf.forall":
        return []
    _guard_thread_loops(loop)
    mapping = [str(m) for m in ir.ArrayAttr(loop.attributes["mapping"])]
    found = []
    for pos, k in _run_time_counts(loop):
        if mapping[pos] not in _GRID_AXES:
            raise CompilerInternalError("gpu", f"a run-time trip count on a loop mapped to {mapping[pos]}")
        found.append((_GRID_AXES[mapping[pos]], loop.operands[k]))
        with ir.InsertionPoint(region), loop.location:
            loop.operands[k] = arith.ConstantOp(ir.IndexType.get(), _STAND_IN).result
    # a static count above its axis's limit (which map_forall_to_blocks refuses) the same way:
    # the launch gets it back and the emitter walks that axis with a grid-stride loop
    static = list(ir.DenseI64ArrayAttr(loop.attributes["staticUpperBound"]))
    over = [(pos, n) for pos, n in enumerate(static)
            if n != ir.ShapedType.get_dynamic_size() and mapping[pos] in _GRID_AXES
            and n > _GRID_LIMITS[_GRID_AXES[mapping[pos]]]]
    for pos, n in over:
        with ir.InsertionPoint(region), loop.location:
            found.append((_GRID_AXES[mapping[pos]], arith.ConstantOp(ir.IndexType.get(), n).result))
        static[pos] = _STAND_IN
    if over:
        loop.attributes["staticUpperBound"] = ir.DenseI64ArrayAttr.get(static)
    return found


def _run_time_counts(loop) -> list[tuple[int, int]]:
    """(dim, operand index) of each of a forall's upper bounds that is a value, not a number."""
    static = list(ir.DenseI64ArrayAttr(loop.attributes["staticUpperBound"]))
    k = list(ir.DenseI32ArrayAttr(loop.attributes["operandSegmentSizes"]))[0]     # after the lower bounds
    out = []
    for pos, n in enumerate(static):
        if n == ir.ShapedType.get_dynamic_size():
            out.append((pos, k))
            k += 1
    return out


_STAND_IN = 2                                # any count above 1: MLIR maps the loop, the grid is reset after
_GRID_AXES = {"#gpu.block<x>": 0, "#gpu.block<y>": 1, "#gpu.block<z>": 2}
_GRID_LIMITS = (2**31 - 1, 65535, 65535)     # CUDA's gridDim limits; emit/ids.py: GRID_LIMITS


def _guard_thread_loops(block_loop) -> None:
    """Give each thread forall with a run-time trip count its tile's count and a guard.

    A block's tile at the edge of a run-time extent is clamped (`affine.min(tile, M - i*tile)`),
    and its thread loop runs that many iterations; map_nested_forall_to_threads needs a number.
    The loop runs the tile's count (the affine.min's constant term, the most it can be) and each
    iteration past the clamped count does nothing."""
    loops = []
    block_loop.walk(lambda op: (loops.append(op) if op.name == "scf.forall" and op != block_loop else None,
                                ir.WalkResult.ADVANCE)[1])
    for loop in loops:
        counts = _run_time_counts(loop)
        if not counts:
            continue
        body = loop.regions[0].blocks[0]
        ivs, ops = list(body.arguments), list(body.operations)
        conds = []
        with loop.location:
            for pos, k in counts:
                count = loop.operands[k]
                with ir.InsertionPoint(loop):
                    loop.operands[k] = arith.ConstantOp(ir.IndexType.get(), _most(count)).result
                with ir.InsertionPoint.at_block_begin(body):
                    conds.append(arith.CmpIOp(arith.CmpIPredicate.ult, ivs[pos], count).result)
            with ir.InsertionPoint(ops[-1]):
                cond = conds[0]
                for c in conds[1:]:
                    cond = arith.AndIOp(cond, c).result
                guard = scf.IfOp(cond)
                with ir.InsertionPoint(guard.then_block):
                    end = scf.YieldOp([])
            for op in ops[:-1]:
                op.move_before(end)


def _most(count) -> int:
    """The largest value a thread loop's run-time trip count takes: the constant term of the
    affine.min that clamps its tile (tile_using_forall writes min(tile, extent - offset))."""
    owner = count.owner
    if isinstance(owner, ir.Block) or owner.name != "affine.min":
        raise CompilerInternalError("gpu", "a thread loop's run-time trip count is not a clamped tile")
    terms = [e.value for e in ir.AffineMapAttr(owner.attributes["map"]).value.results
             if isinstance(e, ir.AffineConstantExpr)]
    if not terms:
        raise CompilerInternalError("gpu", "a thread loop's run-time trip count has no largest value")
    return min(terms)


def _run_time_grids(module: ir.Module, grids: list[list]) -> None:
    """Put each kernel's run-time trip counts back as its gpu.launch's grid sizes (`_static_grid`)."""
    if not any(grids):
        return
    launches = []
    module.operation.walk(lambda op: (launches.append(op.opview) if op.name == "gpu.launch" else None,
                                      ir.WalkResult.ADVANCE)[1])
    if len(launches) != len(grids):
        raise CompilerInternalError("gpu", f"{len(grids)} kernels became {len(launches)} gpu.launch ops")
    for launch, counts in zip(launches, grids):
        first = list(ir.DenseI32ArrayAttr(launch.attributes["operandSegmentSizes"]))[0]
        for axis, value in counts:
            launch.operands[first + axis] = value


def block_dims(g: Kernel) -> list[int]:
    """A kernel's threads per block as (x, y, z): the innermost mapped loop is x; a row
    kernel's row threads are x and its rows y; a contraction kernel's threads are its register
    tiles, x along the output's contiguous side (plan/gemm.py) (plan/templates.py: block_dims)."""
    dims = g.config.block_dims(g.threads(), g.mapped)
    if len(dims) > 3:
        raise CompilerInternalError("gpu", f"kernel {g.id} needs {len(dims)} thread dims")
    return dims + [1] * (3 - len(dims))


def _lower_all_but_emitter_ops(module: ir.Module) -> None:
    """linalg to loops, except what the emitter writes itself: the block-wide combines of row
    kernels (split_rows.py) and the ops of contraction kernels (gemm_kernels.py): what each
    template owns (plan/templates.py)."""
    owned = tuple(m for t in TEMPLATES.values() for m in t.owns)
    for op in linalg_ops(module):
        if not any(m in op.attributes for m in owned):
            op.attributes[TO_LOOPS] = ir.UnitAttr.get()
    apply_script(module, loops_script(), "gpu")


def to_cpu(module: ir.Module, plans: dict[str, FusionPlan] | None = None) -> None:
    """Foralls become scf.parallel loops (the emitter's prange); float contractions stay linalg
    ops that the emitter hands to BLAS (transforms/cpu_library_calls.py); attention kernels stay
    linalg ops for the emitter's template (attention_kernels.py); the rest loops."""
    with module.context:
        run_passes(module, CPU_CLEANUP[:1], "cpu")
        if plans:
            _mark_templates(module, plans, "cpu")
        with ir.Location.unknown():
            fold_transposed_operands(module)
            hoist_whole_contractions(module, None if not plans else
                                     {tag_of(g.id, m) for plan in plans.values() for g in plan.kernels
                                      for m in g.whole_calls})
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


def _threads_of(op) -> int | None:
    """The row kernel whose thread loop `op` is (tile_and_fuse.py annotates them), if any."""
    return ir.IntegerAttr(op.attributes[THREADS_OF]).value if THREADS_OF in op.attributes else None


def _block_buffers(ops, moving) -> list:
    """Workgroup-memory buffers (and their views) the moving ops use: they belong inside the
    kernel, allocated once per block."""
    inside = {id(op.operation) for op in moving}
    used = set()
    for op in moving:
        op.operation.walk(lambda o: (used.update(v for v in o.operands), ir.WalkResult.ADVANCE)[1])
    out = []
    for op in ops:
        op = op.operation
        if id(op) in inside or not op.results:
            continue
        shared = op.name == "memref.alloc" and "workgroup" in str(ir.MemRefType(op.results[0].type).memory_space)
        view_of_shared = op.name in MEMREF_VIEWS and any(v.owner.operation in out for v in op.operands
                                                  if not isinstance(v.owner, ir.Block))
        if (shared or view_of_shared) and any(r in used for r in op.results):
            out.append(op)
    return out


_STAY_ON_HOST = ("memref.alloc", "memref.alloca") + MEMREF_VIEWS + ("arith.constant", "scf.forall", "scf.execute_region")


def _batch(ops, g: Kernel, planned: int):
    """An attention kernel's batch (the grid's y): the product of its output's leading dims (all
    but queries and values), read at run time when one is taken at run time (--dynamic)."""
    root = [op for op in ops if TAG in op.attributes and ir.IntegerAttr(op.attributes[TAG]).value == tag_of(g.id, g.root)]
    if len(root) != 1:
        raise CompilerInternalError("gpu", f"attention kernel {g.id}: its root was not found after bufferization")
    out = root[0].operation.operands[len(root[0].operation.operands) - 1]
    t = ir.MemRefType(out.type)
    lead = range(t.rank - 2)
    if not any(t.is_dynamic_dim(d) for d in lead):
        return planned
    index = ir.IndexType.get()
    total = arith.ConstantOp(index, 1).result
    for d in lead:
        total = arith.MulIOp(total, memref.DimOp(out, arith.ConstantOp(index, d).result).result).result
    return total


def _wrap_serial(body, g: Kernel, gpu: bool, blocks: tuple[int, int] | None = None) -> None:
    """Move a serial kernel's (bufferized) ops into a one-iteration forall mapped to one block.

    Everything between the kernel's first and last op moves with it (bufferization puts copies
    of its buffers there), except allocations and views, which stay on the host before the
    kernel (later kernels may read the same view), and other kernels' loops, which do not
    depend on this kernel's partial results."""
    tags = {tag_of(g.id, m) for m in g.ops}
    ops = list(body.operations)
    idx = [i for i, op in enumerate(ops) if TAG in op.attributes and ir.IntegerAttr(op.attributes[TAG]).value in tags
           or _threads_of(op) == g.id]
    if not idx:
        raise CompilerInternalError("gpu", f"kernel {g.id}: its ops were not found after bufferization")
    moving = [op for op in ops[idx[0]: idx[-1] + 1]
              if op.operation.name not in _STAY_ON_HOST or _threads_of(op) == g.id]
    moving = _block_buffers(ops, moving) + moving
    last = ops[idx[-1]]
    with ir.InsertionPoint(last), last.location:
        if blocks is None:
            mapping = ir.ArrayAttr.get([ir.Attribute.parse("#gpu.block<x>")])
            loop = scf.ForallOp([0], [1], [1], mapping=mapping)
        else:             # a grid the kernel's template indexes itself (attention: query blocks x batch)
            mapping = ir.ArrayAttr.get([ir.Attribute.parse("#gpu.block<y>"), ir.Attribute.parse("#gpu.block<x>")])
            loop = scf.ForallOp([0, 0], [_batch(moving, g, blocks[1]), blocks[0]], [1, 1], mapping=mapping)
        loop.attributes[GROUP] = i64(g.id)
        block = loop.regions[0].blocks[0]
        with ir.InsertionPoint(block):
            end = scf.InParallelOp()
    for op in moving:
        op.move_before(end)
