"""Tile and fuse a graph-stage module by its FusionPlan (stage `tiled`).

Per kernel, in a scratch module of its own (_apply_alone): tile the root with `tile_using_forall`
(blocks or cpu chunks), siblings into the same loop, fuse producers consumers first, then (gpu)
tile to threads, a row kernel through split_rows.py; then canonicalize, CSE and one-shot
bufferize the module. Pads become gather generics first (pad_to_generic.py). See docs/ARCHITECTURE.md, "Stages and what each hands on" (tiled).
"""
from __future__ import annotations

from ..errors import CompilerInternalError
from ..mlir import bufferization, ir
from ..plan.analysis import loop_correspondence, payload_ops, sibling_tiles
from ..plan.kernels import FusionPlan, Kernel
from .generic import empty_like
from .in_place import write_in_place
from .pad_to_generic import pad_to_generic
from .script import ANY, Step, apply_script, i64, match_tag, script_text, tag_of
from .split_rows import Phase, split_rows
from ..marks import GROUP, OP_ID, PART, TAG, THREADS_OF


def tag_groups(func_op, plan: FusionPlan) -> None:
    """Tag each op with (group, op). An op in several groups (a shared fill or pad, an op kernels
    recompute) stays itself in the group that writes it (the one it is not `recomputed` in; else
    the first) and every other group gets its own copy, which only that group's ops read."""
    ops = {ir.IntegerAttr(op.attributes[OP_ID]).value: op for op in payload_ops(func_op)}
    home: dict[int, int] = {}
    for g in plan.kernels:
        for m in g.ops:
            if m not in g.recomputed and plan.info.op(m).kind not in ("fill", "pad"):
                home.setdefault(m, g.id)
    for g in plan.kernels:
        for m in g.ops:
            home.setdefault(m, g.id)
    versions = {k: [op] for k, op in ops.items()}   # an op and its copies: a copy of a consumer reads
    for g in plan.kernels:                           # the version its original read, any of them
        mine = {k: ops[k] for k in g.ops}
        for m in sorted(g.ops, reverse=True):     # consumers first: a copy reads the group's copies
            op = ops[m]
            if home[m] == g.id:
                op.attributes[TAG] = i64(tag_of(g.id, m))
                continue
            clone = op.clone(ip=ir.InsertionPoint(op))
            clone.attributes[TAG] = i64(tag_of(g.id, m))
            members = {mine[k] for k in g.ops if k != m}
            for v in versions[m]:
                for use in list(v.results[0].uses):
                    if use.owner in members:
                        use.owner.operands[use.operand_number] = clone.results[0]
            versions[m].append(clone)
            mine[m] = clone
            # where its kernel runs: just before the first of the kernel's ops that reads it, not
            # beside the original. Bufferization reads program order as run order: a copy left
            # before the original (in an earlier kernel's ops) let that kernel's copy, now the
            # last reader in the program, write over the input the later kernel's copy reads
            # (`t0 = cumsum(x) * 0.25` recomputed in two serial kernels was scaled twice)
            readers = {use.owner for use in clone.results[0].uses}
            first = next((o.operation for o in op.block.operations if o.operation in readers), None)
            if first is not None:
                clone.move_before(first)


