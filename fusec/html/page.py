"""The report page: one self-contained HTML document (inline CSS, SVG and script, a content
security policy that forbids every request) holding, per chain and for the whole file, the
graph, the three charts and the kernels, with buttons to switch views and chains.
"""
from __future__ import annotations

import json
from html import escape
from importlib import resources

from fusec.compiler.plan.describe import ms

from . import charts
from .data import ChainModel
from .details import kernels_html
from .graph import graph_svg

VIEWS = (("graph", "Graph"), ("roofline", "Roofline"), ("traffic", "Memory traffic"), ("time", "Time"),
         ("kernels", "Kernels"))
# nothing may be fetched: no script, style, image, font or connection from anywhere
POLICY = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'"
DEFS = ('<svg width="0" height="0" style="position:absolute" aria-hidden="true"><defs>'
        '<pattern id="removed" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
        '<rect width="6" height="6" fill="#fde0c5"/><line x1="0" y1="0" x2="0" y2="6" stroke="#e6550d" '
        'stroke-width="3"/></pattern></defs></svg>')


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def page_html(models: list[ChainModel], *, title: str, layout: str = "auto") -> str:
    graphs, used = [], set()
    for i, m in enumerate(models):
        svg, how = graph_svg(m, i, layout)
        graphs.append(svg)
        used.add(how)
    views = {"graph": [_chain_block(m, i, f'<div class="graphbox">{graphs[i]}</div>', True)
                       for i, m in enumerate(models)],
             "kernels": [_chain_block(m, i, kernels_html(m, i), True) for i, m in enumerate(models)]}
    for view, draw, notes in (("roofline", charts.roofline, None), ("traffic", charts.traffic, _traffic_notes),
                              ("time", charts.breakdown, _time_notes)):
        blocks = [_scope("all", _chart(draw, models, notes), False)]
        blocks += [_chain_block(m, i, _chart(draw, [m], notes), False) for i, m in enumerate(models)]
        views[view] = blocks
    targets = sorted({m.report.target for m in models})
    hardware = sorted({(m.plan.get("model") or {}).get("hardware", "") for m in models} - {""})
    meta = (f"{len(models)} chain{'s' if len(models) != 1 else ''} · target {', '.join(targets)}"
            + (f" · planned for {', '.join(hardware)}" if hardware else "") + f" · graph: {', '.join(sorted(used))}")
    nav_views = "".join(f'<button data-view="{v}">{label}</button>' for v, label in VIEWS)
    nav_scopes = '<button data-scope="all">all chains</button>' + "".join(
        f'<button data-scope="{i}">{escape(m.name)}</button>' for i, m in enumerate(models))
    sections = "".join(
        f'<section class="view" data-view="{v}"{"" if v == "graph" else " hidden"}>'
        + (_legend() if v == "graph" else "") + "".join(views[v])
        + ('<aside id="detail"><p class="hint">Hover over or click an op to see its kernel, template, tiles and the '
           'decisions that touch it; click a kernel\'s outline for the kernel.</p></aside>' if v == "graph" else "")
        + "</section>" for v, _ in VIEWS)
    data = json.dumps({"chains": [m.js() for m in models]}, separators=(",", ":")).replace("</", "<\\/")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{escape(title)}</title><style>{_asset('page.css')}</style></head>\n"
            f'<body data-view="graph" data-scope="all">{DEFS}<header><h1>{escape(title)}</h1>'
            f'<p class="meta">{escape(meta)}</p><nav class="views">{nav_views}</nav>'
            f'<nav class="scopes">{nav_scopes}</nav></header>\n<main>{sections}</main>\n'
            f'<script type="application/json" id="fusec-data">{data}</script>\n'
            f"<script>{_asset('page.js')}</script></body></html>\n")


def _scope(scope: str, inner: str, in_all: bool) -> str:
    return f'<div class="scope" data-scope="{scope}"{" data-all" if in_all else ""}>{inner}</div>'


def _chain_block(m: ChainModel, i: int, inner: str, in_all: bool) -> str:
    return _scope(str(i), f"{_heading(m)}{inner}", in_all)


def _chart(draw, models: list[ChainModel], notes) -> str:
    extra = notes(models) if notes else ""
    return f'<div class="chartbox">{draw(models)}</div>{extra}'


def _traffic_notes(models) -> str:
    return "".join(f'<p class="note">{escape(t)}</p>' for t in charts.traffic_notes(models))


def _time_notes(models) -> str:
    return "".join(f'<p class="{cls}">{"⚠ " if cls == "warn" else ""}{escape(t)}</p>'
                   for cls, t in charts.time_notes(models))


def _heading(m: ChainModel) -> str:
    r, plan = m.report, m.plan
    bound = ", ".join(f"{k}={v}" for k, v in r.binding.items())
    k = plan["kernels"]
    unfused = getattr(r, "unfused_kernels", None)
    head = (f"chain {m.name}{f' [{bound}]' if bound else ''} on {r.target}: {plan['ops']} ops → {k} "
            f"kernel{'s' if k != 1 else ''}" + (f" (unfused: {unfused})" if unfused is not None else ""))
    facts = []
    model = plan.get("model")
    if model:
        facts.append(f"predicted fused {ms(model['predicted_s'])}, unfused {ms(model['unfused_predicted_s'])} "
                     f"on {model['hardware']}")
    fused, unf = getattr(r, "fused", None), getattr(r, "unfused", None)
    if fused is not None:
        facts.append(f"measured (min) fused {ms(fused.min_s)}" + (f", unfused {ms(unf.min_s)}" if unf else ""))
    comparisons = getattr(r, "comparisons", None)
    if comparisons:
        facts.append("numerics " + ("ok" if all(c.ok for c in comparisons) else "MISMATCH"))
    warn = (f'<p class="warn">⚠ timing not reliable: {escape(r.unreliable)}</p>'
            if getattr(r, "unreliable", None) else "")
    return f"<h2>{escape(head)}</h2><p class=\"facts\">{escape('; '.join(facts))}</p>{warn}"


def _legend() -> str:
    items = (("memory", "through memory between kernels (bytes written and read again)"),
             ("onchip", "inside a kernel: never reaches memory"), ("input", "an input or output of the chain"),
             ("indirect", "read at computed indices (a gather)"))
    zoom = ('<span class="zoom">zoom <button data-zoom="out" title="smaller">−</button>'
            '<button data-zoom="reset" class="zoomv" title="actual size">100%</button>'
            '<button data-zoom="in" title="larger">+</button></span>')
    return '<p class="legend">' + zoom + "".join(f'<span class="lg {k}"></span>{escape(t)} ' for k, t in items) + \
        "· each coloured outline is one kernel</p>"
