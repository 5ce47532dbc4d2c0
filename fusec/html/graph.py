"""The graph view of one chain as inline SVG: `graph_svg(model, index, layout)` draws every op
as a node, every tensor as an edge with its bytes (red where it goes through memory between
kernels), each kernel as a coloured cluster; laid out by Graphviz `dot` when it is installed
(dot.py), else by the built-in layered layout (layout.py). Both drawings give the page's
script the same handles: `g.node#c{index}-{key}`, `g.cluster#c{index}-k{kernel}`,
`g.edge.{kind}`.
"""
from __future__ import annotations

from html import escape

from . import dot
from .data import ChainModel
from .layout import layered
from .style import EDGE_COLOR, LINE_H, cluster_label, kernel_color, kernel_fill, node_size

LAYOUTS = ("auto", "dot", "builtin")


def graph_svg(model: ChainModel, index: int, layout: str = "auto") -> tuple[str, str]:
    """(the SVG, the layout that drew it: 'dot VERSION' or 'built-in')."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r}: expected one of {', '.join(LAYOUTS)}")
    if layout != "builtin":
        drawn = dot.dot_svg(model, index)
        if drawn is not None:
            return drawn
        if layout == "dot":
            raise RuntimeError("Graphviz dot is not installed (or failed): no dot layout")
    return builtin_svg(model, index), "built-in layered layout"


def builtin_svg(model: ChainModel, index: int) -> str:
    sizes = {n.key: node_size(n.lines) for n in model.nodes}
    lay = layered(sizes, [(e.src, e.dst) for e in model.edges], {n.key: n.kernel for n in model.nodes})
    p = f"c{index}"
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="graph builtin" width="{lay.width:.0f}" '
           f'height="{lay.height:.0f}" viewBox="0 0 {lay.width:.0f} {lay.height:.0f}">',
           "<defs>" + "".join(
               f'<marker id="{p}-arrow-{kind}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="9" markerHeight="9" '
               f'markerUnits="userSpaceOnUse" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{color}"/></marker>'
               for kind, color in EDGE_COLOR.items()) + "</defs>"]
    for k in sorted(lay.clusters, key=int):
        pts = lay.clusters[k]
        if not pts:
            continue
        d = "M" + " L".join(f"{x:.1f},{y:.1f}" for x, y in pts) + " Z"
        x0, y0 = pts[0]
        out.append(f'<g class="cluster kernel" id="{p}-k{k}"><title>{escape(cluster_label(model, k))}</title>'
                   f'<path d="{d}" fill="{kernel_fill(k)}" stroke="{kernel_color(k)}" stroke-width="1.5" '
                   f'stroke-linejoin="round"/><text x="{x0 + 8:.1f}" y="{y0 + 13:.1f}" class="klabel" '
                   f'fill="{kernel_color(k)}">{escape(cluster_label(model, k))}</text></g>')
    for e in model.edges:
        pts = lay.edges.get((e.src, e.dst))
        if not pts:
            continue
        width = 2.4 if e.kind == "memory" else 1.2
        dash = ' stroke-dasharray="4 3"' if e.kind == "indirect" else ""
        (mx, my) = _label_at(pts)
        out.append(f'<g class="edge {e.kind}" id="{p}-e-{e.src}-{e.dst}"><title>{escape(_edge_title(e))}</title>'
                   f'<path d="{_curve(pts)}" fill="none" stroke="{EDGE_COLOR[e.kind]}" stroke-width="{width}"{dash} '
                   f'marker-end="url(#{p}-arrow-{e.kind})"/>'
                   f'<text x="{mx + 4:.1f}" y="{my:.1f}" class="elabel">{escape(e.label)}</text></g>')
    for n in model.nodes:
        box = lay.nodes[n.key]
        x, y = box.x - box.w / 2, box.y - box.h / 2
        stroke = kernel_color(n.kernel) if n.kernel is not None else "#555"
        rx = 16 if n.kind in ("arg", "out") else 6
        dash = ' stroke-dasharray="3 2"' if n.kind == "view" else ""
        text = "".join(f'<text x="{box.x:.1f}" y="{y + 17 + i * LINE_H:.1f}" text-anchor="middle"'
                       f'{" class=head" if i == 0 else ""}>{escape(s)}</text>' for i, s in enumerate(n.lines))
        out.append(f'<g class="node {n.kind}" id="{p}-{n.key}"><title>{escape(n.lines[0])}</title>'
                   f'<rect x="{x:.1f}" y="{y:.1f}" width="{box.w:.1f}" height="{box.h:.1f}" rx="{rx:.1f}" '
                   f'fill="#fff" stroke="{stroke}" stroke-width="1.6"{dash}/>{text}</g>')
    out.append("</svg>")
    return "\n".join(out)


def _edge_title(e) -> str:
    where = {"memory": "written to memory by one kernel, read by another",
             "onchip": "stays inside the kernel", "input": "an input, read from memory",
             "output": "an output, written to memory", "indirect": "read at computed indices"}[e.kind]
    return f"{e.tensor or e.src} {e.label}: {where}"


def _curve(pts: list[tuple[float, float]]) -> str:
    """A smooth path through the points, vertical at each."""
    d = f"M{pts[0][0]:.1f},{pts[0][1]:.1f}"
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        dy = (y1 - y0) / 2
        d += f" C{x0:.1f},{y0 + dy:.1f} {x1:.1f},{y1 - dy:.1f} {x1:.1f},{y1:.1f}"
    return d


def _label_at(pts: list[tuple[float, float]]) -> tuple[float, float]:
    """Halfway along the last segment, near the reader: edges fanning out of one value part there."""
    (x0, y0), (x1, y1) = pts[-2], pts[-1]
    return (x0 + x1) / 2, (y0 + y1) / 2 + 4
