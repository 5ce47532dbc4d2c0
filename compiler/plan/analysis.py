"""Read the graph-stage linalg IR into plain data the planner can reason about.

Every payload op of a chain's func gets a `fusec.id` attribute (its position), so plans and
transform scripts can name ops without holding IR handles. Loop structure is read from a
generalized copy of the module: every linalg op there is a linalg.generic with explicit
indexing maps, so matmul, conv and fill need no special cases.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import CompilerInternalError
from ..mlir import PassManager, ir
from ..marks import NOTE, OP_ID, SCAN, SCAN_AXIS

VIEW_OPS = ("tensor.expand_shape", "tensor.collapse_shape", "tensor.reshape")
IGNORED = ("tensor.empty", "arith.constant", "func.return", "tensor.dim")
# convolutions: conv2d, and conv2d with groups (its operands viewed [N, G, C/G, H, W], [G, F/G, C/G, KH, KW])
CONVS = ("linalg.conv_2d_nchw_fchw", "linalg.conv_2d_ngchw_gfchw")
CONTRACTIONS = ("linalg.matmul", "linalg.batch_matmul", *CONVS, "linalg.batch_matmul_transpose_b",
                "linalg.matmul_transpose_b", "linalg.batch_reduce_matmul", "linalg.contract")
# body ops that cost nothing at run time (constants, casts between index and integers, compares
# feeding selects are counted through the select)
FREE_OPS = ("constant", "index_cast", "index_castui", "bitcast", "extf", "truncf", "sitofp", "uitofp", "fptosi",
            "fptoui", "extsi", "extui", "trunci")


@dataclass(frozen=True)
class OpInfo:
    id: int
    name: str                                   # the IR op name: linalg.generic, linalg.matmul, tensor.pad...
    kind: str                                   # elementwise | reduction | contraction | fill | pad | view
    loops: tuple[int, ...]                      # static loop ranges (empty for pad/view)
    iterators: tuple[str, ...]                  # 'parallel' | 'reduction' per loop
    producers: tuple[int | None, ...]           # per operand (ins, then outs): producing op id, or None
    operand_loops: tuple[tuple[frozenset, ...], ...]   # per operand, per tensor dim: loops indexing it
    result_loops: tuple[frozenset, ...]         # per dim of the (first) result: loops indexing it
    users: tuple[int, ...]                      # op ids reading the result; -1 when returned
    result_shape: tuple[int, ...]
    elem_bytes: int
    body_ops: tuple[str, ...]                   # payload ops of a generic's body (for costs and notes)
    loc: str
    operand_keys: tuple[str, ...] = ()          # per operand: "arg3", "%5:0" (op 5's result 0), "empty"...
    operand_shapes: tuple[tuple[int, ...], ...] = ()
    operand_elem_bytes: tuple[int, ...] = ()
    operand_dtypes: tuple[str, ...] = ()        # per operand: its element type (f32, f16, bf16, i64...)
    n_inputs: int = 0                           # operands before the outs (inits)
    result_shapes: tuple[tuple[int, ...], ...] = ()
    reduction_ops: tuple[str, ...] = ()         # body ops that combine into an accumulator (reductions)
    view_dims: tuple[int | None, ...] = ()      # views: per result dim, the source dim it is (None: a unit dim)
    fill_value: float | None = None             # fills: the constant they fill with (None: not a constant)
    note: str = ""                              # what a graph pass did to it (its `fusec.note`)
    body_expr: tuple = ()                       # generics: each yielded value as a tree (body_tree)
    # tensors the body reads with tensor.extract at computed indices (a gather's table; what a
    # concat or a reversed slice reads that inline-indexed-reads did not inline): per tensor
    # (operand key, bytes read at most, the compute op behind it through views or None). Such a
    # producer is a dependency the kernel cannot fuse: it must be written before the kernel runs.
    indirect: tuple[tuple[str, int, int | None], ...] = ()
    scan: str = ""                              # a running sum/product (lowering's `fusec.scan`): cumsum, cumprod
    scan_axis: int = -1                         # its axis: the output dim it runs along (loop `len(loops)-1` is j)
    window: tuple[int, ...] = ()                # convs: (stride h, stride w, dilation h, dilation w)

    @property
    def points(self) -> int:
        """Points of the iteration space (one body execution each); a scan's body runs once per
        output element (its generic's extra loop over j <= i is what it means, not what runs)."""
        n = 1
        for x in (self.loops[:-1] if self.scan else self.loops):
            n *= max(1, x)
        return n

    @property
    def result_bytes(self) -> int:
        return sum(_prod(s) * self.elem_bytes for s in (self.result_shapes or (self.result_shape,)))

    def operand_bytes(self, k: int) -> int:
        return _prod(self.operand_shapes[k]) * self.operand_elem_bytes[k]

    def flop_counts(self) -> dict[str, int]:
        """Body ops that cost FLOPs, by short name (addf, exp, ...), per point. A contraction's
        multiply-add counts as one `mac`, a reduction's combining op as one `reduce`."""
        if self.kind == "contraction":
            return {"mac": 1}
        out: dict[str, int] = {}
        combining = list(self.reduction_ops)
        for b in self.body_ops:
            dialect, _, op = b.partition(".")
            if dialect not in ("arith", "math") or op in FREE_OPS:
                continue
            if op in combining:
                combining.remove(op)
                op = "reduce"
            out[op] = out.get(op, 0) + 1
        return out

    @property
    def indirect_ops(self) -> frozenset[int]:
        """The compute ops whose results this op reads at computed indices."""
        return frozenset(p for _, _, p in self.indirect if p is not None)

    @property
    def parallel_loops(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.iterators) if t == "parallel")

    @property
    def is_compute(self) -> bool:
        return self.kind in ("elementwise", "reduction", "contraction", "pad")

    @property
    def label(self) -> str:
        if self.kind == "contraction":
            return "contract" if self.name == "linalg.generic" else self.name.split(".", 1)[1]
        if self.name == "linalg.generic" or self.kind in ("elementwise", "reduction"):
            core = [b.split(".", 1)[1] for b in self.body_ops if b.split(".")[0] in ("arith", "math")
                    and not b.endswith("constant")]
            head = "reduce" if self.kind == "reduction" else "map"
            shown = ",".join(dict.fromkeys(core))
            if not shown:
                return "copy" if head == "map" else "reduce"
            return f"{head}({shown[:40]}{'…' if len(shown) > 40 else ''})"
        return self.name.split(".", 1)[1]


