"""The README's sample of the main job is what the command prints: its block (after `## The main
job`) is matched against a real run of its command, where `...` stands for any text within a
line and a line of only `...` for any number of lines; so is the user guide's (docs/GUIDE.md).
The cpu profile is pinned to the cost tests' fixed one, so that the plan shown does not depend
on the machine running the test. The README's first command runs that same sample's file and
binding, and `.ci/run` runs the README's two commands exactly."""
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


def main_job_block(page: str = "README.md") -> list[str]:
    """The first fenced block after `## The main job` that starts with `$ fusec `."""
    text = (ROOT / page).read_text(encoding="utf-8")
    section = text.split("## The main job", 1)[1]
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", section, re.S | re.M):
        if block.startswith("$ fusec "):
            return block.rstrip("\n").split("\n")
    raise AssertionError(f"{page}: no `$ fusec ...` block after `## The main job`")


def pattern(lines: list[str]) -> re.Pattern:
    parts = []
    for line in lines:
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(".*?".join(re.escape(p) for p in line.split("...")) + r"\n")
    return re.compile("".join(parts))


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"^```sh\n(.*?)^```", text, re.S | re.M).group(1)
    return block.rstrip("\n").split("\n")


@pytest.mark.slow
@pytest.mark.parametrize("page", ["README.md", "docs/GUIDE.md"])
def test_the_main_job_sample_is_what_fusec_prints(page, monkeypatch, capsys):
    lines = main_job_block(page)
    argv = lines[0][len("$ fusec "):].split()
    monkeypatch.setattr(calibrate, "_CPU", fixed_cpu())
    monkeypatch.chdir(ROOT)
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert pattern(lines[1:]).fullmatch(out), f"{page}'s sample:\n" + "\n".join(lines[1:]) + f"\n\nfusec printed:\n{out}"
    monkeypatch.setattr(calibrate, "_CPU", None)


def test_the_first_command_runs_the_sample():
    """The README opens with exactly two commands: the first installs and runs the main job shown
    in the sample, the second runs the tests; .ci/run runs both, verbatim."""
    first, second = readme_commands()
    sample = main_job_block()[0][len("$ "):]
    assert first.startswith(".ci/system-packages && python3 -m venv .venv && ") and first.endswith(" && " + sample)
    assert second == '. .venv/bin/activate && python -m pytest -q -n auto -m "not slow"'
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert first in ci and second in ci
    assert ". .venv/bin/activate && python -m pytest -q -n auto -m slow" in ci   # CI runs the long tests too


@pytest.mark.parametrize("sample, out, ok", [
    (["a ... b", "...", "c"], "a 1 b\nx\ny\nc\n", True),
    (["a ... b", "c"], "a 1 b\nx\nc\n", False),
    (["a b"], "a c\n", False),
])
def test_the_matcher(sample, out, ok):
    assert bool(pattern(sample).fullmatch(out)) is ok
