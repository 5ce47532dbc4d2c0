"""The cpu target's convolution templates: y (+)= conv(x, w) for a linalg.conv_2d_nchw_fchw the
CPU lowering left as a library call, by the algorithm the plan chose (compiler/plan/conv.py,
the op's `fusec.conv_algorithm`):

  gemm      1x1 stride 1: per image, ?gemm of w [F, C] by x[n] [C, H*W] into y[n] [F, H*W].
  im2col    per block of output rows, the rows' windows gathered into [C*KH*KW, rows*OW], then
            one ?gemm of w [F, C*KH*KW] by them.
  winograd  F(2x2, 3x3): the weights transformed once, [16, F, C]; per block of tile rows the
            input tiles transformed, [16, C, tiles], 16 ?gemm into [16, F, tiles], and the
            output transform into y.
  direct    stride 1: per output row and four filters, accumulator rows added into along
            whole rows (vectorised), then stored.

Each runs over the conv's images: one after another inside a kernel's chunk loop, or in a prange
of their own (buffers per image) when the conv is not inside one (an unfused conv). The
templates' loops are module-level Numba functions (Helpers.use_text), called with the image's
input as a C-contiguous array, so LLVM sees unit strides; typed constants come as arguments.
"""
from __future__ import annotations

import numpy as np

from ..mlir import ir
from ..plan.conv import ConvShape, im2col_rows, winograd_rows, winograd_tiles
from .values import add, mul

from ..transforms.cpu_library_calls import CONV_ALGORITHM as ALGORITHM
NO_TRANS = 111
_JIT = '@numba.njit(nogil=True, fastmath={"contract", "reassoc"}, error_model="numpy")'


def algorithm(op) -> str:
    return ir.StringAttr(op.attributes[ALGORITHM]).value if ALGORITHM in op.attributes else "im2col"


def shape(op, extra) -> ConvShape:
    xv, wv, yv = op.operands
    nb, ch, xh, xw = ir.MemRefType(xv.type).shape
    nf, _, kh, kw = ir.MemRefType(wv.type).shape
    oh, ow = ir.MemRefType(yv.type).shape[2:]
    (sh, sw), (dh, dw) = (tuple(int(t) for t in p.strip("()").split(", ")) for p in extra)
    eb = np.dtype(str(ir.MemRefType(yv.type).element_type).replace("f", "float")).itemsize
    return ConvShape(nb, ch, xh, xw, nf, kh, kw, oh, ow, sh, sw, dh, dw, eb)


def strides(value) -> list[int | None]:
    """A memref's strides in elements, None where dynamic."""
    st, _ = ir.MemRefType(value.type).get_strides_and_offset()
    dyn = ir.ShapedType.get_dynamic_stride_or_offset()
    return [None if x == dyn else x for x in st]


def conv_call(body, op, views, extra, zero: bool, gemm_fn: str, mark: str) -> None:
    """The conv by its algorithm; `gemm_fn` is the CBLAS ?gemm to call, `mark` the comment that
    ends a line calling it (emit/cpu.py)."""
    s = shape(op, extra)
    algo = algorithm(op)
    template = {"gemm": _gemm_1x1, "im2col": _im2col, "winograd": _winograd, "direct": _direct}[algo]
    template(body, op, views, s, zero, _Blas(gemm_fn, mark))


class _Blas:
    def __init__(self, fn: str, mark: str):
        self.fn, self.mark = fn, mark


class _Images:
    """The loop over a conv's images: a prange with per-image buffers outside a kernel's chunk
    loop, else a plain loop after buffers made once."""

    def __init__(self, body, s: ConvShape):
        self.body, self.s = body, s
        self.n = body.names.temp("n")
        self.per_image = body.parallel_depth == 0 and s.n > 1
        self.depth = body.w.depth
        self.buffers: list[str] = []

    def buffer(self, line: str) -> None:
        """A scratch buffer: made before the loop, or per image in the prange."""
        self.buffers.append(line)

    def before(self, line: str) -> None:
        """Once per call, before the images (a weight transform)."""
        self.body.w(line)

    def open(self) -> str:
        w = self.body.w
        if self.per_image:
            w(f"for {self.n} in numba.prange(0, {self.s.n}):")
            w.depth += 1
        for line in self.buffers:
            w(line)
        if not self.per_image:
            w(f"for {self.n} in range({self.s.n}):")
            w.depth += 1
        return self.n

    def close(self) -> None:
        self.body.w.depth = self.depth


