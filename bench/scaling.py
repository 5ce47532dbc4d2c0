"""Compile-time scaling: chains of n elementwise ops, and of n mixed ops (elementwise with
reductions and matmuls between them), compiled for the CPU target at n = 10, 100, 1000; the time
of each compiler stage, and the exponent k of a least-squares fit total ~ c * n**k."""
from __future__ import annotations

import math
import time

UNARY = ("tanh", "exp", "sigmoid", "abs", "relu", "sin")


def elementwise_chain(n: int) -> str:
    """n ops, each reading the previous value (and x every few ops, so x stays live)."""
    lines = ["chain scale(x: f32[64, 64]) -> f32[64, 64] {", "    v0 = x"]
    for i in range(1, n + 1):
        prev = f"v{i - 1}"
        k = i % 4
        if k == 0:
            e = f"{UNARY[(i // 4) % len(UNARY)]}({prev})"
        elif k == 1:
            e = f"{prev} * 0.5"
        elif k == 2:
            e = f"{prev} + x"
        else:
            e = f"{prev} - 0.25"
        lines.append(f"    v{i} = {e}")
    lines += [f"    return v{n}", "}"]
    return "\n".join(lines) + "\n"


def mixed_chain(n: int) -> str:
    """n ops: mostly elementwise, with a row reduction (softmax-like) and a matmul every 10."""
    lines = ["chain scale(x: f32[64, 64], w: f32[64, 64]) -> f32[64, 64] {", "    v0 = x"]
    for i in range(1, n + 1):
        prev = f"v{i - 1}"
        k = i % 10
        if k == 3:
            e = f"{prev} - max({prev}, axis=-1, keepdims=true)"
        elif k == 6:
            e = f"{prev} @ w"
        elif k == 8:
            e = f"{prev} / sum(abs({prev}) + 1.0, axis=-1, keepdims=true)"
        else:
            e = f"{UNARY[i % len(UNARY)]}({prev})" if i % 2 else f"{prev} * 0.5 + x"
        lines.append(f"    v{i} = {e}")
    lines += [f"    return v{n}", "}"]
    return "\n".join(lines) + "\n"


KINDS = {"elementwise": elementwise_chain, "mixed": mixed_chain}


def compile_once(source: str, target: str = "cpu", jit: bool = True) -> dict:
    """Front end + every compiler stage of one chain (fused build); seconds per stage."""
    import fusec
    from fusec.compiler.calibrate import hardware_profile
    from fusec.compiler.options import CompileOptions
    from fusec.compiler.pipeline import compile_typed
    t0 = time.perf_counter()
    typed = fusec.check(source)
    front = time.perf_counter() - t0
    chain = typed.chains[0]
    st = compile_typed(chain, {}, options=CompileOptions(target=target, hardware=hardware_profile(None, target)))
    stages = {"front end": front, **st.seconds}
    if target == "cpu" and jit:
        stages["numba jit"] = _jit_seconds(st.emitted, chain.name)
    n_ops = st.plan.summary()["ops"]
    return {"stages_s": {k: round(v, 4) for k, v in stages.items()},
            "total_s": round(sum(stages.values()), 4), "ops": n_ops,
            "kernels": st.plan.kernel_count, "source_lines": len(st.emitted.source.splitlines())}


def _jit_seconds(emitted, name: str) -> float:
    """Import the emitted module and run it once on zeros: Numba's compile time, mostly."""
    import numpy as np
    entry = emitted.entries[name]
    namespace: dict = {}
    t0 = time.perf_counter()
    exec(compile(emitted.source, f"<fusec {name}>", "exec"), namespace)
    args = [np.zeros(_shape(t), _DTYPES[t.split("[")[0]]) for t in entry.arg_types]
    namespace[entry.host](*args)
    return time.perf_counter() - t0


_DTYPES = {"f32": "float32", "f64": "float64", "f16": "float16", "i32": "int32", "i64": "int64"}


def _shape(label: str) -> tuple[int, ...]:
    inner = label.split("[", 1)[1].rstrip("]")
    return tuple(int(d) for d in inner.split(",") if d)


def fit_exponent(ns: list[int], ts: list[float]) -> float | None:
    """Least-squares slope of log t against log n."""
    pts = [(math.log(n), math.log(t)) for n, t in zip(ns, ts) if t > 0]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    den = sum((x - mx) ** 2 for x, _ in pts)
    return round(sum((x - mx) * (y - my) for x, y in pts) / den, 3) if den else None


def run_scaling(sizes=(10, 100, 1000), kinds=tuple(KINDS), target: str = "cpu", log=print,
                jit_max: int = 100, status=None) -> dict:
    """Numba's jit time is measured up to n = jit_max only (it grows fast: see the results); the
    fitted exponents cover the MLIR stages at every size and the jit where it was measured.
    `status` (when given): what is being compiled now, for a progress line."""
    status = status or (lambda text: None)
    status("warm-up")
    compile_once(elementwise_chain(2), target)     # warm-up: imports, MLIR context, Numba
    out = {}
    for kind in kinds:
        rows = []
        for n in sizes:
            status(f"compiling the {kind} chain of {n} ops")
            r = compile_once(KINDS[kind](n), target, jit=n <= jit_max)
            r["n"] = n
            rows.append(r)
            log(f"  {kind:11s} n={n:5d}: {r['total_s']:.3f} s ({r['ops']} linalg ops, "
                f"{r['kernels']} kernels) " + ", ".join(f"{k} {v:.3f}" for k, v in r["stages_s"].items()))
        per_stage = {}
        for stage in rows[0]["stages_s"]:
            have = [r for r in rows if stage in r["stages_s"]]
            per_stage[stage] = fit_exponent([r["n"] for r in have], [r["stages_s"][stage] for r in have])
        mlir = [sum(v for k, v in r["stages_s"].items() if k != "numba jit") for r in rows]
        out[kind] = {"rows": rows, "exponent": fit_exponent([r["n"] for r in rows], mlir),
                     "exponent_covers": "front end + MLIR stages + emit (not the Numba jit)",
                     "stage_exponents": per_stage}
        log(f"  {kind}: compile time (without the jit) grows as n^{out[kind]['exponent']}; "
            f"per stage: {per_stage}")
    return {"target": target, "sizes": list(sizes), "kinds": out}
