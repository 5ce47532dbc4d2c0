"""Transcendental accuracy of every cpu contender, in ulp (issue 39): f32 exp, tanh, erf and
sigmoid as fusec (both math modes), NumPy, torch, jax.jit, onnxruntime and TVM (with and
without FastMathTransform) compute them, against float64 truth; and what fusec's accurate mode
costs on the bench's exp/tanh chains.

    python -m bench.accuracy                 writes bench/results/accuracy-<date>.json
    python -m bench.accuracy --stride 101    denser sampling (about 10x the points)
    python -m bench.accuracy --no-time       accuracy only (no timing of the math modes)
    python -m bench.accuracy --only exp,tanh --contenders fusec,torch
    python -m bench.accuracy --table bench/results/accuracy-<date>.json    its tables, as markdown

Sampling: f32 values by bit pattern, over each function's interesting range (where the result
is neither saturated nor the argument itself): every `stride`-th bit pattern from +0 up to the
range's end on each side (so every binade, denormals included, is sampled alike: the same
weighting as an exhaustive test), from an odd offset, plus every bit pattern within `window` of
the function's edges (range ends, thresholds of the known forms, points where the result passes
a binade). Beyond the range, 8192 arguments log-uniform out to f32's largest, and the specials
(+-0, +-inf, NaN), are measured with the rest (saturated results such as tanh's +-1 in ulp).

Error: |got - truth| / spacing, with truth the float64 result (NumPy's exp/tanh, SciPy's erf:
errors below 1e-15 relative, far below f32's half ulp) and spacing the f32 ulp at the truth
rounded to f32 (the denormal spacing below the normals). So a correctly rounded result is at
most 0.5 ulp. Results whose truth is below f32's smallest normal (exp and sigmoid below -87.3),
and denormal arguments, are reported apart (`subnormal`): a contender that flushes denormals to
zero, or underflows early (1 / (1 + exp(-x)) with exp(-x) = inf), gives 0 there (`zeroed`), up
to 2**23 denormal ulps off, which would hide everything else. Where the truth rounds to 0,
+-inf or NaN (exp's overflow, the tails, the specials) the result must be exactly that
(`exact`: how many are not).
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from . import utc_stamp, write_result

F32 = np.float32
TINY = float(np.finfo(F32).tiny)
RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parent.parent


def _erf64(x: np.ndarray) -> np.ndarray:
    from scipy.special import erf
    return erf(x)


def _sigmoid64(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


@dataclass(frozen=True)
class Fn:
    """A function measured: its float64 truth, the interesting range [lo, hi] and edges where
    every bit pattern nearby is taken."""
    name: str
    truth: Callable[[np.ndarray], np.ndarray]
    lo: float
    hi: float
    edges: tuple[float, ...] = ()


FUNCTIONS = {
    # exp: 0 below -103.97 (half the smallest denormal), inf above 88.72
    "exp": Fn("exp", np.exp, -103.98, 88.73,
              (88.7228, -87.3365, -103.279, -103.972, 1e-7, 0.5, 1.0, 0.6931472, 10.0)),
    # tanh: x itself below ~2**-12 (still sampled: the fast form switches at 0.0004), +-1 beyond 9.01
    "tanh": Fn("tanh", np.tanh, -9.02, 9.02,
               (0.0004, 0.0001220703125, 0.5493, 1.0, 2.0, 7.99881172, 9.0, 0.625)),
    # erf: +-1 beyond 3.92 (the f32 below 1 is 1 - 2**-24)
    "erf": Fn("erf", _erf64, -3.95, 3.95, (1e-7, 0.84375, 1.25, 2.857, 3.0, 3.92, 0.5)),
    # sigmoid: denormal below -87.3, 0 below -103.97, 1 beyond 17.33
    "sigmoid": Fn("sigmoid", _sigmoid64, -104.0, 17.4, (-87.3365, -103.279, 1e-7, 16.6355, 17.3287, 0.0)),
}


# ---- sampling --------------------------------------------------------------------------------

def _bits(v: float) -> int:
    return int(np.array([abs(v)], F32).view(np.uint32)[0])


def sample(fn: Fn, stride: int, window: int) -> np.ndarray:
    """In-range f32 arguments of `fn`: every stride-th bit pattern on each side (offset 7, so
    not only round numbers), every pattern within `window` of each edge (and its negation)."""
    parts = []
    for sign, end in ((0, fn.hi), (0x80000000, fn.lo)):
        top = _bits(end)
        parts.append(np.arange(7 % stride, top + 1, stride, dtype=np.uint64).astype(np.uint32) | np.uint32(sign))
        for e in fn.edges:
            for v in (e, -e):
                if not fn.lo <= v <= fn.hi or (v < 0) != bool(sign) or v == 0 and sign:
                    continue
                b = _bits(v)
                lo, hi = max(0, b - window), min(top, b + window)
                parts.append(np.arange(lo, hi + 1, dtype=np.uint64).astype(np.uint32) | np.uint32(sign))
        parts.append(np.arange(0, min(window, top) + 1, dtype=np.uint64).astype(np.uint32) | np.uint32(sign))
    bits = np.unique(np.concatenate(parts))
    return bits.view(F32)


def tails(fn: Fn, n: int = 4096) -> np.ndarray:
    """Arguments beyond the range (where the result saturates or is the argument) and the
    specials."""
    rng = np.random.default_rng(39)
    hi = np.exp(rng.uniform(np.log(fn.hi), np.log(3.0e38), n)).astype(F32)
    lo = -np.exp(rng.uniform(np.log(-fn.lo), np.log(3.0e38), n)).astype(F32)
    hi, lo = hi[hi > F32(fn.hi)], lo[lo < F32(fn.lo)]
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan], F32)
    return np.concatenate([hi, lo, specials])


# ---- error ------------------------------------------------------------------------------------

def errors(fn: Fn, x: np.ndarray, got: np.ndarray) -> dict:
    """Max and mean ulp over the normal arguments with a normal result; the subnormal arguments
    and results apart; where the rounded truth is 0, +-inf or NaN (the tails, the specials,
    exp's overflow), whether `got` is exactly it (a zero's sign too)."""
    got = np.asarray(got, dtype=F32).reshape(-1)
    with np.errstate(all="ignore"):
        want = fn.truth(x.astype(np.float64))
        want32 = want.astype(F32)
    exact = ~np.isfinite(want32) | (want32 == 0)
    spacing = np.spacing(np.maximum(np.abs(want32), F32(TINY))).astype(np.float64)
    with np.errstate(all="ignore"):
        ulps = np.abs(got.astype(np.float64) - want) / spacing
    ulps[~np.isfinite(got)] = np.inf
    tiny_x = (x != 0) & (np.abs(x) < TINY)
    normal = ~exact & ~tiny_x & (np.abs(want) >= TINY)
    out: dict = {"points": int(normal.sum())}
    u = ulps[normal]
    worst = int(np.argmax(u))
    out.update(max_ulp=_r(u[worst]), mean_ulp=_r(float(np.mean(u[np.isfinite(u)]))),
               worst_x=float(x[normal][worst]), over_1_ulp=int((u > 1.0).sum()),
               nonfinite=int((~np.isfinite(got[normal])).sum()))
    sub = ~exact & ~normal
    if sub.any():
        us = ulps[sub]
        out["subnormal"] = {"points": int(sub.sum()), "max_ulp": _r(us.max()),
                            "worst_x": float(x[sub][int(np.argmax(us))]),
                            "zeroed": int((got[sub] == 0).sum())}
    same = (got == want32) | (np.isnan(got) & np.isnan(want32))
    same &= (want32 != 0) | (np.signbit(got) == np.signbit(want32))
    bad = np.flatnonzero(exact & ~same)
    out["exact"] = {"points": int(exact.sum()), "wrong": int(bad.size),
                    "examples": [[float(x[i]), float(got[i]), float(want32[i])] for i in bad[:4]]}
    return out


def _r(v: float) -> float:
    return float(f"{float(v):.4g}") if np.isfinite(v) else float("inf")


# ---- contenders -------------------------------------------------------------------------------

class Skip(Exception):
    """This contender cannot run here; the message says why."""


@dataclass
class Contender:
    name: str
    setup: Callable[[list[str]], Callable[[str, np.ndarray], np.ndarray]]
    notes: list[str] = field(default_factory=list)


def _fusec(math: str):
    def setup(names: list[str]):
        import fusec
        outs = ", ".join(f"{n}(x)" for n in names)
        types = ", ".join("f32[N]" for _ in names)
        src = f"chain acc(x: f32[N]) -> ({types}) {{ return {outs} }}"
        prog = fusec.compile(src, target="cpu", options={"baseline": False, "math": math})

        def run(name: str, x: np.ndarray) -> np.ndarray:
            return prog.acc(x)[names.index(name)] if len(names) > 1 else prog.acc(x)
        return run
    return setup


def _numpy(names):
    import scipy.special as sp
    fns = {"exp": np.exp, "tanh": np.tanh, "erf": sp.erf, "sigmoid": sp.expit}

    def run(name: str, x: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):         # exp's overflow to inf is a result here
            return fns[name](x)
    return run


def _torch(names):
    try:
        import torch
    except ImportError as e:
        raise Skip(f"torch not installed: {e}") from None
    fns = {"exp": torch.exp, "tanh": torch.tanh, "erf": torch.erf, "sigmoid": torch.sigmoid}
    return lambda name, x: fns[name](torch.from_numpy(x)).numpy()


def _torch_compile(names):
    """Inductor's cpu code for each function, as `torch.compile` builds it by default (one graph
    per function and argument length)."""
    try:
        import torch
    except ImportError as e:
        raise Skip(f"torch not installed: {e}") from None
    fns = {"exp": torch.exp, "tanh": torch.tanh, "erf": torch.erf, "sigmoid": torch.sigmoid}
    compiled = {n: torch.compile(fns[n], dynamic=False) for n in names}

    def run(name: str, x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return compiled[name](torch.from_numpy(x)).numpy()
    return run


def _jax(names):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError as e:
        raise Skip(f"jax not installed: {e}") from None
    fns = {"exp": jax.jit(jnp.exp), "tanh": jax.jit(jnp.tanh), "erf": jax.jit(jax.scipy.special.erf),
           "sigmoid": jax.jit(jax.nn.sigmoid)}
    return lambda name, x: np.asarray(fns[name](x))


ONNX_OPS = {"exp": "Exp", "tanh": "Tanh", "erf": "Erf", "sigmoid": "Sigmoid"}


def _onnxruntime(names):
    try:
        import onnx
        import onnxruntime as ort
        from onnx import TensorProto, helper
    except ImportError as e:
        raise Skip(f"onnx/onnxruntime not installed: {e}") from None
    sessions = {}
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = os.cpu_count() or 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    for name in names:
        node = helper.make_node(ONNX_OPS[name], ["x"], ["y"])
        graph = helper.make_graph([node], name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 10            # onnx 1.23 writes 12+; onnxruntime reads <= its own
        onnx.checker.check_model(model)
        sessions[name] = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return lambda name, x: sessions[name].run(None, {"x": x})[0]


RELAX_OPS = {"exp": "exp", "tanh": "tanh", "erf": "erf", "sigmoid": "sigmoid"}


def host_mcpu() -> str:
    import tvm
    return tvm.target.codegen.llvm_get_system_cpu()


def _tvm(fast: bool):
    def setup(names):
        try:
            import tvm
            from tvm import relax
            from tvm.script import relax as R
        except ImportError as e:
            raise Skip(f"apache-tvm not installed: {e}") from None
        target = tvm.target.Target({"kind": "llvm", "mcpu": host_mcpu()})
        built: dict = {}

        def build(name: str, n: int):
            bb = relax.BlockBuilder()
            x = relax.Var("x", R.Tensor((n,), "float32"))
            with bb.function("main", [x]):
                with bb.dataflow():
                    y = bb.emit(getattr(relax.op, RELAX_OPS[name])(x))
                    gv = bb.emit_output(y)
                bb.emit_func_output(gv)
            mod = bb.get()
            if fast:
                mod = relax.transform.FastMathTransform()(mod)
            with target:
                mod = relax.get_pipeline("zero")(mod)
            return relax.VirtualMachine(tvm.compile(mod, target=target), tvm.cpu())

        def run(name: str, x: np.ndarray) -> np.ndarray:
            key = (name, x.size)
            if key not in built:
                built[key] = build(name, x.size)
            return built[key]["main"](tvm.runtime.tensor(x)).numpy()
        return run
    return setup


CONTENDERS = {
    "fusec": Contender("fusec", _fusec("fast"), ["cpu target, default math (fast): f32 polynomial exp/tanh; "
                                                 "erf is libm's (Numba's math.erf); sigmoid is exp(-|x|) and a "
                                                 "division (compiler/lowering/scalar.py)"]),
    "fusec accurate": Contender("fusec accurate", _fusec("accurate"),
                                ["cpu target, options math='accurate' (--math accurate): exp/tanh in f64, "
                                 "rounded once"]),
    "numpy": Contender("numpy", _numpy, ["erf and sigmoid: scipy.special.erf / expit (NumPy has neither)"]),
    "torch": Contender("torch", _torch, ["CPU eager (ATen's vectorised Sleef forms)"]),
    "torch.compile": Contender("torch.compile", _torch_compile, ["inductor's cpu code (its vectorised Sleef calls), "
                                                               "torch.compile(fn, dynamic=False)"]),
    "jax.jit": Contender("jax.jit", _jax, ["XLA cpu; erf: jax.scipy.special.erf"]),
    "onnxruntime": Contender("onnxruntime", _onnxruntime, ["one-node graph, opset 17, ORT_ENABLE_ALL"]),
    "tvm": Contender("tvm", _tvm(False), ["one-op Relax function, llvm -mcpu=<host>, relax pipeline 'zero'"]),
    "tvm fastmath": Contender("tvm fastmath", _tvm(True), ["as tvm, after relax.transform.FastMathTransform "
                                                           "(fast_exp, fast_tanh, fast_erf; sigmoid untouched)"]),
}


def measure_accuracy(names: list[str], contenders: list[str], stride: int, window: int,
                     log=print) -> dict:
    samples = {n: sample(FUNCTIONS[n], stride, window) for n in names}
    outside = {n: tails(FUNCTIONS[n]) for n in names}
    results: dict = {}
    for cname in contenders:
        c = CONTENDERS[cname]
        entry: dict = {"notes": list(c.notes)}
        results[cname] = entry
        try:
            t0 = time.perf_counter()
            run = c.setup(names)
        except Skip as e:
            entry["skipped"] = str(e)
            log(f"{cname}: skipped ({e})")
            continue
        except Exception as e:          # a contender that fails here is recorded, not fatal
            entry["skipped"] = f"setup failed: {type(e).__name__}: {e}"
            log(f"{cname}: skipped ({entry['skipped']})")
            continue
        for n in names:
            fn = FUNCTIONS[n]
            try:
                xs = np.concatenate([samples[n], outside[n]])
                r = errors(fn, xs, run(n, xs))
            except Exception as e:
                r = {"skipped": f"{type(e).__name__}: {str(e)[:300]}"}
            entry[n] = r
            log(f"{cname:15s} {n:8s} " + (f"max {r['max_ulp']:>8} mean {r['mean_ulp']:.3f} ulp"
                                          f"  (worst at x = {r['worst_x']:.9g}; not exact "
                                          f"{r['exact']['wrong']} of {r['exact']['points']}"
                                          + (f"; subnormal max {r['subnormal']['max_ulp']}, zeroed "
                                             f"{r['subnormal']['zeroed']}" if "subnormal" in r else "") + ")"
                                          if "skipped" not in r else f"skipped: {r['skipped']}"))
        entry["seconds"] = round(time.perf_counter() - t0, 2)
    return {"functions": {n: {"range": [FUNCTIONS[n].lo, FUNCTIONS[n].hi], "points": int(samples[n].size),
                              "edges": list(FUNCTIONS[n].edges)} for n in names},
            "contenders": results}


# ---- the accurate mode's time -------------------------------------------------------------------

TIMED = {"ew_chain": "M=4096,N=4096", "bias_gelu_res": "M=8192,N=3072"}


def time_modes(seconds: float, log=print) -> dict:
    """fusec's fused build of bench/fdsl's exp/tanh chains at bench size, math fast and accurate,
    timed interleaved (bench/timing.py) with the paired ratio."""
    import fusec
    from fusec.api import parse_bind

    from .timing import Budget, measure, paired_ratio
    from .workloads import WORKLOADS
    out = {}
    by_name = {w.name: w for w in WORKLOADS}
    for chain, bind in TIMED.items():
        binding = parse_bind(bind)
        inputs = by_name[chain].make_inputs(binding) if chain in by_name else None
        calls, kernels = {}, {}
        for math in ("fast", "accurate"):
            prog = fusec.compile(str(ROOT / "bench" / "fdsl" / f"{chain}.fdsl"), target="cpu",
                                 options={"baseline": False, "math": math})
            built = prog.chains[chain].compiled(binding)
            exe = built.fused
            args = exe.prepare(inputs)
            calls[math] = (lambda e, a: lambda: e.run_prepared(a))(exe, args)
            kernels[math] = built.kernel_counts.get("fused")
        samples = measure(calls, Budget(seconds=seconds, min_runs=10, max_runs=100))
        ratio = paired_ratio(samples["accurate"], samples["fast"])
        out[chain] = {"binding": bind, "kernels": kernels,
                      "fast": samples["fast"].as_dict(), "accurate": samples["accurate"].as_dict(),
                      "accurate_over_fast": round(ratio, 3) if ratio else None}
        log(f"{chain} [{bind}]: fast {samples['fast'].median_ms:.2f} ms, accurate "
            f"{samples['accurate'].median_ms:.2f} ms (median), paired ratio {ratio:.3f}")
    return out


def table(result: dict) -> str:
    """The markdown tables of a result (docs/PERFORMANCE.md, "Transcendental accuracy"): per
    contender and function the max / mean ulp over normal arguments and results, with the
    subnormal results that came out 0 and the saturated or special results that were not exact."""
    acc = result["accuracy"]
    names = list(acc["functions"])
    lines = ["| contender | " + " | ".join(f"{n} max / mean ulp" for n in names) + " |",
             "| --- |" + " --- |" * len(names)]
    for cname, entry in acc["contenders"].items():
        if "skipped" in entry:
            lines.append(f"| {cname} | skipped: {entry['skipped']} |" + " |" * (len(names) - 1))
            continue
        cells = []
        for n in names:
            r = entry.get(n, {})
            if "skipped" in r or not r:
                cells.append("skipped")
                continue
            cell = f"{_fmt(r['max_ulp'])} / {_fmt(r['mean_ulp'])}"
            notes = []
            if r.get("subnormal", {}).get("zeroed"):
                notes.append(f"{r['subnormal']['zeroed']} subnormal results 0")
            if r["exact"]["wrong"]:
                notes.append(f"{r['exact']['wrong']} special{'s' if r['exact']['wrong'] > 1 else ''} wrong")
            cells.append(cell + (f" ({'; '.join(notes)})" if notes else ""))
        lines.append(f"| {cname} | " + " | ".join(cells) + " |")
    out = "\n".join(lines)
    if result.get("math_modes_time"):
        rows = ["| chain | fast ms | accurate ms | accurate / fast (paired) |", "| --- | --- | --- | --- |"]
        for chain, t in result["math_modes_time"].items():
            rows.append(f"| {chain} [{t['binding']}] | {t['fast']['median_ms']:.3g} | {t['accurate']['median_ms']:.3g} "
                        f"| {t['accurate_over_fast']} |")
        out += "\n\n" + "\n".join(rows)
    return out


def _fmt(v: float) -> str:
    return f"{v:.3g}" if v < 1e4 else f"{v:.2e}".replace("e+0", "e").replace("e+", "e")


def machine() -> dict:
    from .machine import describe
    d = describe()
    d["platform"] = platform.platform()
    try:
        d["llvm_mcpu"] = host_mcpu()
    except Exception:
        pass
    versions = {}
    for mod in ("torch", "jax", "jaxlib", "onnxruntime", "tvm", "scipy"):
        try:
            versions[mod] = __import__(mod).__version__
        except Exception:
            pass
    d["versions"] = versions
    return d


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.accuracy", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default=",".join(FUNCTIONS), help="functions (default: exp,tanh,erf,sigmoid)")
    p.add_argument("--contenders", default=",".join(CONTENDERS),
                   help="default: " + ",".join(CONTENDERS))
    p.add_argument("--stride", type=int, default=1021,
                   help="take every STRIDE-th f32 bit pattern of each range (default 1021: about 2.2 million "
                        "points a function)")
    p.add_argument("--window", type=int, default=4096, help="bit patterns each side of an edge (default 4096)")
    p.add_argument("--no-time", action="store_true", help="skip timing fusec's math modes")
    p.add_argument("--seconds", type=float, default=4.0, help="timing budget per mode and chain")
    p.add_argument("--out", default=str(RESULTS))
    p.add_argument("--table", metavar="JSON", help="print the markdown tables of a result file and stop")
    a = p.parse_args(argv)
    if a.table:
        import json
        with open(a.table) as fh:
            print(table(json.load(fh)))
        return 0
    names = [n.strip() for n in a.only.split(",") if n.strip()]
    contenders = [c.strip() for c in a.contenders.split(",") if c.strip()]
    bad = [n for n in names if n not in FUNCTIONS] + [c for c in contenders if c not in CONTENDERS]
    if bad or a.stride < 1 or a.window < 0:
        p.error(f"unknown: {', '.join(bad)}" if bad else "--stride is at least 1, --window at least 0")
    result = {"date": utc_stamp(), "command": "python -m bench.accuracy " + " ".join(argv or sys.argv[1:]),
              "machine": machine(),
              "sampling": {"stride": a.stride, "window": a.window, "method": __doc__.split("Sampling: ")[1]
                           .split("\n\n")[0].replace("\n", " ")}}
    result["accuracy"] = measure_accuracy(names, contenders, a.stride, a.window)
    if not a.no_time:
        result["math_modes_time"] = time_modes(a.seconds)
    print(write_result(a.out, "accuracy", result))
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
