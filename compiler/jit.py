"""The MLIR CPU JIT executor (--target mlir-jit): the graph-stage module run inside MLIR + LLVM,
the independent check of lowering and of every MLIR transform. A JIT-only entry
`_fusec_entry` takes every input and output as a memref (outputs allocated by us: nothing the
JIT allocates escapes); bool crosses as i8, f16, bf16, f32, f64, i32, i64 as themselves. See
docs/ARCHITECTURE.md, "What the code taught us" (the references are targets).
"""
from __future__ import annotations

import ctypes
from collections import OrderedDict
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from fusec.dsl.typed import TypedChain, TypedModule
from fusec.dsl.types import DType

from .errors import CompilerInternalError
from . import mlir
from .lowering.builder import element_type, parallel, tensor_type
from .lowering.lower import validated_binding
from .mlir import MLIRError, PassManager, arith, bufferization, func, ir, linalg, print_ir
from .options import CompileOptions
from .pipeline import compile_typed

STAGE = "mlir-jit"
ENTRY = "_fusec_entry"
OPT_LEVEL = 2

# Each step's why, in order. Between the two lists every memref.copy becomes a linalg.copy: the
# LLVM lowering of a copy into a strided view (tensor.pad's interior) calls `memrefCopy` from
# MLIR's C runner utils, which the wheel does not ship.
BUFFERIZE: tuple[str, ...] = (
    "inline",                              # the chain body moves into the entry
    "func.func(convert-elementwise-to-linalg)",   # _wide_sums' extf / truncf of whole tensors
    "symbol-dce",                          # the now-unused private chain function goes
    "one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map}",
    "buffer-deallocation-pipeline",        # frees every temporary
    "convert-bufferization-to-memref",
)
TO_LLVM: tuple[str, ...] = (
    "func.func(convert-linalg-to-loops)",
    "math-extend-to-supported-types",      # f16/bf16 math ops computed in f32 (libm has no f16)
    "convert-math-to-funcs",               # math.ipowi (integer pow) as a software loop
    "convert-math-to-llvm",                # exp, log, sqrt, rsqrt, sin, ... as LLVM intrinsics
    "convert-math-to-libm",                # what LLVM has no intrinsic for (erf, tanh) as libm calls
    "convert-scf-to-cf",
    "expand-strided-metadata",             # expand/collapse_shape views
    "lower-affine",
    "finalize-memref-to-llvm",
    "func.func(arith-emulate-unsupported-floats{source-types=bf16 target-type=f32})",  # bf16 <-> int via f32
    "arith-expand{include-bf16=true}",     # arith ops without a direct LLVM lowering; bf16 extf/truncf
                                           # as integer ops (no __truncsfbf2 in the JIT without AVX-512 BF16)
    "convert-arith-to-llvm",
    "convert-func-to-llvm",
    "convert-cf-to-llvm",
    "reconcile-unrealized-casts",
)


@dataclass(frozen=True)
class BoundaryArg:
    """One input or output as it crosses the JIT boundary."""
    shape: tuple[int, ...]
    dtype: DType

    @property
    def carrier(self) -> np.dtype:
        """The NumPy dtype whose bytes the JIT reads or writes (bool travels as uint8)."""
        return np.dtype(np.uint8) if self.dtype.is_bool else self.dtype.np

    def memref_type(self) -> ir.MemRefType:
        elem = ir.IntegerType.get_signless(8) if self.dtype.is_bool else element_type(self.dtype)
        return ir.MemRefType.get(list(self.shape), elem)


