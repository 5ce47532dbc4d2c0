"""The graph's look, shared by both layouts: the kernels' colours, the edges' colours by where
their tensor lives, node sizes (11px monospace text) and cluster labels."""
from __future__ import annotations

from .data import ChainModel

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#86bc86")
CHAR_W = 6.6            # 11px monospace: 0.6 em a character
LINE_H = 14.0
EDGE_COLOR = {"memory": "#d62728", "onchip": "#9a9a9a", "input": "#1f77b4", "output": "#1f77b4",
              "indirect": "#7f3fbf"}


def kernel_color(k: int) -> str:
    return PALETTE[k % len(PALETTE)]


def kernel_fill(k: int) -> str:
    """The colour's pale tint, for a cluster's background."""
    c = kernel_color(k)
    r, g, b = (int(c[i:i + 2], 16) for i in (1, 3, 5))
    return "#%02x%02x%02x" % tuple(int(v + (255 - v) * 0.86) for v in (r, g, b))


def node_size(lines) -> tuple[float, float]:
    return max(len(s) for s in lines) * CHAR_W + 16, len(lines) * LINE_H + 10


def cluster_label(model: ChainModel, k: int) -> str:
    kernel = next(x for x in model.kernels if x["id"] == k)
    return f"kernel {k} · {kernel['template']}" if kernel["template"] else f"kernel {k}"
