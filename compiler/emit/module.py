"""The emitter's driver: lowered MLIR to a readable Python module of Numba code. cuda: one
`@cuda.jit("<signature>", cache=NUMBA_CACHE)` kernel per gpu.launch (see CACHE_FLAG) and a host
function `run_<func>(*args) -> tuple` per func.func; cpu: `run_<func>` is one
`numba.njit(parallel=True)` function. See `emit` for the input it requires, and
docs/ARCHITECTURE.md, "GPU kernels: how a plan becomes CUDA".
"""
from __future__ import annotations


from ..emitted import EmittedModule, Entry, Launch
from . import ids
from . import bf16 as emit_bf16
from . import cpu as emit_cpu
from .body import GPU_TEMPLATE_MARKS, Body, FuncCtx, Writer, arena_param, operand_segments, output_param
from .memplan import MemoryPlan, plan_memory
from .scalar import Helpers, ScalarRules
from .shared import block_shared_allocs
from .values import (Constants, EmitError, Globals, Names, elem_of_type, floordiv,
                          format_location, is_memref, is_memref_type, memref_shape, mod,
                          py_ident, type_label)
from .views import Array, View, copy_element, whole
from ..mlir import ir

__all__ = ["EmittedModule", "Entry", "EmitError", "Launch", "emit"]

_COPY_THREADS = 256
CPU_FASTMATH = '{"contract", "reassoc"}'


def emit(module: "ir.Module", target: str, vector_bits: int = 0, math: str = "fast", cores: int = 1) -> EmittedModule:
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

    cpu: `vector_bits` (256 or 512; 0: LLVM's choice for the CPU) is the vector width each host
    function and prange body asks LLVM's vectorizer for (the profile's, compiler/calibrate.py).
    `math` ("fast" or "accurate", options.math): which of emit/cpu.py's forms f32 exp and tanh
    take on the cpu (the f32 polynomials, or the f64 ones rounded once); cuda ignores it.
    `cores` (the profile's units): how many slices a cpu BLAS call outside every prange is split
    into, one per worker (emit/cpu.py: _gemm_chunks); a constant of the emitted code, so that
    Numba can cache it (numba.get_num_threads() in compiled code is a dynamic global).

    Semantics kept: f16 is computed in f32 (rounded to half precision at truncf and at stores;
    the CPU target rounds on the bits, emit/cpu.py); bf16 too, rounded at truncf and held as
    its bits in uint16 arrays on cuda (emit/bf16.py; float32 ones on the cpu); NaN rules of
    maximumf/minimumf/maxnumf/minnumf and every cmpf predicate; divsi/remsi round toward zero.
    Assumed: unsigned integer ops (divui, cmpi ult...) see operands below 2**(width-1), as index
    arithmetic does. Under the CUDA simulator, math calls that raise in Python (exp overflow,
    log(0), floor(nan)) go through NumPy instead, so every target gives the IEEE results
    (emit/scalar.py).
    """
    if target not in ("cuda", "cpu"):
        raise ValueError(f"unknown emit target {target!r}: expected 'cuda' or 'cpu'")
    if vector_bits not in (0, 256, 512):
        raise ValueError(f"vector_bits is {vector_bits!r}: expected 0, 256 or 512")
    if not isinstance(cores, int) or cores < 1:
        raise ValueError(f"cores is {cores!r}: expected a positive int")
    consts = Constants()
    helpers = Helpers(target, consts)
    if math not in ("fast", "accurate"):
        raise ValueError(f"math is {math!r}: expected 'fast' or 'accurate'")
    rules = ScalarRules(consts, helpers, target, math)
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
        fe = _FuncEmitter(op, target, consts, helpers, rules, globals_, len(kernels), vector_bits, cores)
        hosts.append(fe.run())
        kernels += fe.kernels
        entries[fe.func_name] = fe.entry()
    if target == "cuda" and any(t in text for text in kernels + hosts for t in ("_bf16_f32(", "_f32_bf16(")):
        helpers.use_text("bf16_round", emit_bf16.ROUND.strip("\n").splitlines())   # bf16 arrays' bits
    source = _assemble(target, consts, globals_, helpers, kernels, hosts)
    return EmittedModule(source, entries)


def _assemble(target, consts, globals_, helpers, kernels, hosts) -> str:
    head = [f'"""Numba {"CUDA kernels" if target == "cuda" else "CPU code"} generated by '
            f'fusec.compiler.emit (target {target!r}). Do not edit."""',
            "import math", "import sys", "import threading", "", "import numba", "import numpy as np"]
    if any("ml_dtypes." in text for text in hosts + list(map("\n".join, helpers.used.values()))):
        head.append("import ml_dtypes")
    if target == "cuda":
        head.append("from numba import cuda")
    head += helpers.imports()
    parts = ["\n".join(head)]
    if target == "cuda":
        parts.append(CACHE_FLAG)
    if helpers.cudasim:       # Numba's simulator runs kernels as Python and has no warp shuffles
        parts.append("_CUDASIM = bool(numba.config.ENABLE_CUDASIM)")
    if target == "cuda":
        parts.append(BOUNDS_HELPER)
    if consts.defs:
        parts.append("\n".join(consts.lines()))
    if globals_.defs:
        parts.append("\n".join(globals_.lines()))
    body = "\n".join(helpers.lines()).strip("\n")
    if body:
        parts.append(body)
    if any("= _Memory(" in h for h in hosts):
        parts.append(MEMORY_CLASS)
    parts += kernels + hosts
    return "\n\n\n".join(parts) + "\n"


