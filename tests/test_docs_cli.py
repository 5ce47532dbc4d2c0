"""docs/CLI.md names every flag of every command: each flag that `fusec ... --help` lists is in
that command's section of the page, and each subcommand of `fusec cache` too."""
import re
from pathlib import Path

import pytest

from fusec.cli import main

CLI_MD = Path(__file__).resolve().parents[1] / "docs" / "CLI.md"


def section(title: str) -> str:
    text = CLI_MD.read_text(encoding="utf-8")
    parts = re.split(r"^## ", text, flags=re.M)
    found = [p for p in parts if p.startswith(title)]
    assert found, f"docs/CLI.md has no section `## {title}...`"
    return found[0]


def help_text(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv + ["--help"])
    assert e.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("argv, title", [
    ([], "`fusec FILE`"),
    (["test"], "`fusec test`"),
    (["compile"], "`fusec compile`"),
    (["run"], "`fusec run`"),
    (["cache"], "`fusec cache`"),
    (["import"], "`fusec import`"),
])
def test_every_flag_is_documented(argv, title, capsys):
    text = help_text(argv, capsys)
    flags = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", text)) - {"--help"}
    doc = section(title)
    missing = sorted(f for f in flags if not re.search(re.escape(f) + r"(?![\w-])", doc))
    assert not missing, f"docs/CLI.md's {title} section lacks {missing}"
    if argv == ["cache"]:
        choices = re.search(r"\{([a-z,]+)\}", text).group(1).split(",")
        assert all(f"fusec cache {c}" in doc for c in choices)
