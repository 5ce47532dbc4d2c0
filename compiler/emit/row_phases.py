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

With a blocked-cyclic row (plan/rows.py: row_layout; transforms/split_rows.py) a phase is a loop
over the thread's runs q holding a loop over the run's 4 elements v (or the v loop alone when
the thread has one run); both are unrolled alike, element (q, v) after (q, v-1). Then 4
consecutive elements of a load whose addresses are consecutive f32 of a global array (the
last index of element k+j is element k's + j, the others equal: read from the emitted
index text, so it holds whatever the layout) are one `_ld4_f32` (emit/vector.py: a 16-byte
load where the address is 16-byte aligned at run time, else 4 scalar ones), and the stores of
4 such elements one `_st4_f32` after the fourth element's compute, when nothing in the phase
reads the stored buffer and no other store of the phase writes it.

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

from .values import expr_add, is_int, is_memref
from .vector import VECTOR_HELPERS, WIDTH
from ..marks import BLOCK_REDUCE
from ..mlir import ir
from ..plan.rows import ROW_KEPT as ROW_UNROLL      # the row model prices the same limit
from .siblings import MEMREF_VIEW_OPS, defined_in, nested_ops, operation, view_root

_DROP = object()      # a line a 16-byte access took over (removed when the phase is written)

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


def _loop_range(body, op):
    """(lb, step, trips) of an scf.for without results or carried values, or None."""
    block = op.regions[0].blocks[0]
    if len(block.arguments) != 1 or len(op.results):
        return None
    n = trip_count(body, op)
    if n is None:
        return None
    return int(body.val(op.operands[0])), int(body.val(op.operands[2])), n


def _nest(body, op):
    """The phase's elements and ops: ([{iv: value}] in order, [op], {blocks}) when `op` is one
    loop whose body has no regions, or a loop over runs holding pure ops (constants, views,
    index arithmetic) and, last, one loop over a run's elements whose body has no regions; else
    None."""
    outer = _loop_range(body, op)
    if outer is None:
        return None
    block = op.regions[0].blocks[0]
    iv = block.arguments[0]
    inner = [o.operation for o in block.operations][:-1]          # the scf.yield dropped
    if not any(len(o.regions) for o in inner):
        lb, step, n = outer
        return [{iv: lb + k * step} for k in range(n)], inner, {block}
    loop = inner[-1]
    if loop.name != "scf.for" or any(len(o.regions) for o in inner[:-1]) or not all(
            o.name == "arith.constant" or o.name in MEMREF_VIEW_OPS or
            (o.name.startswith("arith.") and len(o.results) == 1 and str(o.results[0].type) == "index")
            for o in inner[:-1]):
        return None
    run = _loop_range(body, loop)
    if run is None:
        return None
    vblock = loop.regions[0].blocks[0]
    ops = [o.operation for o in vblock.operations][:-1]
    if any(len(o.regions) for o in ops) or any(v in (o.operands) for o in inner[:-1] for v in vblock.arguments):
        return None
    vi = vblock.arguments[0]
    elements = [{iv: outer[0] + q * outer[1], vi: run[0] + v * run[1]} for q in range(outer[2]) for v in range(run[2])]
    return elements, inner[:-1] + ops, {block, vblock}


def phase_loop(body, op, rows: RowLaunch) -> bool:
    """Whether `op` (an scf.for in a row kernel) is a phase loop (or nest) this module unrolls."""
    nest = _nest(body, op)
    if nest is None or not 2 <= len(nest[0]) <= ROW_UNROLL:
        return False
    return any(o.name == "memref.load" and view_root(o.operands[0]) in rows.read_only for o in nest[1])


def unrolled_phase(body, op, rows: RowLaunch) -> None:
    """Emit the phase loop `op` unrolled: per element, its views, index arithmetic and the loads
    of read-only global buffers first (reused when an earlier phase loaded the element), then per
    element the rest of its body in order; 4 consecutive f32 of a load or a store as one 16-byte
    access (see the module doc)."""
    elements, inner, blocks = _nest(body, op)
    n = len(elements)
    here = op.block
    ctx = body.ctx
    body.w(f"# {n} elements per thread, unrolled: the row's loads first (emit/row_phases.py)")
    rest, envs = [], []
    loads: dict = {}                      # load op -> [(element, line, lane name, view, base index)]
    for k, env in enumerate(elements):
        for iv, value in env.items():
            ctx.expr[iv] = str(value)
        early: set = set(env)
        later = []
        for o in inner:
            if _early(o, early, blocks, rows):
                _emit_early(body, o, k, here, rows, loads)
                early.update(o.results)
            else:
                later.append(o)
        envs.append({v: (ctx.expr.get(v), ctx.views.get(v)) for v in early})
        rest.append(later)
    _wide_loads(body, loads)
    stored = _storable(body, inner)
    stores: dict = {}                     # store op -> [(element, line, view, base index, value)]
    for k in range(n):
        for v, (e, view) in envs[k].items():
            if e is not None:
                ctx.expr[v] = e
            if view is not None:
                ctx.views[v] = view
        for o in rest[k]:
            if o in stored:
                _scalar_store(body, o, k, stores)
            else:
                body.op(o)
    _wide_stores(body, stores)
    body.w.lines[:] = [line for line in body.w.lines if line is not _DROP]
    for env in elements[:1]:
        for iv in env:
            ctx.expr.pop(iv, None)


