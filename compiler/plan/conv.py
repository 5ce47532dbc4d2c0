"""How the cpu target computes a convolution (linalg.conv_2d_nchw_fchw): five algorithms
(ALGORITHMS: gemm, im2col, winograd, winograd4, direct), each an emitter template
(compiler/emit/conv.py). The model prices each for a kernel's chunk (one prange iteration on
one core, single-threaded BLAS) and the planner takes the fastest; a hand plan's "conv" forces
one ("winograd" is F(2x2, 3x3)). See docs/FUSION.md, "Convolutions on the cpu"; the constants'
fit: docs/PERFORMANCE.md, "Figures behind the planner's constants".
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .analysis import ChainInfo, OpInfo, loop_correspondence
from .hardware import HardwareProfile
from .templates import ConvConfig, ElementwiseConfig

CONV_OP = "linalg.conv_2d_nchw_fchw"
ALGORITHMS = ("gemm", "im2col", "winograd", "winograd4", "direct")
TITLES = {"gemm": "one GEMM per image (1x1)", "im2col": "im2col + GEMM", "winograd": "Winograd F(2x2, 3x3)",
          "winograd4": "Winograd F(4x4, 3x3)", "direct": "direct convolution"}
WINOGRAD = {"winograd": 2, "winograd4": 4}     # outputs per tile side
FLOATS = ("f32", "f64")

# Fitted to `python -m bench.conv_algorithms`: docs/PERFORMANCE.md, "Figures behind the
# planner's constants".
CALL_S = 0.5e-6            # one ?gemm call's fixed cost (dispatch, packing set-up)
GEMM_EFFICIENCY = (2, 32, 16)   # GEMM efficiency m/(m+2) * n/(n+32) * k/(k+16): small sides idle the kernel
COPY_SLOWDOWN = 2.5        # im2col's gather: this many times one core's share of the LLC bandwidth
WINOGRAD_SLOWDOWN = 2.0    # Winograd's input and output transforms: likewise, per value moved
WINOGRAD4_ARITHMETIC = 1.5  # F(4x4, 3x3)'s transforms: more arithmetic per value moved than F(2x2, 3x3)'s
DIRECT_SLOWDOWN = 4.0      # a vectorised multiply-add loop against BLAS's rate per core
DIRECT_ROW = 16            # direct's row loop costs at least what a row this long costs (a shorter row
                           # fills no vector: its loop set-up and the weight loads are the time)
IM2COL_BLOCK = 512 << 10   # im2col gathers about this many bytes per block, or as many as the chunk's weights
WINOGRAD_BLOCK = 4 << 20   # Winograd's transformed input and products per block of tile rows


@dataclass(frozen=True)
class ConvShape:
    """One conv (or its tile): batch, channels, input (padded) rows and columns, filters,
    window, output rows and columns, strides, dilations, element bytes."""
    n: int
    c: int
    xh: int
    xw: int
    f: int
    kh: int
    kw: int
    oh: int
    ow: int
    sh: int = 1
    sw: int = 1
    dh: int = 1
    dw: int = 1
    elem_bytes: int = 4

    @property
    def macs(self) -> int:
        return self.n * self.f * self.oh * self.ow * self.c * self.kh * self.kw

    @property
    def ckk(self) -> int:
        return self.c * self.kh * self.kw

    def text(self) -> str:
        s = f"{self.kh}x{self.kw}"
        if (self.sh, self.sw) != (1, 1):
            s += f" stride {self.sh}" if self.sh == self.sw else f" stride {self.sh}x{self.sw}"
        if (self.dh, self.dw) != (1, 1):
            s += f" dilation {self.dh}" if self.dh == self.dw else f" dilation {self.dh}x{self.dw}"
        return f"{s}, {self.c} -> {self.f} channels"


def op_shape(op: OpInfo) -> ConvShape:
    """The whole conv of an op."""
    n, f, oh, ow, c, kh, kw = op.loops
    xh, xw = op.operand_shapes[0][2:]
    sh, sw, dh, dw = op.window or (1, 1, 1, 1)
    return ConvShape(n, c, xh, xw, f, kh, kw, oh, ow, sh, sw, dh, dw, op.operand_elem_bytes[0])


def tile_shape(s: ConvShape, tiles: dict[int, int]) -> ConvShape:
    """The conv one chunk computes when its loops (0 n, 1 f, 2 oh, 3 ow) are cut to `tiles`."""
    n, f, oh, ow = (tiles.get(k) or ext for k, ext in enumerate((s.n, s.f, s.oh, s.ow)))
    return ConvShape(n, s.c, (oh - 1) * s.sh + (s.kh - 1) * s.dh + 1, (ow - 1) * s.sw + (s.kw - 1) * s.dw + 1,
                     f, s.kh, s.kw, oh, ow, s.sh, s.sw, s.dh, s.dw, s.elem_bytes)


def not_applicable(s: ConvShape, algo: str) -> str | None:
    """Why `algo` cannot compute `s`, or None."""
    if algo == "gemm" and ((s.kh, s.kw) != (1, 1) or (s.sh, s.sw) != (1, 1)):
        return "needs a 1x1 window with stride 1"
    if algo in WINOGRAD and ((s.kh, s.kw) != (3, 3) or (s.sh, s.sw, s.dh, s.dw) != (1, 1, 1, 1)):
        return "needs a 3x3 window with stride 1 and no dilation"
    if algo == "direct" and (s.sh, s.sw) != (1, 1):
        return "needs stride 1 (strided loads keep its loop scalar)"
    if algo not in ALGORITHMS:
        return f"is not one of {', '.join(ALGORITHMS)}"
    return None


def im2col_rows(s: ConvShape) -> int:
    """Output rows per im2col block (the emitter's and the model's): columns of about
    IM2COL_BLOCK bytes, or of the chunk's weights' size where those are larger. Each block is one
    ?gemm call, and each call packs all of the chunk's weights (F x C*KH*KW) again: a deep layer's
    weights (512 x 4608 floats at 7x7) against 512 KiB of columns (4 of its 7 rows) spent more
    time packing than multiplying (ResNet-18's last 3x3 conv at batch 1: 2.64 ms in two blocks,
    2.04 ms in one; docs/PERFORMANCE.md, "Figures behind the planner's constants")."""
    block = max(IM2COL_BLOCK, s.f * s.ckk * s.elem_bytes)
    return max(1, min(s.oh, block // max(1, s.ckk * s.ow * s.elem_bytes)))


def winograd_tiles(s: ConvShape, m: int) -> tuple[int, int]:
    """(tile rows, tiles per row) of an image: m x m outputs per tile."""
    return -(-s.oh // m), -(-s.ow // m)


def winograd_rows(s: ConvShape, m: int) -> int:
    """Tile rows per Winograd block: its transformed input [(m+2)^2, C, tiles] and products
    [(m+2)^2, F, tiles] together about WINOGRAD_BLOCK bytes."""
    th, tw = winograd_tiles(s, m)
    return max(1, min(th, WINOGRAD_BLOCK // max(1, (m + 2) ** 2 * (s.c + s.f) * tw * s.elem_bytes)))


def _efficiency(m: int, n: int, k: int) -> float:
    a, b, c = GEMM_EFFICIENCY
    return m / (m + a) * n / (n + b) * k / (k + c)


def seconds(s: ConvShape, algo: str, hw: HardwareProfile) -> float:
    """Predicted time of `algo` computing `s` on one core with single-threaded BLAS."""
    eb = s.elem_bytes
    rate = hw.peak(eb) / max(1, hw.units) / max(1.0, hw.weight("mac"))     # one core's BLAS MACs per second
    cache = max(hw.cache_bandwidth, hw.bandwidth) / max(1, hw.units)        # one core's share of the LLC
    if algo == "gemm":
        return s.n * (CALL_S + s.f * s.c * s.oh * s.ow / (rate * _efficiency(s.f, s.oh * s.ow, s.c)))
    if algo == "im2col":
        rows = im2col_rows(s)
        blocks = -(-s.oh // rows)
        gemm = s.f * s.ckk * s.oh * s.ow / (rate * _efficiency(s.f, rows * s.ow, s.ckk))
        copy = s.ckk * s.oh * s.ow * eb * 2 / cache * COPY_SLOWDOWN
        return s.n * (blocks * CALL_S + gemm + copy)
    if algo in WINOGRAD:
        m = WINOGRAD[algo]
        a2 = (m + 2) ** 2                   # transformed values per tile, ?gemm calls per block
        th, tw = winograd_tiles(s, m)
        rows = winograd_rows(s, m)
        blocks = -(-th // rows)
        slow = WINOGRAD_SLOWDOWN * (WINOGRAD4_ARITHMETIC if m == 4 else 1.0)
        gemm = a2 * s.f * s.c * th * tw / (rate * _efficiency(s.f, rows * tw, s.c))
        moved = (a2 * (s.c + s.f) * th * tw + s.c * s.xh * s.xw + s.f * s.oh * s.ow) * eb * 2
        weights = a2 * s.f * s.c * eb * 2 / cache * slow * 4
        return s.n * (blocks * a2 * CALL_S + gemm + moved / cache * slow) + weights
    if algo == "direct":
        return s.macs / rate * DIRECT_SLOWDOWN * max(1.0, DIRECT_ROW / s.ow)
    raise ValueError(algo)


@dataclass(frozen=True)
class ConvChoice:
    op: int                                   # the conv op
    algorithm: str
    predicted: tuple[tuple[str, float], ...]  # per applicable algorithm: whole-kernel seconds
    shape: ConvShape                          # the whole conv
    chunk: ConvShape                          # what one chunk computes
    forced: bool = False                      # given by a hand plan

    def reason(self) -> str:
        """Why this algorithm, for --explain."""
        own = dict(self.predicted)[self.algorithm]
        others = [f"{TITLES[a]} {_ms(t)}" for a, t in self.predicted if a != self.algorithm]
        skipped = [f"{TITLES[a]} {why}" for a in ALGORITHMS
                   if (why := not_applicable(self.shape, a)) and a != self.algorithm]
        text = (f"%{self.op} conv {self.shape.text()} as {TITLES[self.algorithm]}"
                f"{' (the plan says so)' if self.forced else ''}: predicted {_ms(own)}")
        if others:
            text += "; " + ", ".join(others)
        if skipped:
            text += "; not: " + ", ".join(skipped)
        return text


def _ms(t: float) -> str:
    return f"{t * 1e3:.3f} ms" if t >= 1e-4 else f"{t * 1e6:.1f} us"


def library_conv(op: OpInfo) -> bool:
    """A conv the cpu target hands to BLAS (floats of one type; others are loops)."""
    return op.name == CONV_OP and len(set(op.operand_dtypes)) == 1 and op.operand_dtypes[0] in FLOATS


def chunk_tiles(info: ChainInfo, members, root: int, conv: int, block: tuple[int, ...],
                mapped: tuple[int, ...]) -> tuple[dict[int, int], int]:
    """(the conv's loop tiles in one chunk, the chunks) for a cpu kernel tiled `block`; a kernel
    with no chunk loop runs the conv's images in a prange (emit/conv.py)."""
    op = info.op(conv)
    if not mapped:
        return {0: 1}, op.loops[0]
    corr = loop_correspondence(info, root, members).get(conv, {})
    tiles: dict[int, int] = {}
    chunks = 1
    r = info.op(root)
    for l in mapped:
        b = block[l]
        if not b:
            continue
        chunks *= r.loops[l] // b
        for k in corr.get(l, ()):
            if k < 4:
                tiles[k] = b
    return tiles, chunks


def choose(info: ChainInfo, members, root: int, block: tuple[int, ...], mapped: tuple[int, ...],
           hw: HardwareProfile, forced: str = "") -> ConvChoice | None:
    """The algorithm of the kernel's conv (the fastest predicted, or `forced`); None when the
    kernel has no conv the cpu target hands to BLAS."""
    convs = [m for m in sorted(members) if library_conv(info.op(m))]
    if len(convs) != 1:
        return None
    conv = convs[0]
    whole = op_shape(info.op(conv))
    tiles, chunks = chunk_tiles(info, members, root, conv, block, mapped)
    chunk = tile_shape(whole, tiles)
    rounds = math.ceil(chunks / max(1, hw.units))
    predicted = tuple((a, rounds * seconds(chunk, a, hw)) for a in ALGORITHMS if not_applicable(whole, a) is None)
    if forced:
        return ConvChoice(conv, forced, predicted, whole, chunk, forced=True)
    best = min(predicted, key=lambda p: p[1])[0]
    return ConvChoice(conv, best, predicted, whole, chunk)


def resolve_conv(info: ChainInfo, members, root: int, t, hw: HardwareProfile, target: str):
    """A cpu kernel's config as its group holds it: a conv kernel with the algorithm the plan gave
    (ConvConfig) or the model's pick, when the kernel has a conv computed with BLAS; else the
    search's (an elementwise kernel's)."""
    if target != "cpu" or any(t.thread):
        return t.config
    choice = choose(info, members, root, t.block, t.mapped, hw, t.config.fields().get("conv", ""))
    return ConvConfig(algorithm=choice.algorithm) if choice else ElementwiseConfig()
