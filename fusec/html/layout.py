"""The built-in layered layout of a graph, top to bottom (the report's graph when Graphviz is
not installed): `layered(sizes, edges, cluster)` places each node on a layer (longest path from
the sources; a source just above its first reader), orders each layer by barycentres, swept
down and up, keeping a cluster's nodes side by side, and gives x by least squares towards the
neighbours under minimum gaps. Edges spanning layers bend through one point per layer; a
cluster is drawn as the outline of its rows. Pure Python, no drawing.
"""
from __future__ import annotations

from dataclasses import dataclass

NODE_GAP = 22.0          # between nodes of one cluster (or both outside any)
CLUSTER_GAP = 44.0       # between nodes of different clusters: room for both outlines
LAYER_GAP = 64.0         # between layers: room for the outlines and an edge label
PAD = 10.0               # an outline around its nodes
LABEL = 16.0             # above a cluster's first row: its label
SWEEPS = 8


@dataclass
class Placed:
    x: float             # centre
    y: float
    w: float
    h: float


@dataclass
class Layout:
    nodes: dict[str, Placed]
    edges: dict[tuple[str, str], list[tuple[float, float]]]   # from the source's bottom to the target's top
    clusters: dict[object, list[tuple[float, float]]]         # outline polygon per cluster
    width: float
    height: float


def layered(sizes: dict[str, tuple[float, float]], edges: list[tuple[str, str]],
            cluster: dict[str, object] | None = None) -> Layout:
    """Lay out the DAG `edges` over the nodes `sizes` (key -> (width, height)); `cluster`: key ->
    the cluster it belongs to (None or absent: none)."""
    cluster = cluster or {}
    keys = list(sizes)
    edges = [(a, b) for a, b in dict.fromkeys(edges) if a in sizes and b in sizes and a != b]
    layer = _layers(keys, edges)
    g = _Graph(keys, edges, layer, sizes, cluster)
    g.order()
    g.place_x()
    g.regroup()
    g.place_x()
    return g.result()


def _layers(keys: list[str], edges: list[tuple[str, str]]) -> dict[str, int]:
    preds: dict[str, list[str]] = {k: [] for k in keys}
    succs: dict[str, list[str]] = {k: [] for k in keys}
    for a, b in edges:
        preds[b].append(a)
        succs[a].append(b)
    order = _topological(keys, preds, succs)
    layer = {}
    for k in order:
        layer[k] = max((layer[p] + 1 for p in preds[k]), default=0)
    for k in reversed(order):          # a source sits just above its first reader
        if not preds[k] and succs[k]:
            layer[k] = max(0, min(layer[s] for s in succs[k]) - 1)
    return layer


def _topological(keys, preds, succs) -> list[str]:
    indeg = {k: len(preds[k]) for k in keys}
    ready = [k for k in keys if indeg[k] == 0]
    out = []
    while ready:
        k = ready.pop(0)
        out.append(k)
        for s in succs[k]:
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    if len(out) != len(keys):           # a cycle (not in a chain): the rest in the given order
        out += [k for k in keys if k not in set(out)]
    return out


