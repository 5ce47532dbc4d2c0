"""One partition of an ATen graph (torch.fx, after aot_autograd and the core decompositions) as
one FDSL chain: `translate(gm, name)` -> Translated (the text, the order of its inputs, the
constants folded into it).

Every FX node becomes one of three kinds of value as the graph is walked in order:
- `V`, a value of the chain (a parameter or a `name = expr` statement), with its FDSL dtype and
  shape (ints and symbols: a SymInt of a dynamic graph is a symbol, `s0` -> `S0`);
- `K`, a constant known now (a tensor computed at translation time from other constants: the
  mask construction, `full`, `arange`, `scalar_tensor`), a literal where a scalar fits, else a
  parameter of the chain filled by the partition at every call;
- a size (an int, or a symbol's name) where a SymInt flows.
Views carry their `base` (the value they reshape), so the flatten -> mm -> unflatten and
view -> bmm -> view round trips aten leaves around every linear layer and attention product are
written as one matmul of the original ranks: FDSL's dims are numbers or single symbols (a
flattened `2*S` is not one) and the attention matcher sees the products as the model wrote them.
The softmax guard SDPA's decomposition writes for fully masked rows is written as
`where(max(s) == -inf, 0, softmax(s))`, the form the attention matcher takes.
`node_support(node)` says whether a node can be translated (None) or why not; the partitioner
(torch_backend.py) asks it.
"""
from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass, field

import torch

from fusec.dsl.parser import KEYWORDS

aten = torch.ops.aten

TORCH_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64",
          torch.int64: "i64", torch.int32: "i32", torch.bool: "bool"}
FLOAT_DTYPES = ("f16", "bf16", "f32", "f64")


class Unsupported(Exception):
    """A node (or a whole partition) fusec cannot take; the message says why."""


@dataclass
class V:
    name: str
    dtype: str
    shape: tuple                   # ints and symbol names
    base: "V | None" = None        # the value this one reshapes (views only)


@dataclass
class K:
    value: torch.Tensor


@dataclass
class Translated:
    """The FDSL of one partition: its text and chain name; `inputs`: per chain parameter, the
    index of the partition's placeholder it takes, or ("const", tensor) for a folded constant;
    `outputs`: how many results; `symbols`: the chain's symbols (dynamic dims)."""
    text: str
    chain: str
    inputs: list
    outputs: int
    symbols: tuple = ()
    folded: int = 0                 # compute ops folded into constants now
    ops: dict = field(default_factory=dict)   # aten op name -> count of those translated


def op_name(target) -> str:
    """`aten.add.Tensor` -> 'add.Tensor'; Python operators by name."""
    if isinstance(target, torch._ops.OpOverload):
        return f"{target._schema.name.split('::')[-1]}.{target._overloadname}"
    return getattr(target, "__name__", str(target))


def fdsl_name(name: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_]", "_", name)
    if not s or s[0].isdigit():
        s = "t_" + s
    if s in KEYWORDS or s.isupper():
        s = s + "_v"
    return s


def sym_name(expr) -> str | None:
    """An FDSL symbol for a SymInt's expression when it is a single symbol (`s0` -> `S0`)."""
    text = str(expr)
    return text.upper() if re.fullmatch(r"[a-z]+\d+", text) else None


def size(d):
    """A dim of a FakeTensor's shape: an int, a symbol name, or None (an expression of symbols)."""
    if isinstance(d, int):
        return d
    if isinstance(d, torch.SymInt):
        node = d.node
        if node.is_nested_int():
            return None
        try:
            return int(node.expr) if node.expr.is_number else sym_name(node.expr)
        except (TypeError, AttributeError):
            return None
    return None


def meta_shape(val) -> tuple:
    return tuple(size(d) for d in val.shape)


def fdsl_dtype(dt) -> str:
    try:
        return TORCH_DTYPES[dt]
    except KeyError:
        raise Unsupported(f"dtype {dt} (fusec takes {', '.join(str(d).split('.')[-1] for d in TORCH_DTYPES)})") from None


# whether FDSL spells infinities and NaN as literals (else such a scalar becomes a 0-d parameter)
NONFINITE_LITERALS = "inf" in KEYWORDS


def finite_or_literal(v) -> bool:
    return NONFINITE_LITERALS or isinstance(v, (bool, int)) or math.isfinite(float(v))