class JitChain:
    """A chain compiled to native code for one binding; call it with NumPy arrays."""

    def __init__(self, engine, chain: TypedChain, binding: dict[str, int],
                 inputs: list[BoundaryArg], outputs: list[BoundaryArg]):
        self._engine = engine
        self.chain = chain
        self.binding = binding
        self.inputs = inputs
        self.outputs = outputs

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        if len(inputs) != len(self.inputs):
            raise ValueError(f"chain {self.chain.name} takes {len(self.inputs)} inputs, got {len(inputs)}")
        args = [self._prepare(i, spec, x) for i, (spec, x) in enumerate(zip(self.inputs, inputs))]
        outs = [np.zeros(spec.shape, spec.carrier) for spec in self.outputs]
        descriptors = [mlir.get_ranked_memref_descriptor(a) for a in args + outs]
        self._engine.invoke(ENTRY, *[ctypes.pointer(ctypes.pointer(d)) for d in descriptors])
        return [o.view(np.bool_) if spec.dtype.is_bool else o for spec, o in zip(self.outputs, outs)]

    def _prepare(self, i: int, spec: BoundaryArg, x) -> np.ndarray:
        name = self.chain.param_nodes[i].name
        if not isinstance(x, np.ndarray):
            x = np.asarray(x, dtype=spec.dtype.np)
        if x.dtype != spec.dtype.np:
            raise ValueError(f"chain {self.chain.name}: input {name} must be {spec.dtype}, got NumPy {x.dtype}")
        if x.shape != spec.shape:
            raise ValueError(f"chain {self.chain.name}: input {name} must have shape {list(spec.shape)}, "
                             f"got {list(x.shape)}")
        x = np.ascontiguousarray(x)
        return x.view(np.uint8) if spec.dtype.is_bool else x


def _find_func(module: ir.Module, name: str) -> func.FuncOp:
    for op in module.body.operations:
        if op.operation.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == name:
            return op
    raise CompilerInternalError(STAGE, f"the module has no function @{name}")


def _add_entry(module: ir.Module, chain_name: str, inputs: list[BoundaryArg], outputs: list[BoundaryArg]) -> None:
    """func @_fusec_entry(ins..., outs...): to_tensor, i8->i1, call the chain, i1->i8, store into outs."""
    target = _find_func(module, chain_name)
    target.attributes["sym_visibility"] = ir.StringAttr.get("private")
    del target.attributes["llvm.emit_c_interface"]
    i1, i8 = ir.IntegerType.get_signless(1), ir.IntegerType.get_signless(8)
    with ir.InsertionPoint(module.body):
        entry = func.FuncOp(ENTRY, ([a.memref_type() for a in inputs + outputs], []))
        entry.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
        block = entry.add_entry_block()
    args = list(block.arguments)
    with ir.InsertionPoint(block):
        tensors = []
        for spec, m in zip(inputs, args):
            t = bufferization.ToTensorOp(tensor_type(spec.shape, ir.MemRefType(m.type).element_type), m,
                                         restrict=True).result
            if spec.dtype.is_bool:
                t = parallel([t], spec.shape, i1, lambda xs: arith.trunci(i1, xs[0]))
            tensors.append(t)
        results = func.CallOp(target, tensors).results
        for spec, r, m in zip(outputs, results, args[len(inputs):]):
            if spec.dtype.is_bool:
                r = parallel([r], spec.shape, i8, lambda xs: arith.extui(i8, xs[0]))
            bufferization.MaterializeInDestinationOp(None, r, m, restrict=True, writable=True)
        func.ReturnOp([])


def _copies_to_linalg(module: ir.Module) -> None:
    copies: list[ir.Operation] = []

    def visit(op):
        if op.name == "memref.copy":
            copies.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    for op in copies:
        src, dst = op.operands
        with op.location, ir.InsertionPoint(op):
            linalg.copy(src, outs=[dst])
        op.erase()


# Math functions the LLVM lowering writes as formulas that lose all precision where the function
# is accurate by definition (convert-math-to-llvm: log1p as log(1 + x), 0 for |x| below the
# epsilon; expm1 as exp(x) - 1); they become calls to libm's own, resolved in this process.
LIBM_CALLS = {"math.log1p": "log1p", "math.expm1": "expm1"}


