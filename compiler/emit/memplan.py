"""Memory planning of a host function: where each top-level buffer lives. `plan_memory` only
reads the IR: outputs are passed in from the runtime's pool (shapes of `--dynamic` outputs as
(argument, axis) pairs), intermediates whose lifetimes do not overlap share one arena per
element type. See docs/ARCHITECTURE.md, "Stages and what each hands on" (buffers).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..marks import ABSORBED, ATTENTION_ROLE, BLOCK_ATTENTION, BLOCK_GEMM, CONTRACTION
from ..mlir import ir
from ..transforms.script import MEMREF_VIEWS

TEMPLATE_ROOTS = (BLOCK_ATTENTION, BLOCK_GEMM)          # a template's root: its one loop nest is written here
TEMPLATE_OWNED = (ABSORBED, ATTENTION_ROLE, CONTRACTION)  # ops before it that the template runs inside that nest

ALIGN = 16                                # elements: every arena offset is a multiple (64 B in f32)


@dataclass(frozen=True)
class Slot:
    """Where one planned alloc lives: an arena range, or an output passed in."""
    kind: str                             # "arena" | "output"
    dtype: str                            # NumPy dtype name of the array (the storage the emitter uses)
    shape: tuple[int, ...]
    offset: int = 0                       # arena: first element
    index: int = 0                        # output: its position among the function's output buffers

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return max(1, n)


@dataclass
class MemoryPlan:
    slots: dict = field(default_factory=dict)             # alloc result (ir.Value) -> Slot
    arenas: dict = field(default_factory=dict)            # dtype -> elements
    outputs: list = field(default_factory=list)           # [(shape, dtype)] in index order
    intermediate_bytes: int = 0           # the intermediates' sum: what a build holds without planning
    arena_bytes: int = 0                  # what they hold planned (the arenas)
    runtime_sized: int = 0                # top-level intermediates sized at run time (--dynamic): allocated per call

    def as_dict(self) -> dict:
        d = {"intermediate_bytes": self.intermediate_bytes, "planned_bytes": self.arena_bytes,
             "intermediates": sum(1 for s in self.slots.values() if s.kind == "arena"),
             "outputs": len(self.outputs)}
        if self.runtime_sized:
            d["runtime_sized"] = self.runtime_sized
        return d


def _input_extents(block, ops) -> dict:
    """The top-level memref.dim values that read an argument's extent at a constant axis:
    value -> (argument position, axis) (the run-time extents of a --dynamic build)."""
    args = list(block.arguments)
    out = {}
    for o in ops:
        if o.name != "memref.dim" or o.operands[0] not in args:
            continue
        index = o.operands[1].owner
        if getattr(index, "name", None) == "arith.constant":
            out[o.results[0]] = (args.index(o.operands[0]), ir.IntegerAttr(index.attributes["value"]).value)
    return out


def plan_memory(block, dtype_of, skip=lambda op: False) -> MemoryPlan:
    """Plan the top-level allocs of a func body `block`. `dtype_of(memref_type, op)` is the NumPy
    dtype name the emitter gives such a buffer; `skip(op)` marks allocs to leave alone."""
    ops = [o.operation for o in block.operations]
    owner: dict = {}                      # value -> the alloc (its result) it is or views
    allocs = []
    sized = _input_extents(block, ops)    # memref.dim of a func argument -> (argument, axis)
    runtime_sized = []                    # allocs sized at run time: an output when sized by the inputs
    for o in ops:
        if o.name == "memref.alloc" and not skip(o) and not list(o.operands):
            owner[o.results[0]] = o.results[0]
            allocs.append(o)
        elif o.name == "memref.alloc" and not skip(o):
            owner[o.results[0]] = o.results[0]
            runtime_sized.append(o)
        elif o.name in MEMREF_VIEWS and o.operands and o.operands[0] in owner:
            owner[o.results[0]] = owner[o.operands[0]]
    first: dict = {}
    last: dict = {}
    escapes: set = set()
    at = _emitted_at(ops)
    for i, o in enumerate(ops):
        if o.name == "memref.alloc" or o.name in MEMREF_VIEWS:
            continue
        if o.name == "func.return":
            escapes |= {owner[v] for v in o.operands if v in owner}
            continue
        for v in _operands_within(o):
            a = owner.get(v)
            if a is not None:
                first[a] = min(first.get(a, at[i]), at[i])
                last[a] = max(last.get(a, at[i]), at[i])
    plan = MemoryPlan()
    for o in runtime_sized:                # an output shaped by the inputs is passed in like a static one
        a = o.results[0]
        extents = iter(sized.get(v) for v in o.operands)
        shape = tuple(next(extents) if d == ir.ShapedType.get_dynamic_size() else d for d in ir.MemRefType(a.type).shape)
        if a in escapes and all(d is not None for d in shape):
            dtype = dtype_of(ir.MemRefType(a.type), o)
            plan.slots[a] = Slot("output", dtype, shape, index=len(plan.outputs))
            plan.outputs.append((shape, dtype))
        else:
            plan.runtime_sized += 1
    items = []
    for o in allocs:
        a = o.results[0]
        mt = ir.MemRefType(a.type)
        shape = tuple(mt.shape) or (1,)               # a rank-0 buffer is carried as one element
        dtype = dtype_of(mt, o)
        if a in escapes:
            plan.slots[a] = Slot("output", dtype, shape, index=len(plan.outputs))
            plan.outputs.append((shape, dtype))
        elif a in first:
            items.append((a, dtype, shape, first[a], last[a]))
    for dtype in sorted({d for _, d, _, _, _ in items}):
        mine = [x for x in items if x[1] == dtype]
        placed: list[tuple[int, int, int, int]] = []          # (offset, end, first, last)
        for a, _, shape, lo, hi in sorted(mine, key=lambda x: (-Slot("arena", dtype, x[2]).size, x[3])):
            size = _aligned(Slot("arena", dtype, shape).size)
            busy = sorted((off, end) for off, end, f, l in placed if f <= hi and lo <= l)
            offset = 0
            for off, end in busy:
                if offset + size <= off:
                    break
                offset = max(offset, end)
            placed.append((offset, offset + size, lo, hi))
            plan.slots[a] = Slot("arena", dtype, shape, offset=offset)
        plan.arenas[dtype] = max(end for _, end, _, _ in placed)
    for a, dtype, shape, _, _ in items:
        plan.intermediate_bytes += plan.slots[a].size * np.dtype(dtype).itemsize
    plan.arena_bytes = sum(n * np.dtype(d).itemsize for d, n in plan.arenas.items())
    return plan


def _emitted_at(ops) -> list[int]:
    """Each top-level op's place in the emitted function: an op a template owns (an attention's
    or a GEMM's absorbed producers, its roles) runs inside the template's one loop nest, written
    at its root, so what it reads is live until the root and shares no memory with what the
    root writes (a Q producer read QKV while the attention wrote its output over it)."""
    at = list(range(len(ops)))
    root = None
    for i in reversed(range(len(ops))):
        attrs = ops[i].attributes
        if any(m in attrs for m in TEMPLATE_ROOTS):
            root = i
        elif root is not None and any(m in attrs for m in TEMPLATE_OWNED):
            at[i] = root
    return at


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _operands_within(op):
    """Every operand of `op` and of the ops nested in its regions."""
    yield from op.operands
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                yield from _operands_within(inner.operation)