def own_destinations(func_op, plan: FusionPlan) -> None:
    """Give a fused producer that does not tile like its root a `tensor.empty` of its own.
    Elementwise fusion and CSE leave one empty for all ops of a shape, and
    fuse_into_containing_op rewires a fused producer whose destination is the loop's shared
    output onto the loop's block argument: the producer then writes its tile into the kernel's
    output, at its own offsets. Where those are the root's (a matmul under its epilogue), that
    saves a buffer; where they are not (a transpose's operand, read by columns while the rows
    are written), parallel iterations wrote over each other's results
    (`exp(x) + transpose(exp(x))`).

    A row kernel's root too, when its empty is shared: bufferization may then write the root
    over the buffer of an input it reads (another op's result with that empty), and a root at
    block level, computed by every thread of the row (a per-row value, or a row of one element
    under a reduction of several), read and wrote that element once per thread: the thread after
    the first read the first one's result (`t = cumsum(x, axis=0); t + sum(concat([t[..., :1],
    t[..., -1:]], axis=-1), axis=-1, keepdims=true)` with `x: f32[1, 1]`)."""
    block = func_op.regions[0].blocks[0]
    by_tag = {ir.IntegerAttr(op.operation.attributes[TAG]).value: op.operation for op in block.operations
              if TAG in op.operation.attributes}
    info = plan.info
    for g in plan.kernels:
        root = by_tag.get(tag_of(g.id, g.root))
        if g.config.splits_rows and root is not None and root.results:
            dest = root.operands[len(root.operands) - 1]
            if (not isinstance(dest.owner, ir.Block) and dest.owner.operation.name == "tensor.empty"
                    and len(list(dest.uses)) > 1):
                # an alloc_tensor, not a copy of the empty: CSE would merge the two empties again
                with ir.InsertionPoint(root), root.location:
                    own = bufferization.AllocTensorOp(dest.type, list(dest.owner.operation.operands)).result
                root.operands[len(root.operands) - 1] = own
        tiled = {r for r, t in enumerate(g.block_tiles) if t} | {r for r, t in enumerate(g.thread_tiles) if t}
        if not tiled or info.op(g.root).kind in ("fill", "pad", "view"):
            continue
        corr = loop_correspondence(info, g.root, set(g.ops))
        for m in g.ops:
            op = by_tag.get(tag_of(g.id, m))
            if (m == g.root or m in g.siblings or m not in corr or op is None or not op.results
                    or op.results[0].type != by_tag[tag_of(g.id, g.root)].results[0].type):
                continue
            dest = op.operands[len(op.operands) - 1]
            if isinstance(dest.owner, ir.Block) or dest.owner.operation.name != "tensor.empty":
                continue
            if _tiles_like_root(info, g, m, corr, tiled):
                continue
            clone = dest.owner.operation.clone(ip=ir.InsertionPoint(op))
            op.operands[len(op.operands) - 1] = clone.results[0]


def own_inits(func_op, plan: FusionPlan) -> None:
    """Give a reduction its kernel also writes for later users (a second output) a fill of its
    own when it shares one with another reduction (CSE merges the -inf fills of two maxes). The
    fill's destination is an empty that is also the loop's shared output for that result, and
    fuse_into_containing_op rewires it onto the loop's block argument: the reduction then reads
    the output slice unfilled while the fill, fused once, initialises the other reduction only
    (`p = softmax(x); m = max(p); return p - m, m`). The copy keeps the fill's tag, so the
    kernel's script fuses it with the original."""
    block = func_op.regions[0].blocks[0]
    by_tag = {ir.IntegerAttr(op.operation.attributes[TAG]).value: op.operation for op in block.operations
              if TAG in op.operation.attributes}
    info = plan.info
    for g in plan.kernels:
        for m in g.ops:
            o = info.op(m)
            op = by_tag.get(tag_of(g.id, m))
            if o.kind != "reduction" or op is None or not any(u == -1 or u not in g.ops for u in o.users):
                continue
            k = len(op.operands) - 1
            fill = op.operands[k].owner
            if isinstance(fill, ir.Block) or fill.name != "linalg.fill" or len(list(fill.results[0].uses)) < 2:
                continue
            fill = fill.operation if hasattr(fill, "operation") else fill
            dest = fill.operands[1]
            with ir.InsertionPoint(op), op.location:
                empty = empty_like(dest)
            clone = fill.clone(ip=ir.InsertionPoint(op))
            clone.operands[1] = empty
            op.operands[k] = clone.results[0]


def _tiles_like_root(info, g: Kernel, m: int, corr: dict, tiled: set[int], seen: frozenset = frozenset()) -> bool:
    """Whether every reading of member `m` in kernel `g` (one fused copy each) takes the root's
    output tile: each dim of `m`'s result moves with a tiled root loop exactly when the root's
    output dim of the same position does, and its reader's copy does too (a reader fused whole,
    for a read of one fixed row, makes its producers whole: `t = exp(x) + x; t * t[-1:]`)."""
    root = info.op(g.root)
    for c in g.ops:
        if c not in corr:
            continue
        cons = info.op(c)
        for k, p in enumerate(cons.producers):
            if p != m or k >= len(cons.operand_loops):
                continue
            dims = cons.operand_loops[k]              # per dim of m's result: c's loops indexing it
            for r in tiled:
                for t, loops in enumerate(dims):
                    if bool(loops & corr[c].get(r, frozenset())) != (r in root.result_loops[t]):
                        return False
            if c in (g.root, *g.siblings) or c in seen:
                continue
            if len(cons.result_loops) != len(root.result_loops):     # a reduction: whole unless it moves
                if not all(corr[c].get(r) for r in tiled):          # with every tiled loop
                    return False
            elif not _tiles_like_root(info, g, c, corr, tiled, seen | {m}):
                return False
    return True


