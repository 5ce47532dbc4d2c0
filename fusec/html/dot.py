"""The graph laid out by Graphviz: `dot_svg(model, index)` writes the chain as DOT (a cluster per
kernel, the ids and classes the page's script reads), runs `dot -Tsvg` and returns the SVG made
fit to inline, with the version that drew it; None when `dot` is not installed or fails (the
caller falls back to the built-in layout).
"""
from __future__ import annotations

import re
import shutil
import subprocess
from html import escape

from .data import ChainModel
from .style import EDGE_COLOR, cluster_label, kernel_color, kernel_fill

DOT_TIMEOUT_S = 60


def available() -> str | None:
    """The path of Graphviz's `dot`, when installed."""
    return shutil.which("dot")


def dot_svg(model: ChainModel, index: int) -> tuple[str, str] | None:
    exe = available()
    if exe is None:
        return None
    try:
        done = subprocess.run([exe, "-Tsvg"], input=dot_text(model, index), capture_output=True, text=True,
                              timeout=DOT_TIMEOUT_S, check=False)
        version = subprocess.run([exe, "-V"], capture_output=True, text=True, timeout=DOT_TIMEOUT_S).stderr.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0 or "<svg" not in done.stdout:
        return None
    m = re.search(r"version (\S+)", version)
    return _inline(done.stdout, model, index), f"Graphviz dot {m.group(1) if m else ''}".strip()


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def dot_text(model: ChainModel, index: int) -> str:
    p = f"c{index}"
    font = 'fontname="Courier"'
    out = [f'digraph {_q(model.name)} {{',
           f'  graph [rankdir=TB, nodesep=0.25, ranksep=0.4, {font}, fontsize=11, id="{p}-graph", bgcolor="transparent"];',
           f'  node [shape=box, style="rounded,filled", fillcolor="white", {font}, fontsize=11, penwidth=1.6, '
           'margin="0.12,0.05"];',
           f'  edge [{font}, fontsize=10, arrowsize=0.7];']
    by_kernel: dict[int | None, list] = {}
    for n in model.nodes:
        by_kernel.setdefault(n.kernel, []).append(n)
    for k, nodes in sorted(by_kernel.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
        indent = "  "
        if k is not None:
            out.append(f'  subgraph cluster_k{k} {{')
            out.append(f'    graph [id="{p}-k{k}", class="kernel", label={_q(cluster_label(model, k))}, '
                       f'labeljust="l", style="filled,rounded", fillcolor="{kernel_fill(k)}", '
                       f'color="{kernel_color(k)}", fontcolor="{kernel_color(k)}", penwidth=1.5];')
            indent = "    "
        for n in nodes:
            shape = ', shape=box, style="rounded,filled,bold"' if n.kind in ("arg", "out") else ""
            dash = ', style="rounded,filled,dashed"' if n.kind == "view" else ""
            color = kernel_color(n.kernel) if n.kernel is not None else "#555555"
            out.append(f'{indent}{n.key} [id="{p}-{n.key}", class="{n.kind}", label={_q(chr(10).join(n.lines))}, '
                       f'color="{color}"{shape}{dash}];')
        if k is not None:
            out.append("  }")
    for e in model.edges:
        width = 2.4 if e.kind == "memory" else 1.2
        style = ', style="dashed"' if e.kind == "indirect" else ""
        out.append(f'  {e.src} -> {e.dst} [id="{p}-e-{e.src}-{e.dst}", class="{e.kind}", label={_q(" " + e.label)}, '
                   f'color="{EDGE_COLOR[e.kind]}", fontcolor="{EDGE_COLOR[e.kind]}", penwidth={width}{style}];')
    out.append("}")
    return "\n".join(out) + "\n"


def _inline(svg: str, model: ChainModel, index: int) -> str:
    """dot's SVG without its XML prolog and comments, its hyphens plain, titled by the nodes'
    first lines."""
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r"<!--.*?-->\n?", "", svg, flags=re.S).replace("&#45;", "-")     # dot escapes every hyphen
    svg = svg.replace("<svg ", '<svg class="graph dot" ', 1)
    heads = {f"c{index}-{n.key}": n.lines[0] for n in model.nodes}

    def title(m: re.Match) -> str:
        head = heads.get(m.group(1))
        return m.group(0) if head is None else f'{m.group(0).split("<title>")[0]}<title>{escape(head)}</title>'
    return re.sub(r'<g id="([^"]+)" class="node[^"]*">\s*<title>[^<]*</title>', title, svg)
