"""The README's sample of the main job is what the command prints: its block (after `## The main
job`) is matched against a real run of its command, where `...` stands for any text within a
line and a line of only `...` for any number of lines. The cpu profile is pinned to the cost
tests' fixed one, so that the plan shown does not depend on the machine running the test."""
import importlib.util
import re
import sys
from pathlib import Path

import pytest

from fusec.cli import main
from fusec.compiler import calibrate

ROOT = Path(__file__).resolve().parents[1]


def fixed_cpu():
    spec = importlib.util.spec_from_file_location("fusec_tests_model_helpers", ROOT / "tests" / "cost" / "model_helpers.py")
    mod = sys.modules["fusec_tests_model_helpers"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.CPU


def main_job_block() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## The main job", 1)[1]
    block = re.search(r"^```\n(.*?)^```", section, re.S | re.M).group(1)
    return block.rstrip("\n").split("\n")


def pattern(lines: list[str]) -> re.Pattern:
    parts = []
    for line in lines:
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(".*?".join(re.escape(p) for p in line.split("...")) + r"\n")
    return re.compile("".join(parts))


def test_the_main_job_sample_is_what_fusec_prints(monkeypatch, capsys):
    lines = main_job_block()
    assert lines[0].startswith("$ fusec ")
    argv = lines[0][len("$ fusec "):].split()
    monkeypatch.setattr(calibrate, "_CPU", fixed_cpu())
    monkeypatch.chdir(ROOT)
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert pattern(lines[1:]).fullmatch(out), "README's sample:\n" + "\n".join(lines[1:]) + f"\n\nfusec printed:\n{out}"
    monkeypatch.setattr(calibrate, "_CPU", None)


@pytest.mark.parametrize("sample, out, ok", [
    (["a ... b", "...", "c"], "a 1 b\nx\ny\nc\n", True),
    (["a ... b", "c"], "a 1 b\nx\nc\n", False),
    (["a b"], "a c\n", False),
])
def test_the_matcher(sample, out, ok):
    assert bool(pattern(sample).fullmatch(out)) is ok
