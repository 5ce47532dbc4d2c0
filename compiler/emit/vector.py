"""16-byte global loads and stores for a thread's run of 4 consecutive f32 (elementwise kernels).

A thread whose tile holds 4 consecutive points of the contiguous axis (plan/tilechoice.py gives
elementwise kernels that thread tile where the axis allows) runs an `scf.for j in range(4)` over
them. Written as it stands, each of its loads is a 4-byte `LDG.E`: LLVM cannot join them, since
Numba's array loads carry only the element's alignment. `vector_loop` writes such a loop
unrolled, each global access that walks the 4 points (`a[..., c + j]`, `c` fixed in the loop)
as one `_ld4_f32`/`_st4_f32` call: a 16-byte `ld.global.v4.f32` (`LDG.E.128` in SASS) when the
address is 16-byte aligned, four scalar accesses when it is not (a run-time fact: an array's
base pointer, or a row length not a multiple of 4), decided per thread in the intrinsic. Loads
are issued before the first point is computed, stores after the last (4 loads in flight a
thread). Under the simulator the helpers are plain Python.
"""
from __future__ import annotations

from .cp_async import INTRINSIC_IMPORTS
from .values import expr_add
from ..mlir import ir
from .siblings import access

WIDTH = 4                    # f32 per 16-byte access
_MARK = "__fusec_lane__"     # stands for the loop's index while index expressions are compared

VECTOR_HELPERS = [
    "if _CUDASIM:   # the simulator runs kernels as Python: a slice of 4 (one access to the kernel report's tracer)",
    "    def _ld4_f32(a, idx):",
    "        *lead, c = idx",
    "        return tuple(a[(*lead, slice(c, c + 4))])",
    "",
    "    def _st4_f32(a, idx, x0, x1, x2, x3):",
    "        *lead, c = idx",
    "        a[(*lead, slice(c, c + 4))] = (x0, x1, x2, x3)",
    "else:",
    *INTRINSIC_IMPORTS,
    "",
    "    def _f32x4_at(context, builder, sig, args):",
    '        """The global pointer to a[idx] (idx a tuple, C order, no wraparound) and whether it is 16-byte aligned."""',
    "        aty, ity = sig.args[0], sig.args[1]",
    "        arr = context.make_array(aty)(context, builder, args[0])",
    "        idx = [context.cast(builder, v, t, _nbt.intp)",
    "               for v, t in zip(_cgutils.unpack_tuple(builder, args[1], len(ity)), ity)]",
    "        ptr = _cgutils.get_item_pointer(context, builder, aty, arr, idx, wraparound=False)",
    "        f32 = _llir.FloatType()",
    "        ptr = builder.addrspacecast(builder.bitcast(ptr, _llir.PointerType(f32)), _llir.PointerType(f32, 1))",
    "        i64 = _llir.IntType(64)",
    "        aligned = builder.icmp_unsigned('==', builder.and_(builder.ptrtoint(ptr, i64), i64(15)), i64(0))",
    "        vec = _llir.PointerType(_llir.VectorType(f32, 4), 1)",
    "        return ptr, builder.bitcast(ptr, vec), aligned",
    "",
    "    @_intrinsic",
    "    def _ld4_f32(typingctx, a, idx):",
    '        """a[idx] and the 3 f32 after it: one 16-byte global load where aligned, else 4."""',
    "        sig = _nbt.UniTuple(_nbt.float32, 4)(a, idx)",
    "",
    "        def codegen(context, builder, sig, args):",
    "            ptr, vptr, aligned = _f32x4_at(context, builder, sig, args)",
    "            i32, f32 = _llir.IntType(32), _llir.FloatType()",
    "            wide, narrow = builder.append_basic_block('ld4_wide'), builder.append_basic_block('ld4_narrow')",
    "            done = builder.append_basic_block('ld4_done')",
    "            builder.cbranch(aligned, wide, narrow)",
    "            builder.position_at_end(wide)",
    "            v = builder.load(vptr, align=16)",
    "            w = [builder.extract_element(v, i32(k)) for k in range(4)]",
    "            builder.branch(done)",
    "            builder.position_at_end(narrow)",
    "            n = [builder.load(builder.gep(ptr, [i32(k)]), align=4) for k in range(4)]",
    "            builder.branch(done)",
    "            builder.position_at_end(done)",
    "            out = []",
    "            for a, b in zip(w, n):",
    "                phi = builder.phi(f32)",
    "                phi.add_incoming(a, wide)",
    "                phi.add_incoming(b, narrow)",
    "                out.append(phi)",
    "            return context.make_tuple(builder, sig.return_type, out)",
    "        return sig, codegen",
    "",
    "    @_intrinsic",
    "    def _st4_f32(typingctx, a, idx, x0, x1, x2, x3):",
    '        """a[idx] and the 3 f32 after it = x0..x3: one 16-byte global store where aligned, else 4."""',
    "        sig = _nbt.void(a, idx, _nbt.float32, _nbt.float32, _nbt.float32, _nbt.float32)",
    "",
    "        def codegen(context, builder, sig, args):",
    "            ptr, vptr, aligned = _f32x4_at(context, builder, sig, args)",
    "            i32, f32 = _llir.IntType(32), _llir.FloatType()",
    "            xs = list(args[2:])",
    "            with builder.if_else(aligned) as (wide, narrow):",
    "                with wide:",
    "                    v = _llir.Constant(_llir.VectorType(f32, 4), None)",
    "                    for k, x in enumerate(xs):",
    "                        v = builder.insert_element(v, x, i32(k))",
    "                    builder.store(v, vptr, align=16)",
    "                with narrow:",
    "                    for k, x in enumerate(xs):",
    "                        builder.store(x, builder.gep(ptr, [i32(k)]), align=4)",
    "            return context.get_dummy_value()",
    "        return sig, codegen",
]