class _Graph:
    """The layered graph with a dummy node per layer an edge crosses."""

    def __init__(self, keys, edges, layer, sizes, cluster):
        self.size = {k: sizes[k] for k in keys}
        self.layer = dict(layer)
        self.cluster = {k: cluster.get(k) for k in keys}
        self.up: dict[str, list[str]] = {k: [] for k in keys}
        self.down: dict[str, list[str]] = {k: [] for k in keys}
        self.chains: dict[tuple[str, str], list[str]] = {}
        for a, b in edges:
            la, lb = self.layer[a], self.layer[b]
            path = [a]
            for i, ly in enumerate(range(la + 1, lb)):
                d = f"\0{a}\0{b}\0{i}"
                self.size[d] = (8.0, 0.0)
                self.layer[d] = ly
                same = self.cluster[a] if self.cluster[a] == self.cluster[b] else None
                self.cluster[d] = same
                self.up[d], self.down[d] = [], []
                path.append(d)
            path.append(b)
            for u, v in zip(path, path[1:]):
                self.down[u].append(v)
                self.up[v].append(u)
            self.chains[(a, b)] = path
        n = max(self.layer.values(), default=-1) + 1
        self.rows: list[list[str]] = [[] for _ in range(n)]
        for k in self.size:                      # given order first: program order is a good start
            self.rows[self.layer[k]].append(k)
        self.x: dict[str, float] = {}

    # ---- order within layers -------------------------------------------------------------
    def order(self) -> None:
        best, best_cross = [list(r) for r in self.rows], self.crossings()
        for sweep in range(SWEEPS):
            down = sweep % 2 == 0
            rng = range(1, len(self.rows)) if down else range(len(self.rows) - 2, -1, -1)
            for i in rng:
                ref = self.rows[i - 1] if down else self.rows[i + 1]
                pos = {k: j for j, k in enumerate(ref)}
                nbrs = self.up if down else self.down
                self.rows[i] = self._sorted(self.rows[i], lambda k: _mean([pos[n] for n in nbrs[k] if n in pos]))
            c = self.crossings()
            if c < best_cross:
                best, best_cross = [list(r) for r in self.rows], c
        self.rows = best

    def _sorted(self, row: list[str], bary) -> list[str]:
        """Row sorted by barycentre, a cluster's nodes kept together at their mean."""
        here = {k: j for j, k in enumerate(row)}
        value = {k: (b if (b := bary(k)) is not None else here[k]) for k in row}
        return self._grouped(row, value)

    def _grouped(self, row: list[str], value: dict[str, float]) -> list[str]:
        groups: dict[object, list[str]] = {}
        for k in row:
            c = self.cluster[k]
            groups.setdefault(("c", c) if c is not None else ("n", k), []).append(k)
        blocks = sorted(groups.values(), key=lambda ks: _mean([value[k] for k in ks]))
        return [k for ks in blocks for k in sorted(ks, key=lambda k: value[k])]

    def crossings(self) -> int:
        total = 0
        for upper, lower in zip(self.rows, self.rows[1:]):
            pos = {k: j for j, k in enumerate(lower)}
            ends = sorted((i, pos[v]) for i, u in enumerate(upper) for v in self.down[u] if v in pos)
            total += _inversions([b for _, b in ends])
        return total

    def regroup(self) -> None:
        """One order of the clusters across all layers (their outlines then never cross): each
        layer's clusters sorted by the cluster's mean x over the layers."""
        xs: dict[object, list[float]] = {}
        for k, x in self.x.items():
            if self.cluster[k] is not None:
                xs.setdefault(self.cluster[k], []).append(x)
        mean = {c: _mean(v) for c, v in xs.items()}
        for i, row in enumerate(self.rows):
            value = {k: (mean[self.cluster[k]] if self.cluster[k] is not None else self.x[k]) for k in row}
            self.rows[i] = self._grouped(row, value)

    # ---- coordinates ---------------------------------------------------------------------
    def _gap(self, a: str, b: str) -> float:
        same = self.cluster[a] == self.cluster[b] and self.cluster[a] is not None
        dummy = a.startswith("\0") or b.startswith("\0")
        base = NODE_GAP if same or (self.cluster[a] is None and self.cluster[b] is None) else CLUSTER_GAP
        return (base / 2 if dummy and same else base) + (self.size[a][0] + self.size[b][0]) / 2

    def place_x(self) -> None:
        for row in self.rows:                    # packed from the left
            x = 0.0
            for j, k in enumerate(row):
                x = x + self._gap(row[j - 1], k) if j else self.size[k][0] / 2
                self.x[k] = x
        for it in range(2 * SWEEPS):
            rows = self.rows if it % 2 == 0 else list(reversed(self.rows))
            for row in rows:
                want = [_mean([self.x[n] for n in self.up[k] + self.down[k]]) for k in row]
                want = [w if w is not None else self.x[k] for w, k in zip(want, row)]
                for k, x in zip(row, _fit(want, [self._gap(a, b) for a, b in zip(row, row[1:])])):
                    self.x[k] = x
        left = min((self.x[k] - self.size[k][0] / 2 for k in self.x), default=0.0)
        for k in self.x:
            self.x[k] -= left - PAD * 2

    def result(self) -> Layout:
        heights = [max((self.size[k][1] for k in row), default=0.0) for row in self.rows]
        ys, y = [], PAD * 2 + LABEL
        for h in heights:
            ys.append(y + h / 2)
            y += h + LAYER_GAP
        nodes = {k: Placed(self.x[k], ys[self.layer[k]], *self.size[k]) for k in self.size if not k.startswith("\0")}
        edges = {}
        for (a, b), path in self.chains.items():
            pa, pb = nodes[a], nodes[b]
            pts = [(pa.x, pa.y + pa.h / 2)] + [(self.x[d], ys[self.layer[d]]) for d in path[1:-1]]
            edges[(a, b)] = pts + [(pb.x, pb.y - pb.h / 2)]
        clusters = {}
        for c in {v for v in self.cluster.values() if v is not None}:
            clusters[c] = self._outline(c, ys, heights)
        width = max((self.x[k] + self.size[k][0] / 2 for k in self.x), default=0.0) + PAD * 2
        return Layout(nodes, edges, clusters, width, y - LAYER_GAP + PAD * 2)

    def _outline(self, c, ys, heights) -> list[tuple[float, float]]:
        rows = []
        for i, row in enumerate(self.rows):
            ks = [k for k in row if self.cluster[k] == c]
            real = [k for k in ks if not k.startswith("\0")]
            if not ks:
                continue
            h = heights[i] if real else 0.0
            left = min(self.x[k] - self.size[k][0] / 2 for k in ks) - PAD
            right = max(self.x[k] + self.size[k][0] / 2 for k in ks) + PAD
            rows.append((left, right, ys[i] - h / 2 - PAD, ys[i] + h / 2 + PAD))
        if not rows:
            return []
        l0, r0, t0, b0 = rows[0]
        rows[0] = (l0, max(r0, l0 + 120.0), t0 - LABEL, b0)      # room for the label
        left_side = [p for left, _, top, bottom in rows for p in ((left, top), (left, bottom))]
        right_side = [p for _, right, top, bottom in reversed(rows) for p in ((right, bottom), (right, top))]
        return left_side + right_side