def _consts(body, elem, zero: bool) -> tuple[str, str]:
    consts = body.ctx.consts
    one = consts.float(1.0, elem)
    return one, (consts.zero(elem) if zero else one)


def _contiguous_weights(body, wt, wv, rows: int, cols: int) -> str:
    """A pointer to w as a row-major [rows, cols] matrix (a contiguous copy when it is not one)."""
    if strides(wv)[-1] == 1 and all(x is not None for x in strides(wv)) and _dense(wv):
        return f"{wt.host}.ctypes.data"
    wc = body.names.temp("blas")
    body.w(f"{wc} = np.ascontiguousarray({wt.host})")
    return f"{wc}.ctypes.data"


def _dense(value) -> bool:
    shape, st = ir.MemRefType(value.type).shape, strides(value)
    expect = 1
    for n, x in zip(reversed(shape), reversed(st)):
        if n != 1 and x != expect:
            return False
        expect *= n
    return True


def _gemm_1x1(body, op, views, s: ConvShape, zero: bool, gemm: "_Blas") -> None:
    """1x1 stride 1: y[n] as [F, OH*OW] = w [F, C] @ x[n] as [C, OH*OW], each taken as it lies
    when its rows are whole (unit stride along a row, rows one after another), else copied."""
    x, wt, y = views
    xv, wv, yv = op.operands
    elem = y.array.elem
    one, beta = _consts(body, elem, zero)
    hw = s.oh * s.ow
    wptr = _contiguous_weights(body, wt, wv, s.f, s.c)
    xs, ys = strides(xv), strides(yv)
    x_whole = xs[3] == 1 and xs[2] == s.xw and xs[1] is not None and xs[1] >= hw
    y_whole = ys[3] == 1 and ys[2] == s.ow and ys[1] is not None and ys[1] >= hw
    images = _Images(body, s)
    out = body.names.temp("blas")
    if not y_whole:
        images.buffer(f"{out} = np.empty(({s.f}, {hw}), np.{elem.compute})")
    n = images.open()
    w = body.w
    if x_whole:
        xptr, ldx = f"{x.host}[{n}].ctypes.data", xs[1]
    else:
        xc = body.names.temp("blas")
        w(f"{xc} = np.ascontiguousarray({x.host}[{n}])")
        xptr, ldx = f"{xc}.ctypes.data", hw
    if y_whole:
        w(f"{gemm.fn}(101, {NO_TRANS}, {NO_TRANS}, {s.f}, {hw}, {s.c}, {one}, {wptr}, {s.c}, {xptr}, {ldx}, "
          f"{beta}, {y.host}[{n}].ctypes.data, {ys[1]})  {gemm.mark} {op.name} (1x1)")
    else:
        w(f"{gemm.fn}(101, {NO_TRANS}, {NO_TRANS}, {s.f}, {hw}, {s.c}, {one}, {wptr}, {s.c}, {xptr}, {ldx}, "
          f"{body.ctx.consts.zero(elem)}, {out}.ctypes.data, {hw})  {gemm.mark} {op.name} (1x1)")
        target = f"{y.host}[{n}]"
        src = f"{out}.reshape(({s.f}, {s.oh}, {s.ow}))"
        w(f"{target}[:, :, :] = {src}" if zero else f"{target}[:, :, :] += {src}")
    images.close()


