"""The kernels view as HTML: per chain, one card per kernel (template, tiles, the model's line,
its ops, the decisions that name it, the best tile candidates), on cuda the kernel report's
figures of each launch (registers, spills, shared memory, occupancy, waves, coalescing) and
each launch's source, and for every target the emitted module, collapsible.
"""
from __future__ import annotations

from html import escape

from fusec.compiler.plan.describe import ms

from .data import ChainModel
from .style import kernel_color

_FIGURES = (("grid", "grid"), ("block", "block"), ("registers", "registers / thread"),
            ("stack_frame_bytes", "stack frame B / thread"), ("spills", "spill store / load B"),
            ("smem_bytes", "shared memory B / block"), ("shuffles", "warp shuffles"), ("mma", "mma.sync"),
            ("blocks_per_sm", "blocks / SM"), ("occupancy", "occupancy"), ("limited_by", "limited by"),
            ("waves", "waves"), ("coalesced", "coalesced (sector-weighted)"),
            ("sectors", "sectors / request (ideal)"), ("lanes", "active lanes / request"))


def kernels_html(model: ChainModel, index: int) -> str:
    out = []
    target = model.report.target
    for k in model.kernels:
        out.append(_card(model, index, k, target))
    if model.source:
        n = model.source.count("\n")
        out.append(f'<details class="module"><summary>emitted module of {escape(model.name)} ({n} lines, '
                   f'{escape(target)}: what <code>--emit kernels</code> prints)</summary>'
                   f'<pre><code>{escape(model.source)}</code></pre></details>')
    return "\n".join(out)


def _card(model: ChainModel, index: int, k: dict, target: str) -> str:
    color = kernel_color(k["id"])
    graph = {n.key: n for n in model.nodes}
    ops = ", ".join(escape(graph[f"op{o}"].lines[0]) if f"op{o}" in graph else f"%{o}" for o in k["ops"])
    rows = [("template", escape(k["template"] or "-")), ("tiles", escape(k["tiles"])),
            ("ops", ops + (f" (recomputed here: {', '.join(f'%{o}' for o in k['recomputed'])})"
                           if k["recomputed"] else "")),
            ("model", escape(k["cost"] or "no cost model figures"))]
    cands = k["candidates"][:3]
    if cands:
        rows.append(("best candidates", escape("; ".join(
            f"{c['block_tiles']}" + (f"/{c['thread_tiles']}" if any(c.get('thread_tiles') or []) else "")
            + f" {ms(c['predicted_s'])}" for c in cands))))
    table = "".join(f"<tr><th>{a}</th><td>{b}</td></tr>" for a, b in rows)
    decisions = "".join(f'<li class="{_verdict_class(model.decisions[i]["verdict"])}">'
                        f'{escape(model.decisions[i]["text"])}</li>' for i in k["decisions"])
    parts = [f'<div class="kcard" id="c{index}-card-k{k["id"]}" style="border-left-color:{color}">',
             f'<h3 style="color:{color}">kernel {k["id"]}</h3><table class="facts">{table}</table>']
    if decisions:
        parts.append(f"<h4>decisions that name it</h4><ul class='decisions'>{decisions}</ul>")
    parts.append(_launches(k, target))
    parts.append("</div>")
    return "\n".join(parts)


def _launches(k: dict, target: str) -> str:
    if not k["launches"]:
        if target in ("cuda", "cuda-sim"):
            return ('<p class="note">no kernel report for this build (run with <code>--kernel-report</code> for '
                    "registers, shared memory, occupancy, waves and coalescing)</p>")
        return (f'<p class="note">the kernel report measures GPU kernels: on {escape(target)} there is none '
                "(<code>--target cuda --kernel-report</code> compiles for the GPU and reports without one)</p>")
    head = "".join(f"<th>{escape(label)}</th>" for _, label in _FIGURES)
    body, gaps, sources = [], [], []
    for r in k["launches"]:
        cells = "".join(f"<td>{escape(_figure(r, key))}</td>" for key, _ in _FIGURES)
        body.append(f"<tr><th>{escape(r['kernel'])}</th>{cells}</tr>")
        gaps += [f"{r['kernel']}: {what} not measured: {why}" for what, why in (r.get("unmeasured") or {}).items()]
        gaps += [f"{r['kernel']}: error: {e}" for e in r.get("errors") or ()]
        src = k["sources"].get(r["kernel"])
        if src:
            sources.append(f'<details class="launch"><summary>source of {escape(r["kernel"])} '
                           f'({src.count(chr(10))} lines)</summary><pre><code>{escape(src)}</code></pre></details>')
    table = (f'<h4>kernel report (ptxas -v, occupancy, coalescing traced on the simulator)</h4>'
             f'<div class="scroll"><table class="kreport"><tr><th>launch</th>{head}</tr>{"".join(body)}</table></div>')
    notes = "".join(f'<p class="note">{escape(g)}</p>' for g in gaps)
    return table + notes + "".join(sources)


def _figure(r: dict, key: str) -> str:
    c = r.get("coalescing") or {}
    if key in ("grid", "block"):
        return "-" if r.get(key) is None else "(" + ", ".join(map(str, r[key])) + ")"
    if key == "spills":
        return "-" if r.get("spill_store_bytes") is None else f"{r['spill_store_bytes']} / {r['spill_load_bytes']}"
    if key == "occupancy":
        return "-" if r.get("occupancy") is None else f"{100 * r['occupancy']:.1f}%"
    if key == "limited_by":
        return ", ".join(r["limited_by"]) if r.get("limited_by") else "-"
    if key == "waves":
        return "-" if r.get("waves") is None else f"{r['waves']:.3g}"
    if key == "coalesced":
        return "-" if c.get("efficiency") is None else f"{100 * c['efficiency']:.1f}%"
    if key == "sectors":
        return ("-" if c.get("sectors_per_request") is None
                else f"{c['sectors_per_request']:.1f} ({c['ideal_sectors_per_request']:.1f})")
    if key == "lanes":
        return "-" if c.get("lanes_per_request") is None else f"{c['lanes_per_request']:.1f}"
    v = r.get(key)
    return "-" if v is None else str(v)


def _verdict_class(verdict: str) -> str:
    if verdict.startswith("not "):
        return "rejected"
    return "note" if verdict == "note" else "accepted"