@dataclass(frozen=True)
class ChainInfo:
    func: str
    ops: tuple[OpInfo, ...]

    def op(self, i: int) -> OpInfo:
        return self.ops[i]


def payload_ops(func_op) -> list:
    """The ops of a func body that a plan talks about, in program order."""
    out = []
    for op in func_op.regions[0].blocks[0].operations:
        name = op.operation.name
        if name in IGNORED:
            continue
        if name.startswith("linalg.") or name == "tensor.pad" or name in VIEW_OPS:
            out.append(op.operation)
            continue
        raise CompilerInternalError("plan", f"the planner has no rule for '{name}' at {op.location}")
    return out


def tag_ops(module: ir.Module) -> None:
    """Give every payload op its `fusec.id` (position in its func)."""
    i64 = ir.IntegerType.get_signless(64, module.context)
    for f in module.body.operations:
        for i, op in enumerate(payload_ops(f)):
            op.attributes[OP_ID] = ir.IntegerAttr.get(i64, i)


def _prod(shape) -> int:
    n = 1
    for x in shape:
        n *= max(0, x)
    return n


def _dims(expr) -> frozenset:
    return frozenset(int(d) for d in re.findall(r"d(\d+)", str(expr)))


# Element types a target stores wider than their width: the cpu target's f16 and bf16 arrays are
# float32 (Numba's CPU target has no float16 and BLAS reads neither; the host function converts
# at the boundary: emit/module.py, _narrow), so its plans price their traffic at 4 bytes an
# element; cuda and cuda-sim hold the 16 bits.
STORAGE_BYTES = {"cpu": {"f16": 4, "bf16": 4}}


