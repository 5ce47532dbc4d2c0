"""cpu-library-calls: on the CPU target, after bufferization, each float matmul, batch_matmul
and conv_2d_nchw_fchw on memrefs stays a linalg op marked `fusec.cpu_call` ("zero": the +0.0
fill before it is dropped; "acc": it accumulates) for the emitter to hand to BLAS, one call per
tile, as does a float conv_2d_ngchw_gfchw (conv2d with groups) for the emitter's loops of it;
every other linalg op becomes loops. `fold_transposed_operands` and
`hoist_whole_contractions` run first. See docs/ARCHITECTURE.md, "What the code taught us"
(cpu contractions, a product's epilogue).
"""
from __future__ import annotations

import math

from ..errors import CompilerInternalError
from ..mlir import ir, memref
from ..plan.conv import CONV_OP as CONV, library_conv
from ..plan.templates import ConvConfig, groups_of
from .script import MEMREF_VIEWS, tag_of
from ..marks import CONV_ALGORITHM, CPU_CALL, CPU_TEMPLATE_MARKS, TAG, TO_LOOPS

NAME = "cpu-library-calls"
# ops an emitter template writes itself (transforms/attention_kernels.py): neither calls nor loops
BLAS_CONTRACTIONS = ("linalg.matmul", "linalg.batch_matmul", "linalg.conv_2d_nchw_fchw")
# ops left whole for an emitter template of loops (emit/cpu.py): a grouped or depthwise conv
LOOP_TEMPLATES = ("linalg.conv_2d_ngchw_gfchw",)
_FLOATS = ("f32", "f64")


def linalg_ops(module: ir.Module) -> list:
    found = []

    def visit(op):
        if op.name.startswith("linalg.") and not op.parent.name.startswith("linalg."):
            found.append(op)      # structured ops, not the yield/index inside their bodies
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


def _element(v: "ir.Value") -> str | None:
    t = v.type
    if not isinstance(t.maybe_downcast(), ir.MemRefType):
        return None
    return str(ir.MemRefType(t).element_type)


def _callable(op) -> bool:
    """All operands memrefs of one float type (mixed or integer contractions stay loops)."""
    elems = {_element(v) for v in op.operands}
    return len(elems) == 1 and elems.pop() in _FLOATS


def _zero_fill_before(op) -> "ir.Operation | None":
    """The linalg.fill of +0.0 into op's output buffer directly before op, if there is one."""
    out = op.operands[len(op.operands) - 1]
    prev = None
    for o in op.operation.block.operations:
        if o.operation == op.operation:
            break
        prev = o.operation
    if prev is None or prev.name != "linalg.fill" or prev.operands[1] != out:
        return None
    const = prev.operands[0].owner
    if getattr(const, "name", None) != "arith.constant":
        return None
    attr = const.attributes["value"]
    if not isinstance(attr.maybe_downcast(), ir.FloatAttr):
        return None
    value = ir.FloatAttr(attr).value
    return prev if value == 0.0 and not math.copysign(1.0, value) < 0 else None


def _defined_outside(v: "ir.Value", loop) -> bool:
    """v's definition is not nested in `loop`."""
    owner = v.owner
    op = owner if not isinstance(owner, ir.Block) else owner.owner
    while op is not None and getattr(op, "name", None) not in ("func.func", "builtin.module"):
        if op == loop:
            return False
        op = op.parent
    return True


def _root(v: "ir.Value") -> "ir.Value":
    """The buffer a memref view is a view of."""
    while not isinstance(v.owner, ir.Block) and v.owner.name in MEMREF_VIEWS:
        v = v.owner.operands[0]
    return v


