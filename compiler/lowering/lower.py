"""Typed chain -> MLIR on tensors: one public func.func per chain, static shapes for a binding.

With `dynamic` symbols (options.dynamic), their extents are `?` in every type, read with a
tensor.dim of the first parameter that carries each; an op that would need such an extent as a
number is a user error at the op. Each node is lowered by its op's registered rule, at a
location built from its FDSL span (`print_ir(module, locations=True)` shows file:line:col).
See docs/ARCHITECTURE.md, "Stages and what each hands on" (linalg).
"""
from __future__ import annotations

from fusec.dsl.diagnostics import Diagnostic, FdslError
from fusec.dsl.source import Span
from fusec.dsl.typed import Node, TypedChain, TypedModule

from ..errors import CompilerInternalError
from ..mlir import arith, func, ir, new_context, tensor, verify
from . import contraction, elementwise, indexing, norm, reduction, shape  # noqa: F401  (each registers its rules)
from . import pooling  # noqa: F401  (registers its rules)
from . import creation  # noqa: F401  (full, full_like, arange)
from .builder import DynamicUnsupported, ScalarConst, dynamic_dims, element_type, shape_of, elem_of, tensor_type
from .registry import RULES, LoweringContext

STAGE = "linalg"
# ops whose cpu kernels, or whose lowering, need every extent of their operands at compile time
STATIC_ONLY = {
    "conv2d": "its convolution algorithms are chosen and laid out for the image's extents",
    "batchnorm": "it folds into a convolution's weights",
    "cumsum": "its scan kernel is laid out for the row's extent",
    "cumprod": "its scan kernel is laid out for the row's extent",
    "broadcast_to": "its target shape is fixed at compile time",
}


def location_of(span: Span | None) -> ir.Location:
    if span is None:
        return ir.Location.unknown()
    return ir.Location.file(span.file.path, span.line, span.col)


def validated_binding(chain: TypedChain, binding: dict[str, int] | None) -> dict[str, int]:
    """The binding restricted to the chain's symbols; every symbol must be bound to an extent >= 1."""
    binding = dict(binding or {})
    missing = [s for s in chain.symbols if s not in binding]
    if missing:
        raise ValueError(f"chain {chain.name}: no extent bound for symbol(s) {', '.join(missing)}")
    bad = [s for s in chain.symbols if not isinstance(binding[s], int) or binding[s] < 1]
    if bad:
        raise ValueError(f"chain {chain.name}: symbol(s) {', '.join(bad)} must be bound to positive integers")
    return {s: binding[s] for s in chain.symbols}


def _lower_chain_into(block: ir.Block, chain: TypedChain, binding: dict[str, int],
                      dynamic: frozenset[str] = frozenset(), conv_layout: str = "channels-last") -> None:
    binding = validated_binding(chain, binding)
    dynamic = frozenset(dynamic) & set(chain.symbols)
    ctx = LoweringContext(chain, binding, dynamic=dynamic, conv_layout=conv_layout)
    params = chain.param_nodes
    if dynamic:
        check_dynamic_chain(chain, dynamic)
    arg_types = [tensor_type(ctx.shape(p), ctx.elem(p)) for p in params]
    result_types = [tensor_type(ctx.shape(chain.node(i)), element_type(t.dtype))
                    for i, t in zip(chain.outputs, chain.output_types)]
    with ir.InsertionPoint(block), location_of(chain.span):
        f = func.FuncOp(chain.name, (arg_types, result_types))
        f.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
        entry = f.add_entry_block(arg_locs=[location_of(p.span or chain.span) for p in params])
    for p, arg in zip(params, entry.arguments):
        ctx.values[p.id] = arg
    with ir.InsertionPoint(entry), dynamic_dims() as dims:
        for p, arg in zip(params, entry.arguments):
            dims.args[arg] = ctx.shape(p)
            for axis, d in enumerate(p.type.shape):
                if d in dynamic and d not in dims.values:
                    with location_of(p.span or chain.span):
                        dims.values[d] = tensor.dim(arg, arith.constant(ir.IndexType.get(), axis))
        for node in chain.nodes:
            if node.op == "param":
                continue
            with location_of(node.span):
                ctx.values[node.id] = _lower_dynamic_node(ctx, node) if dynamic else _lower_node(ctx, node)
        with location_of(chain.span):
            func.ReturnOp([ctx.tensor(i) for i in chain.outputs])


def check_dynamic_chain(chain: TypedChain, dynamic: frozenset[str]) -> None:
    """User errors, at the op, for what cannot take a symbol's extent at run time: a symbol no
    parameter carries, and ops whose kernels need it at compile time (STATIC_ONLY)."""
    carried = {d for p in chain.param_nodes for d in p.type.shape if isinstance(d, str)}
    errors = []
    for s in sorted(dynamic - carried):
        errors.append(Diagnostic(chain.span, f"--dynamic {s}: no parameter of chain '{chain.name}' has {s} in its "
                                             "shape, so its extent cannot be read from the inputs at run time"))
    for node in chain.nodes:
        if node.op in AXIS_STATIC:
            touched, why = AXIS_STATIC[node.op](chain, node, dynamic)
        elif node.op in STATIC_ONLY:
            touched, why = _touched(chain, node, dynamic), STATIC_ONLY[node.op]
        else:
            continue
        if touched:
            errors.append(_dynamic_error(node, touched, why))
    if errors:
        raise FdslError(errors)


