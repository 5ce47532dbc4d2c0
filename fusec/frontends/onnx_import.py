"""An ONNX graph as one FDSL chain: `convert(model)` -> Imported (the FDSL text, the weights).

Every ONNX tensor becomes one of three kinds of value while the graph is walked in order:
- `T`, a value of the chain (a parameter or a `name = expr` statement), with its dtype and its
  shape (ints and symbols: a `dim_param` is a symbol);
- `C`, a constant known now (an initializer, a Constant, anything computed from constants, which
  is folded with onnx's reference evaluator); it becomes a literal where a scalar fits, else a
  parameter of the chain (a weight) the first time a chain value needs it;
- `S`, a shape value: a 0-d or 1-d integer tensor whose entries are ints, symbols or `Opaque`
  (a size FDSL cannot name, such as S * 4). Shape arithmetic (Shape -> Gather -> Concat ->
  Reshape/Expand, ConstantOfShape, Squeeze/Unsqueeze/Slice of shapes) is folded on it.
Each mapped op writes FDSL through `Converter.emit`; an op FDSL cannot express is an
OnnxImportError naming the node and, where one exists, the FDSL operator to use instead.
The text is checked by fusec's own checker before it is handed back.
"""
from __future__ import annotations

import math
import os
import re
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from .onnx_file import (CONST_ONLY, DTYPES, SUPPORTED, Model, OnnxImportError, elem_name, node_label, np_dtype)

KEYWORDS = {"chain", "return", "const", "true", "false", "f16", "bf16", "f32", "f64", "i32", "i64", "bool"}
FLOAT = ("f16", "bf16", "f32", "f64")
NUMERIC = FLOAT + ("i32", "i64")
NP_TO_FDSL = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64", "int32": "i32",
              "int64": "i64", "bool": "bool"}
FDSL_TO_NP = {v: k for k, v in NP_TO_FDSL.items()}
ELEM_TO_FDSL = {k: v[0] for k, v in DTYPES.items()}
FOLD_LIMIT = 1 << 24            # elements: constants folded now up to this size


class Opaque:
    """A size FDSL cannot name (a product or sum of symbols, a comparison of one)."""

    def __init__(self, what: str):
        self.what = what

    def __repr__(self):
        return self.what


@dataclass
class T:
    name: str
    dtype: str
    shape: tuple


@dataclass
class C:
    value: np.ndarray
    param: T | None = None          # the chain parameter it became, once it did
    origin: str | None = None       # the ONNX tensor it is (an initializer, a Constant's output)


@dataclass
class S:
    items: tuple                    # int | str (a symbol) | Opaque
    scalar: bool = False


@dataclass
class Imported:
    """The FDSL of one ONNX graph: its text, its chain's name, the weights (parameter name ->
    array), the model's inputs (parameter names, in the graph's order) and outputs."""
    text: str
    chain: str
    weights: dict
    inputs: list               # [(onnx name, parameter name)]
    outputs: list              # onnx output names, in order
    nodes: int = 0
    statements: int = 0


class NodeError(Exception):
    """A problem with the node being converted (the converter adds the node's label)."""


def sanitize(name: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_]", "_", name)
    if not s or s[0].isdigit():
        s = "t_" + s
    if s in KEYWORDS:
        s = s + "_"
    return s


def _prod(items):
    """(coefficient, Counter of symbols) of a product of dims, or None when one is Opaque."""
    coef, syms = 1, Counter()
    for d in items:
        if isinstance(d, Opaque):
            return None
        if isinstance(d, str):
            syms[d] += 1
        else:
            coef *= int(d)
    return coef, syms


def _as_dim(coef: int, syms: Counter):
    """A product as one dim (an int or a single symbol), or an Opaque."""
    syms = +syms
    if not syms:
        return coef
    if coef == 1 and sum(syms.values()) == 1:
        return next(iter(syms))
    text = " * ".join(([str(coef)] if coef != 1 else []) + [s for s, n in syms.items() for _ in range(n)])
    return Opaque(text)