def _row_tile_of(v: "ir.Value", iv: "ir.Value", trips: "int | tuple") -> "ir.Value | None":
    """The whole buffer X if v = subview X[iv * T, 0, ...][T, full...][1, ...] and the loop's
    `trips` tiles of T rows cover X's rows exactly; else None. With rows taken at run time
    (--dynamic), `trips` is (T, D) from `_run_time_trips`: the loop runs D ceildiv T times, and
    v = subview X[iv * T, 0, ...][min(D - iv * T, T), full...] of an X with D rows."""
    if isinstance(v.owner, ir.Block) or v.owner.name != "memref.subview":
        return None
    sub = v.owner
    src = sub.operands[0]
    shape = list(ir.MemRefType(src.type).shape)
    offsets = list(ir.DenseI64ArrayAttr(sub.attributes["static_offsets"]))
    sizes = list(ir.DenseI64ArrayAttr(sub.attributes["static_sizes"]))
    strides = list(ir.DenseI64ArrayAttr(sub.attributes["static_strides"]))
    dynamic = list(sub.operands[1:])
    if any(o != 0 for o in offsets[1:]) or any(x != 1 for x in strides) or ir.MemRefType(v.type).rank != len(shape):
        return None
    if sizes[1:] != shape[1:]:
        return None
    if isinstance(trips, tuple):
        tile, rows = trips
        if (len(dynamic) != 2 or not _is_scaled_iv(dynamic[0], iv, tile) or not _is_tail(dynamic[1], iv, tile, rows)
                or not _rows_are(src, rows)):
            return None
        return src
    if len(dynamic) != 1 or sizes[0] * trips != shape[0]:
        return None
    return src if _is_scaled_iv(dynamic[0], iv, sizes[0]) else None


def _run_time_trips(bound: "ir.Value") -> "tuple | None":
    """(T, D) when a loop's upper bound is D ceildiv T (affine.apply), D known at run time only."""
    op = bound.owner
    if isinstance(op, ir.Block) or op.name != "affine.apply" or len(op.operands) != 1:
        return None
    text = str(ir.AffineMapAttr(op.attributes["map"]).value)
    prefix, suffix = "()[s0] -> (s0 ceildiv ", ")"
    if not (text.startswith(prefix) and text.endswith(suffix) and text[len(prefix):-1].isdigit()):
        return None
    return int(text[len(prefix):-1]), op.operands[0]


def _is_tail(v: "ir.Value", iv: "ir.Value", tile: int, rows: "ir.Value") -> bool:
    """v == min(rows - iv * tile, tile), as tile-and-fuse writes it (affine.min)."""
    op = v.owner
    if isinstance(op, ir.Block) or op.name != "affine.min" or list(op.operands) != [iv, rows]:
        return False
    return str(ir.AffineMapAttr(op.attributes["map"]).value) == f"(d0)[s0] -> (d0 * -{tile} + s0, {tile})"


def _rows_are(src: "ir.Value", rows: "ir.Value") -> bool:
    """The buffer's row extent is the value `rows`: an alloc sized by it, or an argument whose
    memref.dim along axis 0 it is."""
    if ir.MemRefType(src.type).shape[0] != ir.ShapedType.get_dynamic_size():
        return False
    if not isinstance(src.owner, ir.Block) and src.owner.name == "memref.alloc":
        return list(src.owner.operands)[:1] == [rows]
    op = rows.owner
    return (not isinstance(op, ir.Block) and op.name == "memref.dim" and op.operands[0] == src
            and _constant_index(op.operands[1]) == 0)


def _is_scaled_iv(v: "ir.Value", iv: "ir.Value", scale: int) -> bool:
    """v == iv * scale, as affine.apply (d0 * scale) or arith.muli."""
    if v == iv:
        return scale == 1
    if isinstance(v.owner, ir.Block):
        return False
    op = v.owner
    if op.name == "affine.apply" and len(op.operands) == 1 and op.operands[0] == iv:
        return str(ir.AffineMapAttr(op.attributes["map"]).value) == f"(d0) -> (d0 * {scale})"
    if op.name == "arith.muli" and iv in list(op.operands):
        other = op.operands[1] if op.operands[0] == iv else op.operands[0]
        return (not isinstance(other.owner, ir.Block) and other.owner.name == "arith.constant"
                and ir.IntegerAttr(other.owner.attributes["value"]).value == scale)
    return False


