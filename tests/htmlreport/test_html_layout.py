"""The report's pieces without a browser: the built-in layered layout (edges point down, no two
nodes of a layer overlap, a cluster's outline holds its nodes, a few hundred ops in well under
a second), the decisions linked to the ops and kernels they name, the graph's edges marked by
where their tensor lives, a page that can fetch nothing, and the plots' log scales."""
import random
import time
from types import SimpleNamespace

import pytest

from fusec.html import html_text
from fusec.html.data import _decision, chain_model
from fusec.html.layout import layered
from fusec.plots import figures


def _dag(n: int, seed: int = 1):
    rnd = random.Random(seed)
    sizes = {f"n{i}": (rnd.randint(80, 220), 52.0) for i in range(n)}
    edges = []
    for i in range(1, n):
        for _ in range(rnd.choice([1, 1, 2, 3])):
            edges.append((f"n{max(0, i - rnd.choice([1, 1, 2, 3, 7, 30]))}", f"n{i}"))
    return sizes, edges, {f"n{i}": i // 12 for i in range(n)}


def _inside(x, y, poly) -> bool:
    hit = False
    for (x0, y0), (x1, y1) in zip(poly, poly[1:] + poly[:1]):
        if (y0 > y) != (y1 > y) and x < x0 + (y - y0) * (x1 - x0) / (y1 - y0):
            hit = not hit
    return hit


def test_builtin_layout_is_layered_without_overlaps_and_fast():
    sizes, edges, cluster = _dag(300)
    t0 = time.perf_counter()
    lay = layered(sizes, edges, cluster)
    assert time.perf_counter() - t0 < 5.0          # a few hundred ops (0.2 s on the development machine)
    assert set(lay.nodes) == set(sizes)
    for a, b in set(edges):
        pa, pb = lay.nodes[a], lay.nodes[b]
        assert pa.y < pb.y                                              # top to bottom
        pts = lay.edges[(a, b)]
        assert pts[0] == (pa.x, pa.y + pa.h / 2) and pts[-1] == (pb.x, pb.y - pb.h / 2)
        assert all(y0 < y1 for (_, y0), (_, y1) in zip(pts, pts[1:]))
    rows: dict[float, list] = {}
    for p in lay.nodes.values():
        rows.setdefault(p.y, []).append(p)
    for row in rows.values():
        row.sort(key=lambda p: p.x)
        for p, q in zip(row, row[1:]):
            assert p.x + p.w / 2 < q.x - q.w / 2, "nodes of one layer overlap"
    for k, p in lay.nodes.items():
        assert _inside(p.x, p.y, lay.clusters[cluster[k]]), k
        assert 0 <= p.x - p.w / 2 and p.x + p.w / 2 <= lay.width and p.y + p.h / 2 <= lay.height


def test_builtin_layout_puts_an_argument_just_above_its_reader_and_keeps_a_cluster_together():
    sizes = {k: (100.0, 40.0) for k in ("a", "b", "c", "arg", "x", "y")}
    edges = [("a", "b"), ("b", "c"), ("arg", "c"), ("a", "x"), ("x", "y")]
    lay = layered(sizes, edges, {"a": 0, "b": 0, "c": 0, "x": 1, "y": 1})
    assert lay.nodes["arg"].y == lay.nodes["b"].y                      # not on the top layer
    assert not _inside(lay.nodes["x"].x, lay.nodes["x"].y, lay.clusters[0])
    assert not _inside(lay.nodes["b"].x, lay.nodes["b"].y, lay.clusters[1])


@pytest.mark.parametrize("text, verdict, ops, kernels", [
    ("fused: %9 map(divf,mulf) into kernel 0: saves 2x1.05 MB and a launch, -47.6 us", "fused", [9], [0]),
    ("attention: %2..%5 as one online-softmax kernel (64 queries per block): predicted 442 us against 479 us in "
     "2 kernels", "attention", [2, 3, 4, 5], []),
    ("not fused horizontally: the kernels of %6 contract and %9 contract (both read arg0): a contraction kernel "
     "has one root", "not fused horizontally", [6, 9], []),
    ("kernel 3: %12 batch_matmul: one BLAS call per chunk (4 chunks)", "note", [12], [3]),
    ("recomputed: %4 map(exp) in kernels 1, 2: saves 4 kB", "recomputed", [4], [1, 2]),
])
def test_a_decision_names_its_ops_and_kernels(text, verdict, ops, kernels):
    d = _decision(text)
    assert (d["verdict"], d["ops"], d["kernels"]) == (verdict, ops, kernels)


def _op(i, kind, label, operands, users, shape=(8, 16)):
    return {"id": i, "kind": kind, "name": "linalg.generic", "label": label, "shape": list(shape), "dtype": "f32",
            "bytes": 4 * 128, "loc": f"chain.fdsl:{2 + i}:5", "note": "", "users": users, "operands": operands,
            "indirect": []}


def _plan():
    """x -> %0 exp -> %1 sum (kernel 0, writes it) -> %2 div reads %0 and %1 (kernel 1, %0 recomputed)."""
    graph = [_op(0, "elementwise", "map(exp)", [["arg0", None, 512, False], ["empty", None, 512, True]], [1, 2]),
             _op(1, "reduction", "reduce(addf)", [["%0:0", 0, 512, False], ["empty", None, 32, True]], [2], (8,)),
             _op(2, "elementwise", "map(divf)", [["%0:0", 0, 512, False], ["%1:0", 1, 32, False],
                                                 ["empty", None, 512, True]], [-1])]
    groups = [{"kernel": 0, "template": "row", "root": 1, "recomputed": [], "serial": False, "loops": [8, 16],
               "block_tiles": [1, 0], "thread_tiles": [], "threads": [1], "ops": [
                   {"id": 0, "label": "map(exp)", "role": "producer", "loc": ""},
                   {"id": 1, "label": "reduce(addf)", "role": "root", "loc": ""}]},
              {"kernel": 1, "template": "elementwise", "root": 2, "recomputed": [0], "serial": False, "loops": [8, 16],
               "block_tiles": [1, 0], "thread_tiles": [], "threads": [1], "ops": [
                   {"id": 0, "label": "map(exp)", "role": "producer", "loc": ""},
                   {"id": 2, "label": "map(divf)", "role": "root", "loc": ""}]}]
    decisions = ["fused: %0 map(exp) into kernel 0: saves 1 kB", "recomputed: %0 map(exp) in kernel 1: saves 512 B"]
    return {"chain": "c", "ops": 3, "kernels": 2, "groups": groups, "decisions": decisions, "graph": graph}


def _report(plan):
    return SimpleNamespace(chain="c", target="cpu", binding={}, plan=plan, output_types=["f32[8, 16]"],
                           kernel_report=None, fused=None, unfused=None, unreliable=None, untimed=None, why=None)


def test_edges_say_where_their_tensor_lives():
    m = chain_model(_report(_plan()))
    kinds = {(e.src, e.dst): e.kind for e in m.edges}
    assert kinds == {("arg0", "op0"): "input", ("op0", "op1"): "onchip", ("op0", "op2"): "onchip",
                     ("op1", "op2"): "memory", ("op2", "out0"): "output"}
    nodes = {n.key: n for n in m.nodes}
    assert nodes["op0"].kernel == 0 and nodes["op0"].detail["recomputed_in"] == [1]
    assert nodes["op0"].detail["decisions"] == [0, 1] and nodes["op2"].detail["decisions"] == []
    assert [k["decisions"] for k in m.kernels] == [[0], [1]]


@pytest.mark.parametrize("layout", ["builtin", "auto"])
def test_the_page_fetches_nothing(layout):
    page = html_text([SimpleNamespace(report=_report(_plan()), typed=None, emitted="def f():\n    return 1\n")],
                     title="t", layout=layout)
    head = page[:page.index("</head>")]
    assert "Content-Security-Policy" in head and "default-src 'none'" in head
    for bad in ("<link", "src=", "url(http", "@import", "fetch(", "XMLHttpRequest", "WebSocket"):
        assert bad not in page, bad
    assert {u for u in __import__("re").findall(r"https?://[^\s\"'<>]+", page)} <= {
        "http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}
    assert 'id="c0-op0"' in page and 'id="c0-k1"' in page and "def f():" in page


def test_plots_keep_an_outlier_from_hiding_the_rest():
    cost = {"flops": 1e6, "intensity": 2.0, "time_s": 2e-5, "launch_s": 5e-6, "alloc_s": 0.0, "compute_s": 1e-5,
            "bytes": 1e3, "bytes_unfused": 5e8}
    plan = {"model": {"unfused_kernels": [cost, cost], "hardware": "cpu",
                      "roof": {"peak_flops": 1e12, "bandwidth": 1e11, "cache_bandwidth": 2e11, "l2_bytes": 1 << 25}},
            "groups": [{"kernel": 0, "cost": cost}, {"kernel": 1, "cost": dict(cost, bytes_unfused=2e3)}]}
    r = SimpleNamespace(chain="c", plan=plan, fused=SimpleNamespace(min_s=3e-5), unfused=SimpleNamespace(min_s=0.055),
                        unreliable="the machine was busy")
    figs = figures([r])
    (ax,) = [a for a in figs["breakdown.png"].axes if a.get_title() == "c"]
    lo, hi = ax.get_ylim()
    assert ax.get_yscale() == "log" and lo < 0.04 / 2 and hi > 55        # 0.04 ms predicted beside 55 ms measured
    assert "timing not reliable" in ax.get_xlabel()
    assert figs["traffic.png"].axes[0].get_yscale() == "log"              # 500 MB beside 2 kB
    import matplotlib.pyplot as plt
    for f in figs.values():
        plt.close(f)
