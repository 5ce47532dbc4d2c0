"""The cpu target's convolution templates: y (+)= conv(x, w) for a linalg.conv_2d_nchw_fchw left
as a library call, by the algorithm the plan chose (the op's `fusec.conv_algorithm`: gemm,
im2col, winograd, winograd4, direct). Each template's loops are module-level Numba functions
(Helpers.use_text), called per image with a C-contiguous input and typed constants as
arguments. See docs/ARCHITECTURE.md, "What the code taught us" (cpu contractions). Also the gpu
contraction template's pieces for a channels-last 16-bit conv (`k_outer`, `k_runs_flat`).
"""
from __future__ import annotations

import math
from fractions import Fraction

from ..mlir import ir
from ..plan.analysis import conv_window
from ..plan.conv import WINOGRAD, ConvShape, im2col_rows, winograd_rows, winograd_tiles
from ..marks import CONV_ALGORITHM
from .template_values import affine, linear
from .values import expr_add, expr_mul, is_int, small_div

NO_TRANS, TRANS = 111, 112      # CBLAS transpose flags (CblasNoTrans, CblasTrans); emit/cpu.py imports them
_JIT = '@numba.njit(nogil=True, fastmath={"contract", "reassoc"}, error_model="numpy")'


def algorithm(op) -> str:
    return ir.StringAttr(op.attributes[CONV_ALGORITHM]).value if CONV_ALGORITHM in op.attributes else "im2col"


def shape(op) -> ConvShape:
    xv, wv, yv = op.operands
    nb, ch, xh, xw = ir.MemRefType(xv.type).shape
    nf, _, kh, kw = ir.MemRefType(wv.type).shape
    oh, ow = ir.MemRefType(yv.type).shape[2:]
    eb = ir.FloatType(ir.MemRefType(yv.type).element_type).width // 8        # f32 or f64 (library_conv)
    return ConvShape(nb, ch, xh, xw, nf, kh, kw, oh, ow, *conv_window(op), eb)


def strides(value) -> list[int | None]:
    """A memref's strides in elements, None where dynamic."""
    st, _ = ir.MemRefType(value.type).get_strides_and_offset()
    dyn = ir.ShapedType.get_dynamic_stride_or_offset()
    return [None if x == dyn else x for x in st]


def conv_call(body, op, views, zero: bool, gemm_fn: str, mark: str) -> None:
    """The conv by its algorithm; `gemm_fn` is the CBLAS ?gemm to call, `mark` the comment that
    ends a line calling it (emit/cpu.py)."""
    s = shape(op)
    algo = algorithm(op)
    template = {"gemm": _gemm_1x1, "im2col": _im2col, "winograd": _winograd, "winograd4": _winograd,
                "direct": _direct}[algo]
    template(body, op, views, s, zero, _Blas(gemm_fn, mark))


class _Blas:
    """The CBLAS ?gemm a template calls and the comment ending each line that calls it."""

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


def _contiguous_weights(body, wt, wv) -> str:
    """w [F, C, KH, KW], whose memory BLAS reads as a row-major [F, C*KH*KW] matrix (a
    contiguous copy when it does not lie so)."""
    if _dense(wv):
        return wt.host
    wc = body.names.temp("blas")
    body.w(f"{wc} = np.ascontiguousarray({wt.host})")
    return wc