def group_steps(plan: FusionPlan, g: Kernel) -> list[Step]:
    """The steps that tile one kernel (none for a kernel of one block: serial, or a one-row row
    kernel, wrapped at the gpu stage)."""
    steps: list[Step] = []
    gpu = plan.target == "gpu"
    if any(g.block_tiles):
        k = g.id
        steps.append(match_tag(f"r{k}", tag_of(k, g.root)))
        mapping = _mapping(g, "block") if gpu else ""
        tiled = f"t{k}" if not g.siblings else f"t{k}_root"
        steps.append(Step(f"%{tiled}, %f{k}_0 = transform.structured.tile_using_forall %r{k} tile_sizes "
                          f"{list(g.block_tiles)}{mapping} : ({ANY}) -> ({ANY}, {ANY})"))
        # horizontal fusion: each sibling tiled alike, its loop fused into the root's before any
        # producer is (they then fuse into the one loop, and CSE merges the copies two roots read)
        loop = _fuse_siblings(steps, plan, g, g.block_tiles, mapping, f"f{k}_0", "root", "b")
        if g.siblings:                   # fusing consumed the loops' handles and those of their ops
            steps.append(Step(f'%t{k} = transform.structured.match attributes {{"{TAG}" = {tag_of(k, g.root)} : i64}} '
                              f"in %{loop} : ({ANY}) -> {ANY}"))
        producers = [m for m in sorted(g.ops, reverse=True) if m != g.root and m not in g.siblings]
        for n, p in enumerate(producers):
            steps.append(match_tag(f"p{k}_{n}", tag_of(k, p)))
            steps.append(Step(f"%q{k}_{n}, %f{k}_{n + 1} = transform.structured.fuse_into_containing_op "
                              f"%p{k}_{n} into %{loop} : ({ANY}, {ANY}) -> ({ANY}, {ANY})"))
            loop = f"f{k}_{n + 1}"
            if len(plan.info.op(p).users) > 1:
                # a producer is fused once per use: merge the copies before its own producers are
                # fused, or a chain of values used twice doubles at every step
                steps.append(Step(f"transform.apply_cse to %{loop} : {ANY}"))
        block_loop = loop
        steps.append(Step(f"%g{k} = transform.param.constant {k} : i64 -> !transform.param<i64>"))
        steps.append(Step(f'transform.annotate %{loop} "{GROUP}" = %g{k} : {ANY}, !transform.param<i64>'))
        if gpu and any(g.thread_tiles) and g.config.mlir_threads:
            steps.append(Step(f"%tt{k}, %h{k}_0 = transform.structured.tile_using_forall %t{k} tile_sizes "
                              f"{list(g.thread_tiles)}{_mapping(g, 'thread')} : ({ANY}) -> ({ANY}, {ANY})"))
            loop = _fuse_siblings(steps, plan, g, g.thread_tiles, _mapping(g, "thread"), f"h{k}_0", block_loop, "t")
            for n in range(len(producers)):
                steps.append(Step(f"%qq{k}_{n}, %h{k}_{n + 1} = transform.structured.fuse_into_containing_op "
                                  f"%q{k}_{n} into %{loop} : ({ANY}, {ANY}) -> ({ANY}, {ANY})"))
                loop = f"h{k}_{n + 1}"
    return steps


