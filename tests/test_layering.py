"""The package's layers: no import circles, no upward imports, every package in the wheel.

Every module's imports (function-local ones included) are read from its AST. The layers:
`fusec.dsl` imports none of the others; `fusec.compiler` and `fusec.runtime` import only
`fusec.dsl` (and never each other); the front door (`fusec`, `fusec.cli`, ...) wires them all.
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"fusec": ROOT / "fusec", "fusec.dsl": ROOT / "dsl", "fusec.compiler": ROOT / "compiler",
            "fusec.runtime": ROOT / "runtime"}
LAYER_OF = {"fusec.dsl": "dsl", "fusec.compiler": "compiler", "fusec.runtime": "runtime"}
ALLOWED = {"dsl": {"dsl"}, "compiler": {"compiler", "dsl"}, "runtime": {"runtime", "dsl"},
           "front": {"front", "dsl", "compiler", "runtime"}}


def _modules() -> dict[str, Path]:
    """Every module of the package: dotted name -> file."""
    out = {}
    for pkg, directory in PACKAGES.items():
        for f in sorted(directory.rglob("*.py")):
            rel = f.relative_to(directory).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            if pkg == "fusec" and parts and f"fusec.{parts[0]}" in PACKAGES:
                continue                    # fusec/dsl, ...: the links to the stage folders
            out[".".join([pkg] + parts)] = f
    return out


MODULES = _modules()


def _layer(module: str) -> str:
    for prefix, layer in LAYER_OF.items():
        if module == prefix or module.startswith(prefix + "."):
            return layer
    return "front"


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module: str) -> set[str]:
    """The fusec modules `module` imports (a package's submodule when `from pkg import sub`)."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, path.name == "__init__.py", node)
            names = [f"{target}.{a.name}" if f"{target}.{a.name}" in MODULES else target for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name != module:
                out.add(name)
    return out


GRAPH = {m: imports_of(m) for m in MODULES}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_the_import_graph_sees_every_module_and_its_relative_imports():
    assert {"fusec.compiler.pipeline", "fusec.compiler.plan.planner", "fusec.compiler.emit.module",
            "fusec.dsl.parser", "fusec.runtime.artifact", "fusec.cli"} <= set(MODULES)
    assert "fusec.compiler.plan.cost" in GRAPH["fusec.compiler.plan.planner"]          # from .cost import ...
    assert "fusec.compiler.mathfns" in GRAPH["fusec.compiler.plan.hardware"]           # from .. import mathfns
    assert "fusec.compiler.pipeline" in GRAPH["fusec.compiler.calibrate"]


def test_no_import_circles():
    circles = _cycles(GRAPH)
    assert not circles, f"import circles: {circles}"


def test_the_cycle_finder_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_upward_or_sideways_imports():
    bad = [(m, w) for m, ws in GRAPH.items() for w in ws if _layer(w) not in ALLOWED[_layer(m)]]
    assert not bad, "imports across layers: " + ", ".join(f"{m} -> {w}" for m, w in bad)


@pytest.mark.parametrize("edge", [("fusec.compiler.pipeline", "fusec.runtime.reference"),
                                  ("fusec.dsl.checker", "fusec.compiler.mlir"),
                                  ("fusec.runtime.artifact", "fusec.compiler.pipeline")])
def test_the_layer_rule_forbids_the_edges_the_design_forbids(edge):
    src, dst = edge
    assert _layer(dst) not in ALLOWED[_layer(src)]


def test_planning_loads_neither_the_emitter_nor_the_execution_engine():
    code = ("import sys, fusec.compiler.plan, fusec.compiler.plan.planner, fusec.compiler.options; "
            "print(sorted(m for m in sys.modules if m.startswith('fusec.compiler.emit') or 'execution_engine' in m))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_package_is_in_the_wheel():
    """pyproject.toml lists each package (a missing one is silently left out of the wheel), each
    where its name says (package-dir maps nothing: fusec/dsl, fusec/compiler and fusec/runtime
    are links to the stage folders)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = {m for m, f in MODULES.items() if f.name == "__init__.py"}
    assert set(config["packages"]) == packages
    assert config["package-dir"] == {"": "."}
    for name in packages:
        assert (ROOT.joinpath(*name.split(".")) / "__init__.py").is_file(), name
    for name, directory in PACKAGES.items():
        link = ROOT.joinpath(*name.split("."))
        assert name == "fusec" or (link.is_symlink() and os.readlink(link) == f"../{directory.name}"), name


def test_no_module_outside_the_gateway_imports_mlir_bindings():
    offenders = []
    for m, f in MODULES.items():
        if m == "fusec.compiler.mlir":
            continue
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            offenders += [f"{m}: {n}" for n in names if n.split(".")[0] in ("mlir", "torch_mlir")]
    assert not offenders


if os.environ.get("FUSEC_LAYERING_DEBUG"):        # print the graph (FUSEC_LAYERING_DEBUG=1 pytest -s ...)
    for _m, _ws in sorted(GRAPH.items()):
        print(_m, "->", ", ".join(sorted(_ws)))


def test_the_architecture_page_layout_table_matches_the_tree():
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    rows = [line.split("|")[1].strip().strip("`") for line in text.splitlines()
            if line.startswith("| `") and line.count("|") >= 3]
    for path in rows:
        assert (ROOT / path).exists(), f"docs/ARCHITECTURE.md lists {path}, which does not exist"
    listed = {r.rstrip("/") for r in rows}
    top = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))
           and p.name not in ("build", "out", "dist") and not p.name.endswith(".egg-info")}
    compiler = {f"compiler/{p.name}" for p in (ROOT / "compiler").iterdir()
                if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").exists()}
    missing = sorted((top | compiler | {".ci"}) - listed)
    assert not missing, f"docs/ARCHITECTURE.md's layout table lacks {missing}"


@pytest.mark.parametrize("stage", ["dsl", "compiler", "runtime"])
def test_a_stage_folder_imported_by_its_bare_name_is_refused_in_one_line(stage):
    """From the checkout root `import dsl.ops` would load a second copy of every module (a second
    op table, a second OpError): it is refused, in one line naming the package to import."""
    sub = {"dsl": "ops", "compiler": "pipeline", "runtime": "cache"}[stage]
    r = subprocess.run([sys.executable, "-c", f"import {stage}.{sub}"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith(f"{stage} is fusec.{stage}: import fusec.{stage}, not {stage} ")
    assert r.stderr.count("\n") == 1
    # an ImportError like any other where it is caught; the package itself imports from the same place
    code = (f"try:\n    import {stage}\nexcept ImportError as e:\n    print(type(e).__name__, e.name)\n"
            f"import fusec.{stage}.{sub} as m\nprint(m.__name__)")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert (r.returncode, r.stdout, r.stderr) == (0, f"ImportError {stage}\nfusec.{stage}.{sub}\n", "")


def test_the_installed_package_is_found_by_reading_files_alone():
    """Editors and type checkers run no import hook: they look for fusec/ in site-packages and in
    the directories its .pth files name. The first fusec/ there is the one Python imports, with its
    stage packages in it (the editable install: this checkout's directory, one .pth line)."""
    import site

    import fusec.compiler.pipeline
    import fusec.dsl.parser
    dirs = []
    for sp in map(Path, site.getsitepackages()):
        dirs.append(sp)
        for pth in sorted(sp.glob("*.pth")):
            dirs += [sp / line.strip() for line in pth.read_text().splitlines()
                     if line.strip() and not line.startswith(("#", "import ", "import\t"))]
    found = [d for d in dirs if (d / "fusec" / "__init__.py").is_file()]
    assert found, (f"no fusec/ in {[str(d) for d in dirs]}: an editable install by an import hook, which "
                   "editors cannot follow? pip install -e '.[dev]' again")
    top = found[0] / "fusec"
    assert Path(fusec.compiler.pipeline.__file__) == top / "compiler" / "pipeline.py"
    assert Path(fusec.dsl.parser.__file__) == top / "dsl" / "parser.py"
    assert (top / "runtime" / "__init__.py").is_file() and (top / "cli" / "__init__.py").is_file()