def _dense(value) -> bool:
    """The memref's elements lie row-major with no gaps (unit dims aside)."""
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
    wmat = _contiguous_weights(body, wt, wv)
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
        xmat, ldx = f"{x.host}[{n}]", xs[1]
    else:
        xc = body.names.temp("blas")
        w(f"{xc} = np.ascontiguousarray({x.host}[{n}])")
        xmat, ldx = xc, hw
    if y_whole:
        w(f"{gemm.fn}(101, {NO_TRANS}, {NO_TRANS}, {s.f}, {hw}, {s.c}, {one}, {wmat}, {s.c}, {xmat}, {ldx}, "
          f"{beta}, {y.host}[{n}], {ys[1]})  {gemm.mark} {op.name} (1x1)")
    else:
        w(f"{gemm.fn}(101, {NO_TRANS}, {NO_TRANS}, {s.f}, {hw}, {s.c}, {one}, {wmat}, {s.c}, {xmat}, {ldx}, "
          f"{body.ctx.consts.zero(elem)}, {out}, {hw})  {gemm.mark} {op.name} (1x1)")
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
    wmat = _contiguous_weights(body, wt, wv)
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
    src = x.at([n, ci, expr_add(expr_mul(f"({p0} + {p})", str(s.sh)), expr_mul(i, str(s.dh))),
                expr_add(expr_mul(q, str(s.sw)), expr_mul(j, str(s.dw)))])
    w(f"{cols}[{row}, {p} * {ow} + {q}] = {src}")
    w.depth -= 5
    if direct:                                  # into y's block of rows
        cbeta, cmat, ldc = beta, f"{y.host}[{n}, :, {p0}:, :]", ys[1]
    else:                                       # into the buffer, then added or copied into y
        cbeta, cmat, ldc = body.ctx.consts.zero(elem), out, rb * ow
    w(f"{gemm.fn}(101, {NO_TRANS}, {NO_TRANS}, {s.f}, {r} * {ow}, {ckk}, {one}, {wmat}, {ckk}, "
      f"{cols}, {rb * ow}, {cbeta}, {cmat}, {ldc})  {gemm.mark} {op.name}")
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
    """Winograd F(mxm, 3x3), m = 2 or 4: u = the weights' transform once per call; per block of
    tile rows of an image, v = its input tiles' transform, (m+2)^2 ?gemm p[k] = u[k] @ v[k], and
    the output transform of p into y."""
    w, names, helpers, consts = body.w, body.names, body.ctx.helpers, body.ctx.consts
    x, wt, y = views
    elem = y.array.elem
    f = f"np.{elem.compute}"
    m = WINOGRAD[algorithm(op)]
    a2 = (m + 2) ** 2
    one, _ = _consts(body, elem, True)
    zero_c = consts.zero(elem)
    ks = ", ".join(consts.float(float(v), elem) for v in _constants(m))
    th, tw = winograd_tiles(s, m)
    rows = winograd_rows(s, m)
    ld = rows * tw
    wt_key = helpers.use_text(f"_winograd{m}_weights", _weights_text(f"_winograd{m}_weights", m))
    in_key = helpers.use_text(f"_winograd{m}_input", _input_text(f"_winograd{m}_input", m))
    out_key = f"_winograd{m}_output_{'set' if zero else 'add'}"
    helpers.use_text(out_key, _output_text(out_key, m, zero))
    u, v, p, a, xc = (names.temp(t) for t in ("u", "v", "p", "a", "x"))
    images = _Images(body, s)
    images.before(f"{u} = np.empty(({a2}, {s.f}, {s.c}), {f})")
    images.before(f"{wt_key}({wt.host}, {u}, {ks})")
    images.buffer(f"{v} = np.empty(({a2}, {s.c}, {ld}), {f})")
    images.buffer(f"{p} = np.empty(({a2}, {s.f}, {ld}), {f})")
    images.buffer(f"{a} = np.empty(({m + 2}, {s.xw + m}), {f})")
    n = images.open()
    t0, tb, k = names.temp("t"), names.temp("tb"), names.temp("k")
    w(f"{xc} = np.ascontiguousarray({x.host}[{n}])")
    w(f"for {t0} in range(0, {th}, {rows}):")
    w.depth += 1
    w(f"{tb} = min({rows}, {th} - {t0})")
    w(f"{in_key}({xc}, {t0}, {tb}, {tw}, {v}, {a}, {zero_c}, {ks})")
    w(f"for {k} in range({a2}):")
    w.depth += 1
    w(f"{gemm.fn}(101, {NO_TRANS}, {NO_TRANS}, {s.f}, {tb} * {tw}, {s.c}, {one}, {u}[{k}], {s.c}, "
      f"{v}[{k}], {ld}, {zero_c}, {p}[{k}], {ld})  {gemm.mark} {op.name} (Winograd)")
    w.depth -= 1
    w(f"{out_key}({p}, {y.host}, {n}, {t0}, {tb}, {tw}, {ks})")
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