def lit(v) -> str:
    """A Python scalar as an FDSL literal."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return f"({v})" if v < 0 else str(v)
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "(-inf)"
    text = repr(v)
    return f"({text})" if text.startswith("-") else text


def dims_text(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def type_text(dtype: str, shape) -> str:
    if any(d is None for d in shape):
        raise Unsupported(f"a shape FDSL cannot name ({dims_text('?' if d is None else d for d in shape)}): "
                          "a dim that is a product or sum of dynamic sizes")
    return dtype if not shape else f"{dtype}{dims_text(shape)}"


# ---- which nodes translate ----------------------------------------------------------------------
# Ops that only name, reshape or copy a tensor (not counted as compute ops in reports).
ATEN_VIEWS = {"view.default", "_unsafe_view.default", "reshape.default", "unsqueeze.default", "squeeze.dim",
            "squeeze.dims", "squeeze.default", "expand.default", "permute.default", "t.default",
            "transpose.int", "clone.default", "alias.default", "detach.default", "lift_fresh_copy.default",
            "getitem", "_to_copy.default", "contiguous.default", "slice.Tensor", "select.int",
            "split_with_sizes.default", "split.Tensor", "cat.default", "flatten.using_ints", "unbind.int",
            "sym_size.int", "sym_numel.default", "sym_stride.int"}

ATEN_UNARY = {"neg.default": "neg", "tanh.default": "tanh", "sigmoid.default": "sigmoid", "rsqrt.default": "rsqrt",
         "exp.default": "exp", "log.default": "log", "cos.default": "cos", "sin.default": "sin",
         "sqrt.default": "sqrt", "relu.default": "relu", "abs.default": "abs", "erf.default": "erf",
         "reciprocal.default": "reciprocal", "log1p.default": "log1p", "floor.default": "floor",
         "ceil.default": "ceil", "silu.default": "silu"}
ATEN_BINARY = {"add": "+", "sub": "-", "mul": "*", "div": "/", "true_divide": "/"}
ATEN_COMPARE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
REDUCE = {"sum.dim_IntList": "sum", "mean.dim": "mean", "amax.default": "max", "amin.default": "min",
          "prod.dim_int": "prod"}
# ops folded when every input is a constant known now (and refused otherwise)
ATEN_FOLDED = {"triu.default", "tril.default", "bitwise_not.default"}
# creation ops: folded when static, else written with FDSL's creation ops
CREATION = {"arange.start_step", "arange.start", "arange.default", "full.default", "scalar_tensor.default",
            "full_like.default", "zeros_like.default", "ones_like.default", "zeros.default", "ones.default"}
ATEN_LOGICAL = {"logical_and.default": "logical_and", "logical_or.default": "logical_or",
           "logical_xor.default": "logical_xor", "bitwise_and.Tensor": "logical_and",
           "bitwise_or.Tensor": "logical_or", "bitwise_xor.Tensor": "logical_xor"}
OTHER = {"addmm.default", "mm.default", "bmm.default", "matmul.default", "_softmax.default",
         "_log_softmax.default", "native_layer_norm.default", "_native_batch_norm_legit_no_training.default",
         "convolution.default", "embedding.default", "where.self", "pow.Tensor_Scalar", "pow.Tensor_Tensor",
         "gelu.default", "hardtanh.default", "clamp.default", "clamp_min.default", "clamp_max.default",
         "maximum.default", "minimum.default", "square.default", "rsub.Scalar", "cumsum.default",
         "convert_element_type.default", "logical_not.default", "any.dim", "any.default", "any.dims",
         "all.dim", "all.default", "gather.default", "index.Tensor", "max_pool2d_with_indices.default",
         "avg_pool2d.default", "_adaptive_avg_pool2d.default", "hardswish.default", "hardsigmoid.default",
         "relu6.default"}

# the FDSL operator an ATen op's translation writes, where it is not one every FDSL has
NEEDS = {"gather.default": "take_along_axis", "index.Tensor": "index", "max_pool2d_with_indices.default": "max_pool2d",
         "avg_pool2d.default": "avg_pool2d", "_adaptive_avg_pool2d.default": "adaptive_avg_pool2d",
         "logical_not.default": "logical_not", "any.dim": "any", "any.default": "any", "any.dims": "any",
         "all.dim": "all", "all.default": "all", "hardswish.default": "hardswish",
         "hardsigmoid.default": "hardsigmoid", "relu6.default": "relu6", "full.default": "full",
         "zeros.default": "full", "ones.default": "full", "scalar_tensor.default": "full",
         "full_like.default": "full_like", "zeros_like.default": "full_like", "ones_like.default": "full_like",
         "arange.start_step": "arange", "arange.start": "arange", "arange.default": "arange",
         **{k: v for k, v in ATEN_LOGICAL.items()}}

SIZE_FUNCTIONS = {operator.mul, operator.add, operator.sub, operator.floordiv, operator.neg}


def _binary_names():
    out = set()
    for b in list(ATEN_BINARY) + list(ATEN_COMPARE):
        out |= {f"{b}.Tensor", f"{b}.Scalar"}
    return out


ATEN_SUPPORTED = set(ATEN_UNARY) | set(REDUCE) | ATEN_FOLDED | CREATION | set(ATEN_LOGICAL) | OTHER | ATEN_VIEWS | \
    _binary_names()


def node_support(node) -> str | None:
    """None when `node` (a call_function of an ATen graph) can be part of a fusec partition, else
    why not."""
    if node.op != "call_function":
        return "not a call"
    name = op_name(node.target)
    if node.target in SIZE_FUNCTIONS:
        return "size arithmetic (stays with the graph)"
    if name not in ATEN_SUPPORTED:
        return "an op fusec does not take"
    vals = node.meta.get("val")
    for v in (vals if isinstance(vals, (tuple, list)) else (vals,)):
        if isinstance(v, torch.Tensor):
            if v.dtype not in TORCH_DTYPES:
                return f"dtype {v.dtype}"
            if v.device.type not in ("cpu", "cuda"):
                return f"a tensor on {v.device}"
    if name in ATEN_FOLDED and not _constant_inputs(node):
        return "only folded when its inputs are constants"
    if name in NEEDS and NEEDS[name] not in _fdsl_ops() and not _constant_inputs(node):
        return f"FDSL has no {NEEDS[name]}"
    if name == "convolution.default" and node.args[8] != 1 and "groups" not in _fdsl_args("conv2d"):
        return "FDSL's conv2d has no groups"
    if name in ("native_layer_norm.default", "_native_batch_norm_legit_no_training.default",
                "max_pool2d_with_indices.default"):
        if any(u.op != "call_function" or u.target is not operator.getitem or u.args[1] != 0 for u in node.users):
            return "its saved statistics are used (a training graph)"
    if name == "convolution.default":
        x = node.args[0].meta.get("val")
        if x is None or x.dim() != 4 or node.args[6]:
            return "a convolution other than 2-D and not transposed"
    if name in ("bitwise_and.Tensor", "bitwise_or.Tensor", "bitwise_xor.Tensor") and any(
            isinstance(a, torch.fx.Node) and getattr(a.meta.get("val"), "dtype", None) != torch.bool
            for a in node.args[:2]):
        return "a bitwise op on integers"
    if name == "index.Tensor" and any(i is not None and getattr(i.meta.get("val"), "dtype", None) == torch.bool
                                      for i in node.args[1]):
        return "an index by a boolean mask (its size depends on the data)"
    if name == "div.Tensor" and node.kwargs.get("rounding_mode") is not None:
        return "a rounding division"
    return None


def _fdsl_ops() -> dict:
    from fusec.dsl.ops.registry import OPS
    return OPS


def _fdsl_args(op: str) -> set:
    return {a.name for a in _fdsl_ops()[op].args}


def _constant_inputs(node) -> bool:
    """Whether every tensor feeding `node` is computed from no graph input (static tensors only)."""
    seen = {}

    def const(n) -> bool:
        if n in seen:
            return seen[n]
        if n.op != "call_function":
            seen[n] = n.op == "get_attr"
            return seen[n]
        v = n.meta.get("val")
        ok = isinstance(v, torch.Tensor) and all(isinstance(d, int) for d in v.shape)
        ok = ok and op_name(n.target) in ATEN_SUPPORTED and all(const(a) for a in n.all_input_nodes)
        seen[n] = ok
        return ok
    return all(const(a) for a in node.all_input_nodes)


# ---- the translation ----------------------------------------------------------------------------
class Translator:
    """The walk over one partition's GraphModule: names, the lines written, the values."""

    def __init__(self, gm: torch.fx.GraphModule, chain: str):
        self.gm = gm
        self.chain = fdsl_name(chain)
        self.names: set[str] = {self.chain}
        self.lines: list[tuple[str, str, tuple]] = []     # (name, expression, names it reads)
        self.params: list[tuple[str, str]] = []          # (name, type)
        self.inputs: list = []
        self.vals: dict = {}
        self.symbols: list[str] = []
        self.folded = 0
        self.ops: dict[str, int] = {}

    def unique(self, base: str) -> str:
        name, k = fdsl_name(base), 2
        stem = name
        while name in self.names:
            name, k = f"{stem}_{k}", k + 1
        self.names.add(name)
        return name

    def emit(self, base: str, expr: str, dtype: str, shape, reads=(), base_of: V | None = None) -> V:
        name = self.unique(base)
        self.lines.append((name, expr, tuple(reads)))
        return V(name, dtype, tuple(shape), base_of)

    def param(self, base: str, dtype: str, shape, source) -> V:
        name = self.unique(base)
        for d in shape:
            if isinstance(d, str) and d not in self.symbols:
                self.symbols.append(d)
        self.params.append((name, type_text(dtype, shape)))
        self.inputs.append(source)
        return V(name, dtype, tuple(shape))

    # ---- values ---------------------------------------------------------------------------------
    def val(self, a):
        if isinstance(a, torch.fx.Node):
            return self.vals[a]
        return a

    def tensor(self, a, like: V | None = None) -> V | str:
        """An argument as chain text: a V, or a literal for a scalar (a 0-d constant included)."""
        v = self.val(a)
        if isinstance(v, K):
            t = v.value
            if hasattr(v, "param"):
                return v.param
            if t.dim() == 0 and finite_or_literal(t.item()):
                return lit(t.item())
            if not hasattr(v, "param"):
                v.param = self.param("const", fdsl_dtype(t.dtype), tuple(t.shape), ("const", t.contiguous()))
            return v.param
        if isinstance(v, (int, float, bool)):
            if not finite_or_literal(v):
                dt = like.dtype if like is not None and like.dtype in FLOAT_DTYPES else "f32"
                return self.tensor(K(torch.tensor(v, dtype=_TORCH[dt])))
            return lit(v)
        if isinstance(v, V):
            return v
        raise Unsupported(f"an argument of kind {type(v).__name__}")

    @staticmethod
    def ref(x) -> str:
        return x.name if isinstance(x, V) else x

    @staticmethod
    def reads(*xs) -> tuple:
        return tuple(x.name for x in xs if isinstance(x, V))

    # ---- the walk -------------------------------------------------------------------------------
    def run(self) -> Translated:
        g = self.gm.graph
        index = 0
        outputs = None
        for node in g.nodes:
            if node.op == "placeholder":
                v = node.meta.get("val")
                if isinstance(v, torch.SymInt) or isinstance(v, int):
                    self.vals[node] = size(v)
                elif isinstance(v, torch.Tensor):
                    self.vals[node] = self.param(node.name, fdsl_dtype(v.dtype), meta_shape(v), index)
                else:
                    raise Unsupported(f"an input of kind {type(v).__name__}")
                index += 1
            elif node.op == "get_attr":
                self.vals[node] = K(getattr(self.gm, node.target))
            elif node.op == "call_function":
                self.vals[node] = self.call(node)
            elif node.op == "output":
                outputs = node.args[0]
                outputs = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
            else:
                raise Unsupported(f"a node of kind {node.op}")
        results = []
        for o in outputs:
            v = self.val(o)
            if isinstance(v, K) and v.value.dim() == 0:
                v.param = self.param("const", fdsl_dtype(v.value.dtype), (), ("const", v.value))
            elif isinstance(v, (int, float, bool)):
                raise Unsupported("a partition output that is a Python number")
            x = self.tensor_m(o)
            if not isinstance(x, V):
                raise Unsupported("a partition output that is a constant")
            results.append(x)
        # a result that is a view of a value is written out (FDSL returns names)
        res_types = [type_text(x.dtype, x.shape) for x in results]
        body = self.prune([x.name for x in results])
        head = f"chain {self.chain}(" + ", ".join(f"{n}: {t}" for n, t in self.params) + ")"
        rtype = res_types[0] if len(res_types) == 1 else "(" + ", ".join(res_types) + ")"
        text = "\n".join([f"{head} -> {rtype} {{"] + [f"    {n} = {e}" for n, e in body] +
                         ["    return " + ", ".join(x.name for x in results), "}", ""])
        return Translated(text, self.chain, list(self.inputs), len(results), tuple(self.symbols), self.folded,
                          dict(self.ops))

    def prune(self, roots: list[str]) -> list[tuple[str, str]]:
        """The statements the results need, in order (views that a matmul looked through drop)."""
        need = set(roots)
        keep = []
        for name, expr, reads in reversed(self.lines):
            if name in need:
                keep.append((name, expr))
                need.update(reads)
        params = {n for n, _ in self.params}
        if (missing := need - params - {n for n, _ in keep}):
            raise AssertionError(f"unbound {missing}")
        return list(reversed(keep))

    def call(self, node):
        name = op_name(node.target)
        if node.target is operator.getitem:
            src = self.val(node.args[0])
            if isinstance(src, (tuple, list)):
                return src[node.args[1]]
            raise Unsupported("an index into a value that is not a tuple")
        if node.target in SIZE_FUNCTIONS:
            return self.size_op(node)
        if name not in ATEN_SUPPORTED:
            raise Unsupported(f"aten.{name}")
        self.ops[name] = self.ops.get(name, 0) + 1
        args = [self._resolve(a) for a in node.args]
        if _all_const(args) and _all_const(list(node.kwargs.values())) and name not in ("clone.default",):
            return self.fold(node)
        handler = getattr(self, "op_" + name.replace(".", "_"), None)
        if handler is not None:
            return handler(node)
        if name in ATEN_LOGICAL:
            return self._logical(node)
        if name in ATEN_FOLDED:
            raise Unsupported(f"aten.{name} on values computed at run time (fusec folds it on constants only)")
        op = name.split(".")[0]
        out = node.meta["val"]
        if name in ATEN_UNARY:
            x = self.tensor_m(node.args[0])
            return self.emit(node.name, f"{ATEN_UNARY[name]}({self.ref(x)})", fdsl_dtype(out.dtype), meta_shape(out),
                             self.reads(x))
        if op in ATEN_BINARY or op in ATEN_COMPARE:
            a, b = self.tensor_m(node.args[0]), self.tensor_m(node.args[1])
            alpha = node.kwargs.get("alpha", 1)
            sym = ATEN_BINARY.get(op) or ATEN_COMPARE[op]
            # PyTorch promotes mixed tensor dtypes (f32 + i64 is f32); FDSL casts explicitly
            want = fdsl_dtype(out.dtype) if op in ATEN_BINARY else self._promoted(node)
            at, bt = (f"cast({self.ref(v)}, {want})" if isinstance(v, V) and want and v.dtype != want
                      else self.ref(v) for v in (a, b))
            bt = bt if alpha == 1 else f"{bt} * {lit(alpha)}"
            return self.emit(node.name, f"{at} {sym} {bt}", fdsl_dtype(out.dtype), meta_shape(out),
                             self.reads(a, b))
        if name in REDUCE:
            x = self.tensor_m(node.args[0])
            dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
            keep = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
            if dims is None or dims == []:
                dims = list(range(len(x.shape)))
            dims = [dims] if isinstance(dims, int) else list(dims)
            if node.kwargs.get("dtype") is not None:
                raise Unsupported("a reduction with a dtype")
            return self.emit(node.name, f"{REDUCE[name]}({x.name}, axis={dims_text(dims)}, keepdims="
                             f"{'true' if keep else 'false'})", fdsl_dtype(out.dtype), meta_shape(out), self.reads(x))
        raise Unsupported(f"aten.{name} (no translation)")

    @staticmethod
    def _promoted(node) -> str | None:
        """The dtype PyTorch compares two tensor operands in (None: an operand is a scalar)."""
        vals = [a.meta.get("val") if isinstance(a, torch.fx.Node) else None for a in node.args[:2]]
        if not all(isinstance(v, torch.Tensor) for v in vals):
            return None
        return fdsl_dtype(torch.promote_types(vals[0].dtype, vals[1].dtype))

    def _resolve(self, a):
        if isinstance(a, torch.fx.Node):
            return self.val(a)
        if isinstance(a, (list, tuple)):
            return [self._resolve(x) for x in a]
        return a

    def fold(self, node):
        """A node whose inputs are all constants: computed now."""
        def real(a):
            if isinstance(a, torch.fx.Node):
                v = self.vals[a]
                if isinstance(v, K):
                    return v.value
                return v
            if isinstance(a, (list, tuple)):
                return type(a)(real(x) for x in a)
            return a
        args = [real(a) for a in node.args]
        kwargs = {k: real(v) for k, v in node.kwargs.items()}
        if "device" in kwargs:
            kwargs["device"] = "cpu"
        out = node.target(*args, **kwargs)
        self.folded += 1
        if isinstance(out, (tuple, list)):
            return [K(o) if isinstance(o, torch.Tensor) else o for o in out]
        return K(out) if isinstance(out, torch.Tensor) else out

    def size_op(self, node):
        a = [self.val(x) for x in node.args]
        if all(isinstance(x, int) for x in a):
            return node.target(*a)
        return None                     # a size FDSL cannot name

    # ---- views ----------------------------------------------------------------------------------
    def reshape(self, node, x: V, shape) -> V:
        shape = tuple(shape)
        if shape == x.shape:
            return x
        b = x.base if x.base is not None else x
        if b.shape == shape:
            return b
        # a view stays lazy (a matmul may look through it); it is written out where a value needs it
        return V(f"<view of {b.name}>", x.dtype, shape, b)

    def materialize(self, x):
        """A lazy view (a value a matmul looked through) written out as a reshape of its base."""
        if isinstance(x, V) and x.name.startswith("<"):
            if any(d is None for d in x.shape):
                raise Unsupported(f"a value of shape {dims_text('?' if d is None else d for d in x.shape)} FDSL "
                                  "cannot name (a dim that is a product of dynamic sizes)")
            if not hasattr(x, "written"):
                x.written = self.emit(x.base.name + "_r", f"reshape({x.base.name}, {dims_text(x.shape)})",
                                      x.dtype, x.shape, (x.base.name,), x.base)
            return x.written
        return x

    def tensor_m(self, a):
        return self.materialize(self.tensor(a))

    def op_view_default(self, node):
        return self.reshape(node, self.tensor(node.args[0]), meta_shape(node.meta["val"]))

    op__unsafe_view_default = op_reshape_default = op_view_default
    op_unsqueeze_default = op_squeeze_dim = op_squeeze_dims = op_squeeze_default = op_view_default
    op_flatten_using_ints = op_view_default

    def op_clone_default(self, node):
        v = self.val(node.args[0])
        return v if not isinstance(v, K) else self.fold(node)

    op_alias_default = op_detach_default = op_lift_fresh_copy_default = op_contiguous_default = op_clone_default

    def op__to_copy_default(self, node):
        x = self.tensor_m(node.args[0])
        out = node.meta["val"]
        dt = fdsl_dtype(out.dtype)
        if dt == x.dtype:
            return x
        return self.emit(node.name, f"cast({x.name}, {dt})", dt, x.shape, self.reads(x))

    def op_expand_default(self, node):
        x = self.tensor(node.args[0])
        shape = meta_shape(node.meta["val"])
        if shape == x.shape:
            return x
        x = self.materialize(x)
        return self.emit(node.name, f"broadcast_to({x.name}, {dims_text(shape)})", x.dtype, shape, self.reads(x))

    def _permute(self, node, x: V, perm: list) -> V:
        """permute(x, perm), composed with the permute that made x (aten's transposes come in
        chains: a chain that undoes itself is no op at all)."""
        src = getattr(x, "permuted", None)
        if src is not None:
            x, perm = src[0], [src[1][p] for p in perm]
        if perm == list(range(len(perm))):
            return x
        shape = tuple(x.shape[p] for p in perm)
        y = self.emit(node.name, f"permute({x.name}, {dims_text(perm)})", x.dtype, shape, self.reads(x))
        y.permuted = (x, perm)
        return y

    def op_permute_default(self, node):
        x = self.tensor_m(node.args[0])
        return self._permute(node, x, [p % len(x.shape) for p in node.args[1]])

    def op_t_default(self, node):
        x = self.tensor_m(node.args[0])
        if len(x.shape) < 2:
            return x
        return self.emit(node.name, f"transpose({x.name})", x.dtype, x.shape[::-1], self.reads(x))

    def op_transpose_int(self, node):
        x = self.tensor_m(node.args[0])
        r = len(x.shape)
        a, b = node.args[1] % r, node.args[2] % r
        perm = list(range(r))
        perm[a], perm[b] = perm[b], perm[a]
        return self._permute(node, x, perm)

    def _subscript(self, node, x: V, items: list, shape) -> V:
        return self.emit(node.name, f"{x.name}[{', '.join(items)}]", x.dtype, shape, self.reads(x))

    def op_slice_Tensor(self, node):
        x = self.tensor_m(node.args[0])
        r = len(x.shape)
        dim = (node.args[1] if len(node.args) > 1 else 0) % r
        start = node.args[2] if len(node.args) > 2 else None
        end = node.args[3] if len(node.args) > 3 else None
        step = node.args[4] if len(node.args) > 4 else 1
        start, end = self.val(start), self.val(end)
        d = x.shape[dim]
        if not isinstance(d, int):
            whole_end = end is None or (isinstance(end, int) and end >= 2 ** 62) or end == d
            if start in (None, 0) and whole_end and step == 1:
                return x
            items = [":"] * r
            if start in (None, 0) and isinstance(end, str) and step == 1:
                items[dim] = f":{end}"                       # the first END positions (a symbol)
            elif isinstance(start, int) and start < 0 and whole_end and step == 1:
                items[dim] = f"{start}:"                     # the last -START positions
            elif start in (None, 0) and isinstance(end, int) and 0 < end < 2 ** 62 and step == 1:
                items[dim] = f":{end}"
            else:
                raise Unsupported("a slice of a dynamic axis that keeps a size FDSL cannot name")
            return self._subscript(node, x, items, meta_shape(node.meta["val"]))
        if not all(isinstance(v, int) or v is None for v in (start, end)):
            raise Unsupported("a slice with dynamic bounds")
        b, e, s = slice(start, end, step).indices(d)
        if (b, e, s) == (0, d, 1):
            return x
        items = [":"] * r
        items[dim] = f"{b}:{e}" + (f":{s}" if s != 1 else "")
        return self._subscript(node, x, items, meta_shape(node.meta["val"]))

    def op_select_int(self, node):
        x = self.tensor_m(node.args[0])
        r = len(x.shape)
        dim, i = node.args[1] % r, self.val(node.args[2])
        if not isinstance(i, int):
            raise Unsupported("a select at a dynamic index")
        items = [":"] * r
        items[dim] = str(i if i >= 0 or not isinstance(x.shape[dim], int) else i + x.shape[dim])
        if i < 0 and not isinstance(x.shape[dim], int):
            raise Unsupported("a select from the end of a dynamic axis")
        return self._subscript(node, x, items, meta_shape(node.meta["val"]))

    def op_split_with_sizes_default(self, node):
        x = self.tensor_m(node.args[0])
        sizes = list(node.args[1])
        dim = (node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)) % len(x.shape)
        outs, start = [], 0
        for k, (n, val) in enumerate(zip(sizes, node.meta["val"])):
            items = [":"] * len(x.shape)
            items[dim] = f"{start}:{start + n}"
            start += n
            outs.append(self._subscript(node, x, items, meta_shape(val)) if n != x.shape[dim] else x)
        return outs

    def op_split_Tensor(self, node):
        x = self.tensor_m(node.args[0])
        dim = (node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)) % len(x.shape)
        outs, start = [], 0
        for val in node.meta["val"]:
            n = size(val.shape[dim])
            items = [":"] * len(x.shape)
            items[dim] = f"{start}:{start + n}"
            start += n
            outs.append(self._subscript(node, x, items, meta_shape(val)))
        return outs

    def op_unbind_int(self, node):
        x = self.tensor_m(node.args[0])
        dim = (node.args[1] if len(node.args) > 1 else 0) % len(x.shape)
        outs = []
        for i, val in enumerate(node.meta["val"]):
            items = [":"] * len(x.shape)
            items[dim] = str(i)
            outs.append(self._subscript(node, x, items, meta_shape(val)))
        return outs

    def op_cat_default(self, node):
        xs = [self.tensor_m(a) for a in node.args[0]]
        out = node.meta["val"]
        xs = [x for x, a in zip(xs, node.args[0]) if not (isinstance(x, V) and 0 in x.shape)]
        if len(xs) == 1:
            return xs[0]
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
        if any(not isinstance(x, V) for x in xs):
            raise Unsupported("a concatenation of a scalar")
        return self.emit(node.name, f"concat([{', '.join(x.name for x in xs)}], axis={dim})", xs[0].dtype,
                         meta_shape(out), self.reads(*xs))

    # ---- compute --------------------------------------------------------------------------------
    def _matmul(self, node, a: V, b: V) -> V:
        """a @ b of aten's ranks, looking through the views that flatten or batch them: when `a`
        flattens leading dims of its base (and `b` is 2-D, or batches the same dims), the product
        is written on the bases and the result is a view of it."""
        out = node.meta["val"]
        shape = meta_shape(out)
        ab, bb = a.base, b.base
        if ab is not None and len(b.shape) == 2 and b.base is None and len(ab.shape) > len(a.shape) \
                and ab.shape[-1] == a.shape[-1]:
            prod = self._batched(node, ab, self.materialize(b))
            return V(f"<view of {prod.name}>", a.dtype, shape, prod) if prod.shape != shape else prod
        if len(a.shape) == 3 and len(b.shape) == 3 and ab is not None and bb is not None \
                and len(ab.shape) == len(bb.shape) and len(ab.shape) > 3 \
                and ab.shape[:-2] == bb.shape[:-2] and ab.shape[-2:] == a.shape[-2:] and bb.shape[-2:] == b.shape[-2:]:
            prod = self.emit(node.name, f"{ab.name} @ {bb.name}", a.dtype, ab.shape[:-1] + (bb.shape[-1],),
                             (ab.name, bb.name))
            return V(f"<view of {prod.name}>", a.dtype, shape, prod)
        if len(a.shape) == 3 and len(b.shape) == 3 and (ab is not None or bb is not None):
            # one side batches the heads of a value of higher rank ([B, H, S, S] viewed as
            # [B*H, S, S]); the other (a GQA key/value broadcast [B, KV, G, S, D]) is brought to
            # the same batch dims, and the product keeps them
            lead = (ab if ab is not None else bb).shape
            lead = lead[:-2] if len(lead) > 3 else None
            if lead is not None and all(isinstance(d, int) for d in lead) and math.prod(lead) == a.shape[0]:
                sides = []
                for x in (a, b):
                    want = lead + x.shape[-2:]
                    src = x.base if x.base is not None else x
                    if src.shape == want:
                        sides.append(src)
                    else:
                        sides.append(self.emit(src.name + "_b", f"reshape({src.name}, {dims_text(want)})", x.dtype,
                                               want, (src.name,), src))
                prod = self.emit(node.name, f"{sides[0].name} @ {sides[1].name}", a.dtype,
                                 lead + (a.shape[1], b.shape[2]), (sides[0].name, sides[1].name))
                return V(f"<view of {prod.name}>", a.dtype, shape, prod)
        if len(b.shape) == 2 and a.name.startswith("<") and len(a.shape) == 2:
            # (d0 .. dk, e0 .. en) flattened to (?, C): reshape the trailing dims to C first
            base = a.base
            for k in range(len(base.shape) - 1, 0, -1):
                tail = base.shape[k:]
                if all(isinstance(d, int) for d in tail) and math.prod(tail) == a.shape[-1]:
                    lead = base.shape[:k]
                    if len(tail) > 1:
                        base = self.emit(base.name + "_m", f"reshape({base.name}, {dims_text(lead + (a.shape[-1],))})",
                                         base.dtype, lead + (a.shape[-1],), (base.name,))
                    prod = self._batched(node, base, self.materialize(b))
                    return V(f"<view of {prod.name}>", a.dtype, shape, prod)
        a, b = self.materialize(a), self.materialize(b)
        return self.emit(node.name, f"{a.name} @ {b.name}", a.dtype, shape, (a.name, b.name))

    def _batched(self, node, a: V, w: V) -> V:
        """a @ w for an N-D `a` and a 2-D `w`. Where a's rows are dynamic (a symbol among its leading
        dims) and its batch dims are numbers, `w` is broadcast over them: fusec regroups the rows of
        an N-D @ 2-D product into one M (no dim FDSL can name at run time), and a batched product
        with a dynamic M it can take."""
        lead = a.shape[:-1]
        shape = lead + (w.shape[-1],)
        if len(lead) > 1 and any(isinstance(d, str) for d in lead) and all(isinstance(d, int) for d in lead[:-1]):
            wb = f"broadcast_to({w.name}, {dims_text(lead[:-1] + w.shape)})"
            return self.emit(node.name, f"{a.name} @ {wb}", a.dtype, shape, (a.name, w.name))
        return self.emit(node.name, f"{a.name} @ {w.name}", a.dtype, shape, (a.name, w.name))

    def op_mm_default(self, node):
        return self._matmul(node, self.tensor(node.args[0]), self.tensor(node.args[1]))

    op_bmm_default = op_matmul_default = op_mm_default

    def op_addmm_default(self, node):
        bias = self.tensor(node.args[0])
        beta = node.kwargs.get("beta", 1)
        alpha = node.kwargs.get("alpha", 1)
        prod = self._matmul(node, self.tensor(node.args[1]), self.tensor(node.args[2]))
        p = prod.base if prod.name.startswith("<") else prod
        expr = p.name if alpha == 1 else f"{p.name} * {lit(alpha)}"
        bt = self.ref(self.materialize(bias)) if beta == 1 else f"{self.ref(self.materialize(bias))} * {lit(beta)}"
        if isinstance(bias, V) and len(bias.shape) == 2 and p is not prod:
            raise Unsupported("addmm with a 2-D bias on a flattened input")
        s = self.emit(node.name + "_bias", f"{expr} + {bt}", p.dtype, p.shape, self.reads(p, bias))
        return V(f"<view of {s.name}>", s.dtype, prod.shape, s) if p is not prod else s

    def op_where_self(self, node):
        guarded = self.softmax_guard(node)
        if guarded is not None:
            return guarded
        c, a, b = (self.tensor_m(x) for x in node.args[:3])
        out = node.meta["val"]
        return self.emit(node.name, f"where({self.ref(c)}, {self.ref(a)}, {self.ref(b)})", fdsl_dtype(out.dtype),
                         meta_shape(out), self.reads(c, a, b))

    def softmax_guard(self, node):
        """where(not(any(not(s == -inf), -1, keepdim)), 0, softmax(s)) -> the matcher's form."""
        if not NONFINITE_LITERALS:
            return None
        c, zero, p = node.args[:3]
        try:
            assert op_name(c.target) == "logical_not.default"
            anyn = c.args[0]
            assert op_name(anyn.target) == "any.dim" and anyn.args[2] if len(anyn.args) > 2 else False
            inner = anyn.args[0]
            assert op_name(inner.target) == "logical_not.default"
            eq = inner.args[0]
            assert op_name(eq.target) == "eq.Scalar" and eq.args[1] == -math.inf
            assert op_name(p.target) == "_softmax.default"
            s = eq.args[0]
            assert p.args[0] is s
            dim = anyn.args[1]
            assert dim in (-1, len(node.meta["val"].shape) - 1) and p.args[1] == dim
            zv = self.val(zero)
            assert isinstance(zv, K) and not bool(zv.value.any()) or (
                isinstance(zero, torch.fx.Node) and op_name(zero.target) == "full_like.default" and zero.args[1] == 0)
        except (AssertionError, AttributeError, IndexError):
            return None
        sv, pv = self.tensor_m(s), self.tensor_m(p)
        out = node.meta["val"]
        return self.emit(node.name, f"where(max({sv.name}, axis=-1, keepdims=true) == (-inf), 0.0, {pv.name})",
                         fdsl_dtype(out.dtype), meta_shape(out), (sv.name, pv.name))

    def op__softmax_default(self, node):
        x = self.tensor_m(node.args[0])
        if node.args[2]:
            raise Unsupported("a softmax computed in a wider dtype (half_to_float)")
        return self.emit(node.name, f"softmax({x.name}, axis={node.args[1]})", x.dtype, x.shape, self.reads(x))

    def op__log_softmax_default(self, node):
        x = self.tensor_m(node.args[0])
        if node.args[2]:
            raise Unsupported("a log-softmax computed in a wider dtype (half_to_float)")
        return self.emit(node.name, f"log_softmax({x.name}, axis={node.args[1]})", x.dtype, x.shape, self.reads(x))

    def op_native_layer_norm_default(self, node):
        x = self.tensor_m(node.args[0])
        norm_shape = list(node.args[1])
        w, b, eps = node.args[2], node.args[3], node.args[4]
        n = len(norm_shape)
        if not all(isinstance(d, int) for d in norm_shape):
            raise Unsupported("a layer norm over dynamic dims")
        if n != 1 and (w is not None or b is not None):
            wv = self.tensor_m(w) if w is not None else None
            if wv is not None and len(wv.shape) != 1:
                raise Unsupported("a layer norm over several axes with a weight")
        wv = self._affine_k(w, norm_shape, 1.0, x.dtype)
        bv = self._affine_k(b, norm_shape, 0.0, x.dtype)
        axes = list(range(-n, 0))
        y = self.emit(node.name, f"layernorm({x.name}, {self.ref(wv)}, {self.ref(bv)}, axis={dims_text(axes)}, "
                      f"eps={lit(float(eps))})", x.dtype, x.shape, self.reads(x, wv, bv))
        return [y, None, None]

    def _affine_k(self, a, shape, value, dtype):
        if a is not None:
            return self.tensor_m(a)
        return self.tensor(K(torch.full(tuple(shape), value, dtype=_TORCH[dtype])))

    def op__native_batch_norm_legit_no_training_default(self, node):
        x = self.tensor_m(node.args[0])
        c = x.shape[1]
        w = self._affine_k(node.args[1], (c,), 1.0, x.dtype)
        b = self._affine_k(node.args[2], (c,), 0.0, x.dtype)
        mean, var = self.tensor_m(node.args[3]), self.tensor_m(node.args[4])
        eps = node.args[6]
        y = self.emit(node.name, f"batchnorm({x.name}, {mean.name}, {var.name}, {self.ref(w)}, {self.ref(b)}, "
                      f"eps={lit(float(eps))})", x.dtype, x.shape, self.reads(x, mean, var, w, b))
        return [y, None, None]

    def op_convolution_default(self, node):
        x, w = self.tensor_m(node.args[0]), self.tensor_m(node.args[1])
        bias = node.args[2]
        stride, padding, dilation = (list(node.args[i]) for i in (3, 4, 5))
        b = self.tensor_m(bias) if bias is not None else None
        out = node.meta["val"]
        args = [x.name, w.name] + ([b.name] if b is not None else [])
        args += [f"stride={dims_text(stride)}", f"padding={dims_text(padding)}", f"dilation={dims_text(dilation)}"]
        if node.args[8] != 1:
            args.append(f"groups={node.args[8]}")
        return self.emit(node.name, f"conv2d({', '.join(args)})", x.dtype, meta_shape(out), self.reads(x, w, b))

    def op_embedding_default(self, node):
        w, ids = self.tensor_m(node.args[0]), self.tensor_m(node.args[1])   # padding_idx: gradients only
        out = node.meta["val"]
        return self.emit(node.name, f"embedding({w.name}, {ids.name})", w.dtype, meta_shape(out), self.reads(w, ids))

    def op_pow_Tensor_Scalar(self, node):
        x = self.tensor_m(node.args[0])
        e = node.args[1]
        out = node.meta["val"]
        expr = f"square({x.name})" if e == 2 else f"pow({x.name}, {lit(e)})"
        return self.emit(node.name, expr, fdsl_dtype(out.dtype), x.shape, self.reads(x))

    def op_pow_Tensor_Tensor(self, node):
        a, b = self.tensor_m(node.args[0]), self.tensor_m(node.args[1])
        out = node.meta["val"]
        return self.emit(node.name, f"pow({self.ref(a)}, {self.ref(b)})", fdsl_dtype(out.dtype), meta_shape(out),
                         self.reads(a, b))

    def op_square_default(self, node):
        x = self.tensor_m(node.args[0])
        return self.emit(node.name, f"square({x.name})", x.dtype, x.shape, self.reads(x))

    def op_rsub_Scalar(self, node):
        x = self.tensor_m(node.args[0])
        other = node.args[1]
        alpha = node.kwargs.get("alpha", 1)
        xt = x.name if alpha == 1 else f"{x.name} * {lit(alpha)}"
        return self.emit(node.name, f"{lit(other)} - {xt}", x.dtype, x.shape, self.reads(x))

    def op_gelu_default(self, node):
        x = self.tensor_m(node.args[0])
        approx = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
        return self.emit(node.name, f'gelu({x.name}, approximate="{approx}")', x.dtype, x.shape, self.reads(x))

    def _clamp(self, node, lo, hi):
        x = self.tensor_m(node.args[0])
        expr = x.name
        if lo is not None:
            expr = f"maximum({expr}, {self.ref(self.tensor_m(lo)) if isinstance(lo, torch.fx.Node) else lit(lo)})"
        if hi is not None:
            expr = f"minimum({expr}, {self.ref(self.tensor_m(hi)) if isinstance(hi, torch.fx.Node) else lit(hi)})"
        out = node.meta["val"]
        reads = self.reads(x) + tuple(self.tensor_m(t).name for t in (lo, hi) if isinstance(t, torch.fx.Node))
        return self.emit(node.name, expr, fdsl_dtype(out.dtype), meta_shape(out), reads)

    def op_hardtanh_default(self, node):
        lo = node.args[1] if len(node.args) > 1 else -1.0
        hi = node.args[2] if len(node.args) > 2 else 1.0
        return self._clamp(node, lo, hi)

    def op_clamp_default(self, node):
        lo = node.args[1] if len(node.args) > 1 else node.kwargs.get("min")
        hi = node.args[2] if len(node.args) > 2 else node.kwargs.get("max")
        return self._clamp(node, lo, hi)

    def op_clamp_min_default(self, node):
        return self._clamp(node, node.args[1], None)

    def op_clamp_max_default(self, node):
        return self._clamp(node, None, node.args[1])

    def op_maximum_default(self, node):
        a, b = self.tensor_m(node.args[0]), self.tensor_m(node.args[1])
        out = node.meta["val"]
        return self.emit(node.name, f"maximum({self.ref(a)}, {self.ref(b)})", fdsl_dtype(out.dtype),
                         meta_shape(out), self.reads(a, b))

    def op_minimum_default(self, node):
        a, b = self.tensor_m(node.args[0]), self.tensor_m(node.args[1])
        out = node.meta["val"]
        return self.emit(node.name, f"minimum({self.ref(a)}, {self.ref(b)})", fdsl_dtype(out.dtype),
                         meta_shape(out), self.reads(a, b))

    def op_cumsum_default(self, node):
        x = self.tensor_m(node.args[0])
        out = node.meta["val"]
        dt = fdsl_dtype(out.dtype)
        src = x.name if dt == x.dtype else f"cast({x.name}, {dt})"
        return self.emit(node.name, f"cumsum({src}, axis={node.args[1]})", dt, x.shape, self.reads(x))

    def op_convert_element_type_default(self, node):
        x = self.tensor_m(node.args[0])
        dt = fdsl_dtype(node.args[1])
        if dt == x.dtype:
            return x
        return self.emit(node.name, f"cast({x.name}, {dt})", dt, x.shape, self.reads(x))

    # ---- booleans, creation, gathers, pooling ---------------------------------------------------
    def op_logical_not_default(self, node):
        x = self.tensor_m(node.args[0])
        src = x.name if x.dtype == "bool" else f"{x.name} == 0"
        return self.emit(node.name, f"logical_not({src})", "bool", x.shape, self.reads(x))

    def _logical(self, node):
        a, b = self.tensor_m(node.args[0]), self.tensor_m(node.args[1])
        conv = [self.ref(v) if not isinstance(v, V) or v.dtype == "bool" else f"{v.name} != 0" for v in (a, b)]
        fn = ATEN_LOGICAL[op_name(node.target)]
        return self.emit(node.name, f"{fn}({conv[0]}, {conv[1]})", "bool", meta_shape(node.meta["val"]),
                         self.reads(a, b))

    def _any_all(self, node, fn: str):
        x = self.tensor_m(node.args[0])
        src = x.name if x.dtype == "bool" else f"{x.name} != 0"
        dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        keep = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
        axis = "" if dims is None else f", axis={dims_text([dims] if isinstance(dims, int) else list(dims))}"
        return self.emit(node.name, f"{fn}({src}{axis}, keepdims={'true' if keep else 'false'})", "bool",
                         meta_shape(node.meta["val"]), self.reads(x))

    def op_any_dim(self, node):
        return self._any_all(node, "any")

    op_any_default = op_any_dims = op_any_dim

    def op_all_dim(self, node):
        return self._any_all(node, "all")

    op_all_default = op_all_dim

    def _fill_value(self, v, dtype: str) -> str:
        if dtype == "bool":
            return "true" if v else "false"
        if dtype in FLOAT_DTYPES:
            return lit(float(v))
        return lit(int(v))

    def _creation(self, node, shape, value):
        out = node.meta["val"]
        dt = fdsl_dtype(out.dtype)
        if any(d is None for d in shape):
            raise Unsupported("a tensor filled to a size FDSL cannot name")
        return self.emit(node.name, f"full({dims_text(shape)}, {self._fill_value(value, dt)}, dtype={dt})", dt,
                         shape, ())

    def op_full_default(self, node):
        return self._creation(node, meta_shape(node.meta["val"]), node.args[1])

    def op_zeros_default(self, node):
        return self._creation(node, meta_shape(node.meta["val"]), 0)

    def op_ones_default(self, node):
        return self._creation(node, meta_shape(node.meta["val"]), 1)

    def op_scalar_tensor_default(self, node):
        return self._creation(node, (), node.args[0])

    def _full_like(self, node, value):
        x = self.tensor_m(node.args[0])
        dt = fdsl_dtype(node.meta["val"].dtype)
        extra = "" if dt == x.dtype else f", dtype={dt}"
        return self.emit(node.name, f"full_like({x.name}, {self._fill_value(value, dt)}{extra})", dt, x.shape,
                         self.reads(x))

    def op_full_like_default(self, node):
        return self._full_like(node, node.args[1])

    def op_zeros_like_default(self, node):
        return self._full_like(node, 0)

    def op_ones_like_default(self, node):
        return self._full_like(node, 1)

    def op_arange_start_step(self, node):
        out = node.meta["val"]
        dt = fdsl_dtype(out.dtype)
        a = [self.val(x) for x in node.args]
        start, stop, step = (a + [None, None, None])[:3] if len(a) > 1 else (0, a[0], 1)
        step = 1 if step is None else step
        if not all(isinstance(v, (int, str)) for v in (start, stop, step)) or isinstance(step, str):
            raise Unsupported("an arange over a size FDSL cannot name")
        if isinstance(start, str):
            raise Unsupported("an arange from a dynamic start")
        return self.emit(node.name, f"arange({start}, {stop}, {step}, dtype={dt})", dt, meta_shape(out), ())

    op_arange_start = op_arange_default = op_arange_start_step

    def op_gather_default(self, node):
        x, idx = self.tensor_m(node.args[0]), self.tensor_m(node.args[2])
        dim = node.args[1]
        return self.emit(node.name, f"take_along_axis({x.name}, {idx.name}, axis={dim})", x.dtype,
                         meta_shape(node.meta["val"]), self.reads(x, idx))

    def op_index_Tensor(self, node):
        x = self.tensor_m(node.args[0])
        idx, axes = [], []
        for k, i in enumerate(node.args[1]):
            if i is not None:
                idx.append(self.tensor_m(i))
                axes.append(k)
        return self.emit(node.name, f"index({x.name}, [{', '.join(i.name for i in idx)}], axes={dims_text(axes)})",
                         x.dtype, meta_shape(node.meta["val"]), self.reads(x, *idx))

    def op_max_pool2d_with_indices_default(self, node):
        x = self.tensor_m(node.args[0])
        kernel = list(node.args[1])
        stride = list(node.args[2]) if len(node.args) > 2 and node.args[2] else kernel
        padding = list(node.args[3]) if len(node.args) > 3 else [0, 0]
        dilation = list(node.args[4]) if len(node.args) > 4 else [1, 1]
        ceil = node.args[5] if len(node.args) > 5 else False
        y = self.emit(node.name, f"max_pool2d({x.name}, kernel={dims_text(_pair(kernel))}, "
                      f"stride={dims_text(_pair(stride))}, padding={dims_text(_pair(padding))}, "
                      f"dilation={dims_text(_pair(dilation))}, ceil_mode={'true' if ceil else 'false'})",
                      x.dtype, meta_shape(node.meta["val"][0]), self.reads(x))
        return [y, None]

    def op_avg_pool2d_default(self, node):
        x = self.tensor_m(node.args[0])
        kernel = list(node.args[1])
        stride = list(node.args[2]) if len(node.args) > 2 and node.args[2] else kernel
        padding = list(node.args[3]) if len(node.args) > 3 else [0, 0]
        ceil = node.args[4] if len(node.args) > 4 else False
        incl = node.args[5] if len(node.args) > 5 else True
        if len(node.args) > 6 and node.args[6] is not None:
            raise Unsupported("an average pool with a divisor_override")
        return self.emit(node.name, f"avg_pool2d({x.name}, kernel={dims_text(_pair(kernel))}, "
                         f"stride={dims_text(_pair(stride))}, padding={dims_text(_pair(padding))}, "
                         f"ceil_mode={'true' if ceil else 'false'}, count_include_pad={'true' if incl else 'false'})",
                         x.dtype, meta_shape(node.meta["val"]), self.reads(x))

    def op__adaptive_avg_pool2d_default(self, node):
        x = self.tensor_m(node.args[0])
        return self.emit(node.name, f"adaptive_avg_pool2d({x.name}, output_size={dims_text(_pair(node.args[1]))})",
                         x.dtype, meta_shape(node.meta["val"]), self.reads(x))

    def _unary_fn(self, node, fn: str):
        x = self.tensor_m(node.args[0])
        return self.emit(node.name, f"{fn}({x.name})", x.dtype, x.shape, self.reads(x))

    def op_hardswish_default(self, node):
        return self._unary_fn(node, "hardswish")

    def op_hardsigmoid_default(self, node):
        return self._unary_fn(node, "hardsigmoid")

    def op_relu6_default(self, node):
        return self._unary_fn(node, "relu6")

    def op_sym_size_int(self, node):
        v = node.meta.get("val")
        return size(v) if v is not None else None

    op_sym_numel_default = op_sym_stride_int = op_sym_size_int


_TORCH = {v: k for k, v in TORCH_DTYPES.items()}


def _pair(v) -> list:
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return v * 2 if len(v) == 1 else v


def _all_const(args) -> bool:
    has = False
    for a in args:
        if isinstance(a, V):
            return False
        if isinstance(a, (list, tuple)):
            if any(isinstance(x, V) for x in a):
                return False
            has = has or any(isinstance(x, K) for x in a)
        if isinstance(a, K):
            has = True
    return has or not any(isinstance(a, V) for a in args)


def translate(gm: torch.fx.GraphModule, chain: str) -> Translated:
    """The FDSL chain of one partition (raises Unsupported)."""
    return Translator(gm, chain).run()
