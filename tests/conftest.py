"""Test-session setup. The CUDA simulator is process-wide and must be chosen before anything
imports numba.cuda, so it is chosen here, first. Set FUSEC_TEST_GPU=1 on a machine with a
GPU to run the `gpu`-marked tests against the real device instead."""
import os

if os.environ.get("FUSEC_TEST_GPU") != "1":
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

# The persistent compile cache stays out of the test suite (a test that breaks the compiler on
# purpose must not be served an earlier test's build); tests/runtime/test_compile_cache.py turns
# it on, in a fresh FUSEC_CACHE_DIR, for what it tests.
os.environ.setdefault("FUSEC_NO_CACHE", "1")

# The cpu cost model plans for this machine's measured profile, and a measurement moves from run
# to run (and is taken again whenever the emitter changes): a plan decision near a break-even
# would follow that noise. So the suite plans for a fixed snapshot of the development machine's
# profile (tests/data/cpu-profile.json), in a cache directory of its own that every subprocess
# inherits; tests of the measurement and of the cache set their own. FUSEC_TEST_MEASURED_CPU=1
# plans for this machine's own measurement instead (and uses the user's cache directory).
if os.environ.get("FUSEC_TEST_MEASURED_CPU") != "1":
    import atexit
    import json
    import shutil
    import tempfile
    from pathlib import Path

    from fusec.compiler.plan.hardware import profile_key

    _root = Path(tempfile.mkdtemp(prefix="fusec-tests-"))
    atexit.register(shutil.rmtree, _root, True)
    os.environ["FUSEC_CACHE_DIR"] = str(_root)
    _profile = json.loads((Path(__file__).parent / "data" / "cpu-profile.json").read_text())
    (_root / "hardware-cpu.json").write_text(json.dumps({"key": profile_key(), "profile": _profile}))


def _memoised_ptx():
    """NVVM's PTX of one emitted module, compiled once per test run: several slow tests judge the
    same bench kernel (the mlp's GEMM at its bench size: the contraction report, the SASS census,
    launch bounds), and one NVVM compile of it takes ~2 minutes on 2 cores. Keyed by the
    module's text and the compute capability, in a directory the first process of the run
    makes (the xdist workers inherit it through FUSEC_TEST_PTX_DIR; it is removed at exit); a
    module that failed to compile is not kept."""
    import atexit
    import hashlib
    import json
    import shutil
    import tempfile
    from pathlib import Path

    from fusec.compiler.report import ptx

    if "FUSEC_TEST_PTX_DIR" not in os.environ:
        os.environ["FUSEC_TEST_PTX_DIR"] = tempfile.mkdtemp(prefix="fusec-test-ptx-")
        atexit.register(shutil.rmtree, os.environ["FUSEC_TEST_PTX_DIR"], True)
    real = ptx.ptx_of
    root = Path(os.environ["FUSEC_TEST_PTX_DIR"])

    def ptx_of(source: str, cc):
        key = hashlib.sha256(f"{tuple(cc)}\n{source}".encode()).hexdigest()
        path = root / f"{key}.json"
        if path.is_file():
            return json.loads(path.read_text())
        out = real(source, cc)
        if not out.get("errors"):
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(out))
            os.replace(tmp, path)
        return out
    ptx.ptx_of = ptx_of


_memoised_ptx()


def pytest_configure(config):
    """Under the simulator every kernel launch of the suite is checked against CUDA's grid and
    block limits (tests/tools/launches.py): the simulator itself runs any grid."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        import importlib.util
        from pathlib import Path
        import sys
        spec = importlib.util.spec_from_file_location("fusec_tests_launches",
                                                      Path(__file__).parent / "tools" / "launches.py")
        launches = sys.modules["fusec_tests_launches"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(launches)
        launches.install()