def _writes(loop) -> set:
    """Root buffers written anywhere inside `loop` (stores, copies, linalg outputs)."""
    roots: set = set()

    def visit(op):
        if op.name == "memref.store":
            roots.add(_root(op.operands[1]))
        elif op.name == "memref.copy":
            roots.add(_root(op.operands[1]))
        elif op.name.startswith("linalg.") and "operandSegmentSizes" in op.attributes:
            n_in = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))[0]
            roots.update(_root(v) for v in list(op.operands)[n_in:])
        return ir.WalkResult.ADVANCE

    loop.walk(visit)
    return roots


def _constant_index(v: "ir.Value") -> int | None:
    if isinstance(v.owner, ir.Block) or v.owner.name != "arith.constant":
        return None
    return ir.IntegerAttr(v.owner.attributes["value"]).value


def hoist_whole_contractions(module: ir.Module, only: "set[int] | None" = None) -> int:
    """Replace the per-tile fill + matmul of an outermost scf.parallel by one whole matmul
    before it, where that is the same computation (see the module docstring) and, given `only`
    (the TAGs of the matmuls the plan calls whole: Kernel.whole_calls), the plan says so;
    returns how many."""
    count = 0
    for loop in _outer_parallel_loops(module):
        body = loop.regions[0].blocks[0]
        if len(body.arguments) != 1 or [_constant_index(v) for v in (loop.operands[0], loop.operands[2])] != [0, 1]:
            continue
        trips = _constant_index(loop.operands[1])
        if trips is None:
            trips = _run_time_trips(loop.operands[1])      # rows taken at run time (--dynamic)
        iv = body.arguments[0]
        for op in list(body.operations):
            op = op.operation
            if op.name != "linalg.matmul" or not _callable(op) or trips is None:
                continue
            if only is not None and (TAG not in op.attributes or ir.IntegerAttr(op.attributes[TAG]).value not in only):
                continue
            fill = _zero_fill_before(op)
            a, b, c = op.operands[0], op.operands[1], op.operands[2]
            whole_a, whole_c = _row_tile_of(a, iv, trips), _row_tile_of(c, iv, trips)
            if fill is None or whole_a is None or whole_c is None or not _defined_outside(b, loop):
                continue
            if not (_defined_outside(whole_a, loop) and _defined_outside(whole_c, loop)):
                continue
            if {_root(whole_a), _root(b)} & _writes(loop):
                continue          # an input the loop itself writes: tile order matters
            whole = op.clone(ip=ir.InsertionPoint(loop))
            whole.operands[0] = whole_a
            whole.operands[2] = whole_c
            whole.attributes[CPU_CALL] = ir.StringAttr.get("zero")
            fill.erase()
            op.erase()
            count += 1
    return count


def _outer_parallel_loops(module: ir.Module) -> list:
    found = []

    def visit(op):
        if op.name == "scf.parallel" and op.parent.name == "func.func":
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


def fold_transposed_operands(module: ir.Module) -> int:
    """A matmul operand that a permutation copy has just made (a linalg.transpose of X, or a
    linalg.generic that only copies X read through a permuted map, into a fresh buffer nothing
    else reads) becomes
    memref.transpose of X: a view, which the BLAS call takes as it lies (its transpose flag),
    so `x @ transpose(w)` copies nothing. The view is made where X is defined, so a whole
    product can still be hoisted before its loop. Returns how many operands were folded."""
    count = 0
    for op in linalg_ops(module):
        if op.name not in ("linalg.matmul", "linalg.batch_matmul") or not _callable(op):
            continue
        for i in (0, 1):
            found = _permutation_copy_into(op.operands[i], op)
            if found is None:
                continue
            copy, src, perm = found
            alloc = op.operands[i].owner
            if isinstance(src.owner, ir.Block):
                where = ir.InsertionPoint.at_block_begin(src.owner)
            else:
                where = ir.InsertionPoint.after(src.owner)
            with where:
                view = memref.TransposeOp(_transposed_type(src.type, perm), src,
                                          ir.AffineMapAttr.get(ir.AffineMap.get_permutation(perm)))
            op.operands[i] = view.result
            copy.erase()
            if not list(alloc.results[0].uses):
                alloc.erase()
            count += 1
    return count