# ---- the gpu contraction template's channels-last conv (emit/gemm.py) ----------------------------
# A 16-bit conv lowered channels-last (lowering/contraction.py: _conv_channels_last) is a
# contraction of K = (kh, kw, c) whose operands' runs of 8 channels the template copies by cp.async
# (`_Gemm._run_layout`, `_staged_loader`); these give it each K step's coordinates and each run's
# offset in the operand's 1-D view. `g` is the template (`emit/gemm.py: _Gemm`).


def k_outer_step(g) -> int | None:
    """Where K is several loops of static extents (a channels-last conv's (kh, kw, c)) and
    every K step lies inside one run of the innermost (its extent C a multiple of BK): C."""
    ext = [g.ext[l] for l in g.loops["k"]]
    if not all(is_int(e) for e in ext) or int(ext[-1]) % g.bk:
        return None
    return int(ext[-1])


def k_outer(g, k0: str) -> tuple[str, dict[int, str]]:
    """The K step at flat k0 (a multiple of BK, `k_outer_step`): (its innermost loop's first
    coordinate, {outer loop: coordinate}), computed once per step."""
    c, w, names = k_outer_step(g), g.w, g.names
    memo = getattr(g, "_k_outer_memo", None)
    if memo and memo[0] == (k0, w.depth) and all(
            len(line) - len(line.lstrip()) >= 4 * w.depth for line in w.lines[memo[1]:]):
        return memo[2]       # the other side's loader of the same step, in the same block
    q, c0 = names.fresh("kq"), names.fresh("kc")
    if c & (c - 1) == 0:
        w(f"{q} = {k0} >> {c.bit_length() - 1}")
        w(f"{c0} = {k0} & {c - 1}")
    else:
        w(f"{q} = {k0} // {c}")
        w(f"{c0} = {k0} - {q} * {c}")
    kl = g.loops["k"]
    outer, rest = {}, q
    sizes = [int(g.ext[l]) for l in kl[:-1]]
    for i, l in enumerate(kl[:-1]):          # row-major over the outer loops, by small divisions
        inner = math.prod(sizes[i + 1:])
        most = math.prod(sizes[i:]) - 1
        div = small_div(rest, inner, most) if inner > 1 else rest
        if div is None:
            return c0, g._delinearize(q, kl[:-1], "ko", [g.ext[l] for l in kl[:-1]])
        outer[l] = names.fresh("ko")
        w(f"{outer[l]} = {div}")
        if inner > 1:
            nxt = names.fresh("kr")
            w(f"{nxt} = {rest} - {outer[l]} * {inner}")
            rest = nxt
    g._k_outer_memo = ((k0, w.depth), len(w.lines), (c0, outer))
    return c0, outer


