"""Every chain in examples/ lowers, verifies (at every stage) and runs on the MLIR CPU JIT, matching
its golden outputs and the NumPy reference."""
from __future__ import annotations

import glob
import os

import pytest

from fusec.compiler.jit import jit_run
from fusec.compiler.options import CompileOptions
from fusec.compiler.pipeline import run_source_stages
from fusec.dsl import checker, parser
from fusec.runtime import npz
from fusec.runtime.compare import compare
from fusec.runtime.reference import run_chain

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
EXAMPLES = sorted(glob.glob(os.path.join(ROOT, "examples", "*.fdsl")))


def _source(path):
    with open(path) as f:
        return f.read(), os.path.relpath(path, ROOT)


def _typed(path):
    return checker.check_module(parser.parse_text(*_source(path)))


@pytest.mark.parametrize("path", EXAMPLES, ids=[os.path.basename(p) for p in EXAMPLES])
def test_example_runs_on_mlir_jit(path):
    typed = _typed(path)
    golden = npz.load_npz(path[:-len(".fdsl")] + ".golden.npz")
    for chain in typed.chains:
        entry = golden[chain.name]
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
    stages = run_source_stages(*_source(path), [c.name for c in typed.chains], bindings, dump_dir=tmp_path,
                               options=CompileOptions(locations=True), until="graph")
    assert list(stages) == ["ast", "typed", "linalg", "graph"]
    assert len(list(tmp_path.iterdir())) == 4 * len(typed.chains)
    assert f'loc("examples/{os.path.basename(path)}"' in stages["linalg"]
    assert stages["linalg"].count("func.func @") == len(typed.chains)


def test_there_are_examples_and_each_has_a_golden_file_with_every_chain():
    assert len(EXAMPLES) >= 10, "examples/ holds fewer .fdsl files than the suite expects"
    for path in EXAMPLES:
        golden = npz.load_npz(path[:-len(".fdsl")] + ".golden.npz")
        assert set(golden) == {c.name for c in _typed(path).chains}, path