def _elem_bytes(t, storage: dict[str, int] | None = None) -> int:
    if storage:
        wide = storage.get(_elem_name(t))
        if wide:
            return wide
    m = re.search(r"x?([fi])(\d+)>", str(t))
    return max(1, int(m.group(2)) // 8) if m else 4


def _elem_name(t) -> str:
    m = re.search(r"(bf16|[fi]\d+)>", str(t))
    return m.group(1) if m else str(t)


def _shape(t) -> tuple[int, ...]:
    try:
        return tuple(ir.ShapedType(t).shape)
    except (ValueError, TypeError):
        return ()


def analyze(module: ir.Module, target: str | None = None) -> dict[str, ChainInfo]:
    """ChainInfo per func of a tagged graph-stage module (the module itself is not changed); a
    `target` that stores an element type wider (STORAGE_BYTES) has its bytes counted so."""
    storage = STORAGE_BYTES.get(target or "", {})
    with module.context:
        generic = ir.Module.parse(str(module))
        PassManager.parse("builtin.module(func.func(linalg-generalize-named-ops))").run(generic.operation)
    out = {}
    for f_orig, f_gen in zip(module.body.operations, generic.body.operations):
        name = ir.StringAttr(f_orig.attributes["sym_name"]).value
        orig, gen = payload_ops(f_orig), payload_ops(f_gen)
        index = {id_: k for k, id_ in enumerate(map(_key, orig))}          # op -> its id, once per func
        out[name] = ChainInfo(name, tuple(_info(i, o, g, index, storage) for i, (o, g) in enumerate(zip(orig, gen))))
    return out


def _info(i: int, orig, gen, index: dict, storage: dict[str, int]) -> OpInfo:
    producers = tuple(_producer(v, index) for v in orig.operands)
    keys = tuple(_operand_key(v, index) for v in orig.operands)
    shapes = tuple(_shape(v.type) for v in orig.operands)
    ebytes = tuple(_elem_bytes(v.type, storage) for v in orig.operands)
    dtypes = tuple(_elem_name(v.type) for v in orig.operands)
    rshapes = tuple(_shape(r.type) for r in orig.results)
    extra = dict(operand_keys=keys, operand_shapes=shapes, operand_elem_bytes=ebytes, operand_dtypes=dtypes,
                 result_shapes=rshapes)
    users = []
    for r in orig.results:
        for use in r.uses:
            users.append(index.get(_key(_payload_owner(use.owner)), -1))
    name = orig.name
    shape = _shape(orig.results[0].type) if len(orig.results) else ()
    eb = _elem_bytes(orig.results[0].type, storage) if len(orig.results) else 4
    if name == "tensor.pad":
        # a pad is its own parallel loop nest over its result; source dim t moves with loop t
        dims = tuple(frozenset({t}) for t in range(len(shape)))
        return OpInfo(i, name, "pad", shape, ("parallel",) * len(shape), producers, (dims,), dims,
                      tuple(sorted(set(users))), shape, eb, (), str(orig.location), n_inputs=1, **extra)
    if name in VIEW_OPS:
        return OpInfo(i, name, "view", (), (), producers, (), (), tuple(sorted(set(users))), shape, eb, (),
                      str(orig.location), n_inputs=1, view_dims=_view_dims(orig, shapes[0], shape), **extra)
    maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(gen.attributes["indexing_maps"])]
    iters = tuple("reduction" if "reduction" in str(a) else "parallel" for a in ir.ArrayAttr(gen.attributes["iterator_types"]))
    operand_loops = tuple(tuple(_dims(e) for e in m.results) for m in maps)
    loops = [0] * len(iters)
    for v, m in zip(gen.operands, maps):
        for e, size in zip(m.results, _shape(v.type)):
            if re.fullmatch(r"d\d+", str(e)):
                loops[int(str(e)[1:])] = size
    body = tuple(op.name for op in gen.regions[0].blocks[0].operations)
    if name == "linalg.fill":
        kind = "fill"
    elif name in CONTRACTIONS or ("reduction" in iters and SCAN not in orig.attributes
                                  and _is_contraction(gen, maps, iters)):
        kind = "contraction"              # (a scan of a product, cumsum(x * x[-1:]), is a scan)
    elif "reduction" in iters:
        kind = "reduction"
    else:
        kind = "elementwise"
    n_in = len(gen.operands) - len(gen.results)
    extra["indirect"] = _indirect_reads(orig, index, _prod(loops) * eb, storage)
    return OpInfo(i, name, kind, tuple(loops), iters, producers, operand_loops, operand_loops[-1],
                  tuple(sorted(set(users))), shape, eb, body, str(orig.location), n_inputs=n_in,
                  reduction_ops=_combining_ops(gen, n_in) if kind == "reduction" else (),
                  fill_value=_fill_value(orig) if kind == "fill" else None,
                  note=ir.StringAttr(orig.attributes[NOTE]).value if NOTE in orig.attributes else "",
                  scan=ir.StringAttr(orig.attributes[SCAN]).value if SCAN in orig.attributes else "",
                  scan_axis=ir.IntegerAttr(orig.attributes[SCAN_AXIS]).value if SCAN_AXIS in orig.attributes else -1,
                  body_expr=body_tree(gen, n_in), window=conv_window(orig), **extra)