def _fuse_siblings(steps: list[Step], plan: FusionPlan, g: Kernel, root_tiles, mapping: str, loop: str,
                   scope: str, level: str) -> str:
    """Tile each of `g`'s siblings (found in handle `scope`) with the root's `root_tiles` over
    its own loops and fuse its forall into `loop`; returns the fused loop's handle."""
    k = g.id
    for i, s in enumerate(g.siblings):
        tiles = sibling_tiles(plan.info, g.root, s, root_tiles)
        if sum(1 for t in tiles if t) != sum(1 for t in root_tiles if t):
            raise CompilerInternalError("tiled", f"kernel {k}: sibling %{s} cannot take the tiles {list(root_tiles)}")
        name = f"{level}{k}_{i}"
        steps.append(Step(f'%s{name} = transform.structured.match attributes {{"{TAG}" = {tag_of(k, s)} : i64}} '
                          f"in %{scope} : ({ANY}) -> {ANY}"))
        steps.append(Step(f"%ts{name}, %fs{name} = transform.structured.tile_using_forall %s{name} tile_sizes "
                          f"{tiles}{mapping} : ({ANY}) -> ({ANY}, {ANY})"))
        if plan.dynamic:
            steps.append(Step(f'%fn{name} = transform.structured.match ops{{["func.func"]}} in %root : ({ANY}) -> {ANY}'))
            steps.append(Step(f"transform.apply_patterns to %fn{name} {{ "
                              "transform.apply_patterns.memref.resolve_ranked_shaped_type_result_dims "
                              f"transform.apply_patterns.canonicalization }} : {ANY}"))
            steps.append(Step(f"transform.apply_cse to %fn{name} : {ANY}"))
        steps.append(Step(f"%fz{name} = transform.loop.fuse_sibling %fs{name} into %{loop} : ({ANY}, {ANY}) -> {ANY}"))
        loop = f"fz{name}"
    return loop


# canonicalize, CSE and bufferize the whole module, after every kernel is tiled
TAIL = [Step(f'%fn = transform.structured.match ops{{["func.func"]}} in %root : ({ANY}) -> {ANY}'),
        Step(f"transform.apply_patterns to %fn {{ transform.apply_patterns.canonicalization }} : {ANY}"),
        Step(f"transform.apply_cse to %fn : {ANY}"),
        Step(f"%buf = transform.bufferization.one_shot_bufferize %root {{bufferize_function_boundaries = "
             f"true, function_boundary_type_conversion = 1 : i32}} : ({ANY}) -> {ANY}")]


def row_script(gid: int, phases: list[Phase]) -> list[Step]:
    """A row kernel's thread level: a forall per phase (t -> thread x, the block's rows ->
    thread y), its producers fused in, consumers first."""
    steps = []
    for n, ph in enumerate(phases):
        k = f"{gid}_{n}"
        steps.append(_match_part(f"ph{k}", *ph.op))
        if ph.columns:      # a column kernel: t on thread y, the block's rows (its columns) on thread x
            dims = "[#gpu.thread<x>, #gpu.thread<y>]" if ph.thread_rows else "[#gpu.thread<y>]"
        else:
            dims = "[#gpu.thread<y>, #gpu.thread<x>]" if ph.thread_rows else "[#gpu.thread<x>]"
        steps.append(Step(f"%pt{k}, %pf{k}_0 = transform.structured.tile_using_forall %ph{k} tile_sizes "
                          f"{list(ph.tiles)} (mapping = {dims}) : ({ANY}) -> ({ANY}, {ANY})"))
        for i, (tag, part) in enumerate(ph.fused):
            steps.append(_match_part(f"pp{k}_{i}", tag, part))
            steps.append(Step(f"%pq{k}_{i}, %pf{k}_{i + 1} = transform.structured.fuse_into_containing_op "
                              f"%pp{k}_{i} into %pf{k}_{i} : ({ANY}, {ANY}) -> ({ANY}, {ANY})"))
        copies = [(tag, part) for tag, part in ph.fused if part != "init"]
        if ph.along is not None and copies:
            # a thread's chunks one at a time, its copies computed per element: a whole row's
            # worth per thread would live in local memory once LLVM stops unrolling the loop
            # (with runs, a run's elements one at a time too: loops q and v, copies fused into v's)
            along = [0] * len(ph.tiles)
            along[ph.along] = 1
            outer = ""
            if ph.run is not None:
                along[ph.run] = 1
                outer = f"%pjo{k}, "
            steps.append(Step(f'%pj{k} = transform.structured.match attributes {{"{TAG}" = {ph.op[0]} : i64, '
                              f'"{PART}" = "{ph.op[1]}"}} in %pf{k}_{len(ph.fused)} : ({ANY}) -> {ANY}'))
            steps.append(Step(f"%pjt{k}, {outer}%pjl{k}_0 = transform.structured.tile_using_for %pj{k} tile_sizes "
                              f"{along} : ({ANY}) -> ({ANY}, {ANY}{', ' + ANY if outer else ''})"))
            for i, (tag, part) in enumerate(copies):
                steps.append(Step(f'%pjp{k}_{i} = transform.structured.match attributes {{"{TAG}" = {tag} : i64, '
                                  f'"{PART}" = "{part}"}} in %pf{k}_{len(ph.fused)} : ({ANY}) -> {ANY}'))
                steps.append(Step(f"%pjq{k}_{i}, %pjl{k}_{i + 1} = transform.structured.fuse_into_containing_op "
                                  f"%pjp{k}_{i} into %pjl{k}_{i} : ({ANY}, {ANY}) -> ({ANY}, {ANY})"))
        steps.append(Step(f"%pg{k} = transform.param.constant {gid} : i64 -> !transform.param<i64>"))
        steps.append(Step(f'transform.annotate %pf{k}_{len(ph.fused)} "{THREADS_OF}" = %pg{k} : {ANY}, '
                          f"!transform.param<i64>"))
    return steps


