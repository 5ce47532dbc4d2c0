"""Statements: the ops of one Python function's body (a CUDA kernel, the CUDA host function or
the CPU function), one statement per MLIR op, in program order."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Callable

from . import cpu as emit_cpu
from . import ids
from . import row_phases
from . import views
from .control import ControlFlow
from .siblings import FusedLoops, access, fuse_siblings, operation
from .scalar import Helpers, ScalarRules
from .values import (Constants, EmitError, Globals, Names, elem_of_type, is_int, is_memref,
                          memref_shape, no_rule)
from .views import Array, View, copy_element, shape_tuple
from ..mlir import ir
from ..marks import GPU_TEMPLATE_MARKS
from ..plan.templates import TEMPLATES

_DYNAMIC = -9223372036854775808  # ShapedType::kDynamic in static_offsets/sizes/strides
_GPU_DIMS = {"x": 0, "y": 1, "z": 2}
_GPU_IDS = {"gpu.block_id": ids.block_id, "gpu.thread_id": ids.thread_id,
            "gpu.block_dim": ids.block_dim, "gpu.grid_dim": ids.grid_dim}


def _template_emitter(op) -> Callable | None:
    """The emitter of the template whose root mark `op` carries (plan/templates.py); None if none."""
    for t in TEMPLATES.values():
        mark = t.emit[0]
        if mark and mark in op.attributes:
            return t.stage("emit")
    return None


class Writer:
    """Lines of Python at a current indentation of 4 spaces per level."""

    def __init__(self, depth: int = 0):
        self.lines: list[str] = []
        self.depth = depth

    def __call__(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    @contextmanager
    def indent(self):
        self.depth += 1
        start = len(self.lines)
        yield
        if len(self.lines) == start:
            self("pass")
        self.depth -= 1

    @contextmanager
    def when(self, conds: list[str]):
        """The lines written inside under `if c1 and c2 ...:` (nothing added where `conds` is
        empty: the lines at the current depth)."""
        if conds:
            self(f"if {' and '.join(conds)}:")
            self.depth += 1
        yield
        if conds:
            self.depth -= 1


def arena_param(dtype: str) -> str:
    """The host function's parameter holding the arena of `dtype` elements (emit/memplan.py)."""
    return f"_arena_{dtype}"


def output_param(index: int) -> str:
    """The host function's parameter holding its output buffer `index` (emit/memplan.py)."""
    return f"_out{index}"


@dataclass
class FuncCtx:
    """What all Python functions emitted for one func.func share."""
    func_op: "ir.Operation"
    target: str
    names: Names
    consts: Constants
    helpers: Helpers
    rules: ScalarRules
    expr: dict = field(default_factory=dict)      # scalar Value -> Python expression
    views: dict = field(default_factory=dict)     # memref Value -> View
    constant: set = field(default_factory=set)    # Values whose expression is a literal
    globals: "Globals | None" = None              # memref.global constants of the module
    shared: set = field(default_factory=set)      # default-space allocs that are block-shared
    block_dims: tuple = ()                        # the current launch's threads per block (x, y, z)
    dynamic_shared: int = 0                       # bytes of dynamic shared memory the current launch asks
    aligned16: list = field(default_factory=list)  # the current launch's arrays whose data must be 16-byte aligned
    on_launch: Callable | None = None             # (gpu.launch op, host Body) -> None
    on_host_copy: Callable | None = None          # (memref.copy op, host Body) -> None
    phantom: set = field(default_factory=set)     # arrays a template's absorbed allocs name: never allocated
    memory: "object | None" = None                # the host function's MemoryPlan (emit/memplan.py)
    held: dict = field(default_factory=dict)      # cpu buffer -> the Python local holding its element
                                                  # (a one-element alloc, or an element for a loop)
    wide: set = field(default_factory=set)        # buffers of `held` whose local is an f64 sum for the loop
    row_launches: dict = field(default_factory=dict)   # gpu.launch -> its row_phases.RowLaunch (or None)
    cores: int = 1                                # cpu: workers a call outside every prange is split among


_LOOPS_RUN_APART = ("scf.parallel", "scf.forall")      # a prange's iterations: a local is not shared


