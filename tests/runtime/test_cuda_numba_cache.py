"""Numba's on-disk cache for a cuda artifact's kernels (runtime/artifact.py): the loader sets the
emitted module's NUMBA_CACHE before it runs, so each `@cuda.jit("sig", cache=NUMBA_CACHE)`
kernel compiles with a CUDACache in the artifact's __pycache__; a kernel Numba fails to cache is
compiled again without it, said in one line. No GPU here: the real compiler's part is checked
in a process without the simulator, up to what only a device can do (the cubin); bench/gpu.py
starts every workload twice on a lent GPU and counts the second process's cache hits."""
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import fusec
from fusec.cli import main
from fusec.artifacts import load_chain
from fusec.runtime import artifact as art
from fusec.runtime.targets import select

ROOT = Path(__file__).resolve().parents[2]
REAL_ENV = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
# a row kernel and an f16 contraction on tensor cores (inline-PTX mma intrinsics)
SOURCE = textwrap.dedent("""\
    chain rows(x: f32[M, N]) -> f32[M, N] {
        return softmax(x, axis=1)
    }
    chain t(a: f16[M, K], b: f16[K, N], c: f16[N]) -> f16[M, N] {
        return relu(a @ b + c)
    }
""")

# the kernels of every chain as the loader makes them, in a process with the real CUDA target:
# a dispatcher records its signature instead of compiling (there is no device to bind to), and
# each is then compiled for sm_90 by NVVM and reduced the way Numba's cache stores it
REAL_CUDA = textwrap.dedent("""
    import json, pickle, sys, types
    import numba.cuda.dispatcher as d
    from numba.core import sigutils
    from numba.cuda import compiler
    captured = []
    d.get_current_device = lambda: types.SimpleNamespace(compute_capability=(9, 0))
    d.CUDADispatcher.compile = lambda self, sig: captured.append((self, sig))
    d.CUDADispatcher.disable_compile = lambda self, val=True: None
    try:  # the CUDA toolkit's NVVM (pip: nvidia-nvvm) must be installed, no GPU needed
        compiler.compile_ptx(lambda a: None, "void(float32[::1])", cc=(9, 0))
    except Exception as e:
        print(json.dumps({"skip": f"{type(e).__name__}: {str(e).strip().splitlines()[0]}"}))
        sys.exit(0)
    from fusec.runtime import artifact as art
    a = art.load(sys.argv[1])
    out = {}
    for chain in a.chains:
        host = a.module(chain, "fused", numba_cache=sys.argv[2] == "1")
        mod = sys.modules[host.__module__]
        for disp, sig in captured:
            args, _ = sigutils.normalize_signature(sig)
            lib, _ = compiler._compile_pyfunc_with_fixup(disp.py_func, args, device=False, abi="numba", cc=(9, 0))
            ptx = "".join(lib.get_asm_strs(cc=(9, 0)))
            out[f"{chain}.{disp.py_func.__name__}"] = {
                "flag": mod.NUMBA_CACHE, "cache": type(disp._cache).__name__,
                "path": getattr(disp._cache, "_cache_path", None), "mma": "mma.sync" in ptx,
                "reduced": len(pickle.dumps(lib._reduce_states()))}
        captured.clear()
    print(json.dumps(out))
""")


def _compiled(d: Path, target: str, binding: str) -> Path:
    (d / "c.fdsl").write_text(SOURCE)
    assert main(["compile", str(d / "c.fdsl"), "--target", target, "--bind", binding, "-o", str(d / "art")]) == 0
    return d / "art"


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    return _compiled(tmp_path_factory.mktemp("cuda-cache"), "cuda", "M=512,N=4096,K=1024")


def _copy(artifact: Path, tmp_path: Path) -> Path:
    """A copy at a new path: imported afresh (the loader keys modules by path and text)."""
    return Path(shutil.copytree(artifact, tmp_path / "art"))


