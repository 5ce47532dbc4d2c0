"""The three views a fusion analysis switches between, as inline SVG charts of one chain or of
all of them: `roofline` (each kernel before and after fusion under the profile's roofs),
`traffic` (global bytes per kernel, unfused vs fused, the part fusion removed hatched) and
`breakdown` (time: predicted launch / compute / memory beside the measured time, on a log
scale so an outlier hides nothing; the `timing not reliable` verdict beside the chain).
"""
from __future__ import annotations

import math
from html import escape

from fusec.compiler.plan.describe import bytes_text, time_text, transfers_line

from ..plots import time_parts
from .data import ChainModel
from .style import PALETTE, kernel_color

W = 880.0
LEFT = 200.0
RIGHT = 140.0
TIME_PARTS = (("launch + allocation", "#8c8c8c"), ("compute", "#1f77b4"), ("memory beyond compute", "#ff7f0e"))


class Scale:
    """Values to pixels, linear or log, with ticks."""

    def __init__(self, lo: float, hi: float, a: float, b: float, log: bool):
        self.log = log
        if log:
            lo = 10 ** math.floor(math.log10(max(lo, 1e-30)))
            hi = 10 ** math.ceil(math.log10(max(hi, lo * 10)))
            if hi <= lo:
                hi = lo * 10
        else:
            lo, hi = 0.0, _nice(hi if hi > 0 else 1.0)
        self.lo, self.hi, self.a, self.b = lo, hi, a, b

    def __call__(self, v: float) -> float:
        if self.log:
            v = min(max(v, self.lo), self.hi)
            t = (math.log10(v) - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
        else:
            t = (v - self.lo) / (self.hi - self.lo)
        return self.a + t * (self.b - self.a)

    def ticks(self) -> list[float]:
        if self.log:
            first, last = round(math.log10(self.lo)), round(math.log10(self.hi))
            step = max(1, (last - first) // 8)
            return [10.0 ** e for e in range(first, last + 1, step)]
        return [self.hi * i / 5 for i in range(6)]


def _nice(x: float) -> float:
    e = 10 ** math.floor(math.log10(x))
    return next(m * e for m in (1, 2, 2.5, 5, 10) if m * e >= x)


def _svg(kind: str, height: float, body: list[str], title: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart {kind}" width="{W:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {W:.0f} {height:.0f}"><text x="10" y="18" class="ctitle">{escape(title)}</text>'
            + "".join(body) + "</svg>")


def _text(x, y, s, cls="", anchor="start", extra="") -> str:
    c = f' class="{cls}"' if cls else ""
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{c}{extra}>{escape(s)}</text>'


def _xaxis(sx: Scale, y0: float, y1: float, fmt, label: str) -> list[str]:
    out = []
    for t in sx.ticks():
        x = sx(t)
        out.append(f'<line x1="{x:.1f}" y1="{y0:.1f}" x2="{x:.1f}" y2="{y1:.1f}" class="grid"/>')
        out.append(_text(x, y1 + 14, fmt(t), "tick", "middle"))
    out.append(_text((sx.a + sx.b) / 2, y1 + 30, label, "axis", "middle"))
    return out


# ---- roofline --------------------------------------------------------------------------------

def roofline(models: list[ChainModel]) -> str:
    one = len(models) == 1
    pts, skipped, roofs = [], 0, {}
    for ci, m in enumerate(models):
        model = m.plan.get("model")
        if not model:
            continue
        roofs.setdefault(model["hardware"], model["roof"])
        homes = {o: k["id"] for k in m.kernels for o in k["ops"]}
        for fused, costs in ((False, model["unfused_kernels"]), (True, [g["cost"] for g in m.plan["groups"]])):
            for i, c in enumerate(costs):
                if c["flops"] <= 0 or c["time_s"] <= 0:
                    skipped += 1
                    continue
                k = i if fused else homes.get((c.get("ops") or [None])[-1], 0)
                color = kernel_color(k) if one else PALETTE[ci % len(PALETTE)]
                name = f"{'' if one else m.name + ' '}{f'k{i}' if fused else 'unfused ' + _ops(c)}"
                pts.append((c["intensity"], c["flops"] / c["time_s"], fused, color, name, c))
    h = 440.0
    top, bottom = 40.0, h - 60
    if not pts:
        return _svg("roofline", 80, [_text(10, 50, "no kernel with FLOPs to place on a roofline", "note")],
                    "Roofline")
    xs = [p[0] for p in pts]
    peak = max(r["peak_flops"] for r in roofs.values())
    sx = Scale(min(xs) / 3, max(xs) * 3, 100, W - 220, True)
    sy = Scale(min(p[1] for p in pts) / 3, peak * 2, bottom, top, True)
    body = _xaxis(sx, top, bottom, _si, "arithmetic intensity (FLOP / byte of global memory)")
    for t in sy.ticks():
        y = sy(t)
        body.append(f'<line x1="{sx.a:.1f}" y1="{y:.1f}" x2="{sx.b:.1f}" y2="{y:.1f}" class="grid"/>')
        body.append(_text(sx.a - 6, y + 4, _si(t) + "FLOP/s", "tick", "end"))
    ly = 40.0
    for name, r in roofs.items():
        for bw, dash, what in ((r["bandwidth"], "", "memory"), (r.get("cache_bandwidth", 0), "5 4", "cache")):
            if bw <= 0 or (what == "cache" and bw <= r["bandwidth"]):
                continue
            line = [(x, y) for x in _grid(sx) if (y := min(r["peak_flops"], bw * x)) >= sy.lo]
            if len(line) < 2:
                continue
            d = "M" + " L".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in line)
            body.append(f'<path d="{d}" fill="none" stroke="#222" stroke-width="1.3" stroke-dasharray="{dash}"/>')
            body.append(_text(W - 210, ly, f"{name} {what}: {bw / 1e9:.0f} GB/s, {r['peak_flops'] / 1e12:.2f} TFLOP/s",
                              "legend"))
            ly += 15
    labels: list[tuple[float, float]] = []
    for x, y, fused, color, name, c in pts:
        title = (f"{name} ({'fused' if fused else 'before fusion'}): {c['intensity']:.3g} FLOP/B, "
                 f"{_si(y)}FLOP/s, {time_text(c['time_s'])}, {c['bound']}-bound")
        fill = color if fused else "none"
        body.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="{6 if fused else 4.5}" fill="{fill}" '
                    f'stroke="{color}" stroke-width="1.6" class="{"after" if fused else "before"}">'
                    f'<title>{escape(title)}</title></circle>')
        if fused and one:                       # kernels at one point: their labels one under another
            lx, ly_ = sx(x) + 8, sy(y) - 6
            while any(abs(lx - a) < 30 and abs(ly_ - b) < 11 for a, b in labels):
                ly_ += 11
            labels.append((lx, ly_))
            body.append(_text(lx, ly_, name, "plabel"))
    ly += 6
    if not one:
        for ci, m in enumerate(models):
            body.append(f'<circle cx="{W - 204:.1f}" cy="{ly - 4:.1f}" r="5" fill="{PALETTE[ci % len(PALETTE)]}"/>')
            body.append(_text(W - 194, ly, m.name, "legend"))
            ly += 15
    body.append(_text(W - 210, ly + 4, "○ before fusion (one kernel per op)", "legend"))
    body.append(_text(W - 210, ly + 19, "● after fusion", "legend"))
    if skipped:
        body.append(_text(W - 210, ly + 34, f"not shown: {skipped} copies (no FLOPs)", "legend"))
    body.append(_text(14, (top + bottom) / 2, "attained FLOP/s (predicted)", "axis", "middle",
                      f' transform="rotate(-90 14 {(top + bottom) / 2:.0f})"'))
    return _svg("roofline", h, body, "Roofline: every kernel before fusion (hollow) and after (filled), predicted")


def _grid(sx: Scale) -> list[float]:
    lo, hi = math.log10(sx.lo), math.log10(sx.hi)
    return [10 ** (lo + (hi - lo) * i / 120) for i in range(121)]


def _ops(c: dict) -> str:
    return ",".join(f"%{o}" for o in c.get("ops", []))


def _si(v: float) -> str:
    for unit, div in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= div:
            return f"{v / div:g}{unit}"
    if abs(v) >= 1 or v == 0:
        return f"{v:g}"
    return f"{v:.0e}"


# ---- memory traffic --------------------------------------------------------------------------

def traffic(models: list[ChainModel]) -> str:
    one = len(models) == 1
    rows = []
    for m in models:
        for g in m.plan["groups"]:
            c = g.get("cost")
            if c:
                rows.append((("" if one else m.name + " ") + f"k{g['kernel']}", c["bytes_unfused"], c["bytes"],
                             kernel_color(g["kernel"])))
        model = m.plan.get("model")
        if model and len(m.plan["groups"]) > 1:
            rows.append((("" if one else m.name + " ") + "all kernels",
                         sum(c["bytes"] for c in model["unfused_kernels"]),
                         sum(g["cost"]["bytes"] for g in m.plan["groups"] if g.get("cost")), "#444"))
    if not rows:
        return _svg("traffic", 80, [_text(10, 50, "no cost model figures for this build", "note")], "Memory traffic")
    values = [v for _, u, f, _ in rows for v in (u, f) if v > 0]
    log = max(values) / max(min(values), 1) > 100
    top = 44.0
    per = 38.0
    h = top + per * len(rows) + 60
    sx = Scale(min(values) / 2 if log else 0, max(values), LEFT, W - RIGHT, log)
    body = _xaxis(sx, top - 6, top + per * len(rows), bytes_text,
                  "global memory traffic per kernel, predicted" + (" (log scale)" if log else ""))
    for i, (label, unfused, fused, color) in enumerate(rows):
        y = top + per * i
        x0 = sx.a
        body.append(_text(LEFT - 8, y + 20, label, "rlabel", "end", f' fill="{color}"'))
        keep = min(fused, unfused)
        body.append(_bar(x0, y + 2, sx(keep) - x0 if keep > 0 else 0, 14, "#c8c8c8",
                         f"{label} unfused: {bytes_text(unfused)}, of which {bytes_text(keep)} a fused kernel moves too"))
        if unfused > fused:
            body.append(_bar(sx(keep) if keep > 0 else x0, y + 2, sx(unfused) - (sx(keep) if keep > 0 else x0), 14,
                             "url(#removed)", f"{label}: {bytes_text(unfused - fused)} of intermediate reads and "
                                              "writes fusion removed", "removed"))
        body.append(_bar(x0, y + 18, sx(fused) - x0 if fused > 0 else 0, 14, "#2ca02c", f"{label} fused: {bytes_text(fused)}"))
        change = f" ({(fused - unfused) / unfused:+.0%})" if unfused else ""
        body.append(_text(max(sx(unfused), sx(fused)) + 6, y + 20, f"{bytes_text(unfused)} → {bytes_text(fused)}{change}",
                          "value"))
    ly = top + per * len(rows) + 46
    body.append(_bar(LEFT, ly - 10, 12, 10, "#c8c8c8", "") + _text(LEFT + 16, ly, "unfused: its ops as one kernel each",
                                                                   "legend"))
    body.append(_bar(LEFT + 250, ly - 10, 12, 10, "url(#removed)", "") +
                _text(LEFT + 266, ly, "intermediate reads and writes fusion removed", "legend"))
    body.append(_bar(LEFT + 570, ly - 10, 12, 10, "#2ca02c", "") + _text(LEFT + 586, ly, "fused", "legend"))
    return _svg("traffic", h, body, "Memory traffic per kernel: unfused vs fused")


def _seconds(s: float) -> str:
    """A time for a chart: 3 significant digits in s, ms or us."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale or unit == "us":
            return f"{s / scale:.3g} {unit}"
    return ""


def _bar(x, y, w, h, fill, title, cls="") -> str:
    t = f"<title>{escape(title)}</title>" if title else ""
    c = f' class="{cls}"' if cls else ""
    return (f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{h:.1f}" fill="{fill}"{c}>{t}</rect>')


# ---- time breakdown --------------------------------------------------------------------------

def traffic_notes(models: list[ChainModel]) -> list[str]:
    """Per chain, its reads and writes of intermediate-sized tensors, op by op, unfused, fused."""
    out = []
    for m in models:
        big = (m.plan.get("model") or {}).get("big_transfers") or {}
        if big.get("fused") is not None:
            out.append(f"{m.name}: {transfers_line(big)}")
    return out


def time_notes(models: list[ChainModel]) -> list[tuple[str, str]]:
    """(class, text) per chain whose times cannot be trusted (the run's verdict) or were not taken."""
    out = []
    for m in models:
        r = m.report
        if getattr(r, "unreliable", None):
            out.append(("warn", f"{m.name}: timing not reliable: {r.unreliable}"))
        elif getattr(r, "untimed", None):
            out.append(("note", f"{m.name}: {r.untimed}"))
        elif getattr(r, "why", None):
            out.append(("note", f"{m.name}: not run: {r.why}"))
    return out


def breakdown(models: list[ChainModel]) -> str:
    rows = []
    for m in models:
        model = m.plan.get("model")
        if not model:
            continue
        r = m.report
        verdict = getattr(r, "unreliable", None)
        for build, costs, timing in (("unfused", model["unfused_kernels"], getattr(r, "unfused", None)),
                                     ("fused", [g["cost"] for g in m.plan["groups"]], getattr(r, "fused", None))):
            rows.append((m.name, build, len(costs), time_parts(costs), timing.min_s if timing is not None else None,
                         verdict))
    if not rows:
        return _svg("breakdown", 80, [_text(10, 50, "no cost model figures for this build", "note")], "Time")
    values = [v for *_, p, meas, _ in rows for v in (sum(p), meas) if v]
    top, per = 44.0, 40.0
    h = top + per * len(rows) + 56
    sx = Scale(min(values) / 2, max(values) * 1.5, LEFT, W - RIGHT, True)
    body = _xaxis(sx, top - 6, top + per * len(rows), _seconds,
                  "time per call (log scale: no bar hides another)")
    for i, (chain, build, n, p, meas, verdict) in enumerate(rows):
        y = top + per * i
        body.append(_text(LEFT - 8, y + 14, f"{chain} {build}", "rlabel", "end"))
        body.append(_text(LEFT - 8, y + 28, f"{n} kernel{'s' if n != 1 else ''}", "tick", "end"))
        total = sum(p)
        length = sx(total) - sx.a
        x = sx.a
        for (name, color), v in zip(TIME_PARTS, p):
            w = length * v / total if total else 0
            body.append(_bar(x, y + 2, w, 14, color, f"{chain} {build} predicted {name}: {time_text(v)}", "pred"))
            x += w
        body.append(_text(sx(total) + 6, y + 14, f"predicted {_seconds(total)}", "value"))
        if meas is not None:
            warn = " ⚠" if verdict else ""
            body.append(_bar(sx.a, y + 19, sx(meas) - sx.a, 14, "#333", f"{chain} {build} measured (min of runs): "
                             f"{_seconds(meas)}" + (f"; timing not reliable: {verdict}" if verdict else ""), "meas"))
            body.append(_text(sx(meas) + 6, y + 31, f"measured {_seconds(meas)}{warn}", "value"))
        else:
            body.append(_text(sx.a + 4, y + 31, "not measured", "note"))
    ly = top + per * len(rows) + 44
    x = LEFT
    for name, color in TIME_PARTS + (("measured (min of runs)", "#333"),):
        body.append(_bar(x, ly - 10, 12, 10, color, "") + _text(x + 16, ly, name, "legend"))
        x += 16 + 7 * len(name) + 18
    return _svg("breakdown", h, body, "Time: predicted launch / compute / memory beside the measured time "
                                      "(a predicted bar is split in proportion)")