def _touched(chain: TypedChain, node: Node, dynamic) -> list[str]:
    """The dynamic symbols in the shapes an op reads or writes."""
    return sorted({d for n in [node] + [chain.node(i) for i in node.inputs] for d in n.type.shape if d in dynamic})


def _sliced(chain: TypedChain, node: Node, dynamic) -> tuple[list[str], str]:
    """A slice takes a run-time extent on the axes it keeps whole; not one it cuts (its bounds
    are positions computed at compile time) nor a bound that names the symbol."""
    src = chain.node(node.inputs[0]).type.shape
    starts, steps, drop = node.attr("start"), node.attr("step"), set(node.attr("drop"))
    kept = [a for a in range(len(src)) if a not in drop]
    out = node.type.shape
    bad = {p[0] for p in starts if isinstance(p, tuple) and p[0] in dynamic}
    for a, d in enumerate(src):
        if d in dynamic and (a in drop or starts[a] != 0 or steps[a] != 1 or out[kept.index(a)] != d):
            bad.add(d)
    return sorted(bad), "the axis it cuts (or a bound it names) must be static: its positions are computed at compile time"


def _concatenated(chain: TypedChain, node: Node, dynamic) -> tuple[list[str], str]:
    """concat takes run-time extents on every axis but the one it joins along."""
    axis = node.attr("axis")
    bad = {n.type.shape[axis] for n in [node] + [chain.node(i) for i in node.inputs]
           if n.type.shape and n.type.shape[axis] in dynamic}
    return sorted(bad), "the axis it joins along must be static: its parts are placed at offsets computed at compile time"


def _gathered(chain: TypedChain, node: Node, dynamic) -> tuple[list[str], str]:
    """gather/embedding take run-time extents on the indices and the table's other axes, not on
    the axis they index (its clamp is compiled for its extent)."""
    table = chain.node(node.inputs[0]).type.shape
    axis = node.attr("axis")
    bad = [table[axis]] if table[axis] in dynamic else []
    return bad, "the table's indexed axis must be static: the index clamp is compiled for its extent"


# ops that take a run-time extent on some axes only: (symbols refused, why)
AXIS_STATIC = {"slice": _sliced, "concat": _concatenated, "gather": _gathered, "embedding": _gathered}


def _dynamic_error(node: Node, symbols: list[str], why: str) -> Diagnostic:
    names = ", ".join(symbols)
    return Diagnostic(node.span, f"{node.op} cannot take {names} at run time (--dynamic {names}): {why}; "
                                 f"bind {names} statically (leave {'it' if len(symbols) == 1 else 'them'} "
                                 "out of --dynamic)")


def _lower_dynamic_node(ctx: LoweringContext, node: Node):
    try:
        return _lower_node(ctx, node)
    except DynamicUnsupported:
        touched = _touched(ctx.chain, node, ctx.dynamic) or sorted(ctx.dynamic)
        raise FdslError([_dynamic_error(node, touched, "its lowering needs the extent as a number "
                                                        "(a count or a regrouping of dims)")]) from None


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
                context: ir.Context | None = None, verify_ir: bool = True,
                dynamic: frozenset[str] | tuple[str, ...] = (), conv_layout: str = "channels-last") -> ir.Module:
    """A module holding one public func.func for `chain`, every shape static under `binding`
    except the extents of the `dynamic` symbols, which the func reads from its arguments.
    `conv_layout`: how a 16-bit conv whose channels make 16-byte runs is lowered,
    "channels-last" or "nchw" (lowering/contraction.py; the pipeline prices both)."""
    return _lower([(chain, binding or {})], context, verify_ir, frozenset(dynamic), conv_layout)


def lower(typed_module: TypedModule, bindings: dict[str, dict[str, int]] | None = None,
          context: ir.Context | None = None) -> ir.Module:
    """A module with one public func.func per chain; bindings maps chain name -> symbol extents."""
    bindings = bindings or {}
    return _lower([(c, bindings.get(c.name, {})) for c in typed_module.chains], context)


def _lower(chains: list[tuple[TypedChain, dict[str, int]]], context: ir.Context | None,
           verify_ir: bool = True, dynamic: frozenset[str] = frozenset(),
           conv_layout: str = "channels-last") -> ir.Module:
    with context or new_context(), ir.Location.unknown():
        module = ir.Module.create()
        for chain, binding in chains:
            _lower_chain_into(module.body, chain, binding, dynamic, conv_layout)
        if verify_ir:
            verify(module, STAGE)
    return module
