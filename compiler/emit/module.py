"""The emitter: a total translator from lowered MLIR to a readable Python module of Numba code.

Output: for target "cuda", one `@cuda.jit("<signature>")` kernel per gpu.launch (memref views
folded into index arithmetic, constants re-materialised, only typed constants) and a host
function `run_<func>(*args) -> tuple` per func.func that allocates with cuda.device_array,
launches in program order and returns the results; for "cpu", `run_<func>` is one
`numba.njit(parallel=True)` function whose outermost scf.parallel is a `numba.prange`, with the
vectorisable scalar forms of emit_cpu.py and contractions handed to NumPy's BLAS.
See `emit` for the input it requires.
"""
from __future__ import annotations

from dataclasses import dataclass

from .body import Body, FuncCtx, Writer, operand_segments
from .scalar import Helpers, ScalarRules
from .shared import block_shared_allocs
from .values import (Constants, EmitError, Globals, Names, elem_of, floordiv,
                          format_location, is_memref, is_memref_type, memref_shape, mod,
                          py_ident, type_label)
from .views import Array, View, whole
from ..mlir import ir

__all__ = ["EmittedModule", "Entry", "EmitError", "emit"]

_COPY_THREADS = 256
CPU_FASTMATH = '{"contract", "reassoc"}'


@dataclass(frozen=True)
class Entry:
    host: str                        # name of the host function in source: run_<func>
    kernels: tuple[str, ...]         # kernel function names launched by it, in order
    arg_types: tuple[str, ...]       # e.g. ("f32[4,8]", ...) of the func's args
    result_types: tuple[str, ...]


@dataclass(frozen=True)
class EmittedModule:
    source: str                      # a complete, importable Python module
    entries: dict[str, Entry]        # func name -> Entry


def emit(module: "ir.Module", target: str) -> EmittedModule:
    """Translate `module` to Python source for `target` ("cuda" or "cpu"); never mutates it.

    Requires (what the tile-and-fuse output gives after compiler/transforms/to_target.py's
    GPU_CLEANUP or CPU_CLEANUP passes):
      - func.funcs on memrefs, args and results identity-layout with static shapes
        (one-shot-bufferize with bufferize-function-boundaries and
        function-boundary-type-conversion=identity-layout-map); memref.global constants;
      - no linalg left (convert-linalg-to-loops); of affine only apply/min/max (lower-affine
        removes those too); single-block regions, structured control flow only (scf.for/if/
        parallel; no cf, scf.while or scf.forall);
      - cuda: every loop inside a gpu.launch (map_forall_to_blocks generate_gpu_launch +
        map_nested_forall_to_threads). Host level: memref alloc/alloca/dealloc/copy/get_global,
        views (subview, expand_shape, collapse_shape, cast, reinterpret_cast), arith/math on
        scalars. An alloc inside a launch needs static sizes; without a memory space it is
        per-thread (cuda.local.array), so buffers a block shares must be
        #gpu.address_space<workgroup> (cuda.shared.array);
      - cpu: no gpu ops; foralls as scf.parallel (scf-forall-to-parallel), without reductions
        at the outermost level; the one linalg left is a float matmul, batch_matmul or
        conv_2d_nchw_fchw marked `fusec.cpu_call` by the CPU lowering
        (transforms/cpu_library_calls.py), written as a NumPy (BLAS) call in Numba's object
        mode, or as i-k-j loops where an operand view has no NumPy expression.
    Anything else raises EmitError naming the op and its location.

    Semantics kept: f16 is computed in f32 (CUDA rounds at truncf and stores; the CPU target
    has no float16, so its run_<func> converts at the boundary); bf16 is refused; NaN rules of
    maximumf/minimumf/maxnumf/minnumf and every cmpf predicate; divsi/remsi round toward zero.
    Assumed: unsigned integer ops (divui, cmpi ult...) see operands below 2**(width-1), as index
    arithmetic does. The CUDA simulator runs kernels as Python, where floor/ceil/trunc of a NaN
    or an infinity raise (a real GPU and the CPU target return them).
    """
    if target not in ("cuda", "cpu"):
        raise ValueError(f"unknown emit target {target!r}: expected 'cuda' or 'cpu'")
    consts = Constants()
    helpers = Helpers(target, consts)
    rules = ScalarRules(consts, helpers, target)
    globals_ = Globals(target)
    kernels: list[str] = []
    hosts: list[str] = []
    entries: dict[str, Entry] = {}
    funcs = []
    for op in module.body.operations:
        op = op.operation
        if op.name == "memref.global":
            globals_.add(op)
        elif op.name != "func.func":
            raise EmitError(f"the emitter has no rule for '{op.name}' at module level", op)
        elif len(op.regions[0].blocks) > 0:  # declarations have no body
            funcs.append(op)
    for op in funcs:
        fe = _FuncEmitter(op, target, consts, helpers, rules, globals_, len(kernels))
        hosts.append(fe.run())
        kernels += fe.kernels
        entries[fe.func_name] = fe.entry()
    source = _assemble(target, consts, globals_, helpers, kernels, hosts)
    return EmittedModule(source, entries)


