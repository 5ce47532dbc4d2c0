"""The checker: names, dtypes, broadcasting, symbols and each op's shape rule -> a typed chain.

Errors are collected, not thrown at the first: a statement that fails binds its name to
POISON (dsl/scope.py), and uses of a poisoned value report nothing more, so independent mistakes
all show up in one run. Compile-time constants are folded in dsl/constants.py; the chain
checker's rules for subscripts and for static arguments are mixins, in dsl/subscripts.py and
dsl/static_args.py.
"""
from __future__ import annotations

import difflib
from typing import Any

from . import ast as A
from .constants import I64_MAX, Weak, declare_const, fit_error, fold, fold_const
from .diagnostics import DiagnosticSink, Note
from .limits import recursion_room
from .ops import BINARY_OPERATORS, OPS, REQUIRED, Arg, OpDef, bind_slice_errors
from .scope import POISON, Binding, Poison
from .shapes import OpError, Symbols
from .source import Span
from .static_args import StaticArgs, default_attr
from .subscripts import Subscripts
from .typed import Node, TypedChain, TypedModule
from .types import BOOL, DTYPES, DType, TensorType

# Op-table entries that are not called by name, and what to write instead.
_NOT_CALLABLE = {"slice": "; a slice is written as a subscript: x[a:b], x[::2], x[..., 0]"}


def check_module(module: A.Module) -> TypedModule:
    """Type-check every chain of a parsed module; raise FdslError listing every error found."""
    with recursion_room():          # the walks below recurse once per level of an expression
        return _check(module)


def _check(module: A.Module) -> TypedModule:
    sink = DiagnosticSink()
    consts: dict[str, Binding] = {}
    chains: list[TypedChain] = []
    seen: dict[str, A.ChainDef] = {}
    for item in module.items:
        if isinstance(item, A.ConstDecl):
            declare_const(sink, consts, item)
            continue
        if item.name in seen:
            sink.error(item.name_span, f"chain '{item.name}' is defined twice",
                       [Note(seen[item.name].name_span, f"'{item.name}' first defined here")])
            continue
        seen[item.name] = item
        chain = _ChainChecker(sink, dict(consts), item).run()
        if chain is not None:
            chains.append(chain)
    sink.raise_if_any()
    return TypedModule(module.file, tuple(chains))