# A kernel with a signature compiles when the module runs, so whether Numba caches it on disk is
# decided before then: the artifact loader (runtime/artifact.py) sets NUMBA_CACHE in the module's
# namespace first; run any other way (exec'd text, the kernel report) the module compiles afresh.
CACHE_FLAG = '''# Numba caches the kernels beside this file when the loader sets NUMBA_CACHE before running it
NUMBA_CACHE = bool(globals().get("NUMBA_CACHE", False))'''


# the emitted module's keeper of planned buffers (emit/memplan.py)
MEMORY_CLASS = '''class _Memory:
    """A host function's arenas (one per element type; allocated once per thread) and its output
    buffers, two per output: a call takes one that only this keeper holds, else a new one. So
    `y = f(x)` in a loop (the previous result still held while the next call runs) alternates
    between two arrays and allocates nothing. release() gives the memory back; the next call
    allocates it again."""

    takes_inputs = True       # buffers() is given the call's inputs (an output's extent may be theirs)

    def __init__(self, arenas, outputs, new):
        self.arenas, self.outputs, self.new = arenas, outputs, new
        self.local = threading.local()

    def buffers(self, *inputs):
        local = self.local
        held = getattr(local, "held", None)
        if held is None:
            held = local.held = [self.new((n,), d) for d, n in self.arenas] + [None] * len(self.outputs)
            local.spare = [None] * len(self.outputs)
        spare, k = local.spare, len(self.arenas)
        for i, (shape, d) in enumerate(self.outputs):
            if inputs:        # an extent (argument, axis) is read from this call's inputs
                shape = tuple(inputs[e[0]].shape[e[1]] if isinstance(e, tuple) else e for e in shape)
            old, other = held[k + i], spare[i]
            # a buffer nobody else holds has 3 references: its list, the local name, getrefcount's
            if old is not None and old.shape == shape and sys.getrefcount(old) <= 3:
                continue
            if other is not None and other.shape == shape and sys.getrefcount(other) <= 3:
                held[k + i], spare[i] = other, old      # old is the caller's: free again once dropped
                continue
            spare[i] = old if old is not None and old.shape == shape else None
            held[k + i] = old = other = None        # one of another shape is freed before the new one
            held[k + i] = self.new(shape, d)
        return held

    def release(self):
        self.local = threading.local()'''


