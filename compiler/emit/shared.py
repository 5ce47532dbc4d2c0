"""Which default-memory-space allocs inside a gpu.launch are block-shared buffers (filled
cooperatively, read whole after a gpu.barrier), so the emitter uses cuda.shared.array for them;
patterns it cannot prove safe are refused rather than emitted as a race. See
docs/ARCHITECTURE.md, "GPU kernels" (block-shared buffers).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .values import EmitError, is_memref
from ..mlir import ir
from ..transforms.script import MEMREF_VIEWS

_THREAD_IDS = ("gpu.thread_id", "gpu.global_id")


@dataclass
class _Alloc:
    op: "ir.Operation"
    uniform: bool                  # in control flow every thread of the block takes alike
    in_loop: bool
    dep_writes: list[int] = field(default_factory=list)   # positions of thread-addressed writes
    dep_reads: list[int] = field(default_factory=list)
    same_writes: list[int] = field(default_factory=list)  # every thread, the same addresses
    same_reads: list[int] = field(default_factory=list)


class _Walk:
    def __init__(self, launch: "ir.Operation"):
        block = launch.regions[0].blocks[0]
        self.dep: set = set(list(block.arguments)[3:6])   # the thread-id block arguments
        self.roots: dict = {}          # memref Value -> set of _Alloc it may view
        self.allocs: list[_Alloc] = []
        self.barriers: list[int] = []
        self.pos = 0
        self.block(block, divergent=False, in_loop=False)

    def block(self, block, divergent: bool, in_loop: bool) -> None:
        for op in block.operations:
            self.op(op.operation, divergent, in_loop)

    def op(self, op, divergent: bool, in_loop: bool) -> None:
        self.pos += 1
        name, ins = op.name, list(op.operands)
        if name in ("memref.alloc", "memref.alloca") and _default_space(op.results[0]):
            a = _Alloc(op, not divergent, in_loop)
            self.allocs.append(a)
            self.roots[op.results[0]] = {id(a): a}
        elif name == "gpu.barrier":
            self.barriers.append(self.pos)
        elif name == "memref.load":
            self._access(ins[0], ins[1:], write=False)
        elif name == "memref.store":
            self._access(ins[1], ins[2:], write=True)
        elif name == "memref.copy":
            self._access(ins[0], [], write=False)
            self._access(ins[1], [], write=True)
        if name in _THREAD_IDS:
            self.dep.update(op.results)
        elif name in MEMREF_VIEWS:
            addressing = ins[:1] + _offsets(op) if name == "memref.subview" else ins
            if any(v in self.dep for v in addressing):
                self.dep.update(op.results)
            self.roots[op.results[0]] = dict(self.roots.get(ins[0], {}))
        elif name == "scf.for":
            self._loop(op, ins[0:1] + ins[2:3], ins[:3], ins[3:], divergent)
        elif name == "scf.parallel":
            n = len(op.regions[0].blocks[0].arguments)
            self._loop(op, ins[:n] + ins[2 * n:3 * n], ins[:3 * n], ins[3 * n:], divergent)
        elif name == "scf.if":
            branch_divergent = divergent or ins[0] in self.dep
            for region in op.regions:
                for block in region.blocks:
                    self.block(block, branch_divergent, in_loop)
                    self._yielded(op, block, ins[0] in self.dep)
        elif name == "scf.execute_region":
            for block in op.regions[0].blocks:
                self.block(block, divergent, in_loop)
                self._yielded(op, block, False)
        elif any(v in self.dep for v in ins):
            self.dep.update(op.results)

    def _loop(self, op, start_step, bounds, inits, divergent) -> None:
        block = op.regions[0].blocks[0]
        args = list(block.arguments)
        ivs = args[:len(args) - len(inits)]
        if any(v in self.dep for v in start_step):
            self.dep.update(ivs)
        for arg, init in zip(args[len(ivs):], inits):
            if init in self.dep:
                self.dep.add(arg)
        self.block(block, divergent or any(v in self.dep for v in bounds), in_loop=True)
        if any(v in self.dep for v in inits):
            self.dep.update(op.results)

    def _yielded(self, op, block, cond_dep: bool) -> None:
        term = list(block.operations)[-1].operation
        for r, v in zip(op.results, term.operands):
            if cond_dep or v in self.dep:
                self.dep.add(r)
            if is_memref(v):
                self.roots.setdefault(r, {}).update(self.roots.get(v, {}))

    def _access(self, memref, indices, write: bool) -> None:
        dep = memref in self.dep or any(v in self.dep for v in indices)
        for a in self.roots.get(memref, {}).values():
            if dep:
                (a.dep_writes if write else a.dep_reads).append(self.pos)
            else:
                (a.same_writes if write else a.same_reads).append(self.pos)


def _default_space(v) -> bool:
    return ir.MemRefType(v.type).memory_space is None


def _offsets(op) -> list:
    sizes = [int(x) for x in op.attributes["operandSegmentSizes"]]
    return list(op.operands[sizes[0]:sizes[0] + sizes[1]])


def block_shared_allocs(launch: "ir.Operation") -> set:
    """The results of the allocs in `launch` that must be cuda.shared.array."""
    walk = _Walk(launch)
    shared = set()
    for a in walk.allocs:
        dep = a.dep_writes + a.dep_reads
        if not (a.uniform and dep and a.same_writes + a.same_reads):
            continue  # private: addressed alike by every thread, or only per thread
        if a.same_writes or a.in_loop or not a.dep_writes or not a.same_reads:
            raise _unsafe(a.op)
        last_write, first_read = max(a.dep_writes), min(a.same_reads)
        if not any(last_write < b < first_read for b in walk.barriers):
            raise _unsafe(a.op)
        shared.add(a.op.results[0])
    return shared


def _unsafe(op) -> EmitError:
    return EmitError("the emitter cannot tell whether this block-level buffer is per thread or "
                     "per block (it is addressed both by thread id and by every thread alike): "
                     "give it memory space #gpu.address_space<workgroup> or <private>", op)
