"""The report of every chain of examples/attention.fdsl (compiled, not run: the page's size and
drawing do not depend on the timings) stays under 2 MB and is drawn in under 2 s by headless
Chromium, with every op of every chain on it and no request made."""
from pathlib import Path

import pytest

import fusec
from fusec.html import program_chains, write_html

from .browser import Browser, chromium

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(chromium() is None, reason="no Chromium here (.ci/run installs the Debian package `chromium`)")
def test_the_attention_examples_report_is_small_and_quick(tmp_path):
    program = fusec.compile(str(ROOT / "examples" / "attention.fdsl"), target="cpu")
    chains = program_chains(program, run=False)
    page = write_html(tmp_path / "attention.html", chains, title="attention")
    assert page.stat().st_size < 2 * 1024 * 1024
    ops = {f"c{i}-op{o['id']}" for i, c in enumerate(chains) for g in c.report.plan["groups"] for o in g["ops"]
           if o["role"] != "init"}
    with Browser(chromium()) as b:
        seconds = min(b.open(page) for _ in range(3))
        assert seconds < 2.0
        drawn = set(b.evaluate("Array.from(document.querySelectorAll('svg.graph g.node')).map(e => e.id)"))
        assert ops <= drawn
        assert b.requests() == [page.resolve().as_uri()]