def _held_as_local(op: "ir.Operation", shape: tuple, elem) -> bool:
    """A one-element cpu alloc that only loads and stores touch, none of them in a parallel loop
    the alloc is outside of (a prange's iterations would each have their own copy)."""
    if any(d != "1" for d in shape) or not (elem.compute.startswith("float") or elem.compute.startswith("int")):
        return False
    home = op.parent
    for use in op.results[0].uses:
        user = operation(use.owner)
        if user.name == "memref.dealloc":
            continue
        at = access(user)
        if at is None or at[0] != op.results[0]:
            return False
        p = user.parent
        while p is not None and p != home:
            if p.name in _LOOPS_RUN_APART:
                return False
            p = p.parent
        if p is None:
            return False
    return True


class Body(ControlFlow):
    """Emits ops into `w`. mode: "host" (CUDA host function), "kernel", or "cpu"."""

    def __init__(self, ctx: FuncCtx, w: Writer, mode: str):
        self.ctx, self.w, self.mode = ctx, w, mode
        self.names = ctx.names
        self.parallel_depth = 0

    # ------------------------------------------------------------------ values
    def val(self, v: "ir.Value") -> str:
        if v not in self.ctx.expr:
            raise EmitError(f"the emitter has no value for {v.get_name()}: its definition was "
                            "not emitted")
        return self.ctx.expr[v]

    def view(self, v: "ir.Value") -> View:
        return self.ctx.views[v]

    def assign(self, result: "ir.Value", e: str) -> str:
        name = self.names(result)
        self.w(f"{name} = {e}")
        self.ctx.expr[result] = name
        return name

    # ------------------------------------------------------------------ ops
    def ops(self, block: "ir.Block") -> "ir.Operation | None":
        """Emit every op of `block` but its terminator, which is returned."""
        ops = [op.operation for op in block.operations]
        term = ops.pop() if ops and _is_terminator(ops[-1]) else None
        if self.mode == "cpu":
            ops = fuse_siblings(ops, self.ctx.memory.slots if self.ctx.memory is not None else None)
        for op in ops:
            if isinstance(op, FusedLoops):
                self.fused_loops(op)
            else:
                self.op(op)
        return term

    def op(self, op: "ir.Operation") -> None:
        name = op.name
        if name == "arith.constant":
            self.ctx.expr[op.results[0]] = self.ctx.rules.constant(op)
            self.ctx.constant.add(op.results[0])
            return
        if any(m in op.attributes for m in GPU_TEMPLATE_MARKS):
            emit = _template_emitter(op)
            if emit is not None:
                emit(self, op)               # the whole kernel (contraction, attention), at its root
            elif name == "memref.alloc":      # a buffer only the template's ops used: never allocated
                dyn = iter(self.val(v) for v in op.operands)
                shape = tuple(str(d) if d is not None else next(dyn) for d in memref_shape(op.results[0].type))
                elem = elem_of_type(ir.MemRefType(op.results[0].type), op)
                array = Array(self.names(op.results[0]), elem, max(1, len(shape)), elem.compute)
                self.ctx.phantom.add(array.name)
                self.ctx.views[op.results[0]] = views.whole(array, shape)
            return                            # evaluated by the template where it needs the values
        handler = _HANDLERS.get(name)
        if handler is not None:
            handler(self, op)
            return
        if len(op.results) != 1 or any(is_memref(v) for v in op.operands):
            raise no_rule(op)
        e = self.ctx.rules.expr(op, [self.val(v) for v in op.operands])
        if e is None:
            raise no_rule(op)
        self.assign(op.results[0], e)

    def need(self, op: "ir.Operation", *modes: str) -> None:
        if self.mode not in modes:
            where = "outside a gpu.launch" if self.mode == "host" else (
                "inside a gpu.launch" if self.mode == "kernel" else "for the cpu target")
            raise no_rule(op, where)

    # ------------------------------------------------------------------ memref
    def alloc(self, op):
        result = op.results[0]
        mt = ir.MemRefType(result.type)
        elem = elem_of_type(mt, op)
        dyn = iter(self.val(v) for v in op.operands)
        shape = tuple(str(d) if d is not None else next(dyn) for d in memref_shape(mt))
        carried = shape or ("1",)
        name = self.names(result)
        if self.mode == "kernel":
            if not all(is_int(d) for d in shape):
                raise EmitError("the emitter needs static sizes for an alloc inside a gpu.launch",
                                op)
            space = _space(mt, op)
            if result in self.ctx.shared:
                space = "shared"
                self.w(f"# {name}: filled by the block's threads, then read whole: block-shared")
            array = Array(name, elem, len(carried), elem.compute, space)
            self.w(f"{name} = cuda.{space}.array({shape_tuple(carried)}, "
                   f"numba.{_numba_name(elem.compute)})")
        elif self.ctx.memory is not None and result in self.ctx.memory.slots:
            slot = self.ctx.memory.slots[result]
            array = Array(name, elem, len(carried), elem.storage if self.mode == "host" else elem.compute)
            if slot.kind == "output":
                self.w(f"{name} = {output_param(slot.index)}")
            else:
                self.w(f"{name} = {arena_param(slot.dtype)}[{slot.offset}:{slot.offset + slot.size}]"
                       f".reshape({shape_tuple(carried)})")
        elif self.mode == "host":
            array = Array(name, elem, len(carried), elem.storage)
            self.w(f"{name} = cuda.device_array({shape_tuple(carried)}, np.{elem.storage})")
        elif _held_as_local(op, shape, elem):
            # a reduction's accumulator: as a local, LLVM keeps it in a register and vectorises the
            # loop (through a heap array it loads and stores every element, one at a time)
            self.ctx.held[result] = name
            self.w(f"{name} = np.{elem.compute}(0)")
            return
        else:
            array = Array(name, elem, len(carried), elem.compute)
            self.w(f"{name} = np.empty({shape_tuple(carried)}, np.{elem.compute})")
        # a run-time size is in the view's shape, which a kernel's index math may read
        self.ctx.views[result] = _with_free(views.whole(array, shape, host=name), self._free(list(op.operands)))

    def get_global(self, op):
        g = self.ctx.globals.lookup(ir.FlatSymbolRefAttr(op.attributes["name"]).value, op)
        name = g.name  # kernels and the CPU function read the module-level array directly
        if self.mode == "host":
            name = self.names(op.results[0])
            self.w(f"{name} = cuda.to_device({g.name})")
        array = Array(name, g.elem, max(len(g.shape), 1), g.storage)
        self.ctx.views[op.results[0]] = views.whole(array, tuple(map(str, g.shape)), host=name)

    def dealloc(self, op):
        pass  # arrays are garbage collected; scratch arrays live as long as the kernel

    def subview(self, op):
        src = self.view(op.operands[0])
        groups = operand_segments(op)
        offs = self._mixed(op, "static_offsets", groups[1])
        sizes = self._mixed(op, "static_sizes", groups[2])
        strides = self._mixed(op, "static_strides", groups[3])
        free = self._free(groups[1] + groups[2] + groups[3])
        self.ctx.views[op.results[0]] = views.subview(
            src, offs, sizes, strides, memref_shape(op.results[0].type), free, op)

    def expand_shape(self, op):
        src = self.view(op.operands[0])
        dyn = iter(self.val(v) for v in op.operands[1:])
        out = tuple(next(dyn) if d == _DYNAMIC else str(d)
                    for d in _ints(op.attributes["static_output_shape"]))
        v = views.expand_shape(src, _reassociation(op), out)
        self.ctx.views[op.results[0]] = _with_free(v, self._free(list(op.operands[1:])))

    def collapse_shape(self, op):
        src = self.view(op.operands[0])
        self.ctx.views[op.results[0]] = views.collapse_shape(src, _reassociation(op))

    def cast(self, op):
        src = self.view(op.operands[0])
        shape = tuple(s if d is None else str(d)
                      for s, d in zip(src.shape, memref_shape(op.results[0].type)))
        self.ctx.views[op.results[0]] = views.cast(src, shape)

    def transpose(self, op):
        perm = ir.AffineMapAttr(op.attributes["permutation"]).value.results
        dims = tuple(ir.AffineDimExpr(d).position for d in perm)
        if any(dims[dims[i]] != i for i in range(len(dims))):
            raise EmitError("the emitter supports memref.transpose only by a permutation that is its own inverse", op)
        self.ctx.views[op.results[0]] = views.transpose(self.view(op.operands[0]), dims)

    def reinterpret_cast(self, op):
        groups = operand_segments(op)
        offs = self._mixed(op, "static_offsets", groups[1])
        sizes = self._mixed(op, "static_sizes", groups[2])
        strides = self._mixed(op, "static_strides", groups[3])
        v = views.reinterpret(self.view(op.operands[0]), offs[0], sizes, strides, op)
        self.ctx.views[op.results[0]] = _with_free(v, self._free(groups[1] + groups[2] + groups[3]))

    def dim(self, op):
        index = op.operands[1]
        if index not in self.ctx.constant:
            raise EmitError("the emitter needs a constant index for memref.dim", op)
        extent = self.view(op.operands[0]).shape[int(self.val(index))]
        if self.mode == "host" and not extent.isdigit():
            self.assign(op.results[0], extent)     # a run-time extent a kernel may take as a parameter
        else:
            self.ctx.expr[op.results[0]] = extent

    def load(self, op):
        self.need(op, "kernel", "cpu")
        held = self.ctx.held.get(op.operands[0])
        if held is not None:
            self.assign(op.results[0], held)
            return
        v = self.view(op.operands[0])
        self.assign(op.results[0], v.load([self.val(i) for i in op.operands[1:]]))   # f16, bf16: in f32

    def store(self, op):
        self.need(op, "kernel", "cpu")
        held = self.ctx.held.get(op.operands[1])
        if held is not None:
            self.w(f"{held} = {self.val(op.operands[0])}")
            return
        v = self.view(op.operands[1])
        idx = [self.val(i) for i in op.operands[2:]]
        src = op.operands[0].owner
        if (views.is_bf16_bits(v.array) and getattr(src, "name", None) == "arith.truncf"
                and str(src.operands[0].type) == "f32" and src.operands[0] in self.ctx.expr):
            # the truncf's f32 rounded once, by the store (its own rounding then unused: dropped)
            self.w(f"{v.at(idx)} = {views.stored(v.array, self.val(src.operands[0]))}")
            return
        self.w(v.store(idx, self.val(op.operands[0])))

    def copy(self, op):
        src, dst = op.operands[0], op.operands[1]
        if src == dst:
            return  # bufferization leaves self-copies of in-place results; nothing moves
        if self.mode == "host":
            self.ctx.on_host_copy(op, self)
            return
        self.copy_loops(self.view(src), self.view(dst))

    def copy_loops(self, src: View, dst: View) -> None:
        idx = []
        for k, n in enumerate(dst.shape):
            i = self.names.temp("i")
            self.w(f"for {i} in {self.range_fn() if k == 0 else 'range'}({n}):")
            self.w.depth += 1
            idx.append(i)
        self.w(copy_element(src, dst, idx))
        self.w.depth -= len(idx)

    def library_call(self, op):
        self.need(op, "cpu")
        emit_cpu.library_call(self, op)

    def generic(self, op):
        emit = _template_emitter(op)
        if emit is None:
            raise no_rule(op, "(linalg is lowered to loops before the emitter, but for the block-wide "
                              "combines of row kernels and scans)")
        emit(self, op)

    def for_loop(self, op):
        """scf.for; in a row kernel, a phase loop unrolled with its loads first (emit/row_phases.py)."""
        if self.mode == "kernel":
            launch = row_phases.enclosing_launch(op)
            if launch is not None:
                if launch not in self.ctx.row_launches:
                    self.ctx.row_launches[launch] = row_phases.row_launch(launch)
                rows = self.ctx.row_launches[launch]
                if rows is not None and row_phases.phase_loop(self, op, rows):
                    row_phases.unrolled_phase(self, op, rows)
                    return
        self.scf_for(op)

    # ------------------------------------------------------------------ gpu
    def gpu_id(self, op):
        self.need(op, "kernel")
        dim = str(op.attributes["dimension"]).split()[-1].strip(">")
        if dim not in _GPU_DIMS:
            raise no_rule(op, f"with dimension {dim}")
        self.assign(op.results[0], _GPU_IDS[op.name](dim))

    def global_id(self, op):
        self.need(op, "kernel")
        d = str(op.attributes["dimension"]).split()[-1].strip(">")
        self.assign(op.results[0], ids.global_id(d))

    def barrier(self, op):
        self.need(op, "kernel")
        self.w("cuda.syncthreads()")

    def launch(self, op):
        self.need(op, "host")
        self.ctx.on_launch(op, self)

    # ------------------------------------------------------------------ helpers
    def range_fn(self) -> str:
        return "numba.prange" if self.mode == "cpu" and self.parallel_depth == 0 else "range"

    def _mixed(self, op, attr: str, dynamic: list) -> tuple[str, ...]:
        dyn = iter(self.val(v) for v in dynamic)
        return tuple(next(dyn) if x == _DYNAMIC else str(x) for x in _ints(op.attributes[attr]))

    def _free(self, values: list) -> tuple:
        """Host scalars a host-level view's index math reads: they become kernel parameters."""
        if self.mode != "host":
            return ()
        return tuple(v for v in values if v not in self.ctx.constant)