class KStepper:
    """The K steps a channels-last conv's ring copies, stepped instead of split: the coordinates
    (c0, then each outer K loop's) of the step the K loop copies next, S - 1 steps ahead of the
    one it reads (`first` its flat K), kept in variables advanced once per K step: c0 += BK,
    wrapping into the next outer loop where it reaches C (a compare and a select per loop, no
    division), and per staged operand a running offset in its 1-D view stepped by BK plus, on a
    wrap, the constant that moves it to the next (kh, kw) (`add`: 0 where the operand's outer
    strides continue its channels', as a channels-last filter's do). Constant K steps (before
    the loop) take their coordinates and offsets as numbers. Shared by both operands' loaders
    (one advance a step, `_Gemm._kstep`)."""

    def __init__(self, g, first: int):
        self.g, self.w, self.names = g, g.w, g.names
        self.kl = g.loops["k"]
        self.sizes = [int(g.ext[l]) for l in self.kl]
        self.c0 = self.names.fresh("kc")
        self.outer = {l: self.names.fresh("ko") for l in self.kl[:-1]}
        c0, outer = self.static(first)
        self.w(f"{self.c0} = {c0}      # the K step the loop copies next: its channel and outer K coordinates")
        for l in self.kl[:-1]:
            self.w(f"{self.outer[l]} = {outer[l]}")
        self.runs: list[tuple[str, dict]] = []
        self.first = first

    def static(self, k0: int) -> tuple[str, dict[int, str]]:
        """The coordinates of the K step at constant k0."""
        q, c0 = divmod(k0, self.sizes[-1])
        outer = {}
        for l, n in reversed(list(zip(self.kl[:-1], self.sizes[:-1]))):
            q, outer[l] = divmod(q, n)
        return str(c0), {l: str(outer[l]) for l in self.kl[:-1]}

    def coords(self, k0: str) -> tuple[str, dict[int, str]]:
        """The coordinates of the K step at k0: numbers for a constant one, else the running
        ones (k0 the step the loop copies)."""
        if is_int(k0):
            return self.static(int(k0))
        return self.c0, dict(self.outer)

    def offset(self, coef: dict, k0: int) -> int:
        c0, outer = self.static(k0)
        return int(c0) * coef.get(self.kl[-1], 0) + sum(int(outer[l]) * coef.get(l, 0) for l in self.kl[:-1])

    def add(self, side: str, coef: dict) -> str:
        """An operand's running offset (its K loops' strides `coef` in its 1-D view)."""
        run = self.names.fresh(f"g{side}k")
        self.w(f"{run} = {self.offset(coef, self.first)}")
        self.runs.append((run, coef))
        return run

    def advance(self) -> None:
        """The next K step: c0 by BK, wrapping into the outer loops; the running offsets with it."""
        w, names, bk = self.w, self.names, self.g.bk
        kl, sizes = self.kl, self.sizes
        c = sizes[-1]
        flags = []              # (the wrap's flag or None: every step, the loop it wraps into)
        if c == bk:
            prev = None
        else:
            prev = names.fresh("kwrap")
            w(f"{prev} = {self.c0} == {c - bk}")
            w(f"{self.c0} = 0 if {prev} else {self.c0} + {bk}")
        flags.append((prev, len(kl) - 1))
        for j in range(len(kl) - 2, -1, -1):
            v, n = self.outer[kl[j]], sizes[j]
            if j == 0:          # the outermost never wraps inside K
                w(f"{v} = {v} + 1" if prev is None else f"{v} = {v} + 1 if {prev} else {v}")
                break
            f = names.fresh("kwrap")
            w(f"{f} = {v} == {n - 1}" if prev is None else f"{f} = {prev} & ({v} == {n - 1})")
            nxt = f"0 if {f} else {v} + 1"
            w(f"{v} = {nxt}" if prev is None else f"{v} = ({nxt}) if {prev} else {v}")
            flags.append((f, j))
            prev = f
        for run, coef in self.runs:
            const, terms = bk * coef.get(kl[-1], 0), []
            for flag, j in flags:        # loop j wraps into loop j - 1: its extent back, one of j - 1 on
                extra = coef.get(kl[j - 1], 0) - sizes[j] * coef.get(kl[j], 0)
                if not extra:
                    continue
                if flag is None:
                    const += extra
                else:
                    terms.append(f"({extra} if {flag} else 0)")
            w(f"{run} = {' + '.join([run, str(const)] + terms)}")