BODY_TREE_OPS = 32      # longer bodies (a fused elementwise chain of hundreds of ops) get no tree


def _constant(op) -> tuple:
    return ("const", str(op.attributes["value"]).split(" :")[0])


def body_tree(gen, n_in: int) -> tuple:
    """Each value a generic's body yields, as nested tuples: ("in", k) / ("out", k) for its
    block arguments, ("const", text), ("index", dim), else (short op name, *operands); a compare
    is ("cmpf:<predicate>", a, b). Plans match algebra on these (plan/attention.py); a body of
    more than BODY_TREE_OPS ops has none (the trees stay shallow: hashing and comparing them
    recurse)."""
    block = gen.regions[0].blocks[0]
    ops = [o.operation for o in block.operations]
    if not ops or ops[-1].name != "linalg.yield" or len(ops) > BODY_TREE_OPS:
        return ()
    trees: dict = {}

    def tree(v):
        owner = v.owner
        if isinstance(owner, ir.Block):
            k = ir.BlockArgument(v).arg_number
            return ("in", k) if k < n_in else ("out", k - n_in)
        key = _key(owner)
        if key in trees:
            return trees[key]
        o = owner.operation if hasattr(owner, "operation") else owner
        return _constant(o) if o.name == "arith.constant" else ("?", "outside")   # (one moved out of the body)

    for op in ops[:-1]:                  # program order: operands before their users
        name = op.name.split(".", 1)[-1]
        if name == "constant":
            out = _constant(op)
        elif name == "index":
            out = ("index", ir.IntegerAttr(op.attributes["dim"]).value)
        elif op.regions:
            out = ("?", name)
        else:
            if "predicate" in op.attributes:
                name = f"{name}:{str(op.attributes['predicate']).split(' :')[0]}"
            out = (name,) + tuple(tree(x) for x in op.operands)
        trees[_key(op)] = out
    return tuple(tree(v) for v in ops[-1].operands)


def _payload_owner(op):
    """The op itself, or, for an op nested in a payload op's body (a tensor.extract reading a
    value at computed indices), that payload op: the value's reader as the plan sees it."""
    op = op.operation if hasattr(op, "operation") else op
    while op.parent is not None and op.parent.name not in ("func.func", "builtin.module"):
        op = op.parent
    return op


def _indirect_reads(op, index: dict, most: int, storage: dict[str, int]) -> tuple:
    """(operand key, bytes, compute op behind it or None) per tensor the body extracts from."""
    found: dict = {}

    def visit(inner):
        inner = inner.operation if hasattr(inner, "operation") else inner
        if inner.name == "tensor.extract":
            v = inner.operands[0]
            if not _defined_in(v, op):
                found.setdefault(v, None)
        return ir.WalkResult.ADVANCE
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                inner.operation.walk(visit)
    out = []
    for v in found:
        owner, behind = v.owner, None
        while not isinstance(owner, ir.Block):
            behind = index.get(_key(owner))
            if owner.name not in VIEW_OPS:
                break
            owner = owner.operands[0].owner
            behind = None
        t = _shape(v.type)
        out.append((_operand_key(v, index), min(_prod(t) * _elem_bytes(v.type, storage), most), behind))
    return tuple(out)


