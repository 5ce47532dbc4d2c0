"""What the transform tests share: compiles of small FDSL chains for the suite's fixed profiles
(tests/data/cpu-profile.json on the cpu, the H200 on the gpu; as tests/tools/emitted_digest.py
builds them), FileCheck, and numerics against the NumPy reference."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import fusec
from fusec.compiler.jit import jit_run
from fusec.compiler.options import CompileOptions
from fusec.compiler.pipeline import compile_source
from fusec.compiler.plan.hardware import get, profile_from_dict
from fusec.runtime import reference
from fusec.runtime.compare import compare

ROOT = Path(__file__).resolve().parents[2]
CPU = profile_from_dict(json.loads((ROOT / "tests" / "data" / "cpu-profile.json").read_text()))
GPU = get("h200")


def chain_name(src: str) -> str:
    return re.search(r"chain\s+(\w+)", src).group(1)


def options(target: str = "cpu", **kw) -> CompileOptions:
    return CompileOptions(target=target, hardware=CPU if target == "cpu" else GPU, **kw)


def compile_(src: str, binding: dict, target: str = "cpu", until: str | None = None, **kw):
    """The ChainStages of the first chain of `src` (texts per stage: st.texts["graph"] ...)."""
    return compile_source(src, "t.fdsl", chain_name(src), binding, options=options(target, **kw), until=until)


def texts(src: str, binding: dict, target: str = "cpu", until: str | None = None, **kw) -> dict[str, str]:
    return compile_(src, binding, target, until, **kw).texts


def filecheck(text: str, checks: str) -> None:
    """LLVM FileCheck semantics (the `filecheck` package), as tests/compiler/chainbuild.py."""
    with tempfile.NamedTemporaryFile("w", suffix=".check", delete=False) as f:
        f.write(checks)
    r = subprocess.run([sys.executable, "-m", "filecheck", f.name], input=text, capture_output=True, text=True)
    Path(f.name).unlink()
    if r.returncode != 0:
        raise AssertionError(f"FileCheck failed:\n{r.stdout}\n{r.stderr}\n--- input ---\n{text}")


def inputs_and_reference(src: str, binding: dict, seed: int = 3):
    chain = fusec.check(src).chain(chain_name(src))
    inputs = reference.random_inputs(chain, binding, seed=seed)
    return chain, inputs, reference.run_chain(chain, inputs, binding)


def assert_matches(got, want, chain) -> None:
    got = list(got) if isinstance(got, (list, tuple)) else [got]
    assert len(got) == len(want)
    for g, w, t in zip(got, want, chain.output_types):
        c = compare(np.asarray(g), w, t.dtype.name)
        assert c.ok, c.describe()


def graph_jit_matches(src: str, binding: dict, disabled=()) -> None:
    """The graph-stage module (with `disabled` passes left out) run by MLIR's JIT gives the
    reference's numbers."""
    chain, inputs, want = inputs_and_reference(src, binding)
    assert_matches(jit_run(chain, chain.name, inputs, binding, disabled_passes=tuple(disabled)), want, chain)


def run_matches(src: str, binding: dict, target: str = "cpu", **kw) -> None:
    """The fused build on `target` (cpu | cuda-sim) gives the reference's numbers."""
    chain, inputs, want = inputs_and_reference(src, binding)
    hw = CPU if target == "cpu" else GPU
    prog = fusec.compile(src, target=target, options=CompileOptions(hardware=hw, **kw), cache=False)
    compiled = getattr(prog, chain.name).compiled(binding)
    assert_matches(compiled.fused(*inputs), want, chain)


def count(pattern: str, text: str) -> int:
    return len(re.findall(pattern, text))
