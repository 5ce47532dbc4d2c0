"""A row kernel's phase loops, unrolled with their loads first and a row's elements kept in
registers across phases.

After split-rows (transforms/split_rows.py) each phase of a row kernel is an `scf.for` over the
thread's J = N/T elements of its row (element j*T + t), whose body loads them, computes and
accumulates into the thread's partial (workgroup memory) or stores the result. Written as a
Python loop, NVVM keeps one global load in flight per thread: each load is issued after the
previous element's combine (and, in the output phase, after its store: Numba's kernel arrays are
not `noalias`, so a load may not pass a store). A CUDA engineer writes instead:

- the phase unrolled (J is a small constant), every global load of the phase issued first, into
  locals, then the compute of each element in order: J loads in flight per thread;
- the thread's elements of a row loaded once, in the first phase that reads them, and kept in
  those locals for the later phases (a [16384, 768] layernorm: 3 elements per thread per input
  read from memory once instead of once per phase).

Both are safe only for what they move: a load goes first, or is reused, when its array is a
kernel parameter (global memory) that nothing in the launch writes (no store, copy, or other
writer reaches the same buffer through a view), so no store of the phase or of the phases between
can change what it reads; its index depends only on values defined before the loop, constants
and the loop counter (a literal once unrolled). A reused element is matched by its full access
expression (array and index text): the kernel's names are assigned once (SSA), so equal text is
the same element. Reuse stays within the block (MLIR region) the first phase ran in. A phase
with more than ROW_UNROLL (plan/rows.py: ROW_KEPT, which the row time model reads) elements
per thread stays a loop.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .values import is_int, is_memref
from ..marks import BLOCK_REDUCE
from ..mlir import ir
from ..plan.rows import ROW_KEPT as ROW_UNROLL      # the row model prices the same limit
from .siblings import MEMREF_VIEW_OPS, defined_in, nested_ops, operation, view_root

_READS = ("memref.load", "memref.dim", "memref.dealloc") + MEMREF_VIEW_OPS


@dataclass
class RowLaunch:
    """What the phase loops of one row-kernel launch may move: its read-only global buffers
    (root memref values), and the row elements loaded so far: (block, access text) -> local."""
    launch: "ir.Operation"
    read_only: set
    loaded: list = field(default_factory=list)      # (ir.Block, access text, local name)

    def cached(self, block, access: str) -> str | None:
        return next((n for b, a, n in self.loaded if a == access and b == block), None)


def row_launch(launch) -> RowLaunch | None:
    """The launch's RowLaunch when it is a row kernel (it holds a block-wide combine), else None."""
    ops = list(nested_ops(launch))
    if not any(o.name == "linalg.generic" and BLOCK_REDUCE in o.attributes for o in ops):
        return None
    written = set()
    for o in ops:
        if o.name in _READS:
            continue
        targets = [o.operands[1]] if o.name == "memref.store" else [v for v in o.operands if is_memref(v)]
        written.update(view_root(v) for v in targets)
    read_only = set()
    for o in ops:
        if o.name == "memref.load":
            r = view_root(o.operands[0])
            if r not in written and not defined_in(r, [launch]):
                read_only.add(r)
    return RowLaunch(launch, read_only)


def enclosing_launch(op):
    p = op.parent
    while p is not None and p.name != "gpu.launch":
        p = p.parent
    return p


def trip_count(body, op) -> int | None:
    lb, ub, step = (body.val(v) for v in op.operands[:3])
    if not (is_int(lb) and is_int(ub) and is_int(step)) or int(step) <= 0:
        return None
    return max(0, -(-(int(ub) - int(lb)) // int(step)))


def phase_loop(body, op, rows: RowLaunch) -> bool:
    """Whether `op` (an scf.for in a row kernel) is a phase loop this module unrolls."""
    block = op.regions[0].blocks[0]
    if len(block.arguments) != 1 or len(op.results):
        return False
    n = trip_count(body, op)
    if n is None or not 2 <= n <= ROW_UNROLL:
        return False
    inner = [o.operation for o in block.operations]
    if any(len(o.regions) for o in inner):
        return False
    return any(o.name == "memref.load" and view_root(o.operands[0]) in rows.read_only for o in inner)


def unrolled_phase(body, op, rows: RowLaunch) -> None:
    """Emit the phase loop `op` unrolled: per element, its views, index arithmetic and the loads
    of read-only global buffers first (reused when an earlier phase loaded the element), then per
    element the rest of its body in order."""
    lb, step = int(body.val(op.operands[0])), int(body.val(op.operands[2]))
    n = trip_count(body, op)
    block = op.regions[0].blocks[0]
    iv = block.arguments[0]
    inner = [o.operation for o in block.operations][:-1]          # the scf.yield dropped
    here = op.block
    ctx, names = body.ctx, body.names
    body.w(f"# {n} elements per thread, unrolled: the row's loads first (emit/row_phases.py)")
    rest, envs = [], []
    for k in range(n):
        ctx.expr[iv] = str(lb + k * step)
        early: set = {iv}
        later = []
        for o in inner:
            if _early(o, early, block, rows):
                _emit_early(body, o, k, here, rows)
                early.update(o.results)
            else:
                later.append(o)
        envs.append({v: (ctx.expr.get(v), ctx.views.get(v)) for v in early})
        rest.append(later)
    for k in range(n):
        for v, (e, view) in envs[k].items():
            if e is not None:
                ctx.expr[v] = e
            if view is not None:
                ctx.views[v] = view
        for o in rest[k]:
            body.op(o)
    ctx.expr.pop(iv, None)


def _ready(v, early: set, block) -> bool:
    """Defined before the loop, or early in this element."""
    return v in early or not _in_block(v, block)


def _in_block(v, block) -> bool:
    owner = v.owner
    if isinstance(owner, ir.Block):
        return owner == block
    return operation(owner).block == block


def _early(o, early: set, block, rows: RowLaunch) -> bool:
    if not all(_ready(v, early, block) for v in o.operands):
        return False
    if o.name == "arith.constant" or o.name in MEMREF_VIEW_OPS:
        return True
    if o.name == "memref.load":
        return view_root(o.operands[0]) in rows.read_only
    return o.name.startswith("arith.") and len(o.results) == 1 and str(o.results[0].type) == "index"


def _emit_early(body, o, k: int, here, rows: RowLaunch) -> None:
    ctx = body.ctx
    if o.name == "arith.constant" or o.name in MEMREF_VIEW_OPS:
        body.op(o)
        return
    result = o.results[0]
    if o.name == "memref.load":
        v = body.view(o.operands[0])
        access = v.at([body.val(i) for i in o.operands[1:]])
        if v.array.storage != v.array.elem.compute:
            access = f"np.{v.array.elem.compute}({access})"
        name = rows.cached(here, access)
        if name is None:
            name = body.names.fresh(f"{body.names(result)}_e{k}")
            body.w(f"{name} = {access}")
            rows.loaded.append((here, access, name))
        ctx.expr[result] = name
        return
    e = ctx.rules.expr(o, [body.val(v) for v in o.operands])       # index arithmetic
    name = body.names.fresh(f"{body.names(result)}_e{k}")
    body.w(f"{name} = {e}")
    ctx.expr[result] = name