def _defined_in(value, op) -> bool:
    owner = value.owner
    inner = owner.owner if isinstance(owner, ir.Block) else owner
    while inner is not None:
        inner = inner.operation if hasattr(inner, "operation") else inner
        if inner == op:
            return True
        inner = inner.parent
    return False


def _view_dims(op, source: tuple[int, ...], result: tuple[int, ...]) -> tuple[int | None, ...]:
    """Per result dim of a reshape view, the source dim it is when its reassociation group has
    one non-unit dim on both sides (None otherwise: a unit dim, or a real reshape)."""
    if "reassociation" not in op.attributes:
        return (None,) * len(result)
    groups = [[int(ir.IntegerAttr(d).value) for d in ir.ArrayAttr(g)] for g in ir.ArrayAttr(op.attributes["reassociation"])]
    expand = op.name == "tensor.expand_shape"
    out: list[int | None] = [None] * len(result)
    for k, group in enumerate(groups):
        many, one = (result, source) if expand else (source, result)
        big = [d for d in group if many[d] != 1]
        if len(big) == 1 and one[k] == many[big[0]]:
            if expand:
                out[big[0]] = k
            else:
                out[k] = big[0]
    return tuple(out)


def conv_window(op) -> tuple[int, ...]:
    """A conv's (stride h, stride w, dilation h, dilation w); () for other ops."""
    if op.name not in CONVS:
        return ()
    pairs = [[int(x) for x in ir.DenseIntElementsAttr(op.attributes[a])] if a in op.attributes else [1, 1]
             for a in ("strides", "dilations")]
    return tuple(pairs[0] + pairs[1])


def _fill_value(op) -> float | None:
    """The scalar a linalg.fill writes, when it is an arith.constant."""
    owner = op.operands[0].owner
    if isinstance(owner, ir.Block) or owner.name != "arith.constant":
        return None
    attr = owner.attributes["value"]
    for cls in (ir.FloatAttr, ir.IntegerAttr):
        try:
            return float(cls(attr).value)
        except (ValueError, TypeError):
            continue
    return None


def _is_contraction(gen, maps, iters) -> bool:
    """A generic that multiplies two inputs which both vary along a reduction loop (batched matmul forms)."""
    red = {i for i, t in enumerate(iters) if t == "reduction"}
    n_in = len(maps) - len(gen.results)
    par = {i for i, t in enumerate(iters) if t == "parallel"}
    # an input the body never reads (a pooling window's, which only gives its loops their extents) is no operand
    args = gen.regions[0].blocks[0].arguments
    varying = [m for k, m in enumerate(maps[:n_in])
               if any(_dims(e) & red for e in m.results) and _has_uses(args[k])]
    body = {op.name for op in gen.regions[0].blocks[0].operations}
    # sum(a * b) over a shared iteration space is a reduction; a contraction has an operand that
    # does not vary along some output loop (A[i,k] ignores j), which is what makes fusing into it costly
    missing = any(par - set().union(*[_dims(e) for e in m.results]) for m in varying)
    return len(varying) >= 2 and missing and bool(body & {"arith.mulf", "arith.muli"})


def _has_uses(value) -> bool:
    for _ in value.uses:
        return True
    return False


def _combining_ops(gen, n_in: int) -> tuple[str, ...]:
    """Short names of the body ops that read an accumulator (an outs block argument)."""
    block = gen.regions[0].blocks[0]
    out = []
    for op in block.operations:
        if op.name.split(".")[0] in ("arith", "math") and any(_is_acc(v, n_in) for v in op.operands):
            out.append(op.name.split(".", 1)[1])
    return tuple(out)


def _is_acc(v, n_in: int) -> bool:
    """An outs argument of the body (by number: naming values prints the whole module)."""
    return isinstance(v.owner, ir.Block) and ir.BlockArgument(v).arg_number >= n_in


