"""The emitter's CUDA tests run on Numba's CUDA simulator: it must be chosen before anything
imports numba.cuda, so it is set here, when pytest collects this folder."""
import os

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
