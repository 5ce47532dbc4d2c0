"""ONNX ops as FDSL, part two: MatMul, Gemm, Conv, and the shape ops (Reshape and its kin,
Expand, Tile, Concat, Split, Slice, Gather, Shape, Size, Constant, ConstantOfShape). `ShapeOps`
is a mixin of onnx_import.Converter; each `op_TYPE(node, ins, attrs)` returns the node's output
values. Shape ops also take shape values (`S`): shape arithmetic is folded here.
"""
from __future__ import annotations

import math

import numpy as np

from .onnx_file import CONST_ONLY, ONNX_DTYPES, SUPPORTED, elem_name
from .onnx_values import (C, FLOAT, FOLD_LIMIT, NP_TO_FDSL, NUMERIC, Opaque, S, NodeError, T, _as_dim, _clamp, _f, _prod,
                          sanitize)


class ShapeOps:
    """The linear-algebra, convolution and shape ops of Converter."""

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
        xs, ws = self.shape(x), self.shape(w)
        if len(ws) != 4:
            raise NodeError("its weights are not rank 4 (F, C, KH, KW)")
        if group < 1:
            raise NodeError(f"group={group}")
        if group != 1:             # conv2d's groups: weights [F, C / group, KH, KW]
            for d, what in ((xs[1], "input channels"), (ws[0], "filters")):
                if not isinstance(d, int):
                    raise NodeError(f"group={group} with its {what} the symbol {d}; FDSL's conv2d needs them as "
                                    "numbers to split into groups")
                if d % group:
                    raise NodeError(f"group={group} does not divide its {d} {what}")
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
        self.unify(xs[1] // group if group != 1 else xs[1], ws[1])
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
        if group != 1:
            args.append(f"groups={group}")
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
            if t.data_type not in ONNX_DTYPES and t.data_type not in CONST_ONLY:
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
        dtype = NP_TO_FDSL.get(value.dtype.name)
        if dtype is None:
            raise NodeError(f"a value of dtype {value.dtype}; fusec imports {SUPPORTED}")
        lit = self.literal(C(value.reshape(())), dtype)
        dims = ", ".join(self.dim_text(d) for d in target)
        if lit is None:            # beyond the dtype's literals: the value as a parameter, broadcast
            p = self.materialize(C(value.reshape(())), f"{self.out_name(node)}_value")
            return self.emit(self.out_name(node), f"broadcast_to({p.name}, [{dims}])", p.dtype, tuple(target))
        return self.emit(self.out_name(node), f"full([{dims}], {lit}, dtype={dtype})", dtype, tuple(target))

    def op_Range(self, node, ins, attrs):
        """Constant bounds are folded before this (onnx_import.py); left: 0 to a size, by 1, as
        position ids are made (Range(0, Shape(x)[1], 1)): arange of the size's symbol."""
        start, limit, delta = (self.s_to_c(v) if isinstance(v, S) and all(isinstance(d, (int, np.integer))
                                                                           for d in v.items) else v for v in ins[:3])
        zero, one = (isinstance(v, C) and np.asarray(v.value).size == 1 and np.asarray(v.value).reshape(-1)[0] == k
                     for v, k in ((start, 0), (delta, 1)))
        if not (zero and one and isinstance(limit, S) and len(limit.items) == 1 and isinstance(limit.items[0], str)):
            raise NodeError("a Range whose bounds are not constants: fusec imports Range(0, n, 1) where n is a "
                            "size of an input (a symbol), as FDSL's arange(n)")
        dtype = NP_TO_FDSL.get(np.asarray(start.value).dtype.name, "i64")
        if dtype not in NUMERIC:
            raise NodeError(f"a Range of {dtype}; FDSL's arange makes numbers")
        sym = limit.items[0]
        return self.emit(self.out_name(node), f"arange({sym}, dtype={dtype})", dtype, (sym,))

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

    # ---- GatherElements and GatherND (issue 38) ----------------------------------------------
    def _index_tensor(self, node, idx) -> T:
        it = self.tensor(idx, f"{self.out_name(node)}_idx")
        if it.dtype not in ("i32", "i64"):
            raise NodeError(f"its indices are {it.dtype}, not i32 or i64")
        return it

    def op_GatherElements(self, node, ins, attrs):
        """take_along_axis; ONNX's indices may be shorter than the data on the other axes (the
        data's first positions are read, as torch.gather's), where FDSL broadcasts: the data is
        sliced to the indices' extents first."""
        data, idx = ins
        x = self.tensor(data, f"{self.out_name(node)}_data")
        it = self._index_tensor(node, idx)
        s, si = self.shape(x), self.shape(it)
        if len(si) != len(s):
            raise NodeError(f"its indices have rank {len(si)}, the data rank {len(s)}")
        a = self.axis(int(attrs.get("axis", 0)), len(s))
        items = []
        for d, (n, k) in enumerate(zip(s, si)):
            if d == a or n == k:
                items.append(":")
            elif isinstance(n, int) and isinstance(k, int) and k < n:
                items.append(f":{k}")
            else:
                raise NodeError(f"its indices have extent {k} on axis {d} where the data has {n}; FDSL's "
                                "take_along_axis needs them equal, or the indices' extent a smaller number")
        if any(i != ":" for i in items):
            x = self.emit(f"{self.out_name(node)}_data", f"{x.name}[{', '.join(items)}]", x.dtype,
                          tuple(k if i != ":" else n for i, n, k in zip(items, s, si)))
        return self.emit(self.out_name(node), f"take_along_axis({x.name}, {it.name}, axis={a})", x.dtype, si)

    def op_GatherND(self, node, ins, attrs):
        data, idx = ins
        x = self.tensor(data, f"{self.out_name(node)}_data")
        it = self._index_tensor(node, idx)
        s, si = self.shape(x), self.shape(it)
        b = int(attrs.get("batch_dims", 0))
        m = si[-1] if si else None
        if not isinstance(m, int):
            raise NodeError(f"the last axis of its indices is {m}; FDSL's gather_nd needs a number there")
        if not 0 <= b < min(len(s), len(si)) or not 1 <= m <= len(s) - b:
            raise NodeError(f"batch_dims={b} and indices of last extent {m} do not fit data of rank {len(s)}")
        return self.emit(self.out_name(node), f"gather_nd({x.name}, {it.name}, batch_dims={b})", x.dtype,
                         si[:-1] + s[b + m:])
