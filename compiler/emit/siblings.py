"""Sibling loops fused on the cpu target: consecutive `scf.for`s of one block over the same range,
where iteration i of each later loop touches only what iteration i of the earlier ones touched,
become one Python loop running their bodies in turn. The conditions are conservative; see
docs/ARCHITECTURE.md, "Stages and what each hands on" (the cpu target).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..mlir import ir

# views of a buffer (plan/analysis.py's VIEW_OPS are the tensor reshapes)
MEMREF_VIEW_OPS = ("memref.subview", "memref.expand_shape", "memref.collapse_shape", "memref.cast",
                   "memref.reinterpret_cast", "memref.transpose")
_PURE_PREFIXES = ("arith.", "math.", "index.")
_STRUCTURED = ("scf.for", "scf.if", "scf.yield")


@dataclass(frozen=True)
class FusedLoops:
    """Loops run as one (`loops`, in order), after `hoisted`, the ops that stood between them."""
    loops: tuple
    hoisted: tuple


@dataclass(frozen=True)
class _Access:
    root: object      # the buffer under every view
    memref: object    # the value loaded or stored through
    index: tuple
    store: bool


def operation(x):
    """The Operation of an op view (a use's owner, a block's op) or of an Operation."""
    return x.operation if hasattr(x, "operation") else x


def access(op) -> tuple | None:
    """(memref, indices, whether it stores) of a memref.load or memref.store, else None."""
    if op.name == "memref.load":
        return op.operands[0], tuple(op.operands[1:]), False
    if op.name == "memref.store":
        return op.operands[1], tuple(op.operands[2:]), True
    return None


def nested_ops(op):
    """Every op inside `op`'s regions, each before the ops inside its own regions."""
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                inner = operation(inner)
                yield inner
                yield from nested_ops(inner)


def _defining(v):
    """The op defining `v`, or None for a block argument."""
    owner = v.owner
    return None if isinstance(owner, ir.Block) else operation(owner)


def view_root(v):
    """The buffer a memref value views (through subviews, reshapes, casts and transposes)."""
    while True:
        op = _defining(v)
        if op is None or op.name not in MEMREF_VIEW_OPS:
            return v
        v = op.operands[0]


def _name(attribute) -> str:
    return attribute if isinstance(attribute, str) else attribute.name


def _pure(op) -> bool:
    return op.name.startswith(_PURE_PREFIXES) or op.name in MEMREF_VIEW_OPS or op.name == "memref.dim"


def within(operation, loop) -> bool:
    p = operation
    while p is not None:
        if p == loop:
            return True
        p = p.parent
    return False


def defined_in(v, loops) -> bool:
    owner = v.owner
    owner = operation(owner.owner) if isinstance(owner, ir.Block) else operation(owner)
    return any(within(owner, loop) for loop in loops)


class _Buffers:
    """Which roots are private: allocated by this function outside its memory plan's arena
    (an arena slice may share memory with another whose lifetime ended)."""

    def __init__(self, planned):
        self.planned = planned

    def private(self, root) -> bool:
        op = _defining(root)
        if op is None or op.name not in ("memref.alloc", "memref.alloca"):
            return False
        slot = self.planned.get(root) if self.planned else None
        return slot is None or slot.kind == "output"

    def apart(self, a, b) -> bool:
        return a != b and (self.private(a) or self.private(b))


def _accesses(loop) -> list | None:
    """Every load and store inside `loop`, or None when its body does anything else with memory."""
    out = []
    for inner in nested_ops(loop):
        name, at = inner.name, access(inner)
        if at is not None:
            out.append(_Access(view_root(at[0]), *at))
        elif name in _STRUCTURED:
            continue                 # the ops inside come next
        elif not (_pure(inner) or name in ("memref.alloc", "memref.alloca", "memref.dealloc")):
            return None              # a region of its own (a linalg op) is never walked into
        elif any(_name(a).startswith("fusec.") for a in inner.attributes):
            return None              # an op a template emits
    return out


def _loop(op) -> bool:
    return op.name == "scf.for" and len(op.operands) == 3 and not list(op.results)


def _same_range(a, b) -> bool:
    return all(x == y for x, y in zip(a.operands[:3], b.operands[:3]))


class _Group:
    def __init__(self, first, buffers: _Buffers, accesses: list):
        self.loops, self.hoisted = [first], []
        self.accesses = [accesses]
        self.buffers = buffers

    def _iv(self, loop):
        return loop.regions[0].blocks[0].arguments[0]

    def joins(self, loop, accesses: list) -> bool:
        if not _same_range(self.loops[0], loop):
            return False
        both = self.loops + [loop]
        iv = self._iv(loop)
        for earlier, theirs in zip(self.loops, self.accesses):
            their_iv = self._iv(earlier)
            for a in theirs:
                for b in accesses:
                    if not (a.store or b.store) or self.buffers.apart(a.root, b.root):
                        continue
                    if a.memref != b.memref or len(a.index) != len(b.index) or their_iv not in a.index:
                        return False
                    for x, y in zip(a.index, b.index):
                        if x == their_iv and y == iv:
                            continue
                        if x != y or defined_in(x, both):
                            return False
        return True

    def moves(self, op) -> bool:
        """Whether `op`, standing after the group's loops, may run before them."""
        if _pure(op) or op.name in ("memref.alloc", "memref.alloca"):
            return True
        at = access(op)
        if at is None:
            return False
        root, store = view_root(at[0]), at[2]
        return all(self.buffers.apart(root, a.root) or not (store or a.store)
                   for theirs in self.accesses for a in theirs)


def fuse_siblings(ops: list, planned=None) -> list:
    """`ops` (a block's ops, its terminator left out) with runs of joinable loops replaced by
    FusedLoops."""
    buffers = _Buffers(planned)
    items, i, n = [], 0, len(ops)
    while i < n:
        op = ops[i]
        acc = _accesses(op) if _loop(op) else None
        if acc is None:
            items.append(op)
            i += 1
            continue
        group = _Group(op, buffers, acc)
        j = i + 1
        while True:
            k, between = j, []
            while k < n and not _loop(ops[k]) and group.moves(ops[k]):
                between.append(ops[k])
                k += 1
            if k == n or not _loop(ops[k]):
                break
            theirs = _accesses(ops[k])
            if theirs is None or not group.joins(ops[k], theirs):
                break
            group.hoisted += between
            group.loops.append(ops[k])
            group.accesses.append(theirs)
            j = k + 1
        if len(group.loops) > 1:
            items.append(FusedLoops(tuple(group.loops), tuple(group.hoisted)))
            i = j
        else:
            items.append(op)
            i += 1
    return items
