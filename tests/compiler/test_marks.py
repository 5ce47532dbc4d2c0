"""Every `fusec.*` IR attribute is spelled once, in compiler/marks.py: the emitter's contract has
one home, and no stage learns an attribute's name by importing another stage."""
import re
from pathlib import Path

from fusec.compiler import marks

ROOT = Path(__file__).resolve().parents[2]
LITERAL = re.compile(r"""["']fusec\.(?!(?:dsl|compiler|runtime|cli)["'])[a-z_]+["']""")   # not a package name


def test_no_attribute_name_is_spelled_outside_marks():
    spelled = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
               for folder in ("compiler", "dsl", "runtime", "fusec")
               for p in sorted((ROOT / folder).rglob("*.py")) if p.name != "marks.py"
               for i, line in enumerate(p.read_text().splitlines(), 1) if LITERAL.search(line)]
    assert spelled == []


def test_marks_are_distinct_attribute_names():
    names = {k: v for k, v in vars(marks).items() if k.isupper() and isinstance(v, str)}
    assert all(v.startswith("fusec.") for v in names.values())
    assert len(set(names.values())) == len(names), "two constants for one attribute"