def _with_free(v: View, free: tuple) -> View:
    return replace(v, free=v.free + free) if free else v


def _numba_name(np_name: str) -> str:
    return {"bool_": "boolean"}.get(np_name, np_name)


def _space(mt: "ir.MemRefType", op) -> str:
    space = mt.memory_space
    if space is None:
        return "local"
    text = str(space)
    if "workgroup" in text or text.split(":")[0].strip() == "3":
        return "shared"
    if "private" in text or text.split(":")[0].strip() == "5":
        return "local"
    raise EmitError(f"the emitter has no rule for memory space {text}", op)


def _ints(attr) -> list[int]:
    return [int(x) for x in attr]


def operand_segments(op: "ir.Operation") -> list[list]:
    """The operands of `op` split by its operandSegmentSizes."""
    sizes = _ints(op.attributes["operandSegmentSizes"])
    out, i = [], 0
    for n in sizes:
        out.append(list(op.operands[i:i + n]))
        i += n
    return out


def _reassociation(op) -> list[list[int]]:
    return [[int(ir.IntegerAttr(d).value) for d in group]
            for group in ir.ArrayAttr(op.attributes["reassociation"])]


def _is_terminator(op: "ir.Operation") -> bool:
    return op.name in ("scf.yield", "scf.reduce", "scf.reduce.return", "gpu.terminator",
                       "func.return", "scf.condition")


