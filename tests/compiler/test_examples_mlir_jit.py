"""Every chain in examples/ lowers, verifies (at every stage) and runs on the MLIR CPU JIT, matching
its golden outputs and the NumPy reference."""
from __future__ import annotations

import glob
import os

import numpy as np
import pytest

from fusec.compiler.jit import jit_run
from fusec.compiler.pipeline import run_stages
from fusec.runtime import npz
from fusec.runtime.compare import compare
from fusec.runtime.reference import run_chain

parser = pytest.importorskip("fusec.dsl.parser")
checker = pytest.importorskip("fusec.dsl.checker")

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
EXAMPLES = sorted(glob.glob(os.path.join(ROOT, "examples", "*.fdsl")))


def _typed(path):
    with open(path) as f:
        return checker.check(parser.parse(f.read(), os.path.relpath(path, ROOT)))


@pytest.mark.parametrize("path", EXAMPLES, ids=[os.path.basename(p) for p in EXAMPLES])
def test_example_runs_on_mlir_jit(path):
    typed = _typed(path)
    golden_path = path[:-len(".fdsl")] + ".golden.npz"
    golden = npz.load(golden_path) if os.path.exists(golden_path) else {}
    for chain in typed.chains:
        entry = golden.get(chain.name)
        if entry is None:
            continue
        inputs = [entry["in"][p.name] for p in chain.param_nodes]
        got = jit_run(typed, chain.name, inputs)
        want = run_chain(chain, inputs)
        for i, (g, w, t) in enumerate(zip(got, want, chain.output_types)):
            for expected, what in ((entry["out"][str(i)], "golden"), (w, "reference")):
                c = compare(g, expected, t.dtype.name)
                assert c.ok, f"{chain.name} output {i} vs {what}: {c.describe()}"


@pytest.mark.parametrize("path", EXAMPLES, ids=[os.path.basename(p) for p in EXAMPLES])
def test_example_stages_verify_with_locations(path, tmp_path):
    typed = _typed(path)
    bindings = {c.name: {s: 4 for s in c.symbols} for c in typed.chains}
    stages = run_stages(typed, bindings, dump_dir=tmp_path, locations=True, until="graph")
    assert set(stages) == {"linalg", "graph"}
    assert len(list(tmp_path.iterdir())) == 2 * len(typed.chains)
    assert f'loc("examples/{os.path.basename(path)}"' in stages["linalg"]


def test_there_are_examples():
    assert EXAMPLES, "examples/ holds no .fdsl files"
    assert np is not None
