"""ONNX ops as FDSL, part one: elementwise math, activations, logic, casts, normalisations and
reductions. `MathOps` is a mixin of onnx_import.Converter (its `emit`, `tensor`, `operands`...);
each `op_TYPE(node, ins, attrs)` returns the node's output values.
"""
from __future__ import annotations

import numpy as np

from .onnx_file import CONST_ONLY, ONNX_DTYPES, SUPPORTED, elem_name, np_dtype
from .onnx_values import (C, ELEM_TO_FDSL, FDSL_TO_NP, FLOAT, NP_TO_FDSL, NUMERIC, S, SYM_OPS, NodeError, T, _f)


class MathOps:
    """The elementwise, normalisation and reduction ops of Converter."""

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
        if to not in ONNX_DTYPES:
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
        if np.float32(a) == np.float32(1 / 6) and b == 0.5:        # PyTorch's, as its exporters write it
            return self._float_unary(node, ins, "hardsigmoid({x})")
        return self._float_unary(node, ins, f"clamp(add(mul({{x}}, {_f(a)}), {_f(b)}), 0.0, 1.0)")

    def op_HardSwish(self, node, ins, attrs):
        return self._float_unary(node, ins, "hardswish({x})")

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
        return self._bool_op(node, ins, "logical_not({0})", 1)

    def op_And(self, node, ins, attrs):
        return self._bool_op(node, ins, "logical_and({0}, {1})", 2)

    def op_Or(self, node, ins, attrs):
        return self._bool_op(node, ins, "logical_or({0}, {1})", 2)

    def op_Xor(self, node, ins, attrs):
        return self._bool_op(node, ins, "logical_xor({0}, {1})", 2)

    def op_IsInf(self, node, ins, attrs):
        x = self.tensor(ins[0])
        self.need_dtype(x, FLOAT, "IsInf")
        pos, neg = int(attrs.get("detect_positive", 1)), int(attrs.get("detect_negative", 1))
        expr = {(1, 1): f"eq(abs({x.name}), inf)", (1, 0): f"eq({x.name}, inf)", (0, 1): f"eq({x.name}, -inf)",
                (0, 0): f"full_like({x.name}, false, dtype=bool)"}[(pos, neg)]
        return self.emit(self.out_name(node), expr, "bool", self.shape(x))

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


ONNX_UNARY = {"Neg": ("neg", NUMERIC), "Abs": ("abs", NUMERIC), "Exp": ("exp", FLOAT), "Log": ("log", FLOAT),
         "Sqrt": ("sqrt", FLOAT), "Tanh": ("tanh", FLOAT), "Sigmoid": ("sigmoid", FLOAT), "Relu": ("relu", NUMERIC),
         "Erf": ("erf", FLOAT), "Sin": ("sin", FLOAT), "Cos": ("cos", FLOAT), "Floor": ("floor", FLOAT),
         "Ceil": ("ceil", FLOAT), "Reciprocal": ("reciprocal", FLOAT)}
ONNX_BINARY = {"Add": ("add", NUMERIC, None, False), "Sub": ("sub", NUMERIC, None, False),
          "Mul": ("mul", NUMERIC, None, False), "Div": ("div", FLOAT, None, False),
          "Max": ("maximum", NUMERIC, None, True), "Min": ("minimum", NUMERIC, None, True),
          "Sum": ("add", NUMERIC, None, True),
          "Equal": ("eq", NUMERIC + ("bool",), "bool", False), "Less": ("lt", NUMERIC, "bool", False),
          "LessOrEqual": ("le", NUMERIC, "bool", False), "Greater": ("gt", NUMERIC, "bool", False),
          "GreaterOrEqual": ("ge", NUMERIC, "bool", False)}
ONNX_REDUCE = {"ReduceSum": ("sum", "{x}", "{y}", NUMERIC), "ReduceMean": ("mean", "{x}", "{y}", FLOAT),
          "ReduceMax": ("max", "{x}", "{y}", NUMERIC), "ReduceMin": ("min", "{x}", "{y}", NUMERIC),
          "ReduceProd": ("prod", "{x}", "{y}", NUMERIC), "ReduceSumSquare": ("sum", "square({x})", "{y}", NUMERIC),
          "ReduceL1": ("sum", "abs({x})", "{y}", NUMERIC), "ReduceL2": ("sum", "square({x})", "sqrt({y})", FLOAT),
          "ReduceLogSum": ("sum", "{x}", "log({y})", FLOAT)}

for _op, (_fn, _allowed) in ONNX_UNARY.items():
    setattr(MathOps, f"op_{_op}", (lambda fn, allowed: lambda self, node, ins, attrs:
                                     self.unary(fn, allowed)(node, ins, attrs))(_fn, _allowed))
for _op, _spec in ONNX_BINARY.items():
    setattr(MathOps, f"op_{_op}", (lambda spec: lambda self, node, ins, attrs:
                                     self.binary(*spec)(node, ins, attrs))(_spec))
for _op, _spec in ONNX_REDUCE.items():
    setattr(MathOps, f"op_{_op}", (lambda spec: lambda self, node, ins, attrs:
                                     self._reduce(*spec)(node, ins, attrs))(_spec))
for _op, _fn in (("Softmax", "softmax"), ("LogSoftmax", "log_softmax")):
    setattr(MathOps, f"op_{_op}", (lambda fn: lambda self, node, ins, attrs:
                                     self._softmax(fn)(node, ins, attrs))(_fn))
for _op, _fn in (("ArgMax", "argmax"), ("ArgMin", "argmin")):
    setattr(MathOps, f"op_{_op}", (lambda fn: lambda self, node, ins, attrs: self._arg(fn)(node, ins, attrs))(_fn))
for _op, _fn in (("GlobalMaxPool", "max"),):      # GlobalAveragePool: onnx_ops_pool.py
    setattr(MathOps, f"op_{_op}", (lambda fn: lambda self, node, ins, attrs:
                                     self._global_pool(fn)(node, ins, attrs))(_fn))
