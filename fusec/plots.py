"""--plot DIR: the cost model's three pictures (roofline.png, traffic.png, breakdown.png) for the
chains of one run, from the plan summaries and timings in ChainReports (no compiler needed).
See docs/FUSION.md and docs/CLI.md.
"""
from __future__ import annotations

from pathlib import Path

PICTURES = ("roofline.png", "traffic.png", "breakdown.png")
OUTLIER = 100          # traffic: a log scale once the largest bar is this many times the smallest


def write_plots(reports, directory) -> list[Path]:
    """Write the three pictures for these ChainReports to `directory`; returns their paths."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    figs = figures(reports)
    import matplotlib.pyplot as plt
    for name, fig in figs.items():
        fig.savefig(out / name)
        plt.close(fig)
        paths.append(out / name)
    return paths


def figures(reports) -> dict:
    """{file name: matplotlib Figure} for the chains of these ChainReports that carry a model."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    chains = [r for r in reports if r.plan.get("model")]
    out = {}
    for name, draw in (("roofline.png", _roofline), ("traffic.png", _traffic)):
        fig, ax = plt.subplots(figsize=(9, 5.5), dpi=110)
        draw(ax, chains)
        fig.tight_layout()
        out[name] = fig
    n = max(1, len(chains))
    cols = min(n, 3)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(max(3.6 * cols + 1, 8), 3.6 * rows), dpi=110, squeeze=False)
    for ax, r in zip(axes.flat, chains):
        _breakdown(ax, r)
    for ax in list(axes.flat)[len(chains):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8)
    fig.suptitle("Execution time (log scale): predicted launch / compute / memory, unfused vs fused "
                 "(measured: diamonds)", fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 0.95))
    out["breakdown.png"] = fig
    return out


def _label(r, k) -> str:
    return f"{r.chain}:k{k}"


def _roofline(ax, chains) -> None:
    colors = _colors(len(chains))
    hws = []
    xs = []
    skipped = [0]
    for r, color in zip(chains, colors):
        model = r.plan["model"]
        before = model["unfused_kernels"]
        after = [g["cost"] for g in r.plan["groups"]]
        for kernels, filled in ((before, False), (after, True)):
            shown = False
            for i, c in enumerate(kernels):
                if c["flops"] <= 0:             # pure data movement (copies): no place on a roofline
                    skipped[0] += 1
                    continue
                x, y = c["intensity"], c["flops"] / max(c["time_s"], 1e-12)
                xs.append(x)
                ax.scatter([x], [y], s=60 if filled else 40, marker="o",
                           facecolors=color if filled else "none", edgecolors=color,
                           label=None if shown else f"{r.chain} {'fused' if filled else 'unfused'}")
                shown = True
                if filled:
                    ax.annotate(f"k{i}", (x, y), textcoords="offset points", xytext=(4, 4 + 8 * (i % 3)),
                                fontsize=7, color=color)
        if model["hardware"] not in dict(hws):
            hws.append((model["hardware"], model["roof"]))
    lo, hi = min(xs, default=0.01) / 4, max(xs, default=100) * 4
    for name, roof in hws:
        import numpy as np
        peak, bw, cache_bw = roof["peak_flops"], roof["bandwidth"], roof["cache_bandwidth"]
        grid = np.logspace(np.log10(lo), np.log10(hi), 200)
        ax.plot(grid, np.minimum(peak, bw * grid), "k-", lw=1.2,
                label=f"{name} roof: {bw / 1e9:.0f} GB/s, {peak / 1e12:.2f} TFLOP/s")
        if cache_bw > bw:
            ax.plot(grid, np.minimum(peak, cache_bw * grid), "k--", lw=0.8,
                    label=f"{name} roof from cache ({int(roof['l2_bytes']) >> 20} MiB): {cache_bw / 1e9:.0f} GB/s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte of global memory)")
    ax.set_ylabel("attained FLOP/s (predicted)")
    ax.set_title("Roofline: each kernel before fusion (hollow) and after (filled)"
                 + (f"\n({skipped[0]} copy kernels without FLOPs not shown)" if skipped[0] else ""), fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")


def _traffic(ax, chains) -> None:
    labels, unfused, fused = [], [], []
    for r in chains:
        for g in r.plan["groups"]:
            labels.append(_label(r, g["kernel"]))
            unfused.append(g["cost"]["bytes_unfused"] / 1e6)
            fused.append(g["cost"]["bytes"] / 1e6)
    xs = range(len(labels))
    w = 0.4
    ax.bar([x - w / 2 for x in xs], unfused, w, label="unfused (its ops as one kernel each)", color="#d62728")
    ax.bar([x + w / 2 for x in xs], fused, w, label="fused", color="#2ca02c")
    for x, u, f in zip(xs, unfused, fused):
        if u > 0:
            ax.annotate(f"{(f - u) / u:+.0%}", (x + w / 2, f), textcoords="offset points", xytext=(0, 3),
                        ha="center", fontsize=7)
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    shown = [v for v in unfused + fused if v > 0]
    if shown and max(shown) > OUTLIER * min(shown):     # one big kernel would flatten the others
        ax.set_yscale("log")
        ax.set_ylim(bottom=min(shown) / 3)
    ax.set_ylabel("global memory traffic (MB, predicted)")
    ax.set_title("Memory traffic per kernel: unfused vs fused")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)


