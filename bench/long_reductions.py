"""Long reductions' errors per target against the float64 truth and NumPy's own f32 error
(docs/FDSL.md, "Long reductions"): `python -m bench.long_reductions TARGETS N ROWS ROW_N [KINDS]`,
e.g. `python -m bench.long_reductions reference,cpu,mlir-jit 1e7 10 1e6` (10^7 elements whole,
10 rows of 10^6). KINDS: u01 (uniform [0, 1)), mixed (uniform [-1, 1)), off (1000 + uniform
[-1, 1)). A sum's or mean's error is over the sum (mean) of |x|, a variance's over the variance.
`python -m bench.long_reductions gpu-order` emulates the GPU kernels' order of adds at 10^7."""
import sys, time, os
import numpy as np
import fusec

SRC = """
chain total(x: f32[N]) -> f32 { return sum(x) }
chain avg(x: f32[N]) -> f32 { return mean(x) }
chain var(x: f32[N]) -> f32 { return mean(square(x - mean(x))) }
chain rsum(x: f32[R, N]) -> f32[R] { return sum(x, axis=1) }
chain rmean(x: f32[R, N]) -> f32[R] { return mean(x, axis=1) }
chain rvar(x: f32[R, N]) -> f32[R] { return mean(square(x - mean(x, axis=1, keepdims=true)), axis=1) }
chain ln(x: f32[R, N], g: f32[N], b: f32[N]) -> f32[R, N] { return layernorm(x, g, b) }
"""

def _truth(name, x):
    x = x.astype(np.float64)
    if name == "total": return x.sum()
    if name == "avg": return x.mean()
    if name == "var": return ((x - x.mean())**2).mean()
    if name == "rsum": return x.sum(1)
    if name == "rmean": return x.mean(1)
    if name == "rvar": return ((x - x.mean(1, keepdims=True))**2).mean(1)

def _np32(name, x):
    if name == "total": return x.sum()
    if name == "avg": return x.mean()
    if name == "var": return np.square(x - x.mean()).mean()
    if name == "rsum": return x.sum(1)
    if name == "rmean": return x.mean(1)
    if name == "rvar": return np.square(x - x.mean(1, keepdims=True)).mean(1)

_SCALE = {}
def _rel(a, t):
    a = np.asarray(a, np.float64); t = np.asarray(t, np.float64)
    return float(np.max(np.abs(a - t) / _SCALE["s"]))

def _data(kind, shape, rng):
    if kind == "u01": return rng.random(shape, dtype=np.float32)
    if kind == "mixed": return (rng.random(shape, dtype=np.float32) * 2 - 1)
    if kind == "off": return (rng.random(shape, dtype=np.float32) * 2 - 1 + 1000.0).astype(np.float32)

if sys.argv[1] == "gpu-order":
    import runpy
    runpy.run_path(__file__.replace("long_reductions.py", "long_reductions_gpu_order.py"), run_name="__main__")
    sys.exit(0)
targets = sys.argv[1].split(",")
n = int(float(sys.argv[2])); rows = int(sys.argv[3]); rn = int(float(sys.argv[4]))
kinds = sys.argv[5].split(",") if len(sys.argv) > 5 else ["u01", "mixed", "off"]
rng = np.random.default_rng(0)
progs = {t: fusec.compile(SRC, target=t) for t in targets}
for kind in kinds:
    x1 = _data(kind, (n,), rng); x2 = _data(kind, (rows, rn), rng)
    for name in ("total", "avg", "var", "rsum", "rmean", "rvar"):
        x = x1 if name in ("total", "avg", "var") else x2
        t = _truth(name, x)
        ax = None if x.ndim == 1 else 1
        x64 = x.astype(np.float64)
        # sums and means: error over the sum (mean) of |x|, the condition-free scale; variances: over the true variance
        _SCALE["s"] = (np.abs(x64).sum(ax) if name in ("total", "rsum") else np.abs(x64).mean(ax) if name in ("avg", "rmean") else t)
        line = f"{kind:6} {name:6} n={x.size:>9} numpy {_rel(_np32(name, x), t):.2e}"
        for tg in targets:
            t0 = time.time()
            try:
                y = getattr(progs[tg], name)(x)
                line += f" | {tg} {_rel(y, t):.2e} ({time.time()-t0:.1f}s)"
            except Exception as e:
                line += f" | {tg} ERR {type(e).__name__}: {str(e)[:100]}"
        print(line, flush=True)
