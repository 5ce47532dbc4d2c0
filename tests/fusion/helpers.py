"""Compile FDSL snippets through the pipeline without running them (no Numba needed)."""
import textwrap

import fusec
from fusec.compiler.pipeline import CompileOptions, compile_chain


def stages(src: str, binding=None, target="gpu", fuse=True, plan=None, chain=None):
    mod = fusec.check(textwrap.dedent(src))
    c = mod.chain(chain) if chain else mod.chains[0]
    binding = binding or {s: 8 for s in c.symbols}
    return compile_chain(c, binding, options=CompileOptions(target=target, fuse=fuse, plan=plan))


def kernel_count(src: str, target="gpu", **kw) -> int:
    return stages(src, target=target, **kw).plan.kernel_count