class Converter:
    def __init__(self, model: Model, chain_name: str | None = None):
        self.m = model
        self.g = model.proto.graph
        self.path = model.path
        self.names: set[str] = set()
        self.subst: dict[str, object] = {}
        self.params: list[tuple[str, str]] = []       # (name, type text)
        self.weights: dict[str, np.ndarray] = {}
        self.lines: list[str] = []
        self.line_node: dict[int, int] = {}
        self.vals: dict[str, object] = {}
        self.node_index = -1
        self.chain = self.unique(sanitize(chain_name or self.g.name or "model"), reserve=False)
        self._used = None
        self.header_lines = 3          # the comment, the chain's head, its result types

    # ---- names and dims ------------------------------------------------------------------------
    def unique(self, base: str, reserve: bool = True) -> str:
        name, k = base, 2
        while name in self.names:
            name, k = f"{base}_{k}", k + 1
        if reserve:
            self.names.add(name)
        return name

    def dim(self, d):
        while isinstance(d, str) and d in self.subst:
            d = self.subst[d]
        return d

    def shape(self, t: T) -> tuple:
        return tuple(self.dim(d) for d in t.shape)

    def dim_text(self, d) -> str:
        d = self.dim(d)
        if isinstance(d, Opaque):
            raise NodeError(f"a dimension would be {d.what}; an FDSL dimension is a number or a single symbol")
        return str(d)

    def type_text(self, dtype: str, shape) -> str:
        if not shape:
            return dtype
        return f"{dtype}[{', '.join(self.dim_text(d) for d in shape)}]"

    def unify(self, a, b):
        """Two dims that must be equal: the representative (an int wins over a symbol)."""
        a, b = self.dim(a), self.dim(b)
        if a == b:
            return a
        if isinstance(a, str) and not isinstance(b, Opaque):
            self.subst[a] = b
            return b
        if isinstance(b, str) and not isinstance(a, Opaque):
            self.subst[b] = a
            return a
        raise NodeError(f"sizes {a} and {b} must be equal")

    def broadcast(self, *shapes) -> tuple:
        rank = max((len(s) for s in shapes), default=0)
        out = []
        for k in range(rank):
            dims = [self.dim(s[len(s) - rank + k]) for s in shapes if len(s) - rank + k >= 0]
            big = [d for d in dims if d != 1]
            if not big:
                out.append(1)
                continue
            rep = big[0]
            for d in big[1:]:
                if isinstance(rep, int) and isinstance(d, int) and rep != d:
                    raise NodeError(f"shapes {' and '.join(str(list(s)) for s in shapes)} do not broadcast")
                rep = self.unify(rep, d)
            out.append(rep)
        return tuple(out)

    # ---- writing FDSL ------------------------------------------------------------------------
    def emit(self, hint: str, expr: str, dtype: str, shape) -> T:
        name = self.unique(sanitize(hint))
        self.lines.append(f"    {name} = {expr}")
        self.line_node[len(self.lines)] = self.node_index
        return T(name, dtype, tuple(shape))

    def add_param(self, hint: str, dtype: str, shape) -> T:
        name = self.unique(sanitize(hint))
        self.params.append((name, self.type_text(dtype, shape)))
        return T(name, dtype, tuple(shape))

    def materialize(self, c: C, hint: str) -> T:
        if c.param is not None:
            return c.param
        arr = np.asarray(c.value)
        dt = NP_TO_FDSL.get(arr.dtype.name)
        if dt is None:
            raise NodeError(f"a constant of dtype {arr.dtype} would become a chain value; fusec imports {SUPPORTED}")
        if 0 in arr.shape:
            raise NodeError(f"an empty constant {list(arr.shape)} would become a chain value; FDSL has no empty "
                            "tensors")
        c.param = self.add_param(c.origin or hint, dt, arr.shape)
        self.weights[c.param.name] = np.array(arr, order="C")     # (ascontiguousarray would make a 0-d array 1-d)
        return c.param

    def tensor(self, v, hint: str = "c") -> T:
        """A chain value for `v` (constants become parameters)."""
        if isinstance(v, T):
            return v
        if isinstance(v, S):
            v = self.s_to_c(v)
        return self.materialize(v, hint)

    def s_to_c(self, s: S) -> C:
        bad = [d for d in s.items if not isinstance(d, (int, np.integer))]
        if bad:
            raise NodeError(f"the size {bad[0]} is used as a tensor's value; FDSL passes sizes only through "
                            "shapes (reshape, broadcast_to)")
        arr = np.array([int(d) for d in s.items], dtype=np.int64)
        return C(arr.reshape(()) if s.scalar else arr)

    def literal(self, c: C, dtype: str) -> str | None:
        """A scalar constant as an FDSL literal for a tensor of `dtype`, or None."""
        arr = np.asarray(c.value)
        if arr.size != 1:
            return None
        v = arr.reshape(()).item()
        if dtype == "bool":
            return ("true" if v else "false") if arr.dtype == np.bool_ else None
        if arr.dtype == np.bool_:
            return None
        if dtype in FLOAT:
            f = float(v)
            if not math.isfinite(f):
                return None
            if abs(f) > float(np.finfo(np.dtype(FDSL_TO_NP[dtype]) if dtype != "bf16" else np.float32).max):
                return None
            text = repr(f)
        else:
            if isinstance(v, float) and not float(v).is_integer():
                return None
            i = int(v)
            lim = 2 ** 31 - 1 if dtype == "i32" else 2 ** 63 - 1
            if abs(i) > lim:
                return None
            text = str(i)
        return f"({text})" if text.startswith("-") else text

    def operands(self, vals: list, hints: list[str]) -> tuple[list[str], str, tuple]:
        """Elementwise operands: their texts, the common dtype, the broadcast shape. A scalar
        constant is written as a literal when it does not raise the rank."""
        ts = [v for v in vals if isinstance(v, T)]
        if not ts:
            vals = [self.tensor(vals[0], hints[0])] + vals[1:]
            ts = [vals[0]]
        dtype = ts[0].dtype
        for t in ts[1:]:
            if t.dtype != dtype:
                raise NodeError(f"operands of dtypes {dtype} and {t.dtype}")
        rank = max(len(t.shape) for t in ts)
        texts, shapes = [], []
        for v, h in zip(vals, hints):
            if isinstance(v, S):
                v = self.s_to_c(v)
            if isinstance(v, C):
                lit = self.literal(v, dtype) if np.ndim(v.value) <= rank else None
                if lit is not None:
                    texts.append(lit)
                    continue
                want = FDSL_TO_NP[dtype]
                if np.asarray(v.value).dtype.name != want:
                    v = C(np.asarray(v.value).astype(np_dtype(want)))
                v = self.materialize(v, h)
            texts.append(v.name)
            shapes.append(self.shape(v))
        return texts, dtype, self.broadcast(*shapes)

    # ---- the walk ---------------------------------------------------------------------------
    def label(self) -> str:
        return f"{self.path}: {node_label(self.g, self.node_index)}"

    def run(self) -> Imported:
        inits = self.m.initializers
        inputs = []
        symbols = self._symbols()
        for vi in self.g.input:
            if vi.name in inits:
                continue
            inputs.append(vi.name)
            self.vals[vi.name] = self._graph_input(vi, symbols)
        for name, arr in inits.items():
            self.vals[name] = C(arr, origin=name)
        count = 0
        for i in self.m.order:
            self.node_index = i
            node = self.g.node[i]
            try:
                self._node(node)
            except NodeError as e:
                raise OnnxImportError(f"{self.label()}: {e}") from None
            except OnnxImportError:
                raise
            except (ValueError, TypeError, IndexError, KeyError, AttributeError, ArithmeticError,
                    OverflowError, RuntimeError, MemoryError) as e:
                raise OnnxImportError(f"{self.label()}: cannot import this node ({type(e).__name__}: {e})") from None
            count += 1
        self.node_index = -1
        outs, types = [], []
        for vo in self.g.output:
            v = self.vals[vo.name]
            try:
                t = self.tensor(v, vo.name)
                types.append(self.type_text(t.dtype, self.shape(t)))
            except NodeError as e:
                raise OnnxImportError(f"{self.path}: graph output '{vo.name}': {e}") from None
            outs.append(t.name)
        if not outs:
            raise OnnxImportError(f"{self.path}: the graph has no outputs")
        params = [(n, ty) for n, ty in self.params]
        head = f"chain {self.chain}(" + ", ".join(f"{n}: {ty}" for n, ty in params) + ")"
        result = types[0] if len(types) == 1 else "(" + ", ".join(types) + ")"
        shown = "".join(c if c.isprintable() else "?" for c in os.path.basename(self.path))
        text = (f"# imported from {shown} by fusec import (opset {self.m.opset}, {len(self.g.node)} nodes)\n"
                f"{head}\n        -> {result} {{\n" + "\n".join(self.lines + [f"    return {', '.join(outs)}"])
                + "\n}\n")
        return Imported(text, self.chain, dict(self.weights),
                        [(n, self.vals[n].name) for n in inputs], [vo.name for vo in self.g.output],
                        nodes=count, statements=len(self.lines))

    def _symbols(self) -> dict[str, str]:
        """dim_param -> symbol name, reserved before any value is named."""
        out = {}
        for vi in self.g.input:
            if vi.name in self.m.initializers or not vi.type.HasField("tensor_type"):
                continue
            for d in vi.type.tensor_type.shape.dim:
                if d.HasField("dim_param") and d.dim_param not in out:
                    out[d.dim_param] = self.unique(sanitize(d.dim_param))
        return out

    def _graph_input(self, vi, symbols) -> T:
        where = f"{self.path}: graph input '{vi.name}'"
        if not vi.type.HasField("tensor_type"):
            raise OnnxImportError(f"{where} is not a tensor (sequences, maps and optionals are not imported)")
        tt = vi.type.tensor_type
        if tt.elem_type not in DTYPES:
            raise OnnxImportError(f"{where} has dtype {elem_name(tt.elem_type)}; fusec imports {SUPPORTED}")
        if not tt.HasField("shape"):
            raise OnnxImportError(f"{where} has no shape; an FDSL parameter needs its rank")
        dims = []
        for k, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value"):
                if d.dim_value <= 0:
                    raise OnnxImportError(f"{where}: dimension {k} is {d.dim_value}; FDSL dimensions are positive")
                dims.append(int(d.dim_value))
            elif d.HasField("dim_param"):
                dims.append(symbols[d.dim_param])
            else:
                dims.append(self.unique(sanitize(f"{vi.name}_d{k}")))
        return self.add_param(vi.name, ELEM_TO_FDSL[tt.elem_type], dims)

    def _node(self, node):
        from onnx import helper
        if node.domain not in ("", "ai.onnx"):
            raise NodeError(f"ops of domain '{node.domain}' are not supported (fusec imports the default ONNX "
                            "domain)")
        ins = [self.vals[x] if x else None for x in node.input]
        attrs = {}
        for a in node.attribute:
            v = helper.get_attribute_value(a)
            attrs[a.name] = v.decode() if isinstance(v, bytes) else v
        handler = getattr(self, f"op_{node.op_type}", None)
        size = None
        if node.op_type not in NO_FOLD and ins and all(isinstance(v, (C, type(None))) for v in ins) and any(ins):
            size = fold_size(node.op_type, [np.asarray(v.value) if v is not None else None for v in ins], attrs)
            if size is not None and size > FOLD_LIMIT and node.op_type not in ("Expand", "ConstantOfShape"):
                raise NodeError(f"folding it on its constant inputs would make {size} elements, more than fusec "
                                f"folds ({FOLD_LIMIT})")
        if size is not None and size <= FOLD_LIMIT:
            outs = self.fold(node, ins)         # constants in, constants out: onnx's reference evaluator
        elif handler is None:
            raise NodeError(unsupported(node.op_type))
        else:
            outs = handler(node, ins, attrs)
        if not isinstance(outs, (list, tuple)):
            outs = [outs]
        for k, name in enumerate(node.output):
            if not name:
                continue
            if k >= len(outs) or outs[k] is None:
                if not self.uses(name):
                    continue
                raise NodeError(f"output {k} ('{name}') is used, and fusec maps only output"
                                f" {', '.join(str(j) for j in range(len(outs)) if outs[j] is not None)} of this op")
            if isinstance(outs[k], C) and outs[k].origin is None:
                outs[k].origin = name
            self.vals[name] = outs[k]

    def uses(self, name: str) -> bool:
        if self._used is None:
            self._used = {x for n in self.g.node for x in n.input} | {o.name for o in self.g.output}
        return name in self._used

    # ---- constant folding -------------------------------------------------------------------
    def fold(self, node, ins):
        from onnx import helper
        from onnx.reference import ReferenceEvaluator
        size = sum(int(np.size(v.value)) for v in ins if v is not None)
        if size > FOLD_LIMIT:
            raise NodeError(f"its constant inputs hold {size} elements, more than fusec folds ({FOLD_LIMIT})")
        names = [f"i{k}" if v is not None else "" for k, v in enumerate(ins)]
        outs = [f"o{k}" for k in range(len(node.output))]
        n = helper.make_node(node.op_type, names, outs, domain=node.domain)
        n.attribute.extend(node.attribute)
        feeds = {nm: np.asarray(v.value) for nm, v in zip(names, ins) if v is not None}
        graph = helper.make_graph([n], "fold",
                                  [helper.make_tensor_value_info(nm, helper.np_dtype_to_tensor_dtype(a.dtype),
                                                                 a.shape) for nm, a in feeds.items()],
                                  [helper.make_value_info(o, helper.make_tensor_type_proto(0, None)) for o in outs])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.m.opset)])
        try:
            res = ReferenceEvaluator(model).run(None, feeds)
        except NodeError:
            raise
        except Exception as e:
            raise NodeError(f"cannot fold it on its constant inputs ({type(e).__name__}: {e})") from None
        return [C(np.asarray(r)) for r in res]

    # ---- attribute helpers ------------------------------------------------------------------
    def const_ints(self, v, what: str) -> list:
        """A constant input holding integers (ints, or for S values, symbols too)."""
        if v is None:
            return None
        if isinstance(v, S):
            return list(v.items)
        if isinstance(v, C):
            return [int(x) for x in np.asarray(v.value).reshape(-1)]
        raise NodeError(f"its {what} must be a constant (computed at run time here); FDSL takes {what} at compile "
                        "time")

    def axis(self, a: int, rank: int) -> int:
        if not -rank <= a < max(rank, 1):
            raise NodeError(f"axis {a} is out of range for rank {rank}")
        return a % rank if rank else 0

    def need_dtype(self, t: T, allowed, op: str):
        if t.dtype not in allowed:
            kinds = "float" if allowed == FLOAT else "numeric"
            raise NodeError(f"{op} takes {kinds} tensors in FDSL, not {t.dtype}")

    def out_name(self, node, k: int = 0) -> str:
        return node.output[k] if k < len(node.output) and node.output[k] else node.op_type.lower()

    # ---- elementwise ------------------------------------------------------------------------
    def unary(self, fn: str, allowed):
        def op(node, ins, attrs):
            t = self.tensor(ins[0])
            self.need_dtype(t, allowed, fn)
            return self.emit(self.out_name(node), f"{fn}({t.name})", t.dtype, self.shape(t))
        return op

    def binary(self, fn: str, allowed, result: str | None = None, variadic: bool = False):
        def op(node, ins, attrs):
            vals = [v for v in ins if v is not None]
            if any(isinstance(v, S) for v in vals):
                return self.sym_elementwise(node.op_type, vals)
            texts, dtype, shape = self.operands(vals, [f"{self.out_name(node)}_c{k}" for k in range(len(vals))])
            if dtype not in allowed:
                raise NodeError(f"{fn} takes {'float' if allowed == FLOAT else 'numeric'} tensors in FDSL, not "
                                f"{dtype}" + ("; cast to a float dtype first" if fn == "div" else ""))
            expr = texts[0]
            if len(texts) == 1:
                return self.emit(self.out_name(node), expr, dtype, shape) if variadic else None
            for t in texts[1:]:
                expr = f"{fn}({expr}, {t})"
            return self.emit(self.out_name(node), expr, result or dtype, shape)
        return op

    def sym_elementwise(self, op_type: str, vals):
        """Shape arithmetic: an elementwise op on shape values (entries may be symbols)."""
        cols = []
        for v in vals:
            if isinstance(v, S):
                cols.append((np.array(v.items + (), dtype=object).reshape(() if v.scalar else (-1,))))
            elif isinstance(v, C):
                cols.append(np.asarray(v.value).astype(object))
            else:
                raise NodeError("mixes a shape value with a tensor computed at run time")
        arrs = np.broadcast_arrays(*cols)
        fn = SYM_OPS.get(op_type)
        if fn is None:
            raise NodeError(f"{op_type} of sizes that depend on a symbolic dimension is not supported")
        out = []
        for items in zip(*(a.reshape(-1) for a in arrs)):
            out.append(fn(*items))
        scalar = arrs[0].ndim == 0
        if all(isinstance(x, (bool, np.bool_)) for x in out):
            return C(np.array(out, dtype=bool).reshape(arrs[0].shape))
        if all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in out):
            return C(np.array(out, dtype=np.int64).reshape(arrs[0].shape))
        if any(isinstance(x, (bool, np.bool_)) for x in out):
            raise NodeError(f"{op_type} of sizes that depend on a symbolic dimension is not decidable here")
        return S(tuple(out), scalar)

    def op_Where(self, node, ins, attrs):
        c, a, b = ins
        if any(isinstance(v, S) for v in ins):
            if not isinstance(c, C):
                raise NodeError("a condition on sizes that FDSL cannot decide")
            return self.sym_elementwise("Where", [c, a, b])
        ct = self.tensor(c, f"{self.out_name(node)}_cond")
        if ct.dtype != "bool":
            raise NodeError(f"its condition is {ct.dtype}, not bool")
        texts, dtype, shape = self.operands([a, b], [f"{self.out_name(node)}_a", f"{self.out_name(node)}_b"])
        shape = self.broadcast(self.shape(ct), shape)
        return self.emit(self.out_name(node), f"where({ct.name}, {texts[0]}, {texts[1]})", dtype, shape)

    def op_Pow(self, node, ins, attrs):
        x, y = ins
        if isinstance(x, S) or isinstance(y, S):
            return self.sym_elementwise("Pow", [x, y])
        x = self.tensor(x, f"{self.out_name(node)}_base")
        self.need_dtype(x, NUMERIC, "pow")
        if isinstance(y, C):
            lit = self.literal(y, x.dtype) if np.ndim(y.value) <= len(x.shape) else None
            if lit is not None:
                return self.emit(self.out_name(node), f"pow({x.name}, {lit})", x.dtype, self.shape(x))
            y = self.materialize(C(np.asarray(y.value).astype(np_dtype(FDSL_TO_NP[x.dtype]))),
                                 f"{self.out_name(node)}_exp")
        ytext = y.name if y.dtype == x.dtype else f"cast({y.name}, {x.dtype})"
        return self.emit(self.out_name(node), f"pow({x.name}, {ytext})", x.dtype,
                         self.broadcast(self.shape(x), self.shape(y)))

    def op_Cast(self, node, ins, attrs):
        to = attrs.get("to")
        if to not in DTYPES:
            if isinstance(ins[0], S) and to in CONST_ONLY:
                return ins[0]
            raise NodeError(f"cast to {elem_name(to)}; fusec imports {SUPPORTED}")
        dt = ELEM_TO_FDSL[to]
        if isinstance(ins[0], S):
            if dt in ("i32", "i64"):
                return ins[0]
            return self.cast_value(self.tensor(ins[0]), dt, node)
        return self.cast_value(self.tensor(ins[0], f"{self.out_name(node)}_in"), dt, node)

    def cast_value(self, t: T, dt: str, node) -> T:
        if t.dtype == dt:
            return t
        return self.emit(self.out_name(node), f"cast({t.name}, {dt})", dt, self.shape(t))

    def op_CastLike(self, node, ins, attrs):
        like = ins[1]
        dt = like.dtype if isinstance(like, T) else NP_TO_FDSL.get(np.asarray(like.value).dtype.name) \
            if isinstance(like, C) else "i64"
        if dt is None:
            raise NodeError(f"cast to {np.asarray(like.value).dtype}; fusec imports {SUPPORTED}")
        if isinstance(ins[0], S) and dt in ("i32", "i64"):
            return ins[0]
        return self.cast_value(self.tensor(ins[0]), dt, node)

    def op_Clip(self, node, ins, attrs):
        x = self.tensor(ins[0], f"{self.out_name(node)}_in")
        lo = ins[1] if len(ins) > 1 else None
        hi = ins[2] if len(ins) > 2 else None
        self.need_dtype(x, NUMERIC, "clamp")
        if lo is None and hi is None:
            return x
        vals = [x] + [v for v in (lo, hi) if v is not None]
        texts, dtype, shape = self.operands(vals, [x.name, f"{self.out_name(node)}_lo", f"{self.out_name(node)}_hi"])
        if lo is not None and hi is not None:
            expr = f"clamp({texts[0]}, {texts[1]}, {texts[2]})"
        elif lo is not None:
            expr = f"maximum({texts[0]}, {texts[1]})"
        else:
            expr = f"minimum({texts[0]}, {texts[1]})"
        return self.emit(self.out_name(node), expr, dtype, shape)

    def op_Gelu(self, node, ins, attrs):
        x = self.tensor(ins[0])
        self.need_dtype(x, FLOAT, "gelu")
        approx = attrs.get("approximate", "none")
        if approx not in ("none", "tanh"):
            raise NodeError(f"approximate='{approx}' (ONNX knows 'none' and 'tanh')")
        return self.emit(self.out_name(node), f'gelu({x.name}, approximate="{approx}")', x.dtype, self.shape(x))

    def _float_unary(self, node, ins, template: str):
        x = self.tensor(ins[0])
        self.need_dtype(x, FLOAT, node.op_type)
        return self.emit(self.out_name(node), template.format(x=x.name), x.dtype, self.shape(x))

    def op_HardSigmoid(self, node, ins, attrs):
        a, b = float(attrs.get("alpha", 0.2)), float(attrs.get("beta", 0.5))
        return self._float_unary(node, ins, f"clamp(add(mul({{x}}, {_f(a)}), {_f(b)}), 0.0, 1.0)")

    def op_HardSwish(self, node, ins, attrs):
        return self._float_unary(node, ins, f"mul({{x}}, clamp(add(mul({{x}}, {_f(1 / 6)}), 0.5), 0.0, 1.0))")

    def op_LeakyRelu(self, node, ins, attrs):
        a = float(attrs.get("alpha", 0.01))
        return self._float_unary(node, ins, f"where(lt({{x}}, 0.0), mul({{x}}, {_f(a)}), {{x}})")

    def op_Elu(self, node, ins, attrs):
        a = float(attrs.get("alpha", 1.0))
        return self._float_unary(node, ins, f"where(lt({{x}}, 0.0), mul(sub(exp({{x}}), 1.0), {_f(a)}), {{x}})")

    def op_Softplus(self, node, ins, attrs):
        return self._float_unary(node, ins, "add(relu({x}), log1p(exp(neg(abs({x})))))")

    def op_Softsign(self, node, ins, attrs):
        return self._float_unary(node, ins, "div({x}, add(abs({x}), 1.0))")

    def op_PRelu(self, node, ins, attrs):
        x = self.tensor(ins[0])
        texts, dtype, shape = self.operands([x, ins[1]], [x.name, f"{self.out_name(node)}_slope"])
        if self.shape(x) != shape:
            raise NodeError("its slope would enlarge the input's shape")
        return self.emit(self.out_name(node), f"where(lt({x.name}, 0.0), mul({x.name}, {texts[1]}), {x.name})",
                         dtype, shape)

    def op_IsNaN(self, node, ins, attrs):
        x = self.tensor(ins[0])
        self.need_dtype(x, FLOAT, "IsNaN")
        return self.emit(self.out_name(node), f"ne({x.name}, {x.name})", "bool", self.shape(x))

    def _bool_op(self, node, ins, template: str, arity: int):
        vals = [self.tensor(v, f"{self.out_name(node)}_in") for v in ins[:arity]]
        for v in vals:
            if v.dtype != "bool":
                raise NodeError(f"takes bool tensors, not {v.dtype}")
        shape = self.broadcast(*(self.shape(v) for v in vals))
        return self.emit(self.out_name(node), template.format(*(v.name for v in vals)), "bool", shape)

    def op_Not(self, node, ins, attrs):
        return self._bool_op(node, ins, "eq({0}, false)", 1)

    def op_And(self, node, ins, attrs):
        return self._bool_op(node, ins, "where({0}, {1}, false)", 2)

    def op_Or(self, node, ins, attrs):
        return self._bool_op(node, ins, "where({0}, true, {1})", 2)

    def op_Xor(self, node, ins, attrs):
        return self._bool_op(node, ins, "ne({0}, {1})", 2)

    def op_Mean(self, node, ins, attrs):
        vals = [v for v in ins if v is not None]
        texts, dtype, shape = self.operands(vals, [f"{self.out_name(node)}_c{k}" for k in range(len(vals))])
        if dtype not in FLOAT:
            raise NodeError(f"Mean takes float tensors, not {dtype}")
        expr = texts[0]
        for t in texts[1:]:
            expr = f"add({expr}, {t})"
        if len(texts) > 1:
            expr = f"div({expr}, {_f(float(len(texts)))})"
        return self.emit(self.out_name(node), expr, dtype, shape)

    # ---- normalisations, reductions ---------------------------------------------------------
    def _softmax(self, fn: str):
        def op(node, ins, attrs):
            x = self.tensor(ins[0])
            self.need_dtype(x, FLOAT, fn)
            a = self.axis(int(attrs.get("axis", -1)), len(x.shape))
            return self.emit(self.out_name(node), f"{fn}({x.name}, axis={a})", x.dtype, self.shape(x))
        return op

    def op_LayerNormalization(self, node, ins, attrs):
        x = self.tensor(ins[0])
        self.need_dtype(x, FLOAT, "layernorm")
        for k in (1, 2):
            if k < len(node.output) and node.output[k] and self.uses(node.output[k]):
                raise NodeError(f"its output {k} ({'Mean' if k == 1 else 'InvStdDev'}) is used; FDSL's layernorm "
                                "gives only the normalised tensor")
        rank = len(x.shape)
        a = self.axis(int(attrs.get("axis", -1)), rank)
        eps = float(attrs.get("epsilon", 1e-5))
        gamma = self._weight_like(ins[1], x.dtype, f"{self.out_name(node)}_scale")
        if len(ins) > 2 and ins[2] is not None:
            beta = self._weight_like(ins[2], x.dtype, f"{self.out_name(node)}_bias")
        else:
            shape = self.shape(gamma)
            if any(isinstance(d, str) for d in shape):
                raise NodeError("it has no bias and its scale has a symbolic shape")
            beta = self.materialize(C(np.zeros(shape, np_dtype(FDSL_TO_NP[x.dtype]))), f"{self.out_name(node)}_bias")
        axes = list(range(a, rank))
        axis = str(axes[0]) if len(axes) == 1 else "[" + ", ".join(map(str, axes)) + "]"
        return [self.emit(self.out_name(node), f"layernorm({x.name}, {gamma.name}, {beta.name}, axis={axis}, "
                                                f"eps={_f(eps)})", x.dtype, self.shape(x)), None, None]

    def _weight_like(self, v, dtype: str, hint: str) -> T:
        if isinstance(v, C) and NP_TO_FDSL.get(np.asarray(v.value).dtype.name) != dtype:
            v = C(np.asarray(v.value).astype(np_dtype(FDSL_TO_NP[dtype])))
        t = self.tensor(v, hint)
        if t.dtype != dtype:
            raise NodeError(f"operands of dtypes {dtype} and {t.dtype}")
        return t

    def op_BatchNormalization(self, node, ins, attrs):
        if int(attrs.get("training_mode", 0)):
            raise NodeError("training_mode=1; fusec imports inference graphs (FDSL's batchnorm uses the running "
                            "statistics)")
        x = self.tensor(ins[0])
        self.need_dtype(x, FLOAT, "batchnorm")
        if len(x.shape) < 2:
            raise NodeError("its input has rank < 2")
        name = self.out_name(node)
        scale, bias, mean, var = (self._weight_like(v, x.dtype, f"{name}_{h}")
                                  for v, h in zip(ins[1:5], ("scale", "bias", "mean", "var")))
        eps = float(attrs.get("epsilon", 1e-5))
        return self.emit(name, f"batchnorm({x.name}, {mean.name}, {var.name}, {scale.name}, {bias.name}, "
                               f"eps={_f(eps)})", x.dtype, self.shape(x))

    def _reduce(self, fn: str, pre: str = "{x}", post: str = "{y}", allowed=NUMERIC):
        def op(node, ins, attrs):
            x = self.tensor(ins[0])
            self.need_dtype(x, allowed, node.op_type)
            rank = len(x.shape)
            axes = attrs.get("axes")
            if axes is None and len(ins) > 1 and ins[1] is not None:
                axes = self.const_ints(ins[1], "axes")
            keep = bool(int(attrs.get("keepdims", 1)))
            if not axes:
                if int(attrs.get("noop_with_empty_axes", 0)):
                    return x
                axes = list(range(rank))
            axes = sorted({self.axis(int(a), rank) for a in axes})
            shape = self.shape(x)
            out = tuple(1 if k in axes else d for k, d in enumerate(shape)) if keep else \
                tuple(d for k, d in enumerate(shape) if k not in axes)
            arg = "[" + ", ".join(map(str, axes)) + "]" if len(axes) > 1 else str(axes[0]) if axes else None
            inner = pre.format(x=x.name)
            expr = f"{fn}({inner}" + (f", axis={arg}" if arg is not None else "") + \
                (", keepdims=true" if keep else "") + ")"
            return self.emit(self.out_name(node), post.format(y=expr), x.dtype, out)
        return op

    def _arg(self, fn: str):
        def op(node, ins, attrs):
            if int(attrs.get("select_last_index", 0)):
                raise NodeError(f"select_last_index=1; FDSL's {fn} gives the first of equal elements")
            x = self.tensor(ins[0])
            self.need_dtype(x, NUMERIC, fn)
            rank = len(x.shape)
            a = self.axis(int(attrs.get("axis", 0)), rank)
            keep = bool(int(attrs.get("keepdims", 1)))
            shape = self.shape(x)
            out = tuple(1 if k == a else d for k, d in enumerate(shape)) if keep else \
                tuple(d for k, d in enumerate(shape) if k != a)
            return self.emit(self.out_name(node), f"{fn}({x.name}, axis={a}" + (", keepdims=true" if keep else "")
                             + ")", "i64", out)
        return op

    def op_CumSum(self, node, ins, attrs):
        if int(attrs.get("exclusive", 0)) or int(attrs.get("reverse", 0)):
            raise NodeError("exclusive or reverse CumSum; FDSL's cumsum is the inclusive forward running sum")
        x = self.tensor(ins[0])
        self.need_dtype(x, NUMERIC, "cumsum")
        a = self.axis(self.const_ints(ins[1], "axis")[0], len(x.shape))
        return self.emit(self.out_name(node), f"cumsum({x.name}, axis={a})", x.dtype, self.shape(x))

    def _global_pool(self, fn: str):
        def op(node, ins, attrs):
            x = self.tensor(ins[0])
            self.need_dtype(x, FLOAT, node.op_type)
            rank = len(x.shape)
            if rank < 3:
                raise NodeError("its input has rank < 3 (N, C and spatial axes)")
            axes = list(range(2, rank))
            shape = self.shape(x)[:2] + (1,) * (rank - 2)
            return self.emit(self.out_name(node), f"{fn}({x.name}, axis=[{', '.join(map(str, axes))}], "
                                                  "keepdims=true)", x.dtype, shape)
        return op

    # ---- linear algebra ---------------------------------------------------------------------
    def op_MatMul(self, node, ins, attrs):
        a = self.tensor(ins[0], f"{self.out_name(node)}_a")
        b = self.tensor(ins[1], f"{self.out_name(node)}_b")
        if a.dtype != b.dtype:
            raise NodeError(f"operands of dtypes {a.dtype} and {b.dtype}")
        self.need_dtype(a, NUMERIC, "matmul")
        name = self.out_name(node)
        sa, sb = self.shape(a), self.shape(b)
        if not sa or not sb:
            raise NodeError("a scalar operand")
        at, bt = a.name, b.name
        if len(sa) == 1:
            at, sa = f"reshape({a.name}, [1, {self.dim_text(sa[0])}])", (1, sa[0])
        if len(sb) == 1:
            bt, sb = f"reshape({b.name}, [{self.dim_text(sb[0])}, 1])", (sb[0], 1)
        self.unify(sa[-1], sb[-2])
        batch = self.broadcast(sa[:-2], sb[:-2])
        out = batch + (sa[-2], sb[-1])
        expr = f"matmul({at}, {bt})"
        final = batch + ((sa[-2],) if len(self.shape(a)) > 1 else ()) + ((sb[-1],) if len(self.shape(b)) > 1 else ())
        if final != out:
            t = self.emit(f"{name}_2d", expr, a.dtype, out)
            return self.emit(name, f"reshape({t.name}, [{', '.join(self.dim_text(d) for d in final)}])"
                             if final else f"{t.name}[0, 0]" if len(out) == 2 else f"reshape({t.name}, [1])",
                             a.dtype, final)
        return self.emit(name, expr, a.dtype, out)

    def op_Gemm(self, node, ins, attrs):
        name = self.out_name(node)
        ta, tb = int(attrs.get("transA", 0)), int(attrs.get("transB", 0))
        alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
        A, B = ins[0], ins[1]
        if isinstance(A, C) and ta:
            A, ta = C(np.ascontiguousarray(np.asarray(A.value).T)), 0
        if isinstance(B, C) and tb:
            B, tb = C(np.ascontiguousarray(np.asarray(B.value).T)), 0
            hint_b = f"{node.input[1]}_t"
        else:
            hint_b = node.input[1]
        a = self.tensor(A, f"{node.input[0]}_t" if isinstance(ins[0], C) and int(attrs.get("transA", 0))
                        else node.input[0])
        b = self.tensor(B, hint_b)
        if a.dtype != b.dtype:
            raise NodeError(f"operands of dtypes {a.dtype} and {b.dtype}")
        self.need_dtype(a, NUMERIC, "matmul")
        sa, sb = self.shape(a), self.shape(b)
        if len(sa) != 2 or len(sb) != 2:
            raise NodeError("Gemm takes rank-2 A and B")
        at = f"transpose({a.name})" if ta else a.name
        bt = f"transpose({b.name})" if tb else b.name
        m, k1 = (sa[1], sa[0]) if ta else sa
        k2, n = (sb[1], sb[0]) if tb else sb
        self.unify(k1, k2)
        expr = f"matmul({at}, {bt})"
        if alpha != 1.0:
            expr = f"mul({expr}, {_f(alpha)})"
        shape = (m, n)
        if len(ins) > 2 and ins[2] is not None and beta != 0.0:
            cv = ins[2]
            if isinstance(cv, C) and beta != 1.0:
                cv, beta = C(np.asarray(cv.value) * np.asarray(beta, np.asarray(cv.value).dtype)), 1.0
            texts, _, cshape = self.operands([T("_gemm_", a.dtype, shape), cv], ["_gemm_", f"{name}_c"])
            if self.broadcast(shape, cshape) != self.broadcast(shape):
                raise NodeError("its C does not broadcast to [M, N]")
            ctext = texts[1] if beta == 1.0 else f"mul({texts[1]}, {_f(beta)})"
            expr = f"add({expr}, {ctext})"
        return self.emit(name, expr, a.dtype, shape)

    def op_Conv(self, node, ins, attrs, name: str | None = None):
        x = self.tensor(ins[0])
        if len(x.shape) == 3:
            return self._conv1d(node, ins, attrs, x)
        w = self.tensor(ins[1], f"{self.out_name(node)}_w" if not node.input[1] else node.input[1])
        self.need_dtype(x, FLOAT, "conv2d")
        if len(x.shape) != 4:
            raise NodeError(f"a convolution of rank {len(x.shape)}; FDSL's conv2d is 2-D (NCHW input, FCHW weights)")
        group = int(attrs.get("group", 1))
        if group != 1:
            raise NodeError(f"group={group}: FDSL's conv2d has no groups yet (grouped and depthwise convolution are "
                            "planned in issue 38)")
        xs, ws = self.shape(x), self.shape(w)
        if len(ws) != 4:
            raise NodeError("its weights are not rank 4 (F, C, KH, KW)")
        for d, what in ((xs[2], "H"), (xs[3], "W"), (ws[2], "KH"), (ws[3], "KW")):
            if not isinstance(d, int):
                raise NodeError(f"its {what} is the symbol {d}; FDSL's conv2d needs H, W, KH, KW as numbers")
        kshape = attrs.get("kernel_shape")
        if kshape is not None and list(kshape) != [ws[2], ws[3]]:
            raise NodeError(f"kernel_shape {list(kshape)} differs from its weights' {[ws[2], ws[3]]}")
        strides = list(attrs.get("strides", [1, 1]))
        dil = list(attrs.get("dilations", [1, 1]))
        pads = list(attrs.get("pads", [0, 0, 0, 0]))
        auto = attrs.get("auto_pad", "NOTSET")
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            pads = [0, 0, 0, 0]
            for k, (n, s, d, kk) in enumerate(zip(xs[2:], strides, dil, ws[2:])):
                out = -(-n // s)
                total = max(0, (out - 1) * s + (kk - 1) * d + 1 - n)
                small, big = total // 2, total - total // 2
                pads[k], pads[k + 2] = (small, big) if auto == "SAME_UPPER" else (big, small)
        elif auto == "VALID":
            pads = [0, 0, 0, 0]
        elif auto != "NOTSET":
            raise NodeError(f"auto_pad='{auto}'")
        if pads[0] != pads[2] or pads[1] != pads[3]:
            raise NodeError(f"asymmetric pads {pads}; FDSL's conv2d pads each side of an axis alike (it has no pad "
                            "operator)")
        self.unify(xs[1], ws[1])
        f = ws[0]
        ho = (xs[2] + 2 * pads[0] - dil[0] * (ws[2] - 1) - 1) // strides[0] + 1
        wo = (xs[3] + 2 * pads[1] - dil[1] * (ws[3] - 1) - 1) // strides[1] + 1
        if ho < 1 or wo < 1:
            raise NodeError("its output would be empty")
        args = [x.name, w.name]
        if len(ins) > 2 and ins[2] is not None:
            b = self._weight_like(ins[2], x.dtype, node.input[2])
            args.append(f"bias={b.name}")
        pair = lambda v: str(v[0]) if v[0] == v[1] else f"[{v[0]}, {v[1]}]"   # noqa: E731
        if strides != [1, 1]:
            args.append(f"stride={pair(strides)}")
        if pads[:2] != [0, 0]:
            args.append(f"padding={pair(pads[:2])}")
        if dil != [1, 1]:
            args.append(f"dilation={pair(dil)}")
        return self.emit(name or self.out_name(node), f"conv2d({', '.join(args)})", x.dtype, (xs[0], f, ho, wo))

    def _conv1d(self, node, ins, attrs, x: T):
        """A 1-D Conv as conv2d over [N, C, 1, L]: the input reshaped, constant weights reshaped
        at import (others at run time), the result reshaped back to [N, F, LO]."""
        self.need_dtype(x, FLOAT, "conv2d")
        n, c, length = self.shape(x)
        w = ins[1]
        if isinstance(w, C) and np.ndim(w.value) == 3:
            wv = np.asarray(w.value)
            w4 = self.materialize(C(wv.reshape(wv.shape[0], wv.shape[1], 1, wv.shape[2]),
                                    origin=f"{node.input[1]}_2d"), f"{node.input[1]}_2d")
        else:
            wt = self.tensor(w)
            if len(wt.shape) != 3:
                raise NodeError("its weights are not rank 3 (F, C, K)")
            f_, c_, k_ = self.shape(wt)
            w4 = self.reshape(wt, [f_, c_, 1, k_], node)
        x4 = self.emit(f"{self.out_name(node)}_in2d", f"reshape({x.name}, [{self.dim_text(n)}, {self.dim_text(c)}, 1, "
                                                      f"{self.dim_text(length)}])", x.dtype, (n, c, 1, length))
        two = {k: v for k, v in attrs.items() if k not in ("strides", "dilations", "pads", "kernel_shape")}
        if "strides" in attrs:
            two["strides"] = [1, attrs["strides"][0]]
        if "dilations" in attrs:
            two["dilations"] = [1, attrs["dilations"][0]]
        if "pads" in attrs:
            p = list(attrs["pads"])
            two["pads"] = [0, p[0], 0, p[1]]
        if "kernel_shape" in attrs:
            two["kernel_shape"] = [1, attrs["kernel_shape"][0]]
        ins4 = [x4, w4] + list(ins[2:])
        y4 = self.op_Conv(node, ins4, two, name=f"{self.out_name(node)}_2d")
        nn, f, _, lo = self.shape(y4)
        return self.emit(self.out_name(node), f"reshape({y4.name}, [{self.dim_text(nn)}, {self.dim_text(f)}, "
                                              f"{self.dim_text(lo)}])", x.dtype, (nn, f, lo))

    def op_Tile(self, node, ins, attrs):
        """Tile as broadcast_to over interleaved axes: [d0, d1] by [r0, r1] is
        reshape(broadcast_to(reshape(x, [1, d0, 1, d1]), [r0, d0, r1, d1]), [r0 * d0, r1 * d1]),
        with only the repeated axes interleaved."""
        x = self.tensor(ins[0])
        reps = self.const_ints(ins[1], "repeats")
        s = self.shape(x)
        if len(reps) != len(s) or any(not isinstance(r, int) or r < 1 for r in reps):
            raise NodeError(f"repeats {reps} for a tensor of rank {len(s)}")
        if all(r == 1 for r in reps):
            return x
        inter, wide, out = [], [], []
        for d, r in zip(s, reps):
            if r > 1:
                if not isinstance(d, int):
                    raise NodeError(f"repeating an axis of symbolic extent {d}: {r} * {d} is not an FDSL dimension")
                inter += [1, d]
                wide += [r, d]
                out.append(r * d)
            else:
                inter.append(d)
                wide.append(d)
                out.append(d)
        name = self.out_name(node)
        a = self.emit(f"{name}_axes", f"reshape({x.name}, [{', '.join(self.dim_text(d) for d in inter)}])", x.dtype,
                      tuple(inter))
        b = self.emit(f"{name}_wide", f"broadcast_to({a.name}, [{', '.join(self.dim_text(d) for d in wide)}])",
                      x.dtype, tuple(wide))
        return self.emit(name, f"reshape({b.name}, [{', '.join(self.dim_text(d) for d in out)}])", x.dtype,
                         tuple(out))

    # ---- shapes -----------------------------------------------------------------------------
    def op_Identity(self, node, ins, attrs):
        return ins[0]

    def op_Dropout(self, node, ins, attrs):
        if len(ins) > 2 and ins[2] is not None:
            if not isinstance(ins[2], C) or bool(np.asarray(ins[2].value).reshape(-1)[0]):
                raise NodeError("training_mode is on or not a constant; fusec imports inference graphs")
        if len(node.output) > 1 and node.output[1] and self.uses(node.output[1]):
            raise NodeError("its mask output is used")
        return [ins[0], None]

    def op_Constant(self, node, ins, attrs):
        from onnx import numpy_helper
        if "value" in attrs:
            t = attrs["value"]
            if t.data_type not in DTYPES and t.data_type not in CONST_ONLY:
                raise NodeError(f"a constant of dtype {elem_name(t.data_type)}; fusec imports {SUPPORTED}")
            if t.data_location == 1:
                raise NodeError("a Constant with external data")
            return C(np.asarray(numpy_helper.to_array(t)))
        for key, dt in (("value_float", np.float32), ("value_floats", np.float32), ("value_int", np.int64),
                        ("value_ints", np.int64)):
            if key in attrs:
                return C(np.asarray(attrs[key], dt))
        raise NodeError(f"a Constant of {', '.join(attrs) or 'nothing'}; fusec imports tensor, float and int "
                        "constants")

    def op_Shape(self, node, ins, attrs):
        x = ins[0]
        shape = self.shape(x) if isinstance(x, T) else tuple(np.shape(x.value)) if isinstance(x, C) else \
            (() if x.scalar else (len(x.items),))
        r = len(shape)
        start = int(attrs.get("start", 0))
        end = int(attrs.get("end", r))
        start = min(max(start + r if start < 0 else start, 0), r)
        end = min(max(end + r if end < 0 else end, 0), r)
        return self.sym_or_const(shape[start:end], False)

    def sym_or_const(self, items, scalar: bool):
        items = tuple(self.dim(d) if isinstance(d, str) else d for d in items)
        if all(isinstance(d, (int, np.integer)) for d in items):
            arr = np.array([int(d) for d in items], np.int64)
            return C(arr.reshape(()) if scalar else arr)
        return S(items, scalar)

    def op_Size(self, node, ins, attrs):
        x = ins[0]
        if isinstance(x, C):
            return C(np.int64(np.size(x.value)))
        if isinstance(x, S):
            return C(np.int64(1 if x.scalar else len(x.items)))
        p = _prod(self.shape(x))
        if p is None:
            raise NodeError("the size of a value whose shape FDSL cannot name")
        return self.sym_or_const((_as_dim(*p),), True)

    def target_shape(self, v) -> list:
        items = self.const_ints(v, "shape")
        return [self.dim(d) if isinstance(d, str) else d for d in items]

    def op_Reshape(self, node, ins, attrs):
        x = ins[0]
        target = self.target_shape(ins[1])
        allowzero = int(attrs.get("allowzero", 0))
        if isinstance(x, S):
            count = 1 if x.scalar else len(x.items)
            if len(target) > 1 and count == 1 or len(target) > 1 and any(
                    isinstance(d, int) and d != 1 and d != count and d != -1 for d in target):
                raise NodeError("a reshape of a shape value into rank > 1")
            return S(x.items, len(target) == 0)
        x = self.tensor(x, f"{self.out_name(node)}_in")
        return self.reshape(x, target, node, allowzero)

    def reshape(self, x: T, target, node, allowzero: int = 0) -> T:
        src = self.shape(x)
        dims = []
        for k, d in enumerate(target):
            if isinstance(d, int) and d == 0 and not allowzero:
                if k >= len(src):
                    raise NodeError(f"shape entry {k} is 0 (copy) beyond the input's rank {len(src)}")
                d = src[k]
            if isinstance(d, int) and (d < -1 or d == 0):
                raise NodeError(f"shape entry {d} in {target}; FDSL has no empty tensors")
            dims.append(d)
        opaque = [k for k, d in enumerate(dims) if isinstance(d, Opaque)]
        if opaque:
            if len(opaque) > 1 or -1 in dims:
                raise NodeError(f"the target shape {dims} holds sizes FDSL cannot name")
            dims[opaque[0]] = -1
        total = _prod(src)
        if total is None:
            raise NodeError("its input's shape cannot be named")
        if dims.count(-1) > 1:
            raise NodeError(f"more than one -1 in the target shape {dims}")
        known = _prod([d for d in dims if d != -1])
        out = list(dims)
        if -1 in dims:
            coef, syms = total
            kc, ks = known
            if kc == 0 or coef % kc or any(ks[s] > syms[s] for s in ks):
                raise NodeError(f"cannot reshape {list(src)} to {dims}")
            out[dims.index(-1)] = _as_dim(coef // kc, syms - ks)
            if isinstance(out[dims.index(-1)], Opaque):
                raise NodeError(f"the -1 of reshape {list(src)} to {dims} would be {out[dims.index(-1)]}; an FDSL "
                                "dimension is a number or a single symbol")
        elif known != total:
            raise NodeError(f"cannot reshape {list(src)} to {dims}: the element counts differ")
        if tuple(out) == src:
            return x
        written = ", ".join(str(d) for d in dims)
        return self.emit(self.out_name(node), f"reshape({x.name}, [{written}])", x.dtype, tuple(out))

    def op_Flatten(self, node, ins, attrs):
        x = self.tensor(ins[0])
        s = self.shape(x)
        a = int(attrs.get("axis", 1))
        a = a + len(s) if a < 0 else a
        if not 0 <= a <= len(s):
            raise NodeError(f"axis {attrs.get('axis')} is out of range for rank {len(s)}")
        pre, post = _as_dim(*_prod(s[:a])), _as_dim(*_prod(s[a:]))
        if isinstance(pre, Opaque) and isinstance(post, Opaque):
            raise NodeError(f"flattening {list(s)} gives sizes FDSL cannot name")
        return self.reshape(x, [-1 if isinstance(pre, Opaque) else pre, -1 if isinstance(post, Opaque) else post],
                            node)

    def op_Squeeze(self, node, ins, attrs):
        x = ins[0]
        axes = self.const_ints(ins[1], "axes") if len(ins) > 1 and ins[1] is not None else attrs.get("axes")
        if isinstance(x, S):
            if x.scalar or len(x.items) != 1:
                raise NodeError("a squeeze of a shape value of more than one entry")
            return S(x.items, True) if not all(isinstance(d, int) for d in x.items) else C(np.int64(x.items[0]))
        x = self.tensor(x)
        s = self.shape(x)
        if axes is None:
            axes = [k for k, d in enumerate(s) if d == 1]
        axes = {self.axis(int(a), len(s)) for a in axes}
        for a in axes:
            if s[a] != 1:
                raise NodeError(f"axis {a} has extent {s[a]}, not 1")
        return self.reshape(x, [d for k, d in enumerate(s) if k not in axes], node)

    def op_Unsqueeze(self, node, ins, attrs):
        x = ins[0]
        axes = self.const_ints(ins[1], "axes") if len(ins) > 1 and ins[1] is not None else attrs.get("axes")
        if isinstance(x, S):
            if not x.scalar or list(axes) not in ([0], [-1]):
                raise NodeError("an unsqueeze of a shape value into rank > 1")
            return S(x.items, False)
        x = self.tensor(x)
        s = list(self.shape(x))
        r = len(s) + len(axes)
        axes = sorted(self.axis(int(a), r) for a in axes)
        for a in axes:
            s.insert(a, 1)
        return self.reshape(x, s, node)

    def op_Expand(self, node, ins, attrs):
        x = self.tensor(ins[0])
        target = self.target_shape(ins[1])
        for d in target:
            if isinstance(d, Opaque):
                raise NodeError(f"the target shape {target} holds sizes FDSL cannot name")
        out = self.broadcast(self.shape(x), tuple(target))
        if out == self.shape(x):
            return x
        return self.emit(self.out_name(node), f"broadcast_to({x.name}, [{', '.join(self.dim_text(d) for d in out)}])",
                         x.dtype, out)

    def op_ConstantOfShape(self, node, ins, attrs):
        from onnx import numpy_helper
        value = np.asarray(numpy_helper.to_array(attrs["value"])).reshape(-1) if "value" in attrs else \
            np.zeros(1, np.float32)
        target = self.target_shape(ins[0])
        if any(isinstance(d, int) and d < 1 for d in target):
            raise NodeError(f"the shape {target} is empty; FDSL has no empty tensors")
        if all(isinstance(d, int) for d in target) and math.prod(target) <= FOLD_LIMIT:
            return C(np.full(target, value[0], value.dtype))
        for d in target:
            if isinstance(d, Opaque):
                raise NodeError(f"the shape {target} holds sizes FDSL cannot name")
        p = self.materialize(C(value.reshape(())), f"{self.out_name(node)}_value")
        return self.emit(self.out_name(node), f"broadcast_to({p.name}, [{', '.join(self.dim_text(d) for d in target)}])",
                         p.dtype, tuple(target))

    def op_Range(self, node, ins, attrs):
        raise NodeError("a Range whose bounds are not constant numbers; FDSL has no arange (planned in issue 38)")

    def op_Transpose(self, node, ins, attrs):
        x = self.tensor(ins[0])
        r = len(x.shape)
        perm = [self.axis(int(p), r) for p in attrs.get("perm", list(range(r))[::-1])]
        if sorted(perm) != list(range(r)):
            raise NodeError(f"perm {perm} is not a permutation of {r} axes")
        if perm == list(range(r)):
            return x
        s = self.shape(x)
        return self.emit(self.out_name(node), f"permute({x.name}, [{', '.join(map(str, perm))}])", x.dtype,
                         tuple(s[p] for p in perm))

    def op_Concat(self, node, ins, attrs):
        vals = [v for v in ins if v is not None]
        if all(isinstance(v, (S, C)) for v in vals):
            items = []
            for v in vals:
                if isinstance(v, C):
                    arr = np.asarray(v.value)
                    if arr.ndim != 1:
                        raise NodeError("a concat of constants and shape values of rank other than 1")
                    items += [int(a) for a in arr]
                else:
                    items += list(v.items)
            return self.sym_or_const(items, False)
        vals = [v for v in vals if not (isinstance(v, C) and np.size(v.value) == 0)]
        ts = [self.tensor(v, f"{self.out_name(node)}_part{k}") for k, v in enumerate(vals)]
        dtype = ts[0].dtype
        r = len(ts[0].shape)
        a = self.axis(int(attrs["axis"]), r)
        for t in ts[1:]:
            if t.dtype != dtype or len(t.shape) != r:
                raise NodeError("its inputs differ in dtype or rank")
        if len(ts) == 1:
            return ts[0]
        out = list(self.shape(ts[0]))
        for t in ts[1:]:
            s = self.shape(t)
            for k in range(r):
                if k != a:
                    out[k] = self.unify(out[k], s[k])
        parts = [self.shape(t)[a] for t in ts]
        ints = [p for p in parts if isinstance(p, int)]
        syms = [p for p in parts if not isinstance(p, int)]
        if syms and (len(syms) > 1 or ints):
            raise NodeError(f"the joined axis would have {' + '.join(map(str, parts))} elements; an FDSL dimension is "
                            "a number or a single symbol")
        out[a] = syms[0] if syms else sum(ints)
        return self.emit(self.out_name(node), f"concat([{', '.join(t.name for t in ts)}], axis={a})", dtype,
                         tuple(out))

    def op_Split(self, node, ins, attrs):
        x = self.tensor(ins[0])
        s = self.shape(x)
        a = self.axis(int(attrs.get("axis", 0)), len(s))
        n = s[a]
        if not isinstance(n, int):
            raise NodeError(f"a split of axis {a} of symbolic extent {n}; FDSL splits axes of fixed extent")
        k = len(node.output)
        if len(ins) > 1 and ins[1] is not None:
            sizes = self.const_ints(ins[1], "split sizes")
        elif "split" in attrs:
            sizes = list(attrs["split"])
        else:
            parts = int(attrs.get("num_outputs", k))
            step = -(-n // parts)
            sizes = [min(step, n - step * j) for j in range(parts)]
        if sum(sizes) != n or any(z <= 0 for z in sizes) or len(sizes) != k:
            raise NodeError(f"split sizes {sizes} do not cut axis {a} of extent {n} into {k} non-empty parts")
        if k == 1:
            return [x]
        names = [self.unique(sanitize(o or f"{self.out_name(node)}_part{j}")) for j, o in enumerate(node.output)]
        self.lines.append(f"    {', '.join(names)} = split({x.name}, [{', '.join(map(str, sizes))}], axis={a})")
        self.line_node[len(self.lines)] = self.node_index
        return [T(nm, x.dtype, s[:a] + (z,) + s[a + 1:]) for nm, z in zip(names, sizes)]

    def op_Slice(self, node, ins, attrs):
        x = ins[0]
        starts = self.const_ints(ins[1], "starts")
        ends = self.const_ints(ins[2], "ends")
        r = len(self.shape(x)) if isinstance(x, T) else (0 if x.scalar else 1) if isinstance(x, S) else \
            np.ndim(x.value)
        axes = self.const_ints(ins[3], "axes") if len(ins) > 3 and ins[3] is not None else list(range(len(starts)))
        steps = self.const_ints(ins[4], "steps") if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
        if not len(starts) == len(ends) == len(axes) == len(steps):
            raise NodeError("starts, ends, axes and steps differ in length")
        for v in starts + ends + steps:
            if not isinstance(v, int):
                raise NodeError(f"a slice bound depends on the symbolic size {v}")
        axes = [self.axis(int(a), r) for a in axes]
        if len(set(axes)) != len(axes):
            raise NodeError(f"axes {axes} repeat an axis")
        if isinstance(x, S):
            if x.scalar:
                raise NodeError("a slice of a scalar")
            b, e, st = _clamp(starts[0], ends[0], steps[0], len(x.items))
            return S(tuple(x.items[b:e if e >= 0 else None:st]), False)
        x = self.tensor(x)
        s = list(self.shape(x))
        items = [":"] * r
        for a, b, e, st in zip(axes, starts, ends, steps):
            if st == 0:
                raise NodeError("a step of 0")
            d = s[a]
            if isinstance(d, int):
                b, e, st = _clamp(b, e, st, d)
                n = len(range(b, e, st))
                if n == 0:
                    raise NodeError(f"the slice of axis {a} is empty; FDSL has no empty tensors")
                if (b, n, st) == (0, d, 1):
                    continue
                stop = "" if e < 0 else str(e)
                if st > 0 and e == d:
                    stop = ""
                items[a] = f"{b}:{stop}" + (f":{st}" if st != 1 else "")
                s[a] = n
            else:
                big = 2 ** 62
                if st == 1 and b in (0,) or (st == 1 and b <= -big):
                    b = 0
                if st == 1 and b == 0 and e >= big:
                    continue
                if st == -1 and b >= big and e <= -big:
                    items[a] = "::-1"
                    continue
                if st == 1 and b < 0 and e >= big:
                    items[a], s[a] = f"{b}:", -b
                elif st == 1 and b == 0 and 0 < e < big:
                    items[a], s[a] = f":{e}", e
                elif st == 1 and b >= 0 and e > b and e < big:
                    items[a], s[a] = f"{b}:{e}", e - b
                elif st == 1 and b < 0 and b < e < 0:
                    items[a], s[a] = f"{b}:{e}", e - b
                else:
                    raise NodeError(f"a slice [{b}:{e}:{st}] of axis {a} of symbolic extent {d}: its extent would not "
                                    "be a number or a single symbol")
        if all(i == ":" for i in items):
            return x
        while items and items[-1] == ":":
            items.pop()
        return self.emit(self.out_name(node), f"{x.name}[{', '.join(items)}]", x.dtype, tuple(s))

    def op_Gather(self, node, ins, attrs):
        data, idx = ins
        if isinstance(data, S):
            if not isinstance(idx, C):
                raise NodeError("a gather of sizes at run-time indices")
            i = np.asarray(idx.value)
            n = len(data.items)
            picked = [data.items[int(k) + n if k < 0 else int(k)] for k in i.reshape(-1)]
            return self.sym_or_const(picked, i.ndim == 0) if i.ndim <= 1 else \
                self._nd(picked, i.shape)
        x = self.tensor(data, f"{self.out_name(node)}_table")
        s = self.shape(x)
        a = self.axis(int(attrs.get("axis", 0)), len(s))
        d = s[a]
        if isinstance(idx, C) and np.ndim(idx.value) == 0:
            k = int(np.asarray(idx.value))
            if isinstance(d, int) and not -d <= k < d:
                raise NodeError(f"index {k} is outside axis {a} of extent {d}")
            items = [":"] * a + [str(k)]
            return self.emit(self.out_name(node), f"{x.name}[{', '.join(items)}]", x.dtype, s[:a] + s[a + 1:])
        if isinstance(idx, C):
            i = np.asarray(idx.value).astype(np.int64)
            if isinstance(d, int):
                if ((i < -d) | (i >= d)).any():
                    raise NodeError(f"an index is outside axis {a} of extent {d}")
                i = np.where(i < 0, i + d, i)
            elif (i < 0).any():
                raise NodeError(f"a negative index into axis {a} of symbolic extent {d}")
            it = self.materialize(C(i), f"{self.out_name(node)}_idx")
        else:
            it = self.tensor(idx)
            if it.dtype not in ("i32", "i64"):
                raise NodeError(f"its indices are {it.dtype}, not i32 or i64")
            if isinstance(d, int):
                # ONNX counts a negative index from the end; FDSL's gather does not
                it = self.emit(f"{self.out_name(node)}_idx", f"where(lt({it.name}, 0), add({it.name}, {d}), "
                                                             f"{it.name})", it.dtype, self.shape(it))
        return self.emit(self.out_name(node), f"gather({x.name}, {it.name}, axis={a})", x.dtype,
                         s[:a] + self.shape(it) + s[a + 1:])

    def _nd(self, picked, shape):
        if all(isinstance(p, int) for p in picked):
            return C(np.array(picked, np.int64).reshape(shape))
        raise NodeError("a gather of sizes into rank > 1")


# ops whose result holds no more elements than their inputs together (folded on constants)
NOT_GROWING = {"Identity", "Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Tanh", "Sigmoid", "Relu", "Erf", "Sin",
               "Cos", "Floor", "Ceil", "Cast", "CastLike", "IsNaN", "IsInf", "Not", "Sign", "Round", "Mod", "Softmax",
               "LogSoftmax", "Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Concat", "Split", "Slice",
               "Trilu", "NonZero", "CumSum", "ArgMax", "ArgMin", "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
               "ReduceProd", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum", "Gelu", "HardSigmoid",
               "HardSwish", "LeakyRelu", "Elu", "Softplus", "Softsign", "Clip", "LayerNormalization",
               "BatchNormalization", "Dropout", "GlobalAveragePool", "GlobalMaxPool", "ScatterND",
               "ScatterElements", "GatherElements"}
BROADCASTING = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Where", "Equal", "Less",
                "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor", "PRelu", "BitShift"}


def fold_size(op: str, arrays: list, attrs: dict) -> int | None:
    """How many elements folding `op` on these constant inputs makes (bounded before onnx's
    reference evaluator allocates them), or None when fusec does not fold this op."""
    given = [a for a in arrays if a is not None]
    total = sum(int(a.size) for a in given)

    def count(shape) -> int:
        n = 1
        for d in shape:
            n *= max(int(d), 0)
        return n
    if op in NOT_GROWING:
        return total
    if op in BROADCASTING:
        return count(np.broadcast_shapes(*(a.shape for a in given)))
    if op in ("MatMul", "Gemm"):
        a, b = given[0], given[1]
        return total + count(a.shape[:-1]) * int(b.shape[-1] if b.ndim else 1) * max(
            1, count(np.broadcast_shapes(a.shape[:-2], b.shape[:-2])))
    if op == "Gather":
        data, idx = arrays[0], arrays[1]
        return count(data.shape) // max(1, int(data.shape[int(attrs.get("axis", 0))]) if data.ndim else 1) * \
            int(idx.size) + total
    if op == "ConstantOfShape":
        return count(arrays[0].reshape(-1))
    if op == "Expand":
        return count(np.broadcast_shapes(arrays[0].shape, tuple(int(d) for d in arrays[1].reshape(-1))))
    if op == "Tile":
        return count(arrays[0].shape) * count(arrays[1].reshape(-1))
    if op == "Range":
        start, limit, delta = (float(np.asarray(a).reshape(-1)[0]) for a in arrays[:3])
        if delta == 0 or not all(math.isfinite(v) for v in (start, limit, delta)):
            return None
        return max(int(math.ceil((limit - start) / delta)), 0)
    return None


def _f(v: float) -> str:
    text = repr(float(v))
    return f"({text})" if text.startswith("-") else text


def _clamp(b: int, e: int, st: int, d: int) -> tuple[int, int, int]:
    """ONNX Slice's clamping of one axis of extent d: (start, stop, step), stop -1 meaning
    'before index 0' for a negative step."""
    if st == 0:
        raise NodeError("a step of 0")
    b = b + d if b < 0 else b
    e = e + d if e < 0 else e
    if st > 0:
        b, e = min(max(b, 0), d), min(max(e, 0), d)
    else:
        b, e = min(max(b, 0), d - 1), min(max(e, -1), d - 1)
    return b, e, st


def _sym_add(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    if b == 0:
        return a
    if a == 0:
        return b
    return Opaque(f"{a} + {b}")


def _sym_sub(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a - b
    if b == 0:
        return a
    return Opaque(f"{a} - {b}")


def _sym_mul(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    p = _prod([a, b])
    return _as_dim(*p) if p is not None else Opaque(f"{a} * {b}")


def _sym_div(a, b):
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise NodeError("a division by zero in shape arithmetic")
        return int(a / b) if (a < 0) != (b < 0) else a // b
    if b == 1:
        return a
    return Opaque(f"{a} / {b}")


def _sym_max(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b)
    if isinstance(b, int) and b <= 1:
        return a
    if isinstance(a, int) and a <= 1:
        return b
    return a if a == b else Opaque(f"max({a}, {b})")


def _sym_min(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    return a if a == b else Opaque(f"min({a}, {b})")


def _sym_eq(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if a is b or (isinstance(a, str) and a == b):
        return True
    if (isinstance(a, int) and a < 1) or (isinstance(b, int) and b < 1):
        return False            # a symbol is a positive size
    return Opaque(f"{a} == {b}")


def _sym_where(c, a, b):
    if isinstance(c, Opaque):
        raise NodeError(f"a condition on sizes FDSL cannot decide ({c})")
    return a if bool(c) else b


SYM_OPS = {"Add": _sym_add, "Sub": _sym_sub, "Mul": _sym_mul, "Div": _sym_div, "Max": _sym_max, "Min": _sym_min,
           "Equal": _sym_eq, "Where": _sym_where}

# ops that are not folded on constant inputs (handled by their own method even then)
NO_FOLD = {"Constant", "Identity", "Dropout", "Shape", "Size"}

UNARY = {"Neg": ("neg", NUMERIC), "Abs": ("abs", NUMERIC), "Exp": ("exp", FLOAT), "Log": ("log", FLOAT),
         "Sqrt": ("sqrt", FLOAT), "Tanh": ("tanh", FLOAT), "Sigmoid": ("sigmoid", FLOAT), "Relu": ("relu", NUMERIC),
         "Erf": ("erf", FLOAT), "Sin": ("sin", FLOAT), "Cos": ("cos", FLOAT), "Floor": ("floor", FLOAT),
         "Ceil": ("ceil", FLOAT), "Reciprocal": ("reciprocal", FLOAT)}
BINARY = {"Add": ("add", NUMERIC, None, False), "Sub": ("sub", NUMERIC, None, False),
          "Mul": ("mul", NUMERIC, None, False), "Div": ("div", FLOAT, None, False),
          "Max": ("maximum", NUMERIC, None, True), "Min": ("minimum", NUMERIC, None, True),
          "Sum": ("add", NUMERIC, None, True),
          "Equal": ("eq", NUMERIC + ("bool",), "bool", False), "Less": ("lt", NUMERIC, "bool", False),
          "LessOrEqual": ("le", NUMERIC, "bool", False), "Greater": ("gt", NUMERIC, "bool", False),
          "GreaterOrEqual": ("ge", NUMERIC, "bool", False)}
REDUCE = {"ReduceSum": ("sum", "{x}", "{y}", NUMERIC), "ReduceMean": ("mean", "{x}", "{y}", FLOAT),
          "ReduceMax": ("max", "{x}", "{y}", NUMERIC), "ReduceMin": ("min", "{x}", "{y}", NUMERIC),
          "ReduceProd": ("prod", "{x}", "{y}", NUMERIC), "ReduceSumSquare": ("sum", "square({x})", "{y}", NUMERIC),
          "ReduceL1": ("sum", "abs({x})", "{y}", NUMERIC), "ReduceL2": ("sum", "square({x})", "sqrt({y})", FLOAT),
          "ReduceLogSum": ("sum", "{x}", "log({y})", FLOAT)}

for _op, (_fn, _allowed) in UNARY.items():
    setattr(Converter, f"op_{_op}", (lambda fn, allowed: lambda self, node, ins, attrs:
                                     self.unary(fn, allowed)(node, ins, attrs))(_fn, _allowed))
for _op, _spec in BINARY.items():
    setattr(Converter, f"op_{_op}", (lambda spec: lambda self, node, ins, attrs:
                                     self.binary(*spec)(node, ins, attrs))(_spec))
for _op, _spec in REDUCE.items():
    setattr(Converter, f"op_{_op}", (lambda spec: lambda self, node, ins, attrs:
                                     self._reduce(*spec)(node, ins, attrs))(_spec))
for _op, _fn in (("Softmax", "softmax"), ("LogSoftmax", "log_softmax")):
    setattr(Converter, f"op_{_op}", (lambda fn: lambda self, node, ins, attrs:
                                     self._softmax(fn)(node, ins, attrs))(_fn))
for _op, _fn in (("ArgMax", "argmax"), ("ArgMin", "argmin")):
    setattr(Converter, f"op_{_op}", (lambda fn: lambda self, node, ins, attrs: self._arg(fn)(node, ins, attrs))(_fn))
for _op, _fn in (("GlobalAveragePool", "mean"), ("GlobalMaxPool", "max")):
    setattr(Converter, f"op_{_op}", (lambda fn: lambda self, node, ins, attrs:
                                     self._global_pool(fn)(node, ins, attrs))(_fn))


def mapped_ops() -> list[str]:
    """The ONNX op types the importer maps (Range only over constants, folded)."""
    return sorted(n[3:] for n in dir(Converter) if n.startswith("op_"))


HINTS = {
    "MaxPool": "FDSL has no pooling yet (max_pool2d and avg_pool2d are planned in issue 38); GlobalAveragePool and "
               "GlobalMaxPool are imported, as mean and max over the spatial axes",
    "GatherElements": "FDSL's gather is np.take (ONNX Gather); take_along_axis is not in FDSL yet",
    "GatherND": "FDSL has no multi-index gather; its gather is np.take (ONNX Gather)",
    "Einsum": "write it with matmul, permute and reshape",
    "Pad": "FDSL has no pad operator (conv2d takes symmetric zero padding itself)",
    "ConvTranspose": "FDSL has conv2d only",
    "Mod": "FDSL has no remainder; floor and sub give it for floats",
    "InstanceNormalization": "FDSL offers layernorm (over chosen axes) and batchnorm (inference)",
    "GroupNormalization": "FDSL offers layernorm (over chosen axes) and batchnorm (inference)",
    "TopK": "FDSL's argmax and max give the top 1",
    "If": "FDSL chains have no control flow", "Loop": "FDSL chains have no control flow",
    "Scan": "FDSL's cumsum and cumprod are its scans",
    "Trilu": "build the mask with comparisons and where",
    "ScatterND": "FDSL has no scatter", "ScatterElements": "FDSL has no scatter",
    "NonZero": "FDSL has no data-dependent shapes", "Resize": "FDSL has no resampling",
    "Selu": "FDSL offers elu-like where/exp forms; Elu is imported",
    "Sign": "FDSL offers where with comparisons", "Round": "FDSL offers floor and ceil",
    "Mish": "FDSL offers tanh, log1p and exp", "IsInf": "FDSL offers comparisons (IsNaN is imported)",
    "CumProd": "FDSL has cumprod, but ONNX has no CumProd op",
}
HINTS["AveragePool"] = HINTS["MaxPool"]


def unsupported(op_type: str) -> str:
    hint = HINTS.get(op_type)
    return (f"op type {op_type} is not supported" + (f": {hint}" if hint else "")
            + " (fusec's ONNX importer maps the op types listed in docs/GUIDE.md, \"Importing ONNX models\")")


def convert(model: Model, chain_name: str | None = None) -> Imported:
    """Map a checked model's graph to FDSL (see the module's docstring); the text is checked with
    fusec's checker, and a problem there is an OnnxImportError naming the node that wrote the line."""
    conv = Converter(model, chain_name)
    imp = conv.run()
    from fusec import api
    from fusec.dsl.diagnostics import FdslError
    try:
        api.check(api.parse_text(imp.text, model.path + ".fdsl"))
    except FdslError as e:
        d = e.diagnostics[0]
        line = d.span.line - conv.header_lines if d.span is not None else None
        node = conv.line_node.get(line) if line is not None else None
        where = f"{model.path}: {node_label(model.proto.graph, node)}" if node is not None and node >= 0 \
            else f"{model.path}"
        raise OnnxImportError(f"{where}: the FDSL written for it does not check: {d.message}") from None
    return imp