_HANDLERS = {
    "memref.alloc": Body.alloc, "memref.alloca": Body.alloc, "memref.dealloc": Body.dealloc,
    "memref.get_global": Body.get_global,
    "memref.subview": Body.subview, "memref.expand_shape": Body.expand_shape,
    "memref.collapse_shape": Body.collapse_shape, "memref.cast": Body.cast,
    "memref.reinterpret_cast": Body.reinterpret_cast, "memref.dim": Body.dim, "memref.transpose": Body.transpose,
    "memref.load": Body.load, "memref.store": Body.store, "memref.copy": Body.copy,
    "scf.for": Body.for_loop, "scf.if": Body.scf_if, "scf.parallel": Body.scf_parallel,
    "scf.execute_region": Body.execute_region,
    "gpu.block_id": Body.gpu_id, "gpu.thread_id": Body.gpu_id, "gpu.block_dim": Body.gpu_id,
    "gpu.grid_dim": Body.gpu_id, "gpu.global_id": Body.global_id, "gpu.barrier": Body.barrier,
    "gpu.launch": Body.launch,
    "linalg.matmul": Body.library_call, "linalg.batch_matmul": Body.library_call,
    "linalg.conv_2d_nchw_fchw": Body.library_call, "linalg.conv_2d_ngchw_gfchw": Body.library_call,
    "linalg.generic": Body.generic,
}
