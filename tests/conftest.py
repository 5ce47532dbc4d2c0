"""Test-session setup. The CUDA simulator is process-wide and must be chosen before anything
imports numba.cuda, so it is chosen here, first. Set FUSEC_TEST_GPU=1 on a machine with a
GPU to run the `gpu`-marked tests against the real device instead."""
import os

if os.environ.get("FUSEC_TEST_GPU") != "1":
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