def k_runs_flat(g, operand: int, side: str, sides, k_pos):
    """A staged operand of several K loops (`k_outer`) that is (a tile of) a global array of
    static shape, linear in the K loops: (its 1-D view (`FlatViews`), {(side position, K
    position): the run's offset at the step's K origin, named before the K loop}, (c0, outer)
    -> the K step's offset, its K loops' strides in the view), so a run's address is one add per
    step; None where it is not."""
    flat, v = g.values.flat, g.c.operands[operand]
    view = g.body.view(v)
    shape = view.shape if view.whole else _array_shape(v)
    if (flat is None or view.array.space != "global" or shape is None or not all(is_int(x) for x in shape)
            or math.prod(int(x) for x in shape) >= 1 << 31):
        return None
    probe = tuple(f"__fusec_q{i}__" for i in range(len(view.shape)))
    based = view.to_base(probe)      # a tile of the array: each index its own plus an offset
    if len(based) != len(probe) or any(p not in b.split(" + ") for p, b in zip(probe, based)):
        return None
    strides, stride = [], 1
    for x in reversed(shape):
        strides.insert(0, stride)
        stride *= int(x)
    kl, coef = g.loops["k"], {}
    for e, st in zip(g.cmaps[operand].results, strides):
        lin = linear(e)
        if lin is None:
            return None
        for l, c in lin[0].items():
            if l in kl:
                coef[l] = coef.get(l, 0) + c * st
    if coef.get(kl[-1]) != 1:
        return None
    name, bases = flat.name(view.array, stride), {}
    for si, (_, coords, *_) in enumerate(sides):
        dims = [coords.get(l, "0") for l in range(len(g.sides))]
        idx = view.to_base(tuple(affine(e, dims) for e in g.cmaps[operand].results))
        b = "0"
        for i, st in zip(idx, strides):
            b = expr_add(expr_mul(i, str(st)), b)
        for ki, (klane, _) in enumerate(k_pos):
            n = bases[(si, ki)] = g.names.fresh(f"{side}f{si}_{ki}_")
            g.w(f"{n} = {expr_add(b, klane)}")

    def step(c0: str, outer: dict[int, str]) -> str:
        off = c0
        for l in kl[:-1]:
            if coef.get(l):
                off = expr_add(expr_mul(outer[l], str(coef[l])), off)
        return off
    return name, bases, step, coef


def _array_shape(v) -> tuple | None:
    """The static shape of the array a memref value is a subview (or a tile of a subview) of."""
    while isinstance(v, ir.OpResult) and v.owner.operation.name == "memref.subview":
        v = v.owner.operation.operands[0]
    shape = ir.MemRefType(v.type).shape
    return None if any(ir.ShapedType.is_dynamic_size(x) for x in shape) else tuple(str(x) for x in shape)


# ---- the templates' module-level functions ---------------------------------------------------

# F(mxm, 3x3)'s matrices per m: B^T (input tiles), G (filters), A^T (outputs), so that one
# dimension's y = A^T ((G g) * (B^T d)) is the correlation of a tile d with a filter g
# (tests/emit/test_cpu_blas.py checks it exactly, in fractions). F(2x2): Lavin and Gray's,
# interpolation points 0, 1, -1 and infinity. F(4x4): Toom-Cook at the points 0, 1, -1, -1/2,
# 2 and infinity (the transpose of the linear-convolution algorithm: A^T from the Vandermonde
# rows, B^T the transposed inverse Vandermonde, each of its rows made integer with G taking
# the scale), which measured 3x less f32 error in the numerics check than Lavin and Gray's
# 0, +-1, +-2 (13-32% of its tolerance against 57-99%, 16 to 512 channels; compiler/plan/
# conv.py), for a denser B^T (26 nonzeros, not 22) that costs 0-6% of the conv's time.
_H = Fraction(1, 2)
_F = Fraction
MATRICES = {
    2: {"BT": ((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1)),
        "G": ((1, 0, 0), (_H, _H, _H), (_H, -_H, _H), (0, 0, 1)),
        "AT": ((1, 1, 1, 0), (0, 1, -1, -1))},
    4: {"BT": ((2, 3, -4, -3, 2, 0), (0, 2, 5, 1, -2, 0), (0, 2, 1, -5, 2, 0), (0, -2, 1, 2, -1, 0),
               (0, -1, -2, 1, 2, 0), (0, 2, 3, -4, -3, 2)),
        "G": ((_H, 0, 0), (_F(1, 6),) * 3, (_F(1, 6), _F(-1, 6), _F(1, 6)), (_F(16, 15), _F(-8, 15), _F(4, 15)),
              (_F(1, 30), _F(1, 15), _F(2, 15)), (0, 0, _H)),
        "AT": ((1, 1, 1, 1, 1, 0), (0, 1, -1, -_H, 2, 0), (0, 1, 1, _F(1, 4), 4, 0), (0, 1, -1, _F(-1, 8), 8, 1))},
}


def _constants(m: int) -> list[Fraction]:
    """The magnitudes other than 0 and 1 in F(mxm, 3x3)'s matrices: typed arguments of the
    helpers (no float literal in the generated arithmetic)."""
    found = {abs(Fraction(c)) for mat in MATRICES[m].values() for row in mat for c in row}
    return sorted(found - {Fraction(0), Fraction(1)})


