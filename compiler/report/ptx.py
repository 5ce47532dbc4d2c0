"""PTX of an emitted module's kernels without a GPU, and what `ptxas -v` says of each.

`ptx_of(source, cc)` compiles every `@cuda.jit("signature")` kernel of an emitted module with
Numba's real CUDA compiler (NVVM: the nvidia-nvvm and nvidia-cuda-nvrtc wheels; no device, no
driver), in a child process when this one runs the simulator. `resources(ptx, arch)` assembles
one kernel's PTX with the ptxas of the nvidia-cuda-nvcc wheel (the dev extra) and parses its
registers, stack frame, spills, local and shared memory and barriers.
"""
from __future__ import annotations

import contextlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import tempfile
import types
from dataclasses import dataclass, replace
from pathlib import Path

from .child import MeasureError, run
from .loader import exec_module

NVCC_DISTRIBUTIONS = ("nvidia-cuda-nvcc", "nvidia-cuda-nvcc-cu12")


@contextlib.contextmanager
def _deferred_kernels(cc: tuple[int, int]):
    """While active, `cuda.jit("sig")` kernels are recorded, not compiled: {name: (py_func,
    signature, options)}.

    With an explicit signature numba-cuda compiles at decoration time (decorators.jit ->
    CUDADispatcher.compile -> _Kernel.__init__), and _Kernel asks the current device for its
    compute capability and then for a context (codegen.CUDACodeLibrary._ensure_cc ->
    devices.get_context()), which fails without a driver; so kernels are captured for
    compile_ptx instead. Device functions stay ordinary lazy dispatchers: when a kernel's typing
    calls one, CUDADispatcher.compile_device asks dispatcher.get_current_device() for the
    compute capability, which answers `cc` meanwhile. Both patches are process-wide and undone
    on exit (tests/emit/test_emit.py's _PTX_CHECK does the same capture).
    """
    from numba import cuda
    import numba.cuda.dispatcher as dispatcher

    real_jit, real_device = cuda.jit, dispatcher.get_current_device
    captured: dict[str, tuple] = {}

    def jit(func_or_sig=None, **kw):
        if isinstance(func_or_sig, str) and not kw.get("device"):
            options = {k: v for k, v in kw.items() if k != "cache"}    # compile_ptx caches nothing

            def record(f):
                captured[f.__name__] = (f, func_or_sig, options)
                return f
            return record
        return real_jit(func_or_sig, **kw)

    cuda.jit = jit
    dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=tuple(cc))
    try:
        yield captured
    finally:
        cuda.jit, dispatcher.get_current_device = real_jit, real_device


def ptx_here(source: str, cc: tuple[int, int]) -> dict:
    """{"ptx": {kernel: text}, "errors": {kernel: why}} in this (non-simulator) process. The
    module runs afresh, so its device functions compile anew for `cc`. For cc (9, 0) the PTX
    targets sm_90; numba-cuda itself compiles for sm_90a on an H200, which for fusec's kernels
    differs in the .target line only (ptxas reports the same resources)."""
    from numba import cuda
    out: dict = {"ptx": {}, "errors": {}}
    with _deferred_kernels(cc) as kernels:
        exec_module(source, "ptx")
        for name, (func, sig, options) in kernels.items():
            try:
                out["ptx"][name], _ = cuda.compile_ptx(func, sig, cc=tuple(cc), **options)
            except Exception as e:   # no NVVM in this environment, or a kernel Numba rejects
                out["errors"][name] = f"NVVM could not compile it ({type(e).__name__}: {_first_line(e)})"
    return out


def ptx_of(source: str, cc: tuple[int, int]) -> dict:
    """`ptx_here`, in a child process when this one runs the CUDA simulator."""
    return run(ptx_here, {"source": source, "cc": tuple(cc)}, simulator=False)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


def ptxas_path() -> str | None:
    """The ptxas of an installed nvidia-cuda-nvcc wheel (found through the distribution's file
    list), else one on $PATH (a CUDA toolkit), else None."""
    for dist in NVCC_DISTRIBUTIONS:
        try:
            files = importlib.metadata.files(dist) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for f in files:
            if f.name == "ptxas" and f.parent.name == "bin":
                path = Path(f.locate())
                if path.is_file() and os.access(path, os.X_OK):
                    return str(path)
    return shutil.which("ptxas")