def _libm_calls(module: ir.Module) -> None:
    """Replace each LIBM_CALLS op by a call to the libm function (f32: the `f` variant; f16 and
    bf16 are computed in f32, as math-extend-to-supported-types does for the others)."""
    found: list[ir.Operation] = []

    def visit(op):
        if op.name in LIBM_CALLS:
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    if not found:
        return
    f32, f64 = ir.F32Type.get(), ir.F64Type.get()
    declared: set[str] = set()
    for op in found:
        x = op.operands[0]
        narrow = x.type not in (f32, f64)
        wide = f64 if x.type == f64 else f32
        name = LIBM_CALLS[op.name] + ("" if wide == f64 else "f")
        if name not in declared:
            with ir.InsertionPoint.at_block_begin(module.body), ir.Location.unknown():
                func.FuncOp(name, ([wide], [wide]), visibility="private")
            declared.add(name)
        with op.location, ir.InsertionPoint(op):
            arg = arith.extf(wide, x) if narrow else x
            y = func.CallOp([wide], ir.FlatSymbolRefAttr.get(name), [arg]).result
            if narrow:
                y = arith.truncf(x.type, y)
        op.results[0].replace_all_uses_with(y)
        op.erase()


def _wide_sums(module: ir.Module) -> None:
    """Every f32 sum (a linalg.generic with a reduction iterator whose one f32 output is only
    added to: `out + y`) accumulates in f64 and is rounded to f32 once, as the cpu and GPU
    emitters do for long sums (docs/FDSL.md, "Long reductions"): convert-linalg-to-loops adds
    the terms one by one, and a serial f32 sum of 10^6 terms about 1000 is off by 1%."""
    found: list[ir.Operation] = []

    def visit(op):
        if op.name == "linalg.generic" and _is_f32_sum(op):
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    f32, f64 = ir.F32Type.get(), ir.F64Type.get()
    for op in found:
        n_in = len(op.operands) - 1
        init = op.operands[n_in]
        wide_t = ir.RankedTensorType.get(ir.RankedTensorType(init.type).shape, f64)
        with op.location, ir.InsertionPoint(op):
            wide_init = arith.extf(wide_t, init)
            new = linalg.GenericOp([wide_t], list(op.operands[:n_in]), [wide_init], op.attributes["indexing_maps"],
                                   op.attributes["iterator_types"]).operation
        for attr in op.attributes:
            name = attr if isinstance(attr, str) else attr.name
            if name not in ("indexing_maps", "iterator_types", "operandSegmentSizes"):
                new.attributes[name] = op.attributes[name]
        old_block = op.regions[0].blocks[0]
        old_args = list(old_block.arguments)
        block = new.regions[0].blocks.append(*[a.type for a in old_args[:-1]], f64)
        for a, b in zip(old_args[:-1], block.arguments):
            a.replace_all_uses_with(b)
        yield_op = old_block.operations[len(old_block.operations) - 1]
        add = yield_op.operands[0].owner
        term = add.operands[1] if add.operands[0] == old_args[-1] else add.operands[0]
        at = ir.InsertionPoint(block)
        for inner in list(old_block.operations)[:-2]:          # all but the addf and the yield
            inner.detach_from_parent()
            at.insert(inner)
        with op.location, at:
            total = arith.addf(arith.extf(f64, term), block.arguments[-1])
            linalg.YieldOp([total])
        with op.location, ir.InsertionPoint(op):
            narrow = arith.truncf(op.results[0].type, new.results[0])
        op.results[0].replace_all_uses_with(narrow)
        op.erase()


def _is_f32_sum(op) -> bool:
    if len(op.results) != 1:
        return False
    try:
        if ir.RankedTensorType(op.results[0].type).element_type != ir.F32Type.get():
            return False
    except ValueError:                         # not a ranked tensor
        return False
    if "reduction" not in str(op.attributes["iterator_types"]):
        return False
    block = op.regions[0].blocks[0]
    out = block.arguments[len(block.arguments) - 1]
    ops = list(block.operations)
    if len(ops) < 2 or ops[-1].name != "linalg.yield" or ops[-2].name != "arith.addf":
        return False
    add, term = ops[-2], ops[-1]
    if list(term.operands) != [add.results[0]] or len(list(add.results[0].uses)) != 1:
        return False
    uses = list(out.uses)
    return len(uses) == 1 and uses[0].owner == add and out in list(add.operands)