def _ancestor_in(op, block) -> "ir.Operation | None":
    """`op` or the op enclosing it that lies in `block`; None when none does."""
    op = op.operation if hasattr(op, "operation") else op
    while op is not None:
        if op.block == block:
            return op
        parent = op.parent
        op = parent.operation if parent is not None and hasattr(parent, "operation") else parent
        if op is not None and op.name == "builtin.module":
            return None
    return None


def _others_never_see_the_copy(v, copy, reader) -> bool:
    """The buffer `v` is shared (one-shot bufferization gave two weights' transposes one alloc
    of CSE'd tensor.empty): its other users run before `copy`, or after `reader` with the first
    of those a whole-buffer copy into it (nothing reads what `copy` wrote but `reader`)."""
    block = reader.operation.block
    order = {o.operation: k for k, o in enumerate(block.operations)}
    at_copy, at_reader = order.get(copy.operation), order.get(reader.operation)
    after = []
    for use in v.uses:
        u = use.owner
        u = u.operation if hasattr(u, "operation") else u
        if u == copy.operation or u == reader.operation:
            continue
        top = _ancestor_in(u, block)
        if top is None or top not in order:
            return False
        k = order[top]
        if at_copy is not None and k < at_copy:
            continue
        if at_reader is None or k <= at_reader:
            return False
        after.append((k, u, top))
    if not after:
        return True
    k, u, top = min(after, key=lambda t: t[0])
    # the first later user writes the whole buffer before anything reads it
    return (u == top and u.name in ("linalg.transpose", "linalg.generic") and len(u.operands) == 2
            and u.operands[1] == v and copy_permutation(u) is not None)


def _permutation_copy_into(v: "ir.Value", reader) -> "tuple | None":
    """(the copy, its source, the permutation) when v is a memref.alloc written only by a
    linalg.generic copying a source through a self-inverse permuted map, in reader's block
    before it, with nothing in between writing the source; read by nothing but `reader`."""
    if isinstance(v.owner, ir.Block) or v.owner.name != "memref.alloc":
        return None
    users = [u.owner for u in v.uses]
    if reader.operation not in users:
        return None
    # the copy: the last whole-buffer copy into v before the reader, in the reader's block
    block = reader.operation.block
    g = None
    for o in block.operations:
        if o.operation == reader.operation:
            break
        if (o.operation in users and o.operation.name in ("linalg.transpose", "linalg.generic")
                and len(o.operation.operands) == 2 and o.operation.operands[1] == v):
            g = o.operation
    if g is None:
        return None
    if len(users) != 2 and not _others_never_see_the_copy(v, g, reader):
        return None
    perm = copy_permutation(g)
    rank = ir.MemRefType(v.type).rank
    if perm is None or perm == list(range(rank)) or any(perm[perm[k]] != k for k in range(rank)):
        return None
    src = g.operands[0]
    if str(ir.MemRefType(src.type).element_type) != str(ir.MemRefType(v.type).element_type):   # g: in reader's block
        return None
    between, seen = [], False
    for o in reader.operation.block.operations:
        if o.operation == g.operation:
            seen = True
            continue
        if o.operation == reader.operation:
            break
        if seen:
            between.append(o.operation)
    if any(_root(src) in _writes(o) for o in between):
        return None
    return g, src, perm