def _im2col(body, op, views, s: ConvShape, zero: bool, gemm: "_Blas") -> None:
    """By blocks of output rows: the block's im2col columns (C*KH*KW rows of R*OW; R rows make
    about 512 KiB, a core's L2) in a buffer, then one ?gemm of the weights by them into y's block
    itself when y's rows lie with unit stride, else into a buffer added or copied into y."""
    w, names = body.w, body.names
    x, wt, y = views
    xv, wv, yv = op.operands
    elem = y.array.elem
    one, beta = _consts(body, elem, zero)
    ckk, ow, oh = s.ckk, s.ow, s.oh
    rb = im2col_rows(s)
    f = f"np.{elem.compute}"
    wptr = _contiguous_weights(body, wt, wv, s.f, ckk)
    ys = strides(yv)
    direct = ys[3] == 1 and ys[2] == ow and ys[1] is not None and ys[1] >= oh * ow
    cols = names.temp("cols")
    out = names.temp("blas") if not direct else None
    images = _Images(body, s)
    images.buffer(f"{cols} = np.empty(({ckk}, {rb * ow}), {f})")
    if out is not None:
        images.buffer(f"{out} = np.empty(({s.f}, {rb * ow}), {f})")
    n = images.open()
    p0, r = names.temp("p"), names.temp("r")
    w(f"for {p0} in range(0, {oh}, {rb}):")
    w.depth += 1
    w(f"{r} = min({rb}, {oh} - {p0})")
    ci, i, j, p, q, row = (names.temp(t) for t in ("c", "i", "j", "p", "q", "row"))
    for var, ext in ((ci, s.c), (i, s.kh), (j, s.kw)):
        w(f"for {var} in range({ext}):")
        w.depth += 1
    w(f"{row} = ({ci} * {s.kh} + {i}) * {s.kw} + {j}")
    w(f"for {p} in range({r}):")
    w.depth += 1
    w(f"for {q} in range({ow}):")
    w.depth += 1
    src = x.at([n, ci, add(mul(f"({p0} + {p})", str(s.sh)), mul(i, str(s.dh))),
                add(mul(q, str(s.sw)), mul(j, str(s.dw)))])
    w(f"{cols}[{row}, {p} * {ow} + {q}] = {src}")
    w.depth -= 5
    if direct:                                  # into y's block of rows
        cbeta, cptr, ldc = beta, f"{y.host}[{n}, :, {p0}:, :].ctypes.data", ys[1]
    else:                                       # into the buffer, then added or copied into y
        cbeta, cptr, ldc = body.ctx.consts.zero(elem), f"{out}.ctypes.data", rb * ow
    w(f"{gemm.fn}(101, {NO_TRANS}, {NO_TRANS}, {s.f}, {r} * {ow}, {ckk}, {one}, {wptr}, {ckk}, "
      f"{cols}.ctypes.data, {rb * ow}, {cbeta}, {cptr}, {ldc})  {gemm.mark} {op.name}")
    if not direct:
        fi, pp, qq = names.temp("f"), names.temp("p"), names.temp("q")
        for var, ext in ((fi, str(s.f)), (pp, r), (qq, str(ow))):
            w(f"for {var} in range({ext}):")
            w.depth += 1
        val = f"{out}[{fi}, {pp} * {ow} + {qq}]"
        at = y.at([n, fi, f"{p0} + {pp}", qq])
        w(f"{at} = {val}" if zero else f"{at} = {at} + {val}")
        w.depth -= 3
    images.close()


def _winograd(body, op, views, s: ConvShape, zero: bool, gemm: "_Blas") -> None:
    """Winograd F(2x2, 3x3): u = the weights' transform once per call; per block of tile rows
    of an image, v = its input tiles' transform, 16 ?gemm m[k] = u[k] @ v[k], and the output
    transform of m into y."""
    w, names, helpers = body.w, body.names, body.ctx.helpers
    x, wt, y = views
    elem = y.array.elem
    f = f"np.{elem.compute}"
    one, _ = _consts(body, elem, True)
    zero_c = body.ctx.consts.zero(elem)
    half = body.ctx.consts.float(0.5, elem)
    th, tw = winograd_tiles(s)
    rows = winograd_rows(s)
    ld = rows * tw
    wt_key = helpers.use_text("_winograd_weights", _winograd_weights_text("_winograd_weights"))
    in_key = helpers.use_text("_winograd_input", _winograd_input_text("_winograd_input"))
    out_key = f"_winograd_output_{'set' if zero else 'add'}"
    helpers.use_text(out_key, _winograd_output_text(out_key, zero))
    u, v, m, a, xc = (names.temp(t) for t in ("u", "v", "m", "a", "x"))
    images = _Images(body, s)
    images.before(f"{u} = np.empty((16, {s.f}, {s.c}), {f})")
    images.before(f"{wt_key}({wt.host}, {u}, {half})")
    images.buffer(f"{v} = np.empty((16, {s.c}, {ld}), {f})")
    images.buffer(f"{m} = np.empty((16, {s.f}, {ld}), {f})")
    images.buffer(f"{a} = np.empty((4, {s.xw + 1}), {f})")
    n = images.open()
    t0, tb, k = names.temp("t"), names.temp("tb"), names.temp("k")
    w(f"{xc} = np.ascontiguousarray({x.host}[{n}])")
    w(f"for {t0} in range(0, {th}, {rows}):")
    w.depth += 1
    w(f"{tb} = min({rows}, {th} - {t0})")
    w(f"{in_key}({xc}, {t0}, {tb}, {tw}, {v}, {a})")
    w(f"for {k} in range(16):")
    w.depth += 1
    w(f"{gemm.fn}(101, {NO_TRANS}, {NO_TRANS}, {s.f}, {tb} * {tw}, {s.c}, {one}, {u}[{k}].ctypes.data, {s.c}, "
      f"{v}[{k}].ctypes.data, {ld}, {zero_c}, {m}[{k}].ctypes.data, {ld})  {gemm.mark} {op.name} (Winograd)")
    w.depth -= 1
    w(f"{out_key}({m}, {y.host}, {n}, {t0}, {tb}, {tw})")
    images.close()