def jit_compile_module(graph_module: ir.Module, chain: TypedChain, binding: dict[str, int] | None = None) -> JitChain:
    """Compile `chain`'s function from a graph-stage module (left untouched) to native code."""
    binding = validated_binding(chain, binding)
    inputs = [BoundaryArg(p.type.concrete(binding), p.type.dtype) for p in chain.param_nodes]
    outputs = [BoundaryArg(t.concrete(binding), t.dtype) for t in chain.output_types]
    with graph_module.context, ir.Location.unknown():
        module = ir.Module.parse(print_ir(graph_module, locations=True))
        _add_entry(module, chain.name, inputs, outputs)
        _wide_sums(module)
        try:
            PassManager.parse(f"builtin.module({','.join(BUFFERIZE)})").run(module.operation)
            _copies_to_linalg(module)
            _libm_calls(module)
            PassManager.parse(f"builtin.module({','.join(TO_LLVM)})").run(module.operation)
        except MLIRError as e:
            raise CompilerInternalError(STAGE, f"lowering chain {chain.name} to LLVM failed:\n{e}") from None
        engine = mlir.ExecutionEngine(module, opt_level=OPT_LEVEL)
    return JitChain(engine, chain, binding, inputs, outputs)


_CACHE: OrderedDict = OrderedDict()
_CACHE_SIZE = 64


def _chain_of(typed: TypedModule | TypedChain, chain_name: str | None) -> TypedChain:
    if isinstance(typed, TypedChain):
        if chain_name not in (None, typed.name):
            raise KeyError(f"the chain is {typed.name}, not {chain_name}")
        return typed
    if chain_name is None:
        if len(typed.chains) != 1:
            raise ValueError("name the chain to run: the module has " + ", ".join(c.name for c in typed.chains))
        return typed.chains[0]
    return typed.chain(chain_name)


def infer_binding(chain: TypedChain, inputs: Sequence[np.ndarray]) -> dict[str, int]:
    """Symbol extents read off the inputs' shapes (the first occurrence of each symbol wins)."""
    binding: dict[str, int] = {}
    for p, x in zip(chain.param_nodes, inputs):
        for d, n in zip(p.type.shape, np.shape(x)):
            if isinstance(d, str):
                binding.setdefault(d, int(n))
    return binding


def jit_compile(typed: TypedModule | TypedChain, chain_name: str | None, binding: dict[str, int] | None = None,
                disabled_passes: Sequence[str] = ()) -> JitChain:
    """Front-end output -> stages -> native code, cached per (chain, binding, disabled passes)."""
    chain = _chain_of(typed, chain_name)
    binding = validated_binding(chain, binding)
    options = CompileOptions(disabled_passes=frozenset(disabled_passes), baseline=False)
    key = (chain, tuple(sorted(binding.items())), options)
    try:
        hash(key)
    except TypeError:           # a chain with unhashable attributes is compiled, not cached
        key = None
    if key is not None and key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    graph = compile_typed(chain, binding, options=options, until="graph").module
    compiled = jit_compile_module(graph, chain, binding)
    if key is not None:
        _CACHE[key] = compiled
        if len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return compiled


def jit_run(typed: TypedModule | TypedChain, chain_name: str | None, inputs: Sequence[np.ndarray],
            binding: dict[str, int] | None = None, disabled_passes: Sequence[str] = ()) -> list[np.ndarray]:
    """Run one chain on the MLIR CPU JIT; returns its outputs as NumPy arrays, in order.
    `binding` defaults to the extents read off the inputs' shapes."""
    chain = _chain_of(typed, chain_name)
    if binding is None:
        binding = infer_binding(chain, inputs)
    return jit_compile(chain, chain.name, binding, disabled_passes)(inputs)