def _match_part(name: str, tag: int, part: str) -> Step:
    return Step(f'%{name} = transform.structured.match attributes {{"{TAG}" = {tag} : i64, "{PART}" = "{part}"}} '
                f'in %root : ({ANY}) -> {ANY}')


def _mapping(g: Kernel, level: str) -> str:
    dims = "zyx"[3 - len(g.mapped):]
    return " (mapping = [" + ", ".join(f"#gpu.{level}<{d}>" for d in dims) + "])"


def tile_and_fuse(module: ir.Module, plans: dict[str, FusionPlan]) -> None:
    """Apply every chain's plan to its func (tensor level), then bufferize. Stage `tiled`."""
    with module.context, ir.Location.unknown():
        pad_to_generic(module)
        funcs = [(f, plans[ir.StringAttr(f.attributes["sym_name"]).value]) for f in module.body.operations]
        for f, plan in funcs:
            write_in_place(f, plan)
            tag_groups(f, plan)
            own_destinations(f, plan)
            own_inits(f, plan)
            for g in plan.kernels:
                if g.config.drops_init:
                    _scan_without_init(f, g)
                if g.config.at_root:
                    _gather_before_root(f, g)
                steps = group_steps(plan, g)
                if steps:
                    _apply_alone(f, g, steps)
        rows = [(f, plan, g) for f, plan in funcs for g in plan.kernels if g.config.splits_rows]
        if not rows:
            apply_script(module, script_text(TAIL), "tiled")
            return
        apply_script(module, script_text(TAIL[:-1]), "tiled")   # CSE merges producers fused per use
        second = []
        for f, plan, g in rows:
            second += row_script(g.id, split_rows(f, g, plan.info))
        apply_script(module, script_text(second + TAIL), "tiled")


def _gather_before_root(func_op, g: Kernel) -> None:
    """Move an attention kernel's ops (no MLIR tiling gathers them) to just before its root, in
    their order. The template evaluates them where it reads them, at the root; left where the
    chain had them (Q's bias add after Q's projection, K's projection kernels after it), one-shot
    bufferization would see their buffers dead before the kernels in between run, and give one
    of those kernels the same buffer (two layers' split projections: K's combine wrote over Q's
    before the attention read it; a GQA's K permute, read by the rotary's tensor.extract, left
    before V's projection, which then wrote its result over K's). An op something outside the
    kernel reads stays; a read inside a member's body (a gather's tensor.extract) is the member's."""
    tags = {tag_of(g.id, m) for m in g.ops}
    block = func_op.regions[0].blocks[0]
    mine = [op.operation for op in block.operations
            if TAG in op.operation.attributes and ir.IntegerAttr(op.operation.attributes[TAG]).value in tags]
    root = next((op for op in mine if ir.IntegerAttr(op.attributes[TAG]).value == tag_of(g.id, g.root)), None)
    if root is None:
        return
    def member(o) -> bool:
        o = o.operation if hasattr(o, "operation") else o
        while o.parent is not None and o.parent.name != "func.func":     # up to the function's op
            o = o.parent.operation if hasattr(o.parent, "operation") else o.parent
        return TAG in o.attributes and ir.IntegerAttr(o.attributes[TAG]).value in tags

    for op in mine:
        if op == root:
            break
        if all(member(use.owner) for r in op.results for use in r.uses):
            op.move_before(root)