def _direct(body, op, views, s: ConvShape, zero: bool, gemm: "_Blas") -> None:
    """Stride 1: loops, the output row innermost (emit/conv.py's _conv_direct)."""
    w, names, helpers = body.w, body.names, body.ctx.helpers
    x, wt, y = views
    elem = y.array.elem
    key = f"_conv_direct_{'set' if zero else 'add'}"
    helpers.use_text(key, _direct_text(key, zero))
    acc, xc, wc = names.temp("acc"), names.temp("x"), names.temp("w")
    images = _Images(body, s)
    images.before(f"{wc} = np.ascontiguousarray({wt.host})")
    images.buffer(f"{acc} = np.empty((4, {s.ow}), np.{elem.compute})")
    n = images.open()
    w(f"{xc} = np.ascontiguousarray({x.host}[{n}])")
    w(f"{key}({xc}, {wc}, {y.host}, {n}, {s.dh}, {s.dw}, {acc}, {body.ctx.consts.zero(elem)})")
    images.close()


# ---- the templates' module-level functions ---------------------------------------------------

_G = (("{0}",), ("({0} + {1} + {2}) * half",), ("({0} - {1} + {2}) * half",), ("{2}",))


def _winograd_weights_text(key: str) -> list[str]:
    """u[4 i + j, f, c] = (G g G^T)[i, j] for each filter g = w[f, c] (straight-line code)."""
    lines = [_JIT, f"def {key}(w, u, half):",
             '    """Winograd F(2x2, 3x3)\'s weight transform: u[4 i + j, f, c] = (G g G^T)[i, j] for each 3x3',
             '    filter g = w[f, c], G = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]]."""',
             "    for f in range(w.shape[0]):",
             "        for c in range(w.shape[1]):"]
    ind = " " * 12
    for r in range(3):
        lines.append(ind + "; ".join(f"g{r}{j} = w[f, c, {r}, {j}]" for j in range(3)))
    for i, (row,) in enumerate(_G):          # (G g)[i, j] over the columns j
        for j in range(3):
            lines.append(ind + f"h{i}{j} = " + row.format(f"g0{j}", f"g1{j}", f"g2{j}"))
    for i in range(4):                       # ((G g) G^T)[i, l]
        for l, (col,) in enumerate(_G):
            lines.append(ind + f"u[{4 * i + l}, f, c] = " + col.format(f"h{i}0", f"h{i}1", f"h{i}2"))
    return lines


def _winograd_input_text(key: str) -> list[str]:
    lines = [_JIT, f"def {key}(x, t0, tb, tw, v, a):",
             '    """Winograd F(2x2, 3x3)\'s input transform of tile rows t0 .. t0 + tb - 1 of an image x',
             "    [C, H, W]: v[4 k + l, c, t] = (B^T d B)[k, l] for the 4x4 input tile d of tile t (numbered",
             "    along rows from t0), B^T = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]:",
             "    first down the tile row's four input rows (a[k], contiguous), then along each tile. A row",
             "    or column past the input (odd output sizes) repeats the last one: only outputs that are",
             '    not stored read it."""',
             "    xh, xw = x.shape[1], x.shape[2]",
             "    for c in range(x.shape[0]):",
             "        for ti in range(tb):",
             "            r = 2 * (t0 + ti)",
             "            r3 = min(r + 3, xh - 1)",
             "            for q in range(xw):",
             "                d0 = x[c, r, q]",
             "                d1 = x[c, r + 1, q]",
             "                d2 = x[c, r + 2, q]",
             "                d3 = x[c, r3, q]",
             "                a[0, q] = d0 - d2",
             "                a[1, q] = d1 + d2",
             "                a[2, q] = d2 - d1",
             "                a[3, q] = d1 - d3",
             "            for k in range(4):",
             "                a[k, xw] = a[k, xw - 1]",
             "            base = ti * tw",
             "            for k in range(4):",
             "                for tj in range(tw):",
             "                    s = 2 * tj",
             "                    v[4 * k, c, base + tj] = a[k, s] - a[k, s + 2]",
             "                    v[4 * k + 1, c, base + tj] = a[k, s + 1] + a[k, s + 2]",
             "                    v[4 * k + 2, c, base + tj] = a[k, s + 2] - a[k, s + 1]",
             "                    v[4 * k + 3, c, base + tj] = a[k, s + 1] - a[k, s + 3]"]
    return lines