class _ChainChecker(Subscripts, StaticArgs):
    """One chain: its parameters, statements, calls and returns, each op's rule applied; the
    subscript and static-argument rules are its mixins'."""

    def __init__(self, sink: DiagnosticSink, consts: dict[str, Binding], chain: A.ChainDef) -> None:
        self.sink = sink
        self.scope = consts
        self.chain = chain
        self.syms = Symbols()
        self.sym_spans: dict[str, Span] = {}
        self.nodes: list[Node] = []
        self.node_span: dict[int, Span] = {}   # the span to blame for each node's value
        self.failed = False

    def error(self, span, message, notes=()) -> None:
        self.failed = True
        self.sink.error(span, message, notes)

    # ---- chain structure ------------------------------------------------------------------
    def run(self) -> TypedChain | None:
        params = [self.param(p) for p in self.chain.params]
        outputs = self.body()
        if self.failed or outputs is None:
            return None
        nodes = tuple(Node(n.id, n.op, n.inputs, self._resolve_attrs(n.attrs),
                           n.type.with_shape(self.syms.resolve(n.type.shape)), n.span, n.name)
                      for n in self.nodes)
        if not self._slices_fit(nodes):
            return None
        symbols = tuple(dict.fromkeys(d for n in nodes for d in n.type.shape if isinstance(d, str)))
        return TypedChain(self.chain.name, nodes, tuple(params), tuple(outputs), symbols, self.chain.span)

    def _resolve_attrs(self, attrs):
        return tuple((k, self.syms.resolve(v) if k == "shape" else self._resolve_starts(v) if k == "start" else v)
                     for k, v in attrs)

    def _resolve_starts(self, starts: tuple) -> tuple:
        """A slice's starts once every symbol is resolved: SYMBOL + OFFSET whose symbol has been
        unified with an extent is a number, with another symbol counts from that one."""
        out = []
        for p in starts:
            if isinstance(p, tuple):
                d = self.syms.find(p[0])
                p = d + p[1] if isinstance(d, int) else (d, p[1])
            out.append(p)
        return tuple(out)

    def _slices_fit(self, nodes: tuple[Node, ...]) -> bool:
        """A slice checked against a symbolic extent that a later statement unified with a
        number is checked again now, as bind_slice_errors would at every binding."""
        ok = True
        for n in nodes:
            if n.op != "slice":
                continue
            src = nodes[n.inputs[0]].type
            starts = n.attr("start")
            if src.symbols or n.type.symbols or any(isinstance(p, tuple) for p in starts):
                continue
            for why in bind_slice_errors(starts, n.attr("step"), n.attr("drop"), src.shape, n.type.shape, {}):
                self.error(n.span, why.replace(" under this binding", "") + f" (the input is {src} once its "
                           "symbols are unified with the sizes they meet later in the chain)")
                ok = False
        return ok

    def param(self, p: A.Param) -> int:
        ttype = self.type_expr(p.type, declare=True)
        nid = self.add(Node(len(self.nodes), "param", (), (), ttype or TensorType(DTYPES["f32"], ()), p.span, p.name))
        self.bind(p.name, p.name_span, nid if ttype else POISON, "parameter")
        return nid

    def type_expr(self, t: A.TypeExpr, declare: bool) -> TensorType | None:
        dtype = DTYPES.get(t.dtype)
        if dtype is None:
            self.error(t.span, f"unknown dtype '{t.dtype}'; expected one of {', '.join(DTYPES)}")
            return None
        dims = []
        for d in t.dims or ():
            if isinstance(d.value, int):
                if d.value < 1:
                    self.error(d.span, f"a dimension must be positive, got {d.value}")
                    return None
                if d.value > I64_MAX:
                    self.error(d.span, f"the dimension {d.value} does not fit in i64 (at most {I64_MAX})")
                    return None
            elif declare:
                self.syms.declare(d.value)
                self.sym_spans.setdefault(d.value, d.span)
            elif d.value not in self.sym_spans:
                self.error(d.span, f"symbol '{d.value}' in the return type is not a dimension of any parameter")
                return None
            dims.append(d.value)
        return TensorType(dtype, tuple(dims))

    def body(self) -> list[int] | None:
        ret: A.Return | None = None
        outputs = None
        for stmt in self.chain.body:
            if ret is not None:
                self.error(stmt.span, "statement after return; `return` must be the last statement of a chain",
                           [Note(ret.span, "the chain returns here")])
                continue
            if isinstance(stmt, A.ConstDecl):
                if stmt.name in self.scope:
                    prev = self.scope[stmt.name]
                    self.error(stmt.name_span, f"'{stmt.name}' is already defined",
                               [Note(prev.span, f"'{stmt.name}' first defined here")])
                else:
                    self.scope[stmt.name] = Binding(fold_const(self.sink, self.scope, stmt.value), stmt.name_span, "const")
            elif isinstance(stmt, A.Assign):
                value = self.expr(stmt.value)
                if isinstance(value, int):
                    self.nodes[value] = _named(self.nodes[value], stmt.name)
                self.bind(stmt.name, stmt.name_span, value, "value")
            elif isinstance(stmt, A.MultiAssign):
                self.multi_assign(stmt)
            else:
                ret = stmt
                outputs = self.returns(stmt)
        if ret is None:
            self.error(self.chain.span, f"chain '{self.chain.name}' has no return statement")
        return outputs

    def multi_assign(self, stmt: A.MultiAssign) -> None:
        """`a, b = split(...)`: one name per part. Any other value binds one name only."""
        names_span = stmt.name_spans[0].to(stmt.name_spans[-1])
        e = stmt.value
        parts: Any = POISON
        if isinstance(e, A.Call) and e.func == "split":
            parts = self.call(e, parts=True)
            if parts is not POISON and len(parts) != len(stmt.names):
                n = len(parts)
                self.error(names_span, f"split makes {n} part{'s' if n != 1 else ''} but {len(stmt.names)} names "
                           "are bound", [Note(e.span, f"the split, into {n} part{'s' if n != 1 else ''}")])
                parts = POISON
        else:
            value = self.expr(e)
            if value is not POISON:
                self.error(names_span, f"only split(...) makes several values; this binds {len(stmt.names)} names "
                           "to one value (write `name = ...`)")
        for i, (name, span) in enumerate(zip(stmt.names, stmt.name_spans)):
            value = POISON if parts is POISON else parts[i]
            if isinstance(value, int):
                self.nodes[value] = _named(self.nodes[value], name)
            self.bind(name, span, value, "value")

    def bind(self, name: str, span: Span, value: Any, what: str) -> None:
        if name in self.scope:
            prev = self.scope[name]
            self.error(span, f"'{name}' is already defined; names are single-assignment",
                       [Note(prev.span, f"'{name}' first defined here")])
            return
        if name in self.sym_spans and what != "parameter":
            self.error(span, f"'{name}' is a dimension symbol of this chain and cannot name a value",
                       [Note(self.sym_spans[name], f"'{name}' used as a dimension here")])
            return
        self.scope[name] = Binding(value, span, what)

    def returns(self, ret: A.Return) -> list[int] | None:
        declared = self.chain.returns
        if len(ret.values) != len(declared):
            self.error(ret.span, f"chain '{self.chain.name}' declares {len(declared)} result"
                       f"{'s' if len(declared) != 1 else ''} but returns {len(ret.values)}")
            return None
        outputs = []
        for e, t in zip(ret.values, declared):
            want = self.type_expr(t, declare=False)
            v = self.expr(e)
            if v is POISON or want is None:
                continue
            if isinstance(v, Weak):
                if want.rank:
                    self.error(e.span, f"returns a scalar but the declared result is {want}")
                    continue
                v = self.constant(v, want.dtype, e.span)
                if v is POISON:
                    continue
            got = self.nodes[v].type
            got_s, want_s = self.syms.resolve(got.shape), self.syms.resolve(want.shape)
            if got.dtype != want.dtype or got_s != want_s:
                self.error(e.span, f"returns {got.with_shape(got_s)} but the chain declares {want}",
                           [Note(t.span, "result type declared here")])
                continue
            outputs.append(v)
        return outputs if len(outputs) == len(declared) else None

    # ---- expressions ----------------------------------------------------------------------
    def add(self, node: Node) -> int:
        self.nodes.append(node)
        return node.id

    def constant(self, w: Weak, dtype: DType, span: Span) -> int | Poison:
        if w.kind == "float" and not dtype.is_float:
            self.error(span, f"the float literal {w.value} cannot combine with {dtype} values; "
                       f"write an integer or cast the tensor with cast(x, f32)")
            return POISON
        if w.kind == "bool" and not dtype.is_bool:
            self.error(span, f"the bool literal {str(w.value).lower()} cannot combine with {dtype} values")
            return POISON
        if w.kind != "bool" and dtype.is_bool:
            self.error(span, f"the number {w.value} cannot combine with bool values; use true or false")
            return POISON
        why = fit_error(w.value, dtype)
        if why is not None:
            self.error(span, why)
            return POISON
        value = bool(w.value) if dtype.is_bool else (float(w.value) if dtype.is_float else int(w.value))
        return self.add(Node(len(self.nodes), "constant", (), (("value", value),), TensorType(dtype, ()), span))

    def expr(self, e: A.Expr) -> Any:
        if isinstance(e, A.Num):
            return Weak(e.value)
        if isinstance(e, A.Bool):
            return Weak(e.value)
        if isinstance(e, A.Name):
            return self.name(e)
        if isinstance(e, A.Unary):
            return self.apply(OPS["neg"], e.op_span, e.span, [e.operand], {}, blame_default=e.op_span)
        if isinstance(e, A.Binary):
            op = OPS[BINARY_OPERATORS[e.op]]
            return self.apply(op, e.op_span, e.span, [e.lhs, e.rhs], {}, blame_default=e.op_span)
        if isinstance(e, A.Call):
            return self.call(e)
        if isinstance(e, A.Subscript):
            return self.subscript(e)
        what = {A.Str: "a string", A.DTypeLit: "a dtype", A.ListExpr: "a list"}.get(type(e), "this")
        self.error(e.span, f"{what} is not a value here; it can only be an operator's static argument")
        return POISON

    def name(self, e: A.Name) -> Any:
        b = self.scope.get(e.id)
        if b is not None:
            return b.value
        if e.id in self.sym_spans:
            self.error(e.span, f"'{e.id}' is a dimension symbol, not a value",
                       [Note(self.sym_spans[e.id], f"'{e.id}' used as a dimension here")])
            return POISON
        hint = difflib.get_close_matches(e.id, list(self.scope), n=1, cutoff=0.5)
        extra = f"; did you mean '{hint[0]}'?" if hint else ""
        if e.id in OPS and e.id != "slice":
            extra = f"; '{e.id}' is an operator: call it as {e.id}(...)"
        self.error(e.span, f"unknown name '{e.id}'{extra}")
        return POISON

    def call(self, e: A.Call, parts: bool = False) -> Any:
        """An operator call. `parts`: the value of `a, b = ...`, the one place a split may be."""
        op = OPS.get(e.func) if e.func not in _NOT_CALLABLE else None
        if op is None:
            hint = difflib.get_close_matches(e.func, [o for o in OPS if o not in _NOT_CALLABLE], n=1)
            why = _NOT_CALLABLE.get(e.func) or (f"; did you mean '{hint[0]}'?" if hint else "")
            self.error(e.func_span, f"unknown operator '{e.func}'{why}")
            for a in e.args:   # still report errors inside the arguments
                self.expr(a) if not isinstance(a, (A.ListExpr, A.Str, A.DTypeLit)) else None
            return POISON
        if op.name == "split" and not parts:
            self.error(e.func_span, "split makes several values: bind them to names with `a, b = split(...)`, one "
                       "per part (a split cannot be used inside an expression)")
            return POISON
        bound: dict[str, A.Expr] = {}
        spans: dict[str, Span] = {}
        ok = True
        if len(e.args) > len(op.args):
            self.error(e.args[len(op.args)].span, f"{op.name} takes at most {len(op.args)} argument"
                       f"{'s' if len(op.args) != 1 else ''} ({_signature(op)}), got {len(e.args)}")
            ok = False
        for arg, a in zip(op.args, e.args):
            bound[arg.name], spans[arg.name] = a, a.span
        names = {a.name for a in op.args}
        for kw in e.kwargs:
            if kw.name not in names:
                hint = difflib.get_close_matches(kw.name, list(names), n=1)
                self.error(kw.span, f"{op.name} has no argument '{kw.name}'" +
                           (f"; did you mean '{hint[0]}'?" if hint else f" ({_signature(op)})"))
                ok = False
            elif kw.name in bound:
                self.error(kw.span, f"{op.name} got argument '{kw.name}' twice")
                ok = False
            else:
                bound[kw.name], spans[kw.name] = kw.value, kw.span
        for arg in op.args:
            if arg.name not in bound and arg.default is REQUIRED:
                self.error(e.span, f"{op.name} needs argument '{arg.name}' ({_signature(op)})")
                ok = False
        if not ok:
            return POISON
        tensors = []
        for a in op.args:
            if a.kind == "tensors":
                items = self.tensor_list(op, a, bound[a.name])
                if items is POISON:
                    return POISON
                tensors += items
            elif a.is_tensor:
                tensors.append(bound.get(a.name))
        statics = {a.name: bound[a.name] for a in op.args if not a.is_tensor and a.kind != "tensors" and a.name in bound}
        return self.apply(op, e.func_span, e.span, tensors, statics, spans=spans, blame_default=e.func_span)

    def tensor_list(self, op: OpDef, arg: Arg, e: A.Expr) -> Any:
        """The expressions of a list-of-tensors argument (concat's `xs`): a non-empty `[a, b, ...]`."""
        if not isinstance(e, A.ListExpr):
            example = f"{op.name}([a, b], axis=0)" if op.args[0] is arg else f"{op.name}(x, [a, b])"
            self.error(e.span, f"{op.name}'s '{arg.name}' must be a list of tensors in [ ], such as {example}")
            return POISON
        if not e.items:
            self.error(e.span, f"{op.name} needs at least one tensor in its list")
            return POISON
        return list(e.items)

    def apply(self, op: OpDef, op_span: Span, span: Span, tensor_exprs: list, static_exprs: dict,
              spans: dict | None = None, blame_default: Span | None = None) -> Any:
        """Evaluate arguments, adopt literal dtypes, run the op's rule, and add its node."""
        attrs = {}
        for arg in op.args:
            if arg.is_tensor or arg.kind == "tensors":
                continue
            if arg.name in static_exprs:
                v = self.static(arg, static_exprs[arg.name], op)
                if v is POISON:
                    return POISON
                attrs[arg.name] = v
            else:
                attrs[arg.name] = default_attr(arg)
        values = [None if ex is None else self.expr(ex) for ex in tensor_exprs]
        if any(v is POISON for v in values):
            return POISON
        tensor_args = [a for a in op.args if a.is_tensor]
        if op.category == "elementwise" and values and all(isinstance(v, Weak) for v in values):
            return fold(op, values, attrs, self.sink, span)
        values = self.adopt_dtypes(op, values, tensor_exprs)
        if values is POISON:
            return POISON
        types = [None if v is None else self.nodes[v].type for v in values]
        if op.category == "elementwise" and op.name not in ("where", "cast") and not op.name.startswith("logical_"):
            mixed = self.dtype_mismatch(op, types, tensor_exprs)
            if mixed:
                return POISON
        try:
            out_type, attrs = op.infer(self.syms, types, attrs)
        except OpError as err:
            self.report(op, err, tensor_args, tensor_exprs, values, spans or {}, blame_default or op_span)
            return POISON
        inputs = tuple(v for v in values if v is not None)
        if op.name == "split":          # no split node: one slice of the input per part
            return tuple(self.add(Node(len(self.nodes), "slice", inputs, tuple(part.items()), t, span))
                         for t, part in zip(out_type, attrs["parts"]))
        if op.name == "conv2d":
            attrs = {**attrs, "has_bias": values[2] is not None}
        node = Node(len(self.nodes), op.name, inputs, tuple(attrs.items()), out_type, span)
        return self.add(node)

    def adopt_dtypes(self, op: OpDef, values: list, exprs: list) -> Any:
        """Weak literals take the dtype of the tensors they combine with; a lone one is an error."""
        group = op.dtype_args if op.dtype_args is not None else tuple(range(len(values)))
        anchor = next((self.nodes[values[i]].type.dtype for i in group
                       if values[i] is not None and not isinstance(values[i], Weak)), None)
        out = []
        for i, v in enumerate(values):
            if not isinstance(v, Weak):
                out.append(v)
                continue
            if op.category != "elementwise":
                self.error(exprs[i].span, f"{op.name} expects a tensor here, got the scalar {v.value}")
                return POISON
            dtype = anchor if i in group else (BOOL if v.kind == "bool" else anchor)
            if dtype is None:
                dtype = {"bool": BOOL, "int": DTYPES["i64"], "float": DTYPES["f32"]}[v.kind]
            c = self.constant(v, dtype, exprs[i].span)
            if c is POISON:
                return POISON
            out.append(c)
        return out

    def dtype_mismatch(self, op: OpDef, types: list, exprs: list) -> bool:
        first = types[0]
        for i, t in enumerate(types[1:], start=1):
            if t.dtype != first.dtype:
                verb = op.verb or op.name
                shown = " and ".join(str(x.with_shape(self.syms.resolve(x.shape))) for x in types)
                self.error(exprs[i].span, f"cannot {verb} {shown}: dtypes differ ({first.dtype} vs {t.dtype}); "
                           f"convert one with cast(x, {first.dtype})", self.notes_for(exprs))
                return True
        return False

    def report(self, op, err: OpError, tensor_args, exprs, values, spans, default: Span) -> None:
        span = default
        if isinstance(err.arg, int) and err.arg < len(exprs) and exprs[err.arg] is not None:
            span = exprs[err.arg].span
        elif isinstance(err.arg, str) and err.arg in spans:
            span = spans[err.arg]
        self.error(span, err.message, self.notes_for(exprs))

    def notes_for(self, exprs: list) -> list[Note]:
        """Point at the declarations of the named operands, with their types."""
        notes, seen = [], set()
        for ex in exprs:
            if isinstance(ex, A.Name) and ex.id in self.scope and ex.id not in seen:
                seen.add(ex.id)
                b = self.scope[ex.id]
                if isinstance(b.value, int):
                    t = self.nodes[b.value].type
                    t = t.with_shape(self.syms.resolve(t.shape))
                    verb = "declared" if b.what == "parameter" else "defined"
                    notes.append(Note(b.span, f"{ex.id} {verb} here as {t}"))
        return notes

    def scalar(self, e: A.Expr) -> Any:
        """A compile-time scalar (a literal, a const, or either negated), or None."""
        if isinstance(e, (A.Num, A.Bool)):
            return Weak(e.value)
        if isinstance(e, A.Name) and e.id in self.scope and isinstance(self.scope[e.id].value, Weak):
            return self.scope[e.id].value
        if isinstance(e, A.Unary):
            v = self.scalar(e.operand)
            return fold(OPS["neg"], [v], {}, self.sink, e.span) if isinstance(v, Weak) else None
        return None


def _named(node: Node, name: str) -> Node:
    return node if node.name or node.op in ("param",) else Node(
        node.id, node.op, node.inputs, node.attrs, node.type, node.span, name)


def _signature(op: OpDef) -> str:
    parts = []
    for a in op.args:
        if a.default is REQUIRED:
            parts.append(a.name)
        else:
            d = a.default
            shown = "none" if d is None else (str(d).lower() if isinstance(d, bool) else
                                             f'"{d}"' if isinstance(d, str) else str(d))
            parts.append(f"{a.name}={shown}")
    return f"{op.name}({', '.join(parts)})"
