"""Every kernel launch under the CUDA simulator checked against CUDA's limits.

The simulator runs any grid (it walks `np.ndindex(*grid)`), so a launch a GPU refuses (grid y
or z above 65,535, x above 2^31-1, more than 1,024 threads a block) passes there. `install()`
wraps the simulator's launch configuration (`kernel[grid, block]`) with that check, process-wide;
tests/conftest.py installs it for the whole suite under the simulator, so every cuda-sim launch
of every test, static grid or one the host computed at run time, is checked.

`only_blocks(pick)` runs, for each launch, only the blocks `pick(grid)` names (the others never
run, so what they would write is left as it was): a launch of a million blocks checked where
it matters (its first and last blocks, or those of a grid-stride loop's last step) in seconds.
"""
from __future__ import annotations

import contextlib
import math

GRID_LIMITS = (2**31 - 1, 65535, 65535)     # CUDA's gridDim limits (x, y, z)
BLOCK_THREADS = 1024                       # threads in a block
BLOCK_LIMITS = (1024, 1024, 64)            # blockDim limits (x, y, z)

_pick = None                               # only_blocks's choice while active


class LaunchOutOfLimits(AssertionError):
    """A launch a GPU would refuse (cudaErrorInvalidConfiguration)."""


def check_launch(grid, block) -> None:
    """Raise LaunchOutOfLimits unless `grid` and `block` (3-tuples) are within CUDA's limits."""
    grid, block = tuple(grid), tuple(block)
    if any(not 1 <= g <= lim for g, lim in zip(grid, GRID_LIMITS)):
        raise LaunchOutOfLimits(f"grid {grid} is outside CUDA's limits {GRID_LIMITS}")
    if any(not 1 <= b <= lim for b, lim in zip(block, BLOCK_LIMITS)) or math.prod(block) > BLOCK_THREADS:
        raise LaunchOutOfLimits(f"block {block} is outside CUDA's limits {BLOCK_LIMITS}, "
                                f"{BLOCK_THREADS} threads")


def install() -> None:
    """Check every simulator launch from now on (idempotent)."""
    import numba.cuda.simulator.kernel as simulator_kernel
    from numba.cuda.simulator.kernel import FakeCUDAKernel
    if getattr(FakeCUDAKernel, "_fusec_checked", False):
        return
    configure, call = FakeCUDAKernel.__getitem__, FakeCUDAKernel.__call__

    def __getitem__(self, configuration):
        out = configure(self, configuration)
        check_launch(self.grid_dim, self.block_dim)
        return out

    def __call__(self, *args):
        if _pick is None or self._device or simulator_kernel._kernel_context is not None:
            return call(self, *args)
        from fusec.compiler.report.trace import _run_blocks
        grid, block = tuple(self.grid_dim), tuple(self.block_dim)
        _run_blocks(self, grid, block, self.dynshared_size, args, sorted(set(_pick(grid))))

    FakeCUDAKernel.__getitem__, FakeCUDAKernel.__call__ = __getitem__, __call__
    FakeCUDAKernel._fusec_checked = True


@contextlib.contextmanager
def only_blocks(pick):
    """While active, each simulator launch runs only the blocks (x, y, z) `pick(grid)` names."""
    global _pick
    install()
    before, _pick = _pick, pick
    try:
        yield
    finally:
        _pick = before
