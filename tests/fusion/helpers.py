"""Compile FDSL snippets through the pipeline without running them (no Numba needed)."""
import json
import os
import textwrap

import fusec
from fusec.compiler.calibrate import cpu_profile
from fusec.compiler.options import CompileOptions
from fusec.compiler.pipeline import compile_typed


def options(target="gpu", **kw) -> CompileOptions:
    """Compile options for `target`, planned for the H200 (gpu) or this machine's profile (cpu)."""
    return CompileOptions(target=target, hardware=cpu_profile() if target == "cpu" else None, **kw)


def stages(src: str, binding=None, target="gpu", fuse=True, plan=None, chain=None):
    mod = fusec.check(textwrap.dedent(src))
    c = mod.chain(chain) if chain else mod.chains[0]
    binding = binding or {s: 8 for s in c.symbols}
    plans = ((c.name, json.dumps(plan) if not isinstance(plan, str) else plan),) if plan else ()
    return compile_typed(c, binding, options=options(target, fuse=fuse, plans=plans))


def kernel_count(src: str, target="gpu", **kw) -> int:
    return stages(src, target=target, **kw).plan.kernel_count


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def example(name: str) -> str:
    """The text of examples/NAME."""
    return open(os.path.join(ROOT, "examples", name)).read()


def compile_chain(src: str, chain: str, binding: dict, target: str, until: str = "plan"):
    """Chain `chain` of the FDSL source `src` through the stages up to `until`."""
    c = fusec.check(src).chain(chain)
    return compile_typed(c, binding, options=options(target), until=until)