def _winograd_output_text(key: str, zero: bool) -> list[str]:
    def store(at: str, val: str) -> str:
        return f"{at} = {val}" if zero else f"{at} = {at} + {val}"
    head = [_JIT, f"def {key}(m, y, n, t0, tb, tw):",
            f'    """Winograd F(2x2, 3x3)\'s output transform: y[n, f, 2 ti + i, 2 tj + j] {"=" if zero else "+="} '
            "(A^T m A)[i, j]",
            "    for the 4x4 products m[:, f, t] of tile t, A^T = [[1, 1, 1, 0], [0, 1, -1, -1]]; the second row",
            '    or column of a tile past the output (odd sizes) is not stored."""',
            "    oh, ow = y.shape[2], y.shape[3]",
            "    full = ow // 2",
            "    for f in range(y.shape[1]):",
            "        for ti in range(tb):",
            "            o = 2 * (t0 + ti)",
            "            base = ti * tw",
            "            two = o + 1 < oh"]

    def tile(ind: str, tail: bool) -> list[str]:
        out = [ind + "; ".join(f"m{i} = m[{i}, f, t]" for i in range(4 * r, 4 * r + 4)) for r in range(4)]
        out += [ind + f"c{l} = m{l} + m{4 + l} + m{8 + l}" for l in range(4)]
        out += [ind + f"e{l} = m{4 + l} - m{8 + l} - m{12 + l}" for l in range(4)]
        out.append(ind + store("y[n, f, o, q]", "c0 + c1 + c2"))
        if not tail:
            out.append(ind + store("y[n, f, o, q + 1]", "c1 - c2 - c3"))
        out.append(ind + "if two:")
        out.append(ind + "    " + store("y[n, f, o + 1, q]", "e0 + e1 + e2"))
        if not tail:
            out.append(ind + "    " + store("y[n, f, o + 1, q + 1]", "e1 - e2 - e3"))
        return out
    body = ["            for tj in range(full):",
            "                t = base + tj",
            "                q = 2 * tj"] + tile(" " * 16, False)
    body += ["            if ow % 2 == 1:",
             "                t = base + tw - 1",
             "                q = ow - 1"] + tile(" " * 16, True)
    return head + body


def _direct_text(key: str, zero: bool) -> list[str]:
    init = "y[n, f0 + k, p, q]" if not zero else "zero"
    return [_JIT, f"def {key}(x, w, y, n, dh, dw, acc, zero):",
            f'    """y[n] {"=" if zero else "+="} conv(x, w) for an image x [C, H, W] with stride 1, dilation (dh, dw): per',
            "    output row and four filters, accumulator rows acc[k] added into along whole rows (unit",
            '    stride: vectorised), then stored."""',
            "    nf, nc, kh, kw = w.shape",
            "    oh, ow = y.shape[2], y.shape[3]",
            "    for p in range(oh):",
            "        for f0 in range(0, nf, 4):",
            "            fb = min(4, nf - f0)",
            "            for k in range(fb):",
            "                for q in range(ow):",
            f"                    acc[k, q] = {init}",
            "            for c in range(nc):",
            "                for i in range(kh):",
            "                    row = x[c, p + i * dh]",
            "                    for j in range(kw):",
            "                        for k in range(fb):",
            "                            wk = w[f0 + k, c, i, j]",
            "                            ak = acc[k]",
            "                            for q in range(ow):",
            "                                ak[q] += wk * row[q + j * dw]",
            "            for k in range(fb):",
            "                for q in range(ow):",
            "                    y[n, f0 + k, p, q] = acc[k, q]"]
