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