class _FuncEmitter:
    """One func.func: its host function and, for CUDA, its kernels."""

    def __init__(self, func_op, target, consts, helpers, rules, globals_, first_kernel: int, vector_bits: int = 0,
                 cores: int = 1):
        self.op, self.target = func_op, target
        self.vector_bits = vector_bits
        self.func_name = ir.StringAttr(func_op.attributes["sym_name"]).value
        self.host_name = f"run_{py_ident(self.func_name)}"
        self.ctx = FuncCtx(func_op, target, Names(func_op), consts, helpers, rules,
                           globals=globals_, on_launch=self._launch, on_host_copy=self._host_copy, cores=cores)
        self.kernels: list[str] = []
        self.kernel_names: list[str] = []
        self.launches: list[Launch] = []
        self.next_kernel = first_kernel
        self.memory = MemoryPlan()
        ftype = ir.FunctionType(ir.TypeAttr(func_op.attributes["function_type"]).value)
        self.arg_types, self.result_types = list(ftype.inputs), list(ftype.results)

    def entry(self) -> Entry:
        return Entry(self.host_name, tuple(self.kernel_names),
                     tuple(type_label(t) for t in self.arg_types),
                     tuple(type_label(t) for t in self.result_types), tuple(self.launches),
                     tuple(self.memory.as_dict().items()))

    # ------------------------------------------------------------------ host function
    def run(self) -> str:
        block = self.op.regions[0].blocks[0]
        # arrays whose element type Numba lacks: the host function widens them to float32 copies
        # (f16 on the cpu; bf16 on every target) and narrows the results (_narrow_wrapper)
        narrow_wrapper = any(self._narrow(t) for t in self.arg_types + self.result_types)
        outer = f"_{self.host_name}_f32" if narrow_wrapper else self.host_name
        inner = f"_{self.host_name}_par"    # renamed below unless BLAS runs inside its prange
        w = Writer(1)
        mode = "host" if self.target == "cuda" else "cpu"
        params = [self._bind_arg(a, w, mode) for a in block.arguments]
        memory = plan_memory(block, lambda mt, op: (elem_of_type(mt, op).storage if mode == "host" else elem_of_type(mt, op).compute),
                             skip=lambda op: any(m in op.attributes for m in GPU_TEMPLATE_MARKS))
        self.memory = memory
        user_params = params
        planned = bool(memory.slots)
        if planned:                          # the public function passes the buffers in (see _memory_wrapper)
            public = self.host_name
            self.host_name = f"_{public}_planned"
            outer = f"_{self.host_name}_f32" if narrow_wrapper else self.host_name
            inner = f"_{self.host_name}_par"
            self.ctx.memory = memory
            params = params + [arena_param(d) for d in memory.arenas] + \
                [output_param(i) for i in range(len(memory.outputs))]
        body = Body(self.ctx, w, mode)
        term = body.ops(block)
        results = [self._result(v, term) for v in term.operands]
        w(f"return ({', '.join(results)}{',' if len(results) == 1 else ''})")
        sig = f"({', '.join(type_label(t) for t in self.arg_types)}) -> " \
              f"({', '.join(type_label(t) for t in self.result_types)})"
        where = format_location(self.op.location)
        defs: list[str] = []       # the cpu function's loop functions, before it
        if self.target == "cuda":
            inner = outer
            doc = f'    """@{self.func_name} {sig} at {where}; arrays are CUDA device arrays."""'
            head = [f"def {inner}({', '.join(params)}):", doc]
        else:
            doc = f'    """@{self.func_name} {sig} at {where}."""'
            blas = _blas_only_in_prange(w.lines)
            if not blas:
                inner = outer
            w.lines[:], loops = emit_cpu.split_loops(w.lines, params, inner)
            prefer = self._prefer_vectors
            w.lines[:] = prefer(w.lines)
            for fn, args, lines in loops:
                defs.append("\n".join([_cpu_jit(True), f"def {fn}({', '.join(args)}):",
                                       f'    """A parallel loop of {inner} (emit/cpu.py: split_loops)."""']
                                      + prefer(lines)))
            # parallel=True only with a prange to run: else Numba warns and compiles for nothing
            parallel = any(emit_cpu.prange_header(line) for line in w.lines)
            head = [_cpu_jit(parallel), f"def {inner}({', '.join(params)}):", doc]
        text = "\n\n\n".join(defs + ["\n".join(head + w.lines)])
        if self.target != "cuda" and inner != outer:
            text += "\n\n\n" + "\n".join([
                f"def {outer}({', '.join(params)}):",
                f'    """{inner} with NumPy\'s BLAS on one thread per prange worker (its BLAS calls run inside',
                '    the parallel loop: more threads would oversubscribe the cores); restored afterwards."""',
                "    if _BLAS_THREADS is None:",
                f"        return {inner}({', '.join(params)})",
                '    with _BLAS_THREADS.limit(limits=1, user_api="blas"):',
                f"        return {inner}({', '.join(params)})",
                "", "",
                f"{outer}.jitted = {inner}   # the Numba dispatcher (runtime/executable.py compiles it first)"])
        if narrow_wrapper:
            text += "\n\n\n" + self._narrow_wrapper(outer, params)
        if planned:
            self.host_name = public
            text += "\n\n\n" + self._memory_wrapper(f"_{public}_planned", user_params, memory)
        return text

    def _prefer_vectors(self, lines: list[str]) -> list[str]:
        """A cpu function's lines with the profile's vector width asked for (emit/cpu.py)."""
        if not self.vector_bits:
            return lines
        return emit_cpu.prefer_vectors(lines, f"{self.ctx.helpers.use(f'prefer_vectors_{self.vector_bits}')}()")

    def _memory_wrapper(self, planned: str, params: list[str], memory: MemoryPlan) -> str:
        """The public host function: the planned one with its arenas and output buffers
        (emit/memplan.py; the module's _Memory keeps them between calls)."""
        new = "cuda.device_array" if self.target == "cuda" else "np.empty"
        arenas = tuple((d, n) for d, n in memory.arenas.items())
        outputs = tuple((tuple(s), d) for s, d in memory.outputs)
        sized = any(isinstance(e, tuple) for s, _ in outputs for e in s)     # by the inputs (--dynamic)
        mem = f"_MEMORY_{self.host_name}"
        mib = memory.arena_bytes / 2**20
        return "\n".join([
            f"{mem} = _Memory({arenas!r}, {outputs!r}, {new})",
            "",
            "",
            f"def {self.host_name}({', '.join(params)}):",
            f'    """{planned} with its buffers: {len(memory.slots) - len(memory.outputs)} intermediates in '
            f'{mib:.3g} MiB of arena, {len(memory.outputs)} output buffers reused once the caller drops them."""',
            f"    return {planned}({', '.join(params + ['*' + mem + '.buffers(' + (', '.join(params) if sized else '') + ')'])})",
            "",
            "",
            f"{self.host_name}.planned, {self.host_name}.memory = {planned}, {mem}   # for the runtime's Executable"])

    def _bind_arg(self, arg: "ir.Value", w: Writer, mode: str) -> str:
        name = self.ctx.names(arg)
        if not is_memref(arg):
            self.ctx.expr[arg] = name
            return name
        elem = elem_of_type(arg.type, self.op)
        shape = memref_shape(arg.type)
        storage = elem.storage if mode == "host" else elem.compute
        carried = name
        if not shape:  # rank-0: carried as a 1-element 1-D array
            carried = self.ctx.names.fresh(f"{name}_1d")
            w(f"{carried} = {name}.reshape(1)")
        array = Array(carried, elem, max(len(shape), 1), storage)
        self.ctx.views[arg] = whole(array, tuple(f"{carried}.shape[{i}]" if d is None else str(d)
                                                 for i, d in enumerate(shape)), host=carried)
        return name

    def _result(self, v: "ir.Value", term) -> str:
        if not is_memref(v):
            return self.ctx.expr[v]
        view = self.ctx.views[v]
        if view.host is None:
            raise EmitError("the emitter cannot return this memref view as an array", term)
        host = view.host
        if host in {g.name for g in self.ctx.globals.by_symbol.values()}:
            host = f"{host}.copy()"     # a constant result (`return 3`): Numba freezes module arrays read-only
        return f"{host}.reshape(())" if not view.shape else host

    def _narrow(self, t) -> str | None:
        """The narrow element type of memref type `t` the host function converts, else None:
        f16 on the cpu (Numba's CPU target has no float16), bf16 on every target (Numba has no
        bfloat16: the cuda kernels hold its bits in uint16 arrays, the cpu's in float32)."""
        if not is_memref_type(t):
            return None
        e = str(ir.MemRefType(t).element_type)
        return e if e == "bf16" or (e == "f16" and self.target == "cpu") else None

    def _narrow_wrapper(self, inner: str, params: list[str]) -> str:
        """The host function on float16 / bfloat16 arrays. cpu: the inner one works on float32
        copies, NumPy's astype both ways (bf16 -> f32 is exact; back it rounds to nearest even,
        which leaves the rounded values a chain computes unchanged); cuda: bf16 device arrays
        seen as their uint16 bits and the results' bits seen as bfloat16, no copy (emit/bf16.py)."""
        cuda = self.target == "cuda"
        if cuda:
            self.ctx.helpers.use_text("bf16_boundary", emit_bf16.BOUNDARY.strip("\n").splitlines())
        widen = {"f16": "{}.astype(np.float32)",
                 "bf16": "{}.view(np.uint16)" if cuda else "{}.astype(np.float32)"}
        narrow = {"f16": "{}.astype(np.float16)",
                  "bf16": "_bf16_out({})" if cuda else "{}.astype(ml_dtypes.bfloat16)"}
        args = [widen[self._narrow(t)].format(p) if self._narrow(t) else p
                for p, t in zip(params, self.arg_types)] + params[len(self.arg_types):]
        outs = [narrow[self._narrow(t)].format(f"outs[{i}]") if self._narrow(t) else f"outs[{i}]"
                for i, t in enumerate(self.result_types)]
        kinds = {self._narrow(t) for t in self.arg_types + self.result_types} - {None}
        arrays = " and ".join(n for k, n in (("f16", "float16"), ("bf16", "bfloat16")) if k in kinds)
        held = "as their uint16 bits" if cuda else "computed in float32"
        return "\n".join([
            f"def {self.host_name}({', '.join(params)}):",
            f'    """@{self.func_name} on {arrays} arrays, {held} by {inner}."""',
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
        counts = [host.val(v[0]) for v in seg[1:4]]
        block_dims = [host.val(v[0]) for v in seg[4:7]]
        name = self._new_kernel_name()
        body_block = region.blocks[0]
        params, sigs = self._params(region)
        strided, grid = grid_stride_axes(counts, self.ctx.names)
        for count in (c for _, c in strided.values() if not c.isdigit() and c not in params):
            params.append(count)
            sigs.append("int64")
        self.ctx.shared = block_shared_allocs(op)
        self.ctx.block_dims = tuple(block_dims)
        self.ctx.dynamic_shared = 0
        self.ctx.aligned16 = []
        w = Writer(1 + len(strided))
        with ids.grid_stride(strided):
            for arg, e in zip(body_block.arguments, launch_args()):
                self.ctx.expr[arg] = e
            Body(self.ctx, w, "kernel").ops(body_block)
        lines = strip_trailing_barrier(w.lines, 1 + len(strided))
        if strided:
            lines = grid_stride_loops(strided, lines)
        grid_t, block_t = _dims(grid), _dims(block_dims)
        self.kernels.append("\n".join([
            f"# {name}: gpu.launch in @{self.func_name} at {format_location(op.location)}, "
            f"grid {grid_t}, block {block_t}" + (f" (grid-stride on {', '.join(strided)})" if strided else ""),
            f'@cuda.jit("void({", ".join(sigs)})", cache=NUMBA_CACHE{launch_bounds(block_dims)})',
            f"def {name}({', '.join(params)}):"] + (lines or ["    pass"])))
        dyn = self.ctx.dynamic_shared
        for a in self.ctx.aligned16:     # copied 16 bytes at a time (emit/cp_async.py: _cp_async16h)
            host.w(f"{a} = _align16({a})")
        if dyn:          # shared memory past the static 48 KB: the kernel opted in, the bytes at launch
            self.ctx.helpers.use_text("_dynamic_shared", DYNAMIC_SHARED_HELPER)
            host.w(f"_dynamic_shared({name}, {dyn})")
            host.w(f"{name}[{grid_t}, {block_t}, 0, {dyn}]({', '.join(params)})")
        else:
            host.w(f"{name}[{grid_t}, {block_t}]({', '.join(params)})")
        group = sum(1 for launch in self.launches if launch.kind == "launch")
        self.launches.append(Launch(name, "launch", group, tuple(grid), tuple(block_dims)))

    def _params(self, region) -> tuple[list[str], list[str]]:
        """Kernel parameters: the arrays under the memrefs the body reads from outside and
        the non-constant host scalars; constants are re-materialised inside."""
        params: dict[str, str] = {}
        for v in _free_values(region):
            if is_memref(v):
                view: View = self.ctx.views[v]
                if view.array.name in self.ctx.phantom:
                    continue          # a buffer the kernel's template never touches in memory
                params.setdefault(view.array.name, view.array.signature)
                for s in view.free:
                    params.setdefault(self.ctx.expr[s], elem_of_type(s.type).numba_compute)
            elif v not in self.ctx.constant:
                params.setdefault(self.ctx.expr[v], elem_of_type(v.type).numba_compute)
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
                params.setdefault(self.ctx.expr[s], elem_of_type(s.type).numba_compute)
        w = Writer(1)
        t = self.ctx.names.temp("t")
        blocks = max(1, -(-total // _COPY_THREADS))
        if blocks <= ids.GRID_LIMITS["x"]:
            w(f"{t} = {ids.global_id('x')}")
            w(f"if {t} < {total}:")
        else:                       # more blocks than grid x takes: each thread strides over the grid
            blocks = ids.GRID_LIMITS["x"]
            w(f"for {t} in range({ids.global_id('x')}, {total}, {ids.hardware_grid_dim('x')} * {_COPY_THREADS}):")
        idx, inner = [], total
        with w.indent():
            for k, n in enumerate(dst.shape):
                inner //= int(n)
                i = self.ctx.names.temp("i")
                e = floordiv(t, str(inner))
                w(f"{i} = {e if k == 0 else mod(e, n)}")
                idx.append(i)
            w(copy_element(src, dst, idx))
        grid = (blocks, 1, 1)
        block = (_COPY_THREADS, 1, 1)
        self.kernels.append("\n".join([
            f"# {name}: memref.copy in @{self.func_name} at {format_location(op.location)}, "
            f"grid {grid}, block {block}",
            f'@cuda.jit("void({", ".join(params.values())})", cache=NUMBA_CACHE{launch_bounds(block)})',
            f"def {name}({', '.join(params)}):"] + w.lines))
        host.w(f"{name}[{grid}, {block}]({', '.join(params)})")
        self.launches.append(Launch(name, "copy", None, tuple(map(str, grid)), tuple(map(str, block))))


def launch_args() -> tuple[str, ...]:
    """A gpu.launch body's block arguments: block ids, thread ids, grid and block sizes (x, y, z
    each), as the kernel being emitted reads them (emit/ids.py: inside its grid-stride loops)."""
    return tuple(f(d) for f in (ids.block_id, ids.thread_id, ids.grid_dim, ids.block_dim) for d in "xyz")


def grid_stride_axes(counts: list[str], names) -> tuple[dict[str, tuple[str, str]], list[str]]:
    """Which grid axes a kernel walks with a grid-stride loop, and the grid it is launched with.

    An axis whose block count is a number within CUDA's limit (2^31-1 on x, 65535 on y and z)
    is launched as it is. Any other (a static count above the limit; a count the host computes
    at run time, from an extent taken at run time: --dynamic) is launched with at most the
    limit, and the kernel loops `for b in range(blockIdx, count, gridDim)` over it: a grid
    within the limits by construction at every size. Returns ({axis: (loop variable, count)},
    the launch's grid as written)."""
    strided, grid = {}, []
    for d, count in zip("xyz", counts):
        limit = ids.GRID_LIMITS[d]
        if count.isdigit() and int(count) <= limit:
            grid.append(count)
            continue
        if not count.isdigit() and not count.isidentifier():
            raise EmitError(f"a gpu.launch's run-time grid size {count!r} is not a host variable")
        strided[d] = (names.fresh(f"block_{d}"), count)
        grid.append(str(limit) if count.isdigit() else f"min({count}, {limit})")
    return strided, grid


def grid_stride_loops(strided: dict[str, tuple[str, str]], lines: list[str]) -> list[str]:
    """A kernel body (indented one level per strided axis) inside its grid-stride loops. A body
    that shares memory between its threads ends each step with a barrier: the next step's
    writes must not overtake this step's last reads."""
    head = [
        "    " * (1 + k) + f"for {var} in range({ids.hardware_block_id(d)}, {count}, {ids.hardware_grid_dim(d)}):"
        for k, (d, (var, count)) in enumerate(strided.items())]
    if any("cuda.syncthreads()" in line or "cuda.shared.array" in line for line in lines):
        lines = lines + ["    " * (1 + len(strided)) + "cuda.syncthreads()"]
    return head + (lines or ["    " * (1 + len(strided)) + "pass"])


def strip_trailing_barrier(lines: list[str], depth: int) -> list[str]:
    """A body without the barrier it ends with (map_nested_forall_to_threads puts one after each
    thread loop): at the end of a kernel it guards nothing."""
    if lines and lines[-1] == "    " * depth + "cuda.syncthreads()":
        return lines[:-1]
    return lines


def launch_bounds(block_dims) -> str:
    """cuda.jit's launch bounds: the block's threads (`.maxntid` in the PTX), so ptxas keeps a
    thread's registers within what a block of that size can have (64 at 1,024 threads, 128 at
    512). The module's `_bounds` gives none under the simulator, which takes no such option."""
    threads = 1
    for b in block_dims:
        threads *= int(b)
    return f", **_bounds({threads})"


DYNAMIC_SHARED_HELPER = [
    "_DYNAMIC_SHARED_SET = {}",
    "",
    "",
    "def _dynamic_shared(kernel, nbytes):",
    '    """Let `kernel` (a cuda.jit dispatcher) launch with `nbytes` of dynamic shared memory: past 48 KB',
    "    a kernel must opt in (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES; Numba has no API for it, so",
    "    the attribute is set on each compiled overload's function in the current context, once). The",
    '    simulator needs nothing."""',
    "    if _CUDASIM or nbytes <= 48 * 1024:",
    "        return",
    "    from numba.cuda.cudadrv.driver import binding, driver",
    "    attr = binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES",
    "    for overload in kernel.overloads.values():",
    "        fn = overload._codelibrary.get_cufunc()",
    "        key = (id(fn), nbytes)",
    "        if _DYNAMIC_SHARED_SET.get(key) is not fn:",
    "            driver.cuKernelSetAttribute(attr, nbytes, fn.handle, fn.device.id)",
    "            _DYNAMIC_SHARED_SET[key] = fn",
]


BOUNDS_HELPER = '''def _bounds(threads):
    """cuda.jit's launch_bounds: ptxas fits a kernel's registers to blocks of `threads` (Numba's simulator takes none)."""
    return {} if _CUDASIM else {"launch_bounds": threads}'''


def _dims(values: list[str]) -> str:
    return f"({', '.join(values)})"


def _cpu_jit(parallel: bool) -> str:
    return (f'@numba.njit(parallel={parallel}, nogil=True, fastmath={CPU_FASTMATH}, cache=False, '
            'error_model="numpy")')


def _blas_only_in_prange(lines: list[str]) -> bool:
    """Every BLAS call of a cpu function (emit/cpu.py: BLAS_MARK) sits inside one of its prange loops."""
    found, depth = False, None
    for line in lines:
        ind = len(line) - len(line.lstrip())
        if depth is not None and line.strip() and ind <= depth:
            depth = None
        if emit_cpu.prange_header(line) and depth is None:
            depth = ind
        if emit_cpu.BLAS_MARK in line:
            if depth is None:
                return False
            found = True
    return found


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