def _runs(entries: list) -> list[tuple[int, int]]:
    """(start, lanes) over `entries` [(element, line, ..., view, base index, ...)] of one access
    op in element order: 4 entries of consecutive elements at consecutive f32 of one global array
    (the last index of each the first's + j) as (start, 4), every other entry as (i, 1)."""
    out, i = [], 0
    while i < len(entries):
        chunk = entries[i:i + WIDTH]
        if len(chunk) == WIDTH and all(e[0] == chunk[0][0] + j for j, e in enumerate(chunk)) and _consecutive(chunk):
            out.append((i, WIDTH))
            i += WIDTH
        else:
            out.append((i, 1))
            i += 1
    return out


def _consecutive(chunk: list) -> bool:
    view, base = chunk[0][-2], chunk[0][-1]
    array = view.array
    if array.space != "global" or array.storage != "float32" or array.elem.compute != "float32":
        return False
    for j, e in enumerate(chunk):
        if e[-2].array.name != array.name or e[-1][:-1] != base[:-1] or e[-1][-1] != expr_add(base[-1], str(j)):
            return False
    return True


def _wide_loads(body, loads: dict) -> None:
    """The row's loads, 4 consecutive f32 as one `_ld4_f32` at the first one's line."""
    lines = body.w.lines
    for entries in loads.values():
        for i, lanes in _runs(entries):
            if lanes == 1:
                continue
            chunk = entries[i:i + lanes]
            first = chunk[0]
            indent = lines[first[1]][:len(lines[first[1]]) - len(lines[first[1]].lstrip())]
            body.ctx.helpers.use_text("_ld4_f32", VECTOR_HELPERS)
            lines[first[1]] = (f"{indent}{', '.join(e[2] for e in chunk)} = "
                               f"_ld4_f32({first[3].array.name}, ({', '.join(first[4])},))")
            for e in chunk[1:]:
                lines[e[1]] = _DROP


def _storable(body, inner: list) -> set:
    """The phase's stores that may wait for the rest of their run (up to 3 elements later): to a
    global f32 buffer that no load of the phase reads and no other store of the phase writes."""
    if any(o.name == "gpu.barrier" for o in inner):
        return set()
    stores = [o for o in inner if o.name == "memref.store"]
    read = {view_root(o.operands[0]) for o in inner if o.name == "memref.load"}
    out = set()
    for o in stores:
        root = view_root(o.operands[1])
        if root in read or sum(1 for s in stores if view_root(s.operands[1]) == root) != 1:
            continue
        if body.ctx.held.get(o.operands[1]) is not None:
            continue
        out.add(o)
    return out


def _scalar_store(body, o, k: int, stores: dict) -> None:
    """A store written as it is (body.store), remembered with its line for _wide_stores."""
    view = body.view(o.operands[1])
    base = view.to_base(tuple(body.val(i) for i in o.operands[2:]))
    value = body.val(o.operands[0])
    line = len(body.w.lines)
    body.op(o)
    if len(body.w.lines) == line + 1:
        stores.setdefault(o, []).append((k, line, value, view, base))


def _wide_stores(body, stores: dict) -> None:
    """4 consecutive f32 stores as one `_st4_f32` at the last one's line, each value held in a
    local at its own store's line."""
    lines, names = body.w.lines, body.names
    for entries in stores.values():
        for i, lanes in _runs(entries):
            if lanes == 1:
                continue
            chunk = entries[i:i + lanes]
            body.ctx.helpers.use_text("_ld4_f32", VECTOR_HELPERS)
            ys = []
            for e in chunk:
                line = lines[e[1]]
                indent = line[:len(line) - len(line.lstrip())]
                y = names.temp("y")
                ys.append(y)
                lines[e[1]] = f"{indent}{y} = {e[2]}"
            first, last = chunk[0], chunk[-1]
            lines[last[1]] += (f"\n{indent}_st4_f32({first[3].array.name}, ({', '.join(first[4])},), "
                               f"{', '.join(ys)})")


def _ready(v, early: set, blocks: set) -> bool:
    """Defined before the loop, or early in this element."""
    return v in early or not _in_block(v, blocks)


def _in_block(v, blocks: set) -> bool:
    owner = v.owner
    if isinstance(owner, ir.Block):
        return owner in blocks
    return operation(owner).block in blocks


def _early(o, early: set, blocks: set, rows: RowLaunch) -> bool:
    if not all(_ready(v, early, blocks) for v in o.operands):
        return False
    if o.name == "arith.constant" or o.name in MEMREF_VIEW_OPS:
        return True
    if o.name == "memref.load":
        return view_root(o.operands[0]) in rows.read_only
    return o.name.startswith("arith.") and len(o.results) == 1 and str(o.results[0].type) == "index"


def _emit_early(body, o, k: int, here, rows: RowLaunch, loads: dict) -> None:
    ctx = body.ctx
    if o.name == "arith.constant" or o.name in MEMREF_VIEW_OPS:
        body.op(o)
        return
    result = o.results[0]
    if o.name == "memref.load":
        v = body.view(o.operands[0])
        access = v.load([body.val(i) for i in o.operands[1:]])     # f16, bf16: widened to f32
        name = rows.cached(here, access)
        if name is None:
            name = body.names.fresh(f"{body.names(result)}_e{k}")
            loads.setdefault(o, []).append((k, len(body.w.lines), name, v,
                                            v.to_base(tuple(body.val(i) for i in o.operands[1:]))))
            body.w(f"{name} = {access}")
            rows.loaded.append((here, access, name))
        ctx.expr[result] = name
        return
    e = ctx.rules.expr(o, [body.val(v) for v in o.operands])       # index arithmetic
    name = body.names.fresh(f"{body.names(result)}_e{k}")
    body.w(f"{name} = {e}")
    ctx.expr[result] = name
