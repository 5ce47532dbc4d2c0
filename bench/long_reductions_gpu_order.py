"""(bench/long_reductions.py gpu-order) The GPU kernels' accumulation order, emulated in NumPy f32 (f64 where the emitter now widens):
per-thread serial partials over a strided chunk, then a block tree, then the second stage."""
import numpy as np
def _tree(p):                       # p[..., T] f32: the emitted block_reduce's halving tree
    p = p.copy()
    t = p.shape[-1]
    while t > 1:
        h = (t + 1) // 2
        p[..., :t - h] = (p[..., :t - h] + p[..., h:t]).astype(np.float32)
        t = h
    return p[..., 0]
def _serial(x3, wide):              # x3[B, L, T]: thread t of block b adds x3[b, :, t]
    acc = np.zeros((x3.shape[0], x3.shape[2]), np.float64 if wide else np.float32)
    for l in range(x3.shape[1]):
        acc = acc + x3[:, l, :].astype(acc.dtype)
    return acc.astype(np.float32)
rng = np.random.default_rng(0)
for kind in ("u01", "off"):
    x = rng.random(10**7, dtype=np.float32)
    if kind == "off": x = x * np.float32(2) - np.float32(1) + np.float32(1000)
    t = x.astype(np.float64).sum(); s = np.abs(x.astype(np.float64)).sum()
    # whole 1e7: k0 500 blocks x 160 threads x 125 serial, tree; k1 250 threads x 2, tree
    p = _tree(_serial(x.reshape(500, 125, 160), False))
    y = _tree(_serial(p.reshape(1, 2, 250), False))
    print(f"{kind} whole 1e7: GPU order {abs(float(y[0]) - t) / s:.2e}, numpy {abs(float(x.sum()) - t) / s:.2e}")
    # rows of 1e6, 1000 rows (10 rows here, same per-row order): one block of 160 threads, 6250 serial each
    r = x.reshape(10, 10**6)
    tr = r.astype(np.float64).sum(1); sr = np.abs(r.astype(np.float64)).sum(1)
    for wide in (False, True):
        y = _tree(_serial(r.reshape(10, 6250, 160), wide))
        print(f"{kind} rows 1e6 (unsplit): {'f64' if wide else 'f32'} partials {np.max(np.abs(y - tr) / sr):.2e}, numpy {np.max(np.abs(r.sum(1) - tr) / sr):.2e}")