def _real_cuda(copy: Path, numba_cache: bool) -> dict:
    """REAL_CUDA's answer for the artifact at `copy` (skips where NVVM is missing)."""
    done = subprocess.run([sys.executable, "-c", REAL_CUDA, str(copy), "1" if numba_cache else "0"],
                          capture_output=True, text=True, env=REAL_ENV)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    if "skip" in out:
        pytest.skip(out["skip"])
    return out


@pytest.mark.slow
def test_every_kernel_compiles_with_numbas_cache_in_the_artifact(artifact, tmp_path):
    """The real compiler's view: each kernel's dispatcher has a CUDACache in the artifact's
    __pycache__, and what that cache would store (the kernel's code library reduced and
    pickled) is storable, tensor-core kernel included: no linked files, no global arrays."""
    copy = _copy(artifact, tmp_path)
    out = _real_cuda(copy, True)
    assert set(out) == {"rows.k0", "t.k0"}
    for kernel in out.values():
        assert kernel["flag"] is True and kernel["cache"] == "CUDACache"
        assert kernel["path"] == str(copy / "__pycache__") and kernel["reduced"] > 0
    assert out["t.k0"]["mma"] and not out["rows.k0"]["mma"]


@pytest.mark.slow
def test_without_numba_cache_the_kernels_compile_afresh(artifact, tmp_path):
    out = _real_cuda(_copy(artifact, tmp_path), False)
    assert {(k["flag"], k["cache"], k["path"]) for k in out.values()} == {(False, "NullCache", None)}


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """The row chain at a size the simulator runs in a moment."""
    return _compiled(tmp_path_factory.mktemp("cuda-sim-cache"), "cuda-sim", "M=4,N=8,K=16")


def test_a_kernel_numba_cannot_cache_is_compiled_without_it(small, tmp_path, monkeypatch, capsys):
    """Numba refuses to pickle a kernel that links files (its RuntimeError, raised while the
    module runs): the loader runs the module again uncached, says so in a line, and the chain
    runs."""
    from numba import cuda
    real = cuda.jit

    def refusing(*args, **kw):
        if kw.get("cache"):
            raise RuntimeError("Cannot pickle CUDACodeLibrary with linking files")
        return real(*args, **kw)
    monkeypatch.setattr(cuda, "jit", refusing)
    copy = _copy(small, tmp_path)
    chain = fusec.check(SOURCE).chain("rows")
    capsys.readouterr()
    built = load_chain(art.load(copy), chain, select("cuda-sim"), numba_cache=True)
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"fusec: Numba could not cache the CUDA kernels of {copy / f'rows.{build}.py'} (RuntimeError: "
                   "Cannot pickle CUDACodeLibrary with linking files); they were compiled without its cache"
                   for build in ("fused", "unfused")]              # a line per module
    assert built.fused.host.__globals__["NUMBA_CACHE"] is False     # (modules are named by their source)
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    want = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(built.fused(x)[0], want / want.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_the_simulator_runs_the_cached_module_as_it_is(small, tmp_path):
    """cuda-sim takes cache=True and caches nothing; the flag is set all the same."""
    copy = _copy(small, tmp_path)
    chain = fusec.check(SOURCE).chain("rows")
    built = load_chain(art.load(copy), chain, select("cuda-sim"), numba_cache=True)
    assert built.fused.host.__globals__["NUMBA_CACHE"] is True
    x = np.ones((4, 8), np.float32)
    np.testing.assert_allclose(built.fused(x)[0], np.full((4, 8), 1 / 8, np.float32), rtol=1e-6)


def test_other_errors_are_not_taken_for_the_caches(small, tmp_path, monkeypatch):
    """An error the module raises without the cache too is raised as it is, not hidden."""
    from numba import cuda

    def broken(*args, **kw):
        raise TypeError("not the cache's")
    monkeypatch.setattr(cuda, "jit", broken)
    copy = _copy(small, tmp_path)
    with pytest.raises(TypeError, match="not the cache's"):
        art.load(copy).module("rows", "fused", numba_cache=True)
