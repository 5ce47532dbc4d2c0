"""Regression: `run_source_stages` (what `--emit` and `--dump-dir` run) parsed and checked the
whole file again for every chain, and every chain kept its own syntax tree: quadratic in the
number of chains (200 chains: ~65 s for `--emit ast` against 0.7 s for a plain run). The file
is now parsed and checked once and each chain goes on from its typed chain."""
import pytest

from fusec.cli import main
from fusec.compiler import pipeline

CHAINS = 150


def many_chains(n: int) -> str:
    head = "const scale = 2.0\n\n"
    return head + "\n".join(f"chain c{i}(x: f32[M, 8]) -> f32[M, 8] {{\n    return exp(x) * scale + {i}.0\n}}\n"
                            for i in range(n))


@pytest.fixture
def counted(monkeypatch):
    calls = {"parse": 0, "check": 0}

    def counting(name, fn):
        def wrapper(*a, **k):
            calls[name] += 1
            return fn(*a, **k)
        return wrapper
    monkeypatch.setattr(pipeline, "parse_text", counting("parse", pipeline.parse_text))
    monkeypatch.setattr(pipeline, "check_module", counting("check", pipeline.check_module))
    return calls


@pytest.mark.parametrize("stage", ["ast", "typed"])
def test_emit_on_a_file_of_many_chains_parses_and_checks_it_once(tmp_path, capsys, counted, stage):
    f = tmp_path / "many.fdsl"
    f.write_text(many_chains(CHAINS))
    dump = tmp_path / "dump"
    assert main([str(f), "--emit", stage, "--target", "cpu", "--dump-dir", str(dump)]) == 0
    assert counted == {"parse": 1, "check": 1}
    out = capsys.readouterr().out
    parts = out.split("\n// -----\n")
    assert len(parts) == CHAINS
    if stage == "ast":                   # each chain's part of the file: the const, then the chain
        assert all(p.strip().startswith("(const scale 2.0)") and p.count("(chain ") == 1 and f"(chain c{i}\n" in p
                   for i, p in enumerate(parts))
    else:
        assert all(f"c{i}" in p for i, p in enumerate(parts))
    names = sorted(p.name for p in dump.iterdir())
    assert len(names) == CHAINS * (1 if stage == "ast" else 2)
    assert (dump / f"c7.{pipeline.STAGE_NAMES.index(stage):02d}-{stage}.txt").read_text().strip() == parts[7].strip()


def test_the_stages_of_each_chain_are_what_a_compile_of_that_chain_alone_gives():
    text = many_chains(3)
    joined = pipeline.run_source_stages(text, "three.fdsl", ["c0", "c2"], until="typed")
    alone = [pipeline.compile_source(text, "three.fdsl", c, until="typed").texts for c in ("c0", "c2")]
    for stage in ("ast", "typed"):
        assert joined[stage] == "\n// -----\n\n".join(t[stage] for t in alone)