def _scan_without_init(func_op, g: Kernel) -> None:
    """A scan's template writes every element of its output and reads none first: its init
    (a fill, which every thread of its launch would run) becomes a tensor.empty."""
    block = func_op.regions[0].blocks[0]
    for op in block.operations:
        op = op.operation
        if TAG in op.attributes and ir.IntegerAttr(op.attributes[TAG]).value == tag_of(g.id, g.root):
            init = op.operands[len(op.operands) - 1]
            with ir.InsertionPoint(op), op.location:
                op.operands[len(op.operands) - 1] = empty_like(init)
            return


def _apply_alone(func_op, g: Kernel, steps: list[Step]) -> None:
    """Apply one kernel's steps with its ops moved into a scratch module of their own, then move
    the result back where the kernel's last op was. fuse_into_containing_op prints its producer
    and loop into a remark on every call, and printing verifies and numbers the whole module
    the op is in: on the chain's own module that made the stage quadratic in the chain's length.
    Values from outside the kernel become the scratch function's arguments, and the results
    read outside it its return values (their readers wait on placeholders meanwhile), so the
    transforms see the kernel as a function of its own."""
    tags = {tag_of(g.id, m) for m in g.ops}
    block = func_op.regions[0].blocks[0]
    mine = [op.operation for op in block.operations
            if TAG in op.operation.attributes and ir.IntegerAttr(op.operation.attributes[TAG]).value in tags]
    if not mine:
        return
    members = set(mine)
    after, seen_last = None, False            # where the kernel goes back: before the first op
    for op in block.operations:               # after its last one that is not the kernel's
        op = op.operation
        if op == mine[-1]:
            seen_last = True
        elif seen_last and op not in members:
            after = op
            break

    def inside(op) -> bool:
        while op is not None and op != func_op:
            if op in members:
                return True
            op = op.parent
        return False

    def defined_inside(v) -> bool:
        owner = v.owner
        return inside(owner.owner if isinstance(owner, ir.Block) else owner.operation)

    external: dict = {}                       # outside value -> its position among the arguments
    uses: list = []                           # (op, operand index, outside value)

    def collect(op):
        for i, v in enumerate(op.operands):
            if not defined_inside(v):
                external.setdefault(v, len(external))
                uses.append((op, i, v))
        return ir.WalkResult.ADVANCE
    for op in mine:
        op.walk(collect)
    results: dict = {}                        # kernel result read outside -> its position among the returns
    readers: list = []                        # (op, operand index, position)
    for op in mine:
        for r in op.results:
            for u in list(r.uses):
                if not inside(u.owner.operation):
                    readers.append((u.owner, u.operand_number, results.setdefault(r, len(results))))
    ins, outs = list(external), list(results)
    scratch = ir.Module.parse("module {\n  func.func @kernel() {\n    func.return\n  }\n}", context=func_op.context)
    sf = scratch.body.operations[0]
    sblock = sf.regions[0].blocks[0]
    args = [sblock.add_argument(v.type, func_op.location) for v in ins]
    sf.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get([v.type for v in ins], [r.type for r in outs]))
    empty_ret = sblock.operations[0].operation
    with ir.InsertionPoint(block.operations[0]), func_op.location:
        holders = [ir.Operation.create("builtin.unrealized_conversion_cast", results=[r.type], operands=[])
                   for r in outs]
    for owner, i, k in readers:
        owner.operands[i] = holders[k].results[0]
    for op in mine:
        op.move_before(empty_ret)
    for op, i, v in uses:
        op.operands[i] = args[external[v]]
    with ir.InsertionPoint(empty_ret), func_op.location:
        ret = ir.Operation.create("func.return", operands=outs)
    empty_ret.erase()
    try:
        apply_script(scratch, script_text(steps), "tiled")
    finally:                                  # a failure's dump shows the whole function too
        new = list(ret.operands)
        ret.erase()
        for op in list(sblock.operations):
            op.operation.move_before(after)   # the function's return at the latest
        for v, a in zip(ins, args):
            a.replace_all_uses_with(v)
        for h, v in zip(holders, new):
            h.results[0].replace_all_uses_with(v)
            h.erase()
