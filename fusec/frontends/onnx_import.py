"""An ONNX graph as one FDSL chain: `to_fdsl(model)` -> Imported (the FDSL text, the weights).

Every ONNX tensor becomes one of three kinds of value while the graph is walked in order
(onnx_values.py): `T`, a value of the chain; `C`, a constant known now (folded with onnx's
reference evaluator; a literal where a scalar fits, else a parameter of the chain, a weight, the
first time a chain value needs it); `S`, a shape value whose entries may be symbols, on which
shape arithmetic (Shape -> Gather -> Concat -> Reshape/Expand...) is folded.
`Converter` names values and symbols, writes the lines (`emit`) and walks the nodes; the op
mappings are its mixins (onnx_ops_math.py, onnx_ops_shape.py). An op FDSL cannot express is an
OnnxImportError naming the node and, where one exists, the FDSL operator to use instead. The
text is checked by fusec's own checker before it is handed back.
"""
from __future__ import annotations

import math
import os

import numpy as np

from .onnx_file import ONNX_DTYPES, SUPPORTED, Model, OnnxImportError, elem_name, node_label, np_dtype
from .onnx_ops_math import MathOps
from .onnx_ops_pool import PoolOps
from .onnx_ops_shape import ShapeOps
from .onnx_values import (C, ELEM_TO_FDSL, FDSL_TO_NP, FLOAT, FOLD_LIMIT, NP_TO_FDSL, Imported, NodeError, Opaque, S,
                          T, fold_size, sanitize)


class Converter(MathOps, ShapeOps, PoolOps):
    """The walk over one graph: names, dims, the FDSL lines written; the ops are its mixins'
    (onnx_ops_math.py, onnx_ops_shape.py)."""

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
            if not math.isfinite(f):                     # the literals inf, -inf and nan
                return "nan" if math.isnan(f) else "inf" if f > 0 else "(-inf)"
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
        if tt.elem_type not in ONNX_DTYPES:
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
        if node.domain not in ("", "ai.onnx"):
            raise NodeError(f"ops of domain '{node.domain}' are not supported (fusec imports the default ONNX "
                            "domain)")
        ins = [self.vals[x] if x else None for x in node.input]
        attrs = self.attributes(node)
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

    def attributes(self, node) -> dict:
        """The node's attributes by name, checked against the op's ONNX schema (for this opset):
        a name given twice, a name the op does not have, a value of another type than the
        schema's, or a flag (keepdims, transB, ...) other than 0 or 1 is a NodeError, not read
        some way onnxruntime would not."""
        from onnx import AttributeProto, defs, helper
        try:
            schema = defs.get_schema(node.op_type, self.m.opset, "")       # (the default domain: checked before)
        except defs.SchemaError:
            schema = None
        attrs = {}
        for a in node.attribute:
            if a.name in attrs:
                raise NodeError(f"attribute '{a.name}' is given twice")
            if schema is not None:
                want = schema.attributes.get(a.name)
                if want is None:
                    raise NodeError(f"{node.op_type} (opset {self.m.opset}) has no attribute '{a.name}'")
                if a.type != want.type:
                    names = AttributeProto.AttributeType
                    got = names.Name(a.type) if a.type in names.values() else str(a.type)
                    raise NodeError(f"attribute '{a.name}' is of type {got}; {node.op_type} takes "
                                    f"{names.Name(int(want.type.value))}")
            v = helper.get_attribute_value(a)
            if a.name in FLAGS and v not in (0, 1):
                raise NodeError(f"attribute '{a.name}' is {v}; ONNX takes 0 or 1")
            attrs[a.name] = v.decode() if isinstance(v, bytes) else v
        return attrs

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
        if node.op_type == "GatherElements":
            # onnx's reference evaluator fails on indices shorter than the data on another axis
            # (BERT's token_type_ids buffer, sliced by a [1, S] index): folded here, as ONNX
            # defines it (the data taken at the indices' extent on the other axes)
            data, idx = (np.asarray(v.value) for v in ins[:2])
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0) % max(data.ndim, 1)
            if idx.ndim != data.ndim:
                raise NodeError(f"indices of rank {idx.ndim} for data of rank {data.ndim}")
            sl = tuple(slice(None) if k == axis else slice(0, idx.shape[k]) for k in range(data.ndim))
            n = data.shape[axis]
            if np.any(idx < -n) or np.any(idx >= n):
                raise NodeError(f"an index outside the axis of {n}")
            if any(idx.shape[k] > data.shape[k] for k in range(data.ndim) if k != axis):
                raise NodeError(f"indices {list(idx.shape)} larger than the data {list(data.shape)} off the axis")
            return [C(np.take_along_axis(data[sl], np.where(idx < 0, idx + n, idx), axis=axis))]
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


NO_FOLD = {"Constant", "Identity", "Dropout", "Shape", "Size"}
# attributes ONNX defines as 0 or 1
FLAGS = {"keepdims", "noop_with_empty_axes", "select_last_index", "exclusive", "reverse", "ceil_mode",
         "count_include_pad", "transA", "transB", "training_mode"}


def mapped_ops() -> list[str]:
    """The ONNX op types the importer maps (Range over constants folded, else from 0 to a size by 1)."""
    return sorted(n[3:] for n in dir(Converter) if n.startswith("op_"))


HINTS = {
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
    "Mish": "FDSL offers tanh, log1p and exp",
    "CumProd": "FDSL has cumprod, but ONNX has no CumProd op",
}


def unsupported(op_type: str) -> str:
    hint = HINTS.get(op_type)
    return (f"op type {op_type} is not supported" + (f": {hint}" if hint else "")
            + " (fusec's ONNX importer maps the op types listed in docs/GUIDE.md, \"Importing ONNX models\")")


def to_fdsl(model: Model, chain_name: str | None = None) -> Imported:
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