def _kname(v: Fraction) -> str:
    return f"k{v.numerator}" if v.denominator == 1 else f"k{v.numerator}_{v.denominator}"


def _combo(row, names) -> str:
    """sum(row[i] * names[i]) as text, zero coefficients left out."""
    out = ""
    for coef, name in zip(row, names):
        c = Fraction(coef)
        if c == 0:
            continue
        term = name if abs(c) == 1 else f"{_kname(abs(c))} * {name}"
        out += (" - " if c < 0 else " + ") + term if out else ("-" if c < 0 else "") + term
    return out


def _params(m: int) -> str:
    return ", ".join(_kname(v) for v in _constants(m))


WEIGHT_BLOCK = 256     # filters per block of the weight transform (emit/conv.py: _weights_text)


def _weights_text(key: str, m: int) -> list[str]:
    """u[A i + l, f, c] = (G g G^T)[i, l] for each filter g = w[f, c], A = m + 2, by blocks of
    WEIGHT_BLOCK filters: the block's nine taps gathered into rows (t[3 r + j, b]); then one loop
    along the block, G down the columns (h) and along the rows with G's nonzero entries as typed
    constants, each step's loads and stores contiguous (vectorised) into a small buffer; then
    each plane's part copied along contiguous (f, c). The planes lie F*C apart, a multiple of 4
    KiB for most layers: A^2 stores a step straight into them all fell in one L1 set. The
    transform runs every call (the weights are arguments): for 128 x 256 filters (ResNet-18's
    third stage, one core) this takes 0.33 ms, where applying G plane by plane over whole
    planes took 0.83 ms and a filter at a time (scalar) 0.95 ms."""
    g, size = MATRICES[m]["G"], m + 2
    a2, bk = size * size, WEIGHT_BLOCK
    lines = [_JIT, f"def {key}(w, u, {_params(m)}):",
             f'    """Winograd F({m}x{m}, 3x3)\'s weight transform: u[{size} i + l, f, c] = (G g G^T)[i, l] for each',
             f'    3x3 filter g = w[f, c], G = {[[str(Fraction(c)) for c in row] for row in g]}."""'.replace("'", ""),
             "    nc = w.shape[1]",
             "    n = w.shape[0] * nc",
             f"    planes = u.reshape(({a2}, n))",
             f"    t = np.empty((9, {bk}), u.dtype)",
             f"    blk = np.empty(({a2}, {bk}), u.dtype)",
             "    f = 0",
             "    c = 0",
             f"    for q0 in range(0, n, {bk}):",
             f"        nb = min({bk}, n - q0)",
             "        for b in range(nb):",
             "            " + "; ".join(f"t[{3 * r + j}, b] = w[f, c, {r}, {j}]" for r in range(3) for j in range(3)),
             "            c += 1",
             "            if c == nc:",
             "                c = 0",
             "                f += 1",
             "        for b in range(nb):",
             "            " + "; ".join(f"g{r}_{j} = t[{3 * r + j}, b]" for r in range(3) for j in range(3))]
    ind = " " * 12
    for i in range(size):                   # h = G g: down the columns
        for j in range(3):
            lines.append(ind + f"h{i}_{j} = " + _combo(g[i], [f"g{r}_{j}" for r in range(3)]))
    for i in range(size):                   # u = h G^T: along the rows
        for l in range(size):
            lines.append(ind + f"blk[{size * i + l}, b] = " + _combo(g[l], [f"h{i}_{j}" for j in range(3)]))
    lines += [f"        for k in range({a2}):",
              "            planes[k, q0:q0 + nb] = blk[k, :nb]"]
    return lines


