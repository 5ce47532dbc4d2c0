"""Regression (issue 42, the soak): a build's first call set up Numba's target
(`typingctx.refresh()`, `targetctx.refresh()`, timed apart as `numba.init`) without Numba's
compiler lock, which Numba itself holds for it; the registries are read through generators, so
a first call made while another thread compiled or made its own first call raised `ValueError:
generator already executing` (seen with three threads each compiling and calling a chain). The
set-up now runs under the lock."""
import numpy as np
from numba.core.compiler_lock import global_compiler_lock

import fusec

SOURCE = "chain f(x: f32[M, 8]) -> f32[M, 8] {\n    return exp(x) * 17.0 + 1.0\n}\n"


def test_numbas_set_up_runs_under_its_compiler_lock(monkeypatch):
    c = fusec.compile(SOURCE, target="cpu", cache=False, options={"baseline": False}).f.compiled({"M": 4})
    jitted = c.fused.jitted
    held = []
    for ctx in (jitted.typingctx, jitted.targetctx):
        refresh = ctx.refresh

        def locked(refresh=refresh):
            held.append(global_compiler_lock.is_locked())
            return refresh()
        monkeypatch.setattr(ctx, "refresh", locked)
    x = np.ones((4, 8), np.float32)
    np.testing.assert_allclose(c(x), np.exp(x) * 17 + 1, rtol=1e-6)
    assert held[:2] == [True, True]

