"""The HTML report opened in headless Chromium: every op and kernel of each chain in the graph
(laid out by Graphviz and by the built-in layout), the views and chains switched by clicking,
an op's detail naming the decisions that touch it, a screenshot of each view, and not one
network request. One report is built for the module (examples/log_softmax.fdsl, small sizes).
Set FUSEC_SCREENSHOTS=DIR to keep the screenshots for a person to look at."""
import os
import re
from pathlib import Path

import pytest

import fusec
from fusec.html import ChainInput, program_chains, write_html
from fusec.html.data import chain_model
from fusec.html.dot import available as dot_available

from .browser import Browser, chromium

ROOT = Path(__file__).resolve().parents[2]
VIEWS = ("graph", "roofline", "traffic", "time", "kernels")

pytestmark = pytest.mark.skipif(chromium() is None, reason="no Chromium here (.ci/run installs the Debian package "
                                                           "`chromium`)")


@pytest.fixture(scope="module")
def chains() -> list[ChainInput]:
    program = fusec.compile(str(ROOT / "examples" / "log_softmax.fdsl"), target="cpu")
    return program_chains(program, {"B": 64, "C": 64})


@pytest.fixture(scope="module")
def browser():
    with Browser(chromium()) as b:
        yield b


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    keep = os.environ.get("FUSEC_SCREENSHOTS")
    out = Path(keep) if keep else tmp_path_factory.mktemp("shots")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _layouts():
    why = "Graphviz dot is not installed (.ci/run installs the Debian package `graphviz`)"
    return ["builtin", pytest.param("dot", marks=pytest.mark.skipif(dot_available() is None, reason=why))]


def _ops_and_kernels(c: ChainInput) -> tuple[set[int], set[int]]:
    plan = c.report.plan
    ops = {o["id"] for g in plan["groups"] for o in g["ops"] if o["role"] != "init"}
    return ops, {g["kernel"] for g in plan["groups"]}


@pytest.mark.parametrize("layout", _layouts())
def test_every_op_and_kernel_is_drawn_and_views_switch(layout, chains, browser, shots, tmp_path):
    page = write_html(tmp_path / f"{layout}.html", chains, title="log_softmax", layout=layout)
    seconds = browser.open(page)
    assert seconds < 2.0
    meta = browser.evaluate("document.querySelector('.meta').textContent")
    assert ("Graphviz dot" if layout == "dot" else "built-in layered layout") in meta
    assert browser.evaluate(f"document.querySelectorAll('svg.graph.{'dot' if layout == 'dot' else 'builtin'}').length") \
        == len(chains)
    for i, c in enumerate(chains):
        ops, kernels = _ops_and_kernels(c)
        drawn = browser.evaluate(f"Array.from(document.querySelectorAll('svg.graph g.node')).map(e => e.id)"
                                 f".filter(id => id.startsWith('c{i}-op'))")
        assert ops <= {int(re.sub(r'^c\d+-op', '', d)) for d in drawn}, (c.report.chain, ops, drawn)
        clusters = browser.evaluate(f"Array.from(document.querySelectorAll('svg.graph g.cluster')).map(e => e.id)"
                                    f".filter(id => id.startsWith('c{i}-k'))")
        assert {f"c{i}-k{k}" for k in kernels} == set(clusters)
        # a value one kernel writes and another reads: marked, with its bytes
        memory = browser.evaluate(f"Array.from(document.querySelectorAll('[id^=\"c{i}-e-\"].memory text'))"
                                  ".map(t => t.textContent.trim())")
        assert len(memory) == sum(e.kind == "memory" for e in chain_model(c.report, c.typed).edges)
        assert (len(memory) > 0) == (len(kernels) > 1)
        assert all(re.fullmatch(r"[\d.]+ (k|M|G)?B", t) for t in memory), memory
    for view in VIEWS:
        browser.click(f'nav.views button[data-view="{view}"]')
        shown = browser.evaluate("Array.from(document.querySelectorAll('section.view')).filter(s => !s.hidden)"
                                 ".map(s => s.dataset.view)")
        assert shown == [view]
        png = browser.screenshot(shots / f"{layout}-{view}.png")
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    assert browser.requests() == [page.resolve().as_uri()]


def test_chains_switch_and_each_view_has_its_chart(chains, browser, tmp_path):
    page = write_html(tmp_path / "r.html", chains, title="log_softmax", layout="builtin")
    browser.open(page)
    browser.click('nav.views button[data-view="roofline"]')
    visible = "Array.from(document.querySelectorAll('section.view:not([hidden]) .scope')).filter(s => !s.hidden)" \
              ".map(s => s.dataset.scope)"
    assert browser.evaluate(visible) == ["all"]
    fused = sum(1 for c in chains for g in c.report.plan["groups"] if g["cost"]["flops"] > 0)
    assert browser.evaluate("document.querySelectorAll('section.view:not([hidden]) .scope:not([hidden]) "
                            "circle.after').length") == fused
    browser.click('nav.scopes button[data-scope="1"]')
    assert browser.evaluate(visible) == ["1"]
    browser.click('nav.views button[data-view="time"]')
    assert browser.evaluate(visible) == ["1"]
    text = browser.evaluate("document.querySelector('section.view:not([hidden]) .scope:not([hidden])').textContent")
    assert f"chain {chains[1].report.chain} " in text and "predicted" in text and "measured" in text
    if chains[1].report.unreliable:
        assert f"timing not reliable: {chains[1].report.unreliable}" in text
    browser.click('nav.views button[data-view="graph"]')
    browser.click('nav.scopes button[data-scope="all"]')
    assert browser.evaluate(visible) == [str(i) for i in range(len(chains))]      # every chain's graph
    width = "document.querySelector('svg.graph').getBoundingClientRect().width"
    before = browser.evaluate(width)
    browser.click('button[data-zoom="in"]')
    assert browser.evaluate(width) == pytest.approx(before * 1.25, rel=0.01)
    browser.click('button[data-zoom="reset"]')
    assert browser.evaluate(width) == pytest.approx(before, rel=0.01)
    assert browser.requests() == [page.resolve().as_uri()]


def test_a_nodes_detail_shows_its_kernel_and_the_decisions_that_touch_it(chains, browser, tmp_path):
    page = write_html(tmp_path / "r.html", chains, title="log_softmax", layout="builtin")
    browser.open(page)
    i, c = next((i, c) for i, c in enumerate(chains) if any("%" in d for d in c.report.plan["decisions"]))
    decision = next(d for d in c.report.plan["decisions"] if re.search(r"%\d+", d))
    op = int(re.search(r"%(\d+)", decision).group(1))
    browser.click(f"#c{i}-op{op}")
    detail = browser.evaluate("document.getElementById('detail').textContent")
    kernel = next(g for g in c.report.plan["groups"] if op in [o["id"] for o in g["ops"]])
    assert decision in detail
    assert f"kernel {kernel['kernel']}" in detail and kernel["template"] in detail
    assert browser.evaluate(f"document.getElementById('c{i}-op{op}').classList.contains('sel')")
    browser.click(f"#c{i}-k{kernel['kernel']} text")                      # a kernel's outline: the kernel
    detail = browser.evaluate("document.getElementById('detail').textContent")
    assert detail.startswith(f"kernel {kernel['kernel']} of {c.report.chain}")
    assert browser.requests() == [page.resolve().as_uri()]
