"""Typed chain -> MLIR on tensors: one public func.func per chain, static shapes for a binding.

Each node is lowered by the rule registered for its op (the other modules of this package), at an MLIR location
built from the node's FDSL span, so `print_ir(module, locations=True)` points every op at the
user's file:line:col.
"""
from __future__ import annotations

from fusec.dsl.source import Span
from fusec.dsl.typed import TypedChain, TypedModule

from ..errors import CompilerInternalError
from ..mlir import func, ir, new_context, verify
from . import contraction, elementwise, indexing, norm, reduction, shape  # noqa: F401  (each registers its rules)
from .builder import ScalarConst, element_type, shape_of, elem_of, tensor_type
from .registry import RULES, LoweringContext

STAGE = "linalg"


def location_of(span: Span | None) -> ir.Location:
    if span is None:
        return ir.Location.unknown()
    return ir.Location.file(span.file.path, span.line, span.col)


def check_binding(chain: TypedChain, binding: dict[str, int] | None) -> dict[str, int]:
    """The binding restricted to the chain's symbols; every symbol must be bound to an extent >= 1."""
    binding = dict(binding or {})
    missing = [s for s in chain.symbols if s not in binding]
    if missing:
        raise ValueError(f"chain {chain.name}: no extent bound for symbol(s) {', '.join(missing)}")
    bad = [s for s in chain.symbols if not isinstance(binding[s], int) or binding[s] < 1]
    if bad:
        raise ValueError(f"chain {chain.name}: symbol(s) {', '.join(bad)} must be bound to positive integers")
    return {s: binding[s] for s in chain.symbols}


def _lower_chain_into(block: ir.Block, chain: TypedChain, binding: dict[str, int]) -> None:
    binding = check_binding(chain, binding)
    ctx = LoweringContext(chain, binding)
    params = chain.param_nodes
    arg_types = [tensor_type(ctx.shape(p), ctx.elem(p)) for p in params]
    result_types = [tensor_type(t.concrete(binding), element_type(t.dtype)) for t in chain.output_types]
    with ir.InsertionPoint(block), location_of(chain.span):
        f = func.FuncOp(chain.name, (arg_types, result_types))
        f.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
        entry = f.add_entry_block(arg_locs=[location_of(p.span or chain.span) for p in params])
    for p, arg in zip(params, entry.arguments):
        ctx.values[p.id] = arg
    with ir.InsertionPoint(entry):
        for node in chain.nodes:
            if node.op == "param":
                continue
            with location_of(node.span):
                ctx.values[node.id] = _lower_node(ctx, node)
        with location_of(chain.span):
            func.ReturnOp([ctx.tensor(i) for i in chain.outputs])


def _lower_node(ctx: LoweringContext, node):
    if node.op == "constant":
        return ScalarConst(node.attr("value"), node.type.dtype)
    lower_rule = RULES.get(node.op)
    if lower_rule is None:
        raise CompilerInternalError(STAGE, f"no lowering rule for op '{node.op}' (chain {ctx.chain.name})")
    value = lower_rule(ctx, node)
    if isinstance(value, ScalarConst):
        return value
    want = (ctx.shape(node), ctx.elem(node))
    if (shape_of(value), elem_of(value)) != want:
        raise CompilerInternalError(
            STAGE, f"{node.op} at {node.span} lowered to {value.type}, but the typed chain says "
                   f"{tensor_type(*want)}")
    return value


def lower_chain(chain: TypedChain, binding: dict[str, int] | None = None,
                context: ir.Context | None = None, verify_ir: bool = True) -> ir.Module:
    """A module holding one public func.func for `chain`, every shape static under `binding`."""
    return _lower([(chain, binding or {})], context, verify_ir)


def lower(typed_module: TypedModule, bindings: dict[str, dict[str, int]] | None = None,
          context: ir.Context | None = None) -> ir.Module:
    """A module with one public func.func per chain; bindings maps chain name -> symbol extents."""
    bindings = bindings or {}
    return _lower([(c, bindings.get(c.name, {})) for c in typed_module.chains], context)


def _lower(chains: list[tuple[TypedChain, dict[str, int]]], context: ir.Context | None,
           verify_ir: bool = True) -> ir.Module:
    with context or new_context(), ir.Location.unknown():
        module = ir.Module.create()
        for chain, binding in chains:
            _lower_chain_into(module.body, chain, binding)
        if verify_ir:
            verify(module, STAGE)
    return module