def _input_text(key: str, m: int) -> list[str]:
    bt, size = MATRICES[m]["BT"], m + 2
    ds = [f"d{j}" for j in range(size)]
    es = [f"e{j}" for j in range(size)]

    def column_pass(ind: str, tail: bool) -> list[str]:
        out = [ind + "for q in range(xw):"]
        for j in range(size):
            load = f"x[c, r + {j}, q]"
            out.append(ind + f"    d{j} = " + (f"{load} if r + {j} < xh else zero" if tail and j else load))
        out += [ind + f"    a[{k}, q] = " + _combo(bt[k], ds) for k in range(size)]
        return out
    lines = [_JIT, f"def {key}(x, t0, tb, tw, v, a, zero, {_params(m)}):",
             f'    """Winograd F({m}x{m}, 3x3)\'s input transform of tile rows t0 .. t0 + tb - 1 of an image x [C, H, W]:',
             f"    v[{size} k + l, c, t] = (B^T d B)[k, l] for the {size}x{size} input tile d of tile t (numbered along",
             f"    rows from t0), B^T = {[list(r) for r in bt]}: first down the tile row's",
             f"    {size} input rows (a[k], contiguous), then along each tile. Rows and columns past the input are",
             '    zeros (exact: they reach only outputs that are not stored, and add nothing to the others)."""',
             "    xh, xw = x.shape[1], x.shape[2]",
             f"    for k in range({size}):",
             "        for q in range(xw, a.shape[1]):",
             "            a[k, q] = zero",
             "    for c in range(x.shape[0]):",
             "        for ti in range(tb):",
             f"            r = {m} * (t0 + ti)",
             f"            if r + {size} <= xh:"]
    lines += column_pass(" " * 16, False)
    lines.append("            else:")
    lines += column_pass(" " * 16, True)
    lines += ["            base = ti * tw",
              f"            for k in range({size}):",
              "                for tj in range(tw):",
              f"                    s = {m} * tj"]
    lines += [" " * 20 + f"e{j} = a[k, s + {j}]" for j in range(size)]
    lines += [" " * 20 + f"v[{size} * k + {l}, c, base + tj] = " + _combo(bt[l], es) for l in range(size)]
    return lines


def _output_text(key: str, m: int, zero: bool) -> list[str]:
    at, size = MATRICES[m]["AT"], m + 2

    def store(at_: str, val: str) -> str:
        return f"{at_} = {val}" if zero else f"{at_} = {at_} + ({val})"

    def tile(ind: str, tail: bool) -> list[str]:
        out = [ind + "; ".join(f"m{i} = p[{i}, f, t]" for i in range(size * k, size * k + size)) for k in range(size)]
        for i in range(m):                  # A^T down the columns
            for l in range(size):
                out.append(ind + f"c{i}_{l} = " + _combo(at[i], [f"m{size * k + l}" for k in range(size)]))
        for i in range(m):                  # then along the rows
            rind = ind if i == 0 else ind + "    "
            if i:
                out.append(ind + f"if nr > {i}:")
            for j in range(m):
                val = _combo(at[j], [f"c{i}_{l}" for l in range(size)])
                line = store(f"y[n, f, o + {i}, q + {j}]", val)
                if tail and j:
                    out.append(rind + f"if rest > {j}:")
                    out.append(rind + "    " + line)
                else:
                    out.append(rind + line)
        return out
    lines = [_JIT, f"def {key}(p, y, n, t0, tb, tw, {_params(m)}):",
             f'    """Winograd F({m}x{m}, 3x3)\'s output transform: y[n, f, {m} ti + i, {m} tj + j] {"=" if zero else "+="} '
             "(A^T P A)[i, j]",
             f"    for the {size}x{size} products P = p[:, f, t] of tile t, A^T = {[list(r) for r in at]};",
             '    rows and columns of a tile past the output are not stored."""',
             "    oh, ow = y.shape[2], y.shape[3]",
             f"    full = ow // {m}",
             f"    rest = ow - full * {m}",
             "    for f in range(y.shape[1]):",
             "        for ti in range(tb):",
             f"            o = {m} * (t0 + ti)",
             f"            nr = min({m}, oh - o)",
             "            base = ti * tw",
             "            for tj in range(full):",
             "                t = base + tj",
             f"                q = {m} * tj"]
    lines += tile(" " * 16, False)
    lines += ["            if rest:",
              "                t = base + full",
              f"                q = {m} * full"]
    lines += tile(" " * 16, True)
    return lines


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