def _fit(want: list[float], gaps: list[float]) -> list[float]:
    """x as close to `want` as least squares allows with x[i+1] - x[i] >= gaps[i] (blocks of
    nodes pushed apart move together, at the mean of what they want)."""
    blocks: list[list[float]] = []          # [first index, count, sum of (want - offset), span]
    offsets = [0.0]
    for g in gaps:
        offsets.append(offsets[-1] + g)
    for i, w in enumerate(want):
        blk = [i, 1, w, 0.0]
        while blocks:
            prev = blocks[-1]
            p_prev = prev[2] / prev[1]
            p_blk = blk[2] / blk[1]
            gap = offsets[blk[0]] - offsets[prev[0]]         # the distance they must keep, first to first
            if p_prev + gap <= p_blk:
                break
            blocks.pop()
            blk = [prev[0], prev[1] + blk[1], prev[2] + blk[2] - blk[1] * gap, 0.0]
        blocks.append(blk)
    out = []
    for first, count, total, _ in blocks:
        p = total / count
        out += [p + offsets[j] - offsets[first] for j in range(first, first + count)]
    return out


def _mean(v: list[float]) -> float | None:
    return sum(v) / len(v) if v else None


def _inversions(seq: list[int]) -> int:
    """Pairs out of order (edge crossings between two layers), by merge sort."""
    if len(seq) < 2:
        return 0
    mid = len(seq) // 2
    a, b = seq[:mid], seq[mid:]
    n = _inversions(a) + _inversions(b)
    a.sort()
    b.sort()
    j = 0
    for x in a:
        while j < len(b) and b[j] < x:
            j += 1
        n += j
    return n
