"""One name, one thing: no public name is defined at module level in more than one module.

A public name is a module-level def, class or assignment (annotated or not, tuple targets
included, inside a module-level `if`/`try` too) whose name does not start with `_`. Two
modules defining one (two `CacheError`s, two `compile_source`s with different results) make a
reader, a grep and an import guess which is meant: where both are the same thing, one defines
it and the other imports it; where they differ, each gets a name that says what it is.

The four package folders are read where they lie (`compiler/`, `dsl/`, `runtime/`, `fusec/`);
`fusec/compiler`, `fusec/dsl` and `fusec/runtime` are links to the first three and are not
followed, so no module is read twice. Read from the AST: nothing is imported.
"""
from __future__ import annotations

import ast
import os
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("compiler", "dsl", "runtime", "fusec")

# Names every module of a kind defines on purpose, each its own: a protocol, not a clash.
EXEMPT = {
    "NAME",      # each graph pass's name (compiler/transforms/*, compiler/plan/conv.py)
    "STAGE",     # each stage module's name (compiler/jit.py, lowering/lower.py, transforms/graph.py)
    "load",      # a format's loader: runtime/artifact.py's artifact, fusec/onnx.py's model (`fusec.onnx.load`)
    "main",      # a program's entry point (fusec/cli, compiler/report/child.py: the report's child Python)
    "parser",    # each CLI subcommand's argument parser (fusec/cli/*.py)
    "run",       # each CLI subcommand's action (fusec/cli/*.py), the report child's work
}

# Names still defined twice while a change elsewhere removes the second definition: each is
# a known failure, listed here until it is fixed (and then must leave the list). None now.
KNOWN: set[str] = set()


def _modules() -> list[Path]:
    """Every .py file under the package folders, symlinked folders not followed."""
    out = []
    for folder in FOLDERS:
        for directory, dirs, files in os.walk(ROOT / folder):      # followlinks=False
            dirs[:] = sorted(d for d in dirs if not (Path(directory) / d).is_symlink())
            out += [Path(directory) / f for f in sorted(files) if f.endswith(".py")]
    return out


def _targets(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, (ast.Tuple, ast.List)):
        return [n for e in node.elts for n in _targets(e)]
    if isinstance(node, ast.Starred):
        return _targets(node.value)
    return []                                   # x.attr = ..., x[i] = ...: defines no name


def _defined(body: list[ast.stmt]) -> list[str]:
    """The names a module body's statements define (into module-level if/try blocks too)."""
    out = []
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.append(node.name)
        elif isinstance(node, ast.Assign):
            out += [n for t in node.targets for n in _targets(t)]
        elif isinstance(node, ast.AnnAssign):
            out += _targets(node.target)
        elif isinstance(node, ast.If):
            out += _defined(node.body) + _defined(node.orelse)
        elif isinstance(node, ast.Try):
            out += _defined(node.body) + [n for h in node.handlers for n in _defined(h.body)]
            out += _defined(node.orelse) + _defined(node.finalbody)
    return out


def public_definitions() -> dict[str, list[str]]:
    """Public name -> the modules (paths from the root) that define it."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in _modules():
        rel = path.relative_to(ROOT).as_posix()
        for name in dict.fromkeys(_defined(ast.parse(path.read_text(), rel).body)):
            if not name.startswith("_"):
                where[name].append(rel)
    return where


def duplicates() -> dict[str, list[str]]:
    return {n: ms for n, ms in sorted(public_definitions().items()) if len(ms) > 1 and n not in EXEMPT}


def test_the_scan_reads_each_module_once():
    rels = [p.relative_to(ROOT).as_posix() for p in _modules()]
    assert len(rels) == len(set(rels))
    assert not [r for r in rels if r.startswith(("fusec/compiler/", "fusec/dsl/", "fusec/runtime/"))]
    assert {"compiler/pipeline.py", "dsl/checker.py", "runtime/cache.py", "fusec/cli/__init__.py"} <= set(rels)


def test_no_public_name_is_defined_twice():
    found = {n: ms for n, ms in duplicates().items() if n not in KNOWN}
    assert not found, "public names defined in more than one module (rename or import one):\n" + "\n".join(
        f"  {n}: {', '.join(ms)}" for n, ms in found.items())


def test_known_duplicates_are_still_duplicates():
    """A name fixed elsewhere leaves KNOWN, so the list never hides a new clash of that name."""
    assert not KNOWN - set(duplicates()), f"fixed, remove from KNOWN: {sorted(KNOWN - set(duplicates()))}"


def test_the_exempt_names_are_protocols():
    """Every exempt name is still defined more than once (else the exemption is not needed)."""
    defs = public_definitions()
    assert all(len(defs.get(n, ())) > 1 for n in EXEMPT), {n: defs.get(n) for n in EXEMPT}
