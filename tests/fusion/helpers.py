"""Compile FDSL snippets through the pipeline without running them (no Numba needed); the SASS
of an emitted module (NVVM, ptxas and cuobjdump from NVIDIA's wheels, no GPU)."""
import json
import os
import re
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


def sass_of(source: str) -> dict[str, list[str]]:
    """The SASS instructions of each kernel of an emitted module (NVVM, ptxas, cuobjdump)."""
    import subprocess
    import tempfile
    import pytest
    from fusec.compiler.report.ptx import ptx_of, ptxas_path
    ptxas = ptxas_path()
    cuobjdump = ptxas and os.path.join(os.path.dirname(ptxas), "cuobjdump")
    if not ptxas or not os.path.exists(cuobjdump):
        pytest.skip("no ptxas and cuobjdump (the nvidia-cuda-nvcc and -cuobjdump wheels)")
    out = ptx_of(source, (9, 0))
    if not out["ptx"]:
        pytest.skip(f"no NVVM to compile PTX with: {out['errors']}")
    kernels = {}
    with tempfile.TemporaryDirectory() as d:
        for name, ptx in out["ptx"].items():
            open(f"{d}/k.ptx", "w").write(ptx)
            subprocess.run([ptxas, "-arch=sm_90", f"{d}/k.ptx", "-o", f"{d}/k.cubin"], check=True)
            sass = subprocess.run([cuobjdump, "-sass", f"{d}/k.cubin"], capture_output=True, text=True,
                                  check=True).stdout
            kernels[name] = [m.group(1).strip() for m in re.finditer(r"/\*[0-9a-f]{4}\*/\s+([^;]*);", sass)]
    return kernels


def loads_in_flight(ins: list[str]) -> list[int]:
    """Per phase (the code between barriers) that loads from global memory: the longest run of
    LDGs issued before an instruction reads one of their destination registers."""
    phases, best, pending, run = [], 0, set(), 0
    for t in ins:
        op = re.sub(r"^@!?P\w+\s+", "", t)
        opc, _, rest = op.partition(" ")
        if opc.startswith("BAR") or opc == "EXIT":
            if best or run:
                phases.append(max(best, run))
            best, pending, run = 0, set(), 0
            continue
        operands = rest.split(",")
        srcs = operands if opc.startswith(("ST", "RED", "ATOM")) else operands[1:]
        used = {int(r) for s in srcs for r in re.findall(r"\bR(\d+)", s)}
        if pending & used:
            best, pending, run = max(best, run), set(), 0
        if opc.startswith("LDG"):
            pending.add(int(re.match(r"R(\d+)", operands[0].strip()).group(1)))
            run += 1
    return phases
