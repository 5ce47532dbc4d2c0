"""The HTML report: one self-contained page (inline SVG, CSS and a little script; nothing
fetched) with every chain's fused graph, the roofline, memory traffic and time views, and the
kernels with their kernel report and emitted source.

    write_html(path, chains, title=...)    chains: ChainInput(report, typed chain, emitted module)
    program_html(program, path, ...)       a Program's chains built, run and checked, then written
                                           (what `Program.html` runs; `fusec FILE --html` writes
                                           the main job's reports with write_html)

A frontend that hands a Program (or run reports with plan summaries) gets the same page.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .data import chain_model
from .page import page_html


@dataclass
class ChainInput:
    """One chain of the report: its run report (fusec/report.py: ChainReport, or UnrunReport
    when it was compiled and not run), its typed chain (names, source lines) and its emitted
    module (`--emit kernels`), both optional."""
    report: object
    typed: object = None
    emitted: str | None = None


def html_text(chains: list[ChainInput], *, title: str, layout: str = "auto") -> str:
    """The page; `layout`: 'auto' (Graphviz dot when installed, else built in), 'dot', 'builtin'."""
    models = [chain_model(c.report, c.typed, c.emitted) for c in chains if c.report.plan]
    return page_html(models, title=title, layout=layout)


def write_html(path, chains: list[ChainInput], *, title: str, layout: str = "auto") -> Path:
    """Write the page to `path` (atomically); returns its path. OSError when it cannot be."""
    from fusec.runtime.files import atomic_write
    text = html_text(chains, title=title, layout=layout)
    atomic_write(path, text.encode("utf-8"))
    return Path(path)


def program_html(program, path, bindings=None, *, chains=None, run: bool = True, seed: int = 0,
                 layout: str = "auto") -> Path:
    """Write the report of `program`'s chains (program_chains) to `path`."""
    inputs = program_chains(program, bindings, chains=chains, run=run, seed=seed)
    return write_html(path, inputs, title=f"fusec report: {program.typed.file.path}", layout=layout)


def program_chains(program, bindings=None, *, chains=None, run: bool = True, seed: int = 0) -> list[ChainInput]:
    """Each chain of `program` (all, or those named in `chains`) built for its binding and, with
    `run`, run and checked against the reference on seeded inputs. `bindings`: {chain: {symbol:
    size}}, or one {symbol: size} for every chain (a symbol left out is 64)."""
    from fusec.runtime import reference
    from ..report import UnrunReport, run_and_check
    if not program.target.compiled:
        raise ValueError(f"the HTML report needs a compiled target (cuda, cuda-sim, cpu), not {program.target.name}")
    bindings = bindings or {}
    shared = all(isinstance(v, int) for v in bindings.values())
    out = []
    for name in chains or list(program.chains):
        chain = program.chains[name]
        given = bindings if shared else bindings.get(name, {})
        binding = {s: int(given.get(s, 64)) for s in chain.typed.symbols}
        compiled = chain.compiled(binding)
        if run:
            rep = run_and_check(compiled, reference.random_inputs(chain.typed, binding, seed))
            rep.kernel_report = compiled.kernel_report
        else:
            rep = UnrunReport(name, program.target.name, dict(binding), compiled.plan,
                              list(compiled.kernel_report or []), "not run (run=False)")
        out.append(ChainInput(rep, chain.typed, compiled.texts.get("kernels")))
    return out