def vector_loop(body, op) -> bool:
    """Write the kernel's `scf.for` `op` as 4 unrolled points with 16-byte accesses, if it is a
    thread's run of 4 f32 points (see the module doc); False (nothing written) otherwise."""
    if body.mode != "kernel" or len(op.operands) != 3:
        return False
    lb, ub, step = (body.val(v) for v in op.operands[:3])
    if (lb, ub, step) != ("0", str(WIDTH), "1"):
        return False
    block = op.regions[0].blocks[0]
    iv = block.arguments[0]
    inner = [o.operation for o in block.operations][:-1]
    if any(len(o.regions) for o in inner) or any(o.name == "gpu.barrier" for o in inner):
        return False
    plan = {}
    for o in inner:
        at = access(o)
        if at is None:
            continue
        memref, indices = at[0], list(at[1])
        if not _outside(memref, op) or not all(i == iv or _outside(i, op) for i in indices):
            return False                     # an index computed inside the loop: left as it is
        if iv not in indices:
            continue
        base = _vector_index(body, memref, indices, iv)
        if base is None:
            continue
        plan[o] = (body.view(memref).array.name, base)
    if not plan or not _same_places(plan, inner, body):
        return False
    _write(body, op, iv, inner, plan)
    return True


def _outside(v, loop) -> bool:
    """`v` is defined outside `loop` (so its expression is known before the loop)."""
    owner = v.owner
    node = owner.owner if isinstance(owner, ir.Block) else owner
    node = getattr(node, "operation", node)
    loop = getattr(loop, "operation", loop)
    while node is not None:
        if node == loop:
            return False
        node = node.parent
    return True


def _vector_index(body, memref, indices, iv) -> tuple[str, ...] | None:
    """The base-array index of point 0 when point j is that index plus j on the array's last
    (contiguous) dim, for a global f32 array; else None."""
    view = body.view(memref)
    if view.array.space != "global" or view.array.storage != "float32":
        return None
    saved = body.ctx.expr.get(iv)
    try:
        body.ctx.expr[iv] = _MARK
        marked = view.to_base(tuple(body.val(i) for i in indices))
        body.ctx.expr[iv] = "0"
        zero = view.to_base(tuple(body.val(i) for i in indices))
    finally:
        if saved is None:
            body.ctx.expr.pop(iv, None)
        else:
            body.ctx.expr[iv] = saved
    if len(marked) != view.array.rank or any(_MARK in m for m in marked[:-1]) or marked[:-1] != zero[:-1]:
        return None
    if marked[-1] != expr_add(zero[-1], _MARK):
        return None
    return tuple(zero)


def _same_places(plan: dict, inner: list, body) -> bool:
    """Loads move before the first point and stores after the last: sound when every array the
    loop both reads and writes is read and written only at the vectorized places, the same ones
    (each point then reads its element before any point writes it: an in-place elementwise op)."""
    written = {body.view(access(o)[0]).array.name for o in inner if o.name == "memref.store"}
    read = {body.view(access(o)[0]).array.name for o in inner if o.name == "memref.load"}
    for name in written & read:
        places = {plan.get(o) for o in inner if access(o) is not None
                  and body.view(access(o)[0]).array.name == name}
        if len(places) != 1 or None in places:
            return False
    return True


def _write(body, op, iv, inner, plan) -> None:
    w, names = body.w, body.names
    body.ctx.helpers.use_text("_ld4_f32", VECTOR_HELPERS)
    loaded: dict = {}
    for o in inner:                        # every vector load first: 4 in flight per access
        if o.name == "memref.load" and o in plan and plan[o] not in loaded:
            array, base = plan[o]
            lanes = [names.temp("x") for _ in range(WIDTH)]
            w(f"{', '.join(lanes)} = _ld4_f32({array}, ({', '.join(base)},))")
            loaded[plan[o]] = lanes
    stored: dict = {}
    saved = body.ctx.expr.get(iv)
    for j in range(WIDTH):
        body.ctx.expr[iv] = str(j)
        w(f"# point {j} of {WIDTH}")
        for o in inner:
            if o in plan and o.name == "memref.load":
                body.ctx.expr[o.results[0]] = loaded[plan[o]][j]
            elif o in plan and o.name == "memref.store":
                lanes = stored.setdefault(plan[o], [names.temp("y") for _ in range(WIDTH)])
                w(f"{lanes[j]} = {body.val(o.operands[0])}")
            else:
                body.op(o)
    for (array, base), lanes in stored.items():
        w(f"_st4_f32({array}, ({', '.join(base)},), {', '.join(lanes)})")
    if saved is not None:
        body.ctx.expr[iv] = saved