def copy_permutation(g) -> list[int] | None:
    """The permutation a linalg.transpose applies, or that a linalg.generic applies when all it
    does is copy its one input, read through a permuted map, to its output read in order."""
    if g.name == "linalg.transpose":
        return list(ir.DenseI64ArrayAttr(g.attributes["permutation"]))
    body = list(g.regions[0].blocks[0].operations)
    if len(body) != 1 or body[0].operands[0] != g.regions[0].blocks[0].arguments[0]:
        return None
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(g.attributes["indexing_maps"])]
    rank = maps[1].n_dims
    if str(maps[1]) != str(ir.AffineMap.get_identity(rank)) or not maps[0].is_permutation:
        return None
    return [ir.AffineDimExpr(d).position for d in maps[0].results]


def _transposed_type(t, perm: list[int]) -> "ir.Type":
    """The strided memref type of memref.transpose(t, perm)."""
    mt = ir.MemRefType(t)
    strides, offset = mt.get_strides_and_offset()
    shape = [mt.shape[p] for p in perm]
    layout = ir.StridedLayoutAttr.get(offset, [strides[p] for p in perm])
    return ir.MemRefType.get(shape, mt.element_type, layout, mt.memory_space)


def mark_conv_algorithms(module: ir.Module, plans: dict, target: str = "cpu") -> int:
    """Give each conv of a cpu kernel its group's algorithm (plan/conv.py) as CONV_ALGORITHM;
    returns how many."""
    tagged: dict[int, list] = {}
    for op in linalg_ops(module):
        if op.name == CONV and TAG in op.attributes:
            tagged.setdefault(ir.IntegerAttr(op.attributes[TAG]).value, []).append(op)
    count = 0
    for plan, g in groups_of(plans, ConvConfig):
        convs = [m for m in g.ops if library_conv(plan.info.op(m))]
        found = [op for m in convs for op in tagged.get(tag_of(g.id, m), [])]
        if len(convs) != 1 or not found:
            raise CompilerInternalError("cpu", f"kernel {g.id} of {plan.chain}: its conv ({g.config.algorithm}) "
                                       "is not in the module")
        for op in found:
            op.attributes[CONV_ALGORITHM] = ir.StringAttr.get(g.config.algorithm)
            count += 1
    return count


def mark_library_calls(module: ir.Module) -> int:
    """Mark the contractions (dropping their zero fills) and every other linalg op for loops;
    returns how many were marked as calls."""
    count = 0
    for op in linalg_ops(module):
        if CPU_CALL in op.attributes or any(m in op.attributes for m in CPU_TEMPLATE_MARKS):
            continue          # hoisted whole already, or an op of the attention template
        if op.name in BLAS_CONTRACTIONS + LOOP_TEMPLATES and _callable(op):
            fill = _zero_fill_before(op)
            op.attributes[CPU_CALL] = ir.StringAttr.get("zero" if fill is not None else "acc")
            if fill is not None:
                fill.erase()
            count += 1
    for op in linalg_ops(module):
        if CPU_CALL not in op.attributes and not any(m in op.attributes for m in CPU_TEMPLATE_MARKS):
            op.attributes[TO_LOOPS] = ir.UnitAttr.get()
    return count


def loops_script() -> str:
    """The transform script lowering the ops marked TO_LOOPS (all but the calls) to scf loops."""
    any_op = "!transform.any_op"
    return ("module attributes {transform.with_named_sequence} {\n"
            f"  transform.named_sequence @__transform_main(%root: {any_op} {{transform.consumed}}) {{\n"
            f'    %l = transform.structured.match attributes {{"{TO_LOOPS}"}} in %root : ({any_op}) -> {any_op}\n'
            f"    %loops = transform.structured.convert_to_loops %l : ({any_op}) -> {any_op}\n"
            "    transform.yield\n  }\n}\n")