def _assemble(target, consts, globals_, helpers, kernels, hosts) -> str:
    head = [f'"""Numba {"CUDA kernels" if target == "cuda" else "CPU code"} generated by '
            f'fusec.compiler.emit (target {target!r}). Do not edit."""',
            "import math", "", "import numba", "import numpy as np"]
    if target == "cuda":
        head.append("from numba import cuda")
    head += helpers.imports()
    parts = ["\n".join(head)]
    if consts.defs:
        parts.append("\n".join(consts.lines()))
    if globals_.defs:
        parts.append("\n".join(globals_.lines()))
    body = "\n".join(helpers.lines()).strip("\n")
    if body:
        parts.append(body)
    parts += kernels + hosts
    return "\n\n\n".join(parts) + "\n"


class _FuncEmitter:
    """One func.func: its host function and, for CUDA, its kernels."""

    def __init__(self, func_op, target, consts, helpers, rules, globals_, first_kernel: int):
        self.op, self.target = func_op, target
        self.func_name = ir.StringAttr(func_op.attributes["sym_name"]).value
        self.host_name = f"run_{py_ident(self.func_name)}"
        self.ctx = FuncCtx(func_op, target, Names(func_op), consts, helpers, rules,
                           globals=globals_, on_launch=self._launch, on_host_copy=self._host_copy)
        self.kernels: list[str] = []
        self.kernel_names: list[str] = []
        self.next_kernel = first_kernel
        ftype = ir.FunctionType(ir.TypeAttr(func_op.attributes["function_type"]).value)
        self.arg_types, self.result_types = list(ftype.inputs), list(ftype.results)

    def entry(self) -> Entry:
        return Entry(self.host_name, tuple(self.kernel_names),
                     tuple(type_label(t) for t in self.arg_types),
                     tuple(type_label(t) for t in self.result_types))

    # ------------------------------------------------------------------ host function
    def run(self) -> str:
        block = self.op.regions[0].blocks[0]
        f16_wrapper = self.target == "cpu" and any(map(_is_f16, self.arg_types + self.result_types))
        inner = f"_{self.host_name}_f32" if f16_wrapper else self.host_name
        w = Writer(1)
        mode = "host" if self.target == "cuda" else "cpu"
        params = [self._bind_arg(a, w, mode) for a in block.arguments]
        body = Body(self.ctx, w, mode)
        term = body.ops(block)
        results = [self._result(v, term) for v in term.operands]
        w(f"return ({', '.join(results)}{',' if len(results) == 1 else ''})")
        sig = f"({', '.join(type_label(t) for t in self.arg_types)}) -> " \
              f"({', '.join(type_label(t) for t in self.result_types)})"
        where = format_location(self.op.location)
        if self.target == "cuda":
            doc = f'    """@{self.func_name} {sig} at {where}; arrays are CUDA device arrays."""'
            head = [f"def {inner}({', '.join(params)}):", doc]
        else:
            doc = f'    """@{self.func_name} {sig} at {where}."""'
            # parallel=True only with a prange to run: else Numba warns and compiles for nothing
            parallel = any("numba.prange(" in line for line in w.lines)
            head = [f'@numba.njit(parallel={parallel}, nogil=True, fastmath={CPU_FASTMATH}, cache=False, '
                    'error_model="numpy")', f"def {inner}({', '.join(params)}):", doc]
        text = "\n".join(head + w.lines)
        if f16_wrapper:
            text += "\n\n\n" + self._f16_wrapper(inner, params)
        return text

    def _bind_arg(self, arg: "ir.Value", w: Writer, mode: str) -> str:
        name = self.ctx.names(arg)
        if not is_memref(arg):
            self.ctx.expr[arg] = name
            return name
        elem = elem_of(arg.type, self.op)
        shape = memref_shape(arg.type)
        if any(d is None for d in shape):
            raise EmitError("the emitter needs static shapes on func arguments", self.op)
        storage = elem.storage if mode == "host" else elem.compute
        carried = name
        if not shape:  # rank-0: carried as a 1-element 1-D array
            carried = self.ctx.names.fresh(f"{name}_1d")
            w(f"{carried} = {name}.reshape(1)")
        array = Array(carried, elem, max(len(shape), 1), storage)
        self.ctx.views[arg] = whole(array, tuple(str(d) for d in shape), host=carried)
        return name

    def _result(self, v: "ir.Value", term) -> str:
        if not is_memref(v):
            return self.ctx.expr[v]
        view = self.ctx.views[v]
        if view.host is None:
            raise EmitError("the emitter cannot return this memref view as an array", term)
        return f"{view.host}.reshape(())" if not view.shape else view.host

    def _f16_wrapper(self, inner: str, params: list[str]) -> str:
        """Numba's CPU target has no float16: the njit function works on float32 copies."""
        args = [f"{p}.astype(np.float32)" if _is_f16(t) else p
                for p, t in zip(params, self.arg_types)]
        outs = [f"outs[{i}].astype(np.float16)" if _is_f16(t) else f"outs[{i}]"
                for i, t in enumerate(self.result_types)]
        return "\n".join([
            f"def {self.host_name}({', '.join(params)}):",
            f'    """@{self.func_name} on float16 arrays, computed in float32 by {inner}."""',
            f"    outs = {inner}({', '.join(args)})",
            f"    return ({', '.join(outs)}{',' if len(outs) == 1 else ''})"])

    # ------------------------------------------------------------------ kernels
    def _new_kernel_name(self) -> str:
        name = f"k{self.next_kernel}"
        self.next_kernel += 1
        self.kernel_names.append(name)
        return name

    def _launch(self, op: "ir.Operation", host: Body) -> None:
        seg = operand_segments(op)
        if seg[0] or any(seg[7:]) or len(op.results):
            raise EmitError("the emitter has no rule for an async, clustered or dynamic-shared-"
                            "memory 'gpu.launch'", op)
        region = op.regions[0]
        if len(region.blocks) != 1:
            raise EmitError("the emitter has no rule for a multi-block 'gpu.launch' body", op)
        grid = [host.val(v[0]) for v in seg[1:4]]
        block_dims = [host.val(v[0]) for v in seg[4:7]]
        name = self._new_kernel_name()
        body_block = region.blocks[0]
        for arg, e in zip(body_block.arguments, _LAUNCH_ARGS):
            self.ctx.expr[arg] = e
        params, sigs = self._params(region)
        self.ctx.shared = block_shared_allocs(op)
        w = Writer(1)
        Body(self.ctx, w, "kernel").ops(body_block)
        if not w.lines:
            w("pass")
        grid_t, block_t = _dims(grid), _dims(block_dims)
        self.kernels.append("\n".join([
            f"# {name}: gpu.launch in @{self.func_name} at {format_location(op.location)}, "
            f"grid {grid_t}, block {block_t}",
            f'@cuda.jit("void({", ".join(sigs)})")',
            f"def {name}({', '.join(params)}):"] + w.lines))
        host.w(f"{name}[{grid_t}, {block_t}]({', '.join(params)})")

    def _params(self, region) -> tuple[list[str], list[str]]:
        """Kernel parameters: the arrays under the memrefs the body reads from outside and
        the non-constant host scalars; constants are re-materialised inside."""
        params: dict[str, str] = {}
        for v in _free_values(region):
            if is_memref(v):
                view: View = self.ctx.views[v]
                params.setdefault(view.array.name, view.array.signature)
                for s in view.free:
                    params.setdefault(self.ctx.expr[s], elem_of(s.type).numba_compute)
            elif v not in self.ctx.constant:
                params.setdefault(self.ctx.expr[v], elem_of(v.type).numba_compute)
        return list(params), list(params.values())

    def _host_copy(self, op: "ir.Operation", host: Body) -> None:
        """A host-level memref.copy: a one-thread-per-element copy kernel."""
        src, dst = self.ctx.views[op.operands[0]], self.ctx.views[op.operands[1]]
        if not all(str(n).isdigit() for n in dst.shape):
            raise EmitError("the emitter needs a static shape for a host-level memref.copy", op)
        total = 1
        for n in dst.shape:
            total *= int(n)
        name = self._new_kernel_name()
        params: dict[str, str] = {}
        for view in (src, dst):
            params.setdefault(view.array.name, view.array.signature)
            for s in view.free:
                params.setdefault(self.ctx.expr[s], elem_of(s.type).numba_compute)
        w = Writer(1)
        t = self.ctx.names.temp("t")
        w(f"{t} = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x")
        w(f"if {t} < {total}:")
        idx, inner = [], total
        with w.indent():
            for k, n in enumerate(dst.shape):
                inner //= int(n)
                i = self.ctx.names.temp("i")
                e = floordiv(t, str(inner))
                w(f"{i} = {e if k == 0 else mod(e, n)}")
                idx.append(i)
            w(f"{dst.at(idx)} = {src.at(idx)}")
        grid = (max(1, -(-total // _COPY_THREADS)), 1, 1)
        block = (_COPY_THREADS, 1, 1)
        self.kernels.append("\n".join([
            f"# {name}: memref.copy in @{self.func_name} at {format_location(op.location)}, "
            f"grid {grid}, block {block}",
            f'@cuda.jit("void({", ".join(params.values())})")',
            f"def {name}({', '.join(params)}):"] + w.lines))
        host.w(f"{name}[{grid}, {block}]({', '.join(params)})")


_LAUNCH_ARGS = ("cuda.blockIdx.x", "cuda.blockIdx.y", "cuda.blockIdx.z",
                "cuda.threadIdx.x", "cuda.threadIdx.y", "cuda.threadIdx.z",
                "cuda.gridDim.x", "cuda.gridDim.y", "cuda.gridDim.z",
                "cuda.blockDim.x", "cuda.blockDim.y", "cuda.blockDim.z")


def _dims(values: list[str]) -> str:
    return f"({', '.join(values)})"


def _is_f16(t) -> bool:
    return is_memref_type(t) and str(ir.MemRefType(t).element_type) == "f16"


def _free_values(region) -> list:
    """Values used inside `region` but defined outside it, in order of first use."""
    defined, free, seen = set(), [], set()

    def visit_region(r):
        for block in r.blocks:
            defined.update(block.arguments)
            for op in block.operations:
                op = op.operation
                for v in op.operands:
                    if v not in defined and v not in seen:
                        seen.add(v)
                        free.append(v)
                for nested in op.regions:
                    visit_region(nested)
                defined.update(op.results)

    visit_region(region)
    return free