@dataclass(frozen=True)
class Resources:
    """One kernel as ptxas -v reports it (per thread unless said; ptxas omits zero items)."""
    registers: int
    stack_frame_bytes: int              # local arrays and spills live here on sm_50 and later
    lmem_bytes: int                     # local memory ptxas lists besides the stack frame
    spill_store_bytes: int
    spill_load_bytes: int
    smem_bytes: int                     # static shared memory per block
    barriers: int
    shuffles: int = 0                   # warp shuffle instructions (shfl.sync) in the PTX, from the text
    mma: int = 0                        # tensor-core instructions (mma.sync) in the PTX, from the text


_ITEMS = {"registers": "registers", "barriers": "barriers", "bytes stack frame": "stack_frame_bytes",
          "bytes spill stores": "spill_store_bytes", "bytes spill loads": "spill_load_bytes",
          "bytes smem": "smem_bytes", "bytes lmem": "lmem_bytes"}
_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_USED = re.compile(r"ptxas info\s*:\s*Used (.*)$")
_STACK_LINE = re.compile(r"^\s+\d+ bytes stack frame")


def parse_ptxas(text: str) -> dict[str, Resources]:
    """ptxas -v output -> {mangled entry name: Resources}, for the .entry functions (kernels).

    The lines: "Compiling entry function 'NAME' for 'sm_90'", then "Function properties for
    NAME" with an indented "N bytes stack frame, N bytes spill stores, N bytes spill loads",
    then "Used N registers, used N barriers, N bytes smem, ...". Callees ptxas did not inline
    get "Function properties" blocks of their own, which are read and dropped."""
    found: dict[str, dict] = {}
    entries: set[str] = set()
    cur = None
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            entries.add(m.group(1))
            cur = found.setdefault(m.group(1), {})
        elif m := _PROPERTIES.search(line):
            cur = found.setdefault(m.group(1), {})
        elif cur is not None and ((m := _USED.search(line)) or _STACK_LINE.match(line)):
            for part in (m.group(1) if m else line).split(","):
                item = re.fullmatch(r"(?:used\s+)?(\d+)\s+(.*)", part.strip(), flags=re.I)
                if item and item.group(2).strip() in _ITEMS:
                    cur[_ITEMS[item.group(2).strip()]] = int(item.group(1))
    fields = [f for f in Resources.__dataclass_fields__ if f not in ("shuffles", "mma")]
    return {name: Resources(**{f: found[name].get(f, 0) for f in fields}) for name in entries}


def resources(ptx: str, arch: str) -> Resources:
    """One kernel's PTX assembled by `ptxas -v -arch=<arch>` (e.g. sm_90): its entry's resources."""
    return assemble(ptx, arch)[0]


def assemble(ptx: str, arch: str) -> tuple[Resources, bytes]:
    """`resources`, and the cubin ptxas wrote (sass.py disassembles it)."""
    exe = ptxas_path()
    if exe is None:
        raise MeasureError("no ptxas: pip install nvidia-cuda-nvcc (the dev extra)")
    with tempfile.TemporaryDirectory(prefix="fusec-ptxas-") as tmp:
        src = Path(tmp, "kernel.ptx")
        src.write_text(ptx)
        proc = subprocess.run([exe, "-v", f"-arch={arch}", str(src), "-o", str(Path(tmp, "kernel.cubin"))],
                              capture_output=True, text=True, timeout=300)
        cubin = Path(tmp, "kernel.cubin").read_bytes() if proc.returncode == 0 else b""
    text = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0:
        raise MeasureError(f"ptxas failed (exit {proc.returncode}): {text[-1000:]}")
    parsed = parse_ptxas(text)
    if len(parsed) != 1:
        raise MeasureError(f"ptxas reported {len(parsed)} entry functions, expected 1")
    return replace(next(iter(parsed.values())), shuffles=len(re.findall(r"\bshfl\.sync\.", ptx)),
                   mma=len(re.findall(r"\bmma\.sync\.", ptx))), cubin


def arch_of(cc: tuple[int, int]) -> str:
    """(9, 0) -> 'sm_90'."""
    return f"sm_{cc[0]}{cc[1]}"