def _operand_key(value, index) -> str:
    owner = value.owner
    if isinstance(owner, ir.Block):
        return f"arg{ir.BlockArgument(value).arg_number}"
    k = index.get(_key(owner))
    if k is None:
        return owner.name.split(".", 1)[-1]          # empty, constant...
    return f"%{k}:{ir.OpResult(value).result_number}"


def _key(op) -> int:
    return hash(op.operation if hasattr(op, "operation") else op)


def _producer(value, index) -> int | None:
    owner = value.owner
    if isinstance(owner, ir.Block):
        return None
    return index.get(_key(owner))


def sinks(info: ChainInfo, members) -> tuple[int, ...]:
    """A kernel's ops that no other member reads (program order): its root (the last) and its
    siblings, which horizontal fusion put beside the root, tiled alike (sibling_tiles)."""
    members = set(members)
    return tuple(m for m in sorted(members) if info.op(m).is_compute and info.op(m).kind not in ("fill", "pad")
                 and not any(u in members for u in info.op(m).users))


def siblings(info: ChainInfo, members) -> tuple[int, ...]:
    """The kernel's sinks but its root (the last compute op)."""
    found = sinks(info, members)
    root = max(m for m in members if info.op(m).is_compute)
    return tuple(m for m in found if m != root)


def sibling_loop(info: ChainInfo, root: int, sib: int, loop: int) -> bool:
    """Whether a sibling's loop `loop` is tiled with the root's loop of that position: both
    parallel, of one extent."""
    r, s = info.op(root), info.op(sib)
    return (loop < len(s.loops) and loop < len(r.loops) and r.loops[loop] == s.loops[loop]
            and r.iterators[loop] == "parallel" and s.iterators[loop] == "parallel")


def sibling_tiles(info: ChainInfo, root: int, sib: int, tiles: tuple[int, ...]) -> list[int]:
    """A sibling's tile sizes for the root's `tiles`: the same per position, over its own loops
    (a loop the root does not tile, or one past the root's, is not tiled)."""
    return [tiles[i] if i < len(tiles) and tiles[i] and sibling_loop(info, root, sib, i) else 0
            for i in range(len(info.op(sib).loops))]


def loop_correspondence(info: ChainInfo, root: int, members, pads: bool = False) -> dict[int, dict[int, frozenset]]:
    """For each member op: root loop -> the member's loops that move with it (pads too when
    `pads`: a pad's loops are its result dims). A sibling's loops move with the root's of their
    position (sibling_loop)."""
    skip = ("view",) if pads else ("pad", "view")
    corr = {root: {r: frozenset({r}) for r in range(len(info.op(root).loops))}}
    for s in sinks(info, members):
        if s == root:
            continue
        corr[s] = {r: frozenset({r}) if sibling_loop(info, root, s, r) else frozenset()
                   for r in range(len(info.op(root).loops))}
    order = sorted(members, reverse=True)
    for c in order:
        if c not in corr:
            continue
        cons = info.op(c)
        for k, p in enumerate(cons.producers):
            if p is None or p not in members or p in corr or info.op(p).kind in skip:
                continue
            prod = info.op(p)
            if k >= len(cons.operand_loops):
                continue
            dims = cons.operand_loops[k]
            corr[p] = {r: frozenset().union(*[prod.result_loops[t] for t, d in enumerate(dims)
                                               if t < len(prod.result_loops) and d & corr[c][r]])
                       for r in corr[c]}
    return corr


def tileable_loops(info: ChainInfo, root: int, members: set[int]) -> tuple[int, ...]:
    """Root loops that can be split across blocks without recomputing a reduction or contraction."""
    r = info.op(root)
    corr = loop_correspondence(info, root, members)
    out = []
    for loop in r.parallel_loops:
        if r.loops[loop] <= 1:
            continue
        if (all(corr.get(m, {}).get(loop) for m in members if info.op(m).kind in ("reduction", "contraction"))
                and all(sibling_loop(info, root, s, loop) for s in sinks(info, members) if s != root)):
            out.append(loop)
    return tuple(out)