def time_parts(costs) -> tuple[float, float, float]:
    """Predicted launch (+ allocation), compute, and memory time beyond compute, summed over the
    kernel costs of a plan (the time breakdown of --plot and of the HTML report)."""
    launch = compute = memory = 0.0
    for c in costs:
        body = c["time_s"] - c["launch_s"] - c["alloc_s"]
        launch += c["launch_s"] + c["alloc_s"]
        shown = min(c["compute_s"], body)
        compute += shown
        memory += body - shown
    return launch, compute, memory


def _breakdown(ax, r) -> None:
    labels, rows, measured = [], [], []
    for build, costs, timing in (("unfused", r.plan["model"]["unfused_kernels"], r.unfused),
                                 ("fused", [g["cost"] for g in r.plan["groups"]], r.fused)):
        labels.append(f"{build}\n({len(costs)} kernel{'s' if len(costs) != 1 else ''})")
        rows.append(time_parts(costs))
        measured.append(timing.min_s * 1e3 if timing is not None else None)
    xs = list(range(len(labels)))
    bottom = [0.0] * len(xs)
    for i, (name, color) in enumerate((("launch + allocation", "#7f7f7f"), ("compute", "#1f77b4"),
                                       ("memory beyond compute", "#ff7f0e"))):
        vals = [row[i] * 1e3 for row in rows]
        ax.bar(xs, vals, 0.6, bottom=bottom, label=name, color=color)
        bottom = [b + v for b, v in zip(bottom, vals)]
    for x, total in zip(xs, bottom):
        ax.annotate(f"{total:.3g}", (x, total), textcoords="offset points", xytext=(0, 2), ha="center", fontsize=7)
    mx = [(x, m) for x, m in zip(xs, measured) if m is not None]
    if mx:
        ax.scatter([x for x, _ in mx], [m for _, m in mx], marker="D", color="black", zorder=3,
                   label="measured (min of runs)")
        for x, m in mx:
            ax.annotate(f"{m:.3g}", (x, m), textcoords="offset points", xytext=(6, -3), fontsize=7)
    ax.set_xticks(xs)
    ax.set_xticklabels(labels, fontsize=8)
    # a log scale: a measurement 1000x the predictions (an unfused build on a busy machine) then
    # leaves every bar readable; the stacked parts keep their order, not their proportions
    ax.set_yscale("log")
    shown = [v for v in bottom + [m for _, m in mx] if v > 0]
    if shown:
        ax.set_ylim(min(shown) / 4, max(shown) * 3)
    ax.set_ylabel("time (ms)")
    ax.set_title(r.chain, fontsize=9)
    if getattr(r, "unreliable", None):
        ax.set_xlabel("timing not reliable (the run's report says why)", fontsize=7, color="#8a4b00")
    ax.grid(True, axis="y", alpha=0.3)


def _colors(n: int) -> list:
    import matplotlib
    cmap = matplotlib.colormaps["tab10"]
    return [cmap(i % 10) for i in range(n)]
