"""Whole models against the field (issue 39): `python -m bench --models`.

Per model (bench/model_defs.py: GPT-2, Llama, BERT, ViT, ResNet-18; random weights, f32,
inference) the contenders are

    fusec torch.compile   torch.compile(model, backend=fusec), target cpu
    fusec onnx            torch.onnx.export(dynamo=True) -> fusec.onnx.load (FUSEC_ONNX models)
    torch                 eager PyTorch
    torch.compile         TorchInductor with freezing on (PyTorch's advice for cpu inference)
    onnxruntime           the same export, ORT_ENABLE_ALL, intra-op threads = cores, no spinning
    tvm                   TVM Relax on the same export (bench/runtimes.py, where present)

each timed interleaved in one process (bench/timing.py), every thread pool sized to the machine's
cores. Each contender's output is compared with eager PyTorch's (runtime/compare.py's f32
tolerances) in the run. Recorded per model: the sizes, each contender's times, its first
(cold) and cached preparation (fusec's compile, Inductor's, ORT's session creation, TVM's build),
fusec's regions and kernels (the cost model's prediction per kernel beside the measured time per
region), the ops left to eager PyTorch and the share of the call spent outside fusec's regions,
and every skip with its reason. Results: bench/results/models-<date>.json, and a table in
docs/PERFORMANCE.md (bench/table.py).

Memory modes (`--memory`, as the micro suite's): "default", each contender as its users call it
(fresh outputs from torch, Inductor, onnxruntime's run and TVM's VM; fusec's planned pool of
output buffers), and "equalised", in a process started with huge pages for malloc and torch's
allocator (bench/__main__.py): fusec hands back a fresh output each call (the backend's and
load's `fresh_outputs`), onnxruntime writes into preallocated outputs (IOBinding), and torch's
and TVM's outputs stay allocated by the model (a forward takes no output buffer): each
contender's entry says which (`memory`).
"""
from __future__ import annotations

import gc
import os
import statistics
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from . import scratch_dir, utc_stamp
from .model_defs import ADJUSTED, ADJUSTED_WHY, MODELS, SIZES, build
from .timing import Budget, measure, paired_ratio

SCHEMA = 1
SUITE = "fusec-bench-models"
CONTENDERS = ("fusec torch.compile", "fusec onnx", "torch", "torch.compile", "onnxruntime", "tvm")
FUSEC = ("fusec torch.compile", "fusec onnx")
ANCHORS = ("torch", "torch.compile", "onnxruntime", "tvm")
# the models that also go through fusec's ONNX path by default (compile time on 2 cores)
FUSEC_ONNX = ("gpt2", "resnet18")
MEMORY_MODES = ("default", "equalised")
# what each contender does with its outputs in the memory-equalised run (recorded per entry)
EQUALISED_NOTES = {
    "fusec torch.compile": "huge pages; a fresh output each call (the backend's fresh_outputs option)",
    "fusec onnx": "huge pages; a fresh output each call (fusec.onnx.load(fresh_outputs=True))",
    "torch": "huge pages (THP_MEM_ALLOC_ENABLE=1); outputs allocated by the model: a forward cannot "
             "write into a preallocated output",
    "torch.compile": "huge pages (THP_MEM_ALLOC_ENABLE=1); outputs allocated by the compiled model: a "
                     "forward cannot write into a preallocated output",
    "onnxruntime": "huge pages for malloc; outputs written into preallocated arrays (IOBinding)",
    "tvm": "huge pages for malloc; outputs allocated by the Relax VM (no preallocated output bound)",
}


class Skip(Exception):
    """This contender cannot run here; the message says why."""


@dataclass
class Contender:
    name: str
    call: Callable[[], object]
    result: Callable[[], np.ndarray]        # the output of a call, as a NumPy array
    cold_s: float | None = None             # first preparation (compile, session, build) + first call
    cached_s: float | None = None           # the same with the tool's caches filled
    detail: dict = field(default_factory=dict)


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:                  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _failure(e: BaseException) -> str:
    last = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
    where = f" ({Path(last.filename).name}:{last.lineno})" if last else ""
    text = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
    return f"failed: {type(e).__name__}: {text}{where}"


def _np(out) -> np.ndarray:
    import torch
    if isinstance(out, (list, tuple)):
        out = out[0]
    if isinstance(out, torch.Tensor):
        return out.detach().numpy()
    return np.asarray(out)


def _r(x, digits: int = 4):
    return None if x is None else float(f"{float(x):.{digits}g}")


# ---- fusec through torch.compile --------------------------------------------------------------

class RegionClock:
    """While entered, times every fusec region's forward (FusecRegion: the chain's call with
    its conversions) by region name, and keeps each region module seen (for its plans)."""

    def __init__(self):
        self.seconds: dict[str, list[float]] = {}
        self.modules: dict[str, object] = {}
        self._orig = None

    def __enter__(self):
        from fusec.frontends.torch_backend import FusecRegion
        orig = FusecRegion.forward
        clock = self

        def timed(mod, *args):
            t0 = time.perf_counter()
            try:
                return orig(mod, *args)
            finally:
                name = mod.region.name
                clock.seconds.setdefault(name, []).append(time.perf_counter() - t0)
                clock.modules.setdefault(name, mod)
        self._orig = orig
        FusecRegion.forward = timed
        return self

    def __exit__(self, *exc):
        from fusec.frontends.torch_backend import FusecRegion
        FusecRegion.forward = self._orig


def predicted_kernels(chain, region: str | None = None) -> list[dict]:
    """The cost model's prediction for each kernel of a chain's builds (compiled.plan)."""
    out = []
    for built in list(getattr(chain, "_builds", {}).values()):
        plan = built.plan or {}
        for g in plan.get("groups", []):
            cost = g.get("cost") or {}
            root = next((o["label"] for o in g.get("ops", []) if o.get("role") == "root"), None)
            k = {"kernel": g.get("kernel"), "template": g.get("template"), "root": root,
                 "ops": len(g.get("ops", [])), "predicted_ms": _r((cost.get("time_s") or 0) * 1e3),
                 "bound": cost.get("bound")}
            if region is not None:
                k = {"region": region, **k}
            out.append(k)
    return out


def _predicted_total_ms(chain) -> float | None:
    tot = [((b.plan or {}).get("model") or {}).get("predicted_s") for b in getattr(chain, "_builds", {}).values()]
    tot = [t for t in tot if t is not None]
    return _r(sum(tot) * 1e3) if tot else None


def fusec_torch(model, args, cache_dir: str, fresh_outputs: bool = False) -> tuple[Contender, dict]:
    """fusec through torch.compile: the first compile into an empty cache, then a fresh
    dynamo trace finding the builds in the cache (the cached time); the second is timed.
    `fresh_outputs`: the backend's option (a new output array every call)."""
    import torch
    import fusec.torch as ft
    from fusec.frontends.torch_backend import Report
    opts = {"target": "cpu", "cache": True, "cache_dir": cache_dir, "fresh_outputs": fresh_outputs}
    report = Report()
    torch._dynamo.reset()
    first = torch.compile(model, backend=ft.make_backend({**opts, "report": report}))
    t0 = time.perf_counter()
    with torch.no_grad():
        first(*args)
    cold = time.perf_counter() - t0
    torch._dynamo.reset()
    again = Report()
    fused = torch.compile(model, backend=ft.make_backend({**opts, "report": again}))
    t0 = time.perf_counter()
    with torch.no_grad():
        fused(*args)
    cached = time.perf_counter() - t0
    holder = {}

    def call():
        with torch.no_grad():
            holder["out"] = fused(*args)
        return holder["out"]

    def result():
        return _np(holder.get("out") if "out" in holder else call())
    eager_ops = report.eager
    detail = {
        "aten_ops": report.aten_ops, "in_fusec": report.in_fusec, "coverage": _r(report.coverage),
        "regions": report.partitions, "kernels": report.kernels,
        "eager_ops": {k: v["count"] for k, v in eager_ops.items()},
        "eager_reasons": {k: v["reasons"] for k, v in eager_ops.items()},
        "eager_op_share": _r(sum(v["count"] for v in eager_ops.values()) / report.aten_ops if report.aten_ops else 0),
        "graphs": report.graphs,
        "region_compile_s": {r.name: _r(r.compile_seconds) for r in report.regions},
        "cache_hits": sum(c == "hit" for r in again.regions for c in r.cache),
    }
    return Contender("fusec torch.compile", call, result, cold, cached, detail), {"fused": fused}


def profile_regions(call: Callable[[], object], runs: int) -> dict:
    """Time `runs` calls of the compiled model with the regions clocked: the measured time per
    region and the share of a call outside them (the ops left to eager PyTorch, the glue and
    dynamo's guards), beside the cost model's prediction per kernel."""
    totals, inside = [], []
    with RegionClock() as clock:
        for _ in range(runs):
            before = sum(map(sum, clock.seconds.values()))
            t0 = time.perf_counter()
            call()
            totals.append(time.perf_counter() - t0)
            inside.append(sum(map(sum, clock.seconds.values())) - before)
    # medians over the same calls (a region's time is part of its call's: the median is too)
    total, in_regions = statistics.median(totals), statistics.median(inside)
    # a region may run more than once per call (a graph calling it in a loop): its time per call
    per_call = {name: sum(v) / len(totals) for name, v in clock.seconds.items()}
    regions = []
    kernels = []
    for name, mod in clock.modules.items():
        regions.append({"region": name, "measured_ms": _r(per_call[name] * 1e3),   # mean per call
                        "calls": len(clock.seconds[name]) // len(totals),
                        "predicted_ms": _predicted_total_ms(mod.chain),
                        "kernels": len(predicted_kernels(mod.chain))})
        kernels += predicted_kernels(mod.chain, name)
    return {"runs": runs, "call_ms": _r(total * 1e3), "in_regions_ms": _r(in_regions * 1e3),
            "outside_share": _r(statistics.median(1 - i / t for i, t in zip(inside, totals) if t > 0)),
            "regions": regions, "kernels": kernels,
            "measured_as": "per region: the cpu build runs a region's chain as one Numba function, so the "
                           "measured time is the region's (its tensor conversions included), the predicted "
                           "one is per kernel"}


# ---- fusec through ONNX -------------------------------------------------------------------

def export_onnx(model, args, path: str) -> float:
    import torch
    t0 = time.perf_counter()
    with torch.no_grad():
        torch.onnx.export(model, args, path, dynamo=True, opset_version=20, verbose=False)
    return time.perf_counter() - t0


def onnx_feeds(path: str, args) -> dict:
    import onnx
    m = onnx.load(path, load_external_data=False)
    init = {i.name for i in m.graph.initializer}
    names = [i.name for i in m.graph.input if i.name not in init]
    return {n: a.numpy() for n, a in zip(names, args)}


def fusec_onnx(path: str, feeds: dict, cache_dir: str, fresh_outputs: bool = False) -> Contender:
    import fusec.onnx as fonnx
    t0 = time.perf_counter()
    first = fonnx.load(path, target="cpu", cache=True, cache_dir=cache_dir, fresh_outputs=fresh_outputs)
    first(**feeds)
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    om = fonnx.load(path, target="cpu", cache=True, cache_dir=cache_dir, fresh_outputs=fresh_outputs)
    om(**feeds)
    cached = time.perf_counter() - t0
    holder = {}

    def call():
        holder["out"] = om(**feeds)
        return holder["out"]

    def result():
        return _np(holder.get("out") or call())
    kernels = predicted_kernels(om.chain)
    detail = {"kernels": len(kernels), "predicted_ms": _predicted_total_ms(om.chain), "kernel_split": kernels,
              "fdsl_lines": om.fdsl.count("\n")}
    return Contender("fusec onnx", call, result, cold, cached, detail)


# ---- the anchors ----------------------------------------------------------------------------

def torch_eager(model, args) -> Contender:
    import torch
    holder = {}

    def call():
        with torch.no_grad():
            holder["out"] = model(*args)
        return holder["out"]
    return Contender("torch", call, lambda: _np(holder.get("out") if "out" in holder else call()),
                     detail={"threads": torch.get_num_threads()})


def inductor(model, args) -> Contender:
    """torch.compile with TorchInductor and freezing on (weights folded as constants)."""
    import torch
    import torch._inductor.config as icfg

    def compile_once():
        comp = torch.compile(model)
        t0 = time.perf_counter()
        with torch.no_grad(), icfg.patch(freezing=True):
            comp(*args)
        return comp, time.perf_counter() - t0
    torch._dynamo.reset()
    _, cold = compile_once()
    torch._dynamo.reset()
    comp, cached = compile_once()
    holder = {}

    def call():
        with torch.no_grad(), icfg.patch(freezing=True):
            holder["out"] = comp(*args)
        return holder["out"]
    return Contender("torch.compile", call, lambda: _np(holder.get("out") if "out" in holder else call()),
                     cold, cached, {"freezing": True, "threads": torch.get_num_threads()})


def onnxruntime_contender(path: str, feeds: dict, preallocate: bool = False) -> Contender:
    """bench/runtimes.py's ort_runner: ORT_ENABLE_ALL, intra-op threads = cores, no spinning;
    `preallocate`: outputs bound to preallocated arrays (IOBinding), for the equalised run."""
    from .runtimes import ort_runner
    return _from_runner("onnxruntime", lambda: ort_runner(path, feeds, cores(), preallocate=preallocate))


def tvm_contender(path: str, feeds: dict, tune_s: float = 0.0) -> Contender:
    """bench/runtimes.py's tvm_runner: Relax's fusing pipeline, FastMath, DLight's cpu rules, the
    host's target, TVM_NUM_THREADS = cores; MetaSchedule tried for `tune_s` seconds (0: not)."""
    from .runtimes import tvm_runner
    return _from_runner("tvm", lambda: tvm_runner(path, feeds, cores(), tune_seconds=tune_s))


def _from_runner(name: str, make) -> Contender:
    """A contender from one of bench/runtimes.py's runners; its RuntimeUnavailable a Skip.
    cold_s: the setup (ORT's session creation, TVM's import and build) plus the first call."""
    from .runtimes import RuntimeUnavailable
    try:
        r = make()
    except RuntimeUnavailable as e:
        raise Skip(str(e)) from None
    t0 = time.perf_counter()
    r.call()
    first = time.perf_counter() - t0
    detail = dict(r.detail or {})
    detail.update(setup_s=_r(r.setup_s), first_call_s=_r(first), notes=list(r.notes or []))
    return Contender(name, r.call, r.result, r.setup_s + first, None, detail)


# ---- one model ------------------------------------------------------------------------------

def run_model(name: str, size: str, budget: Budget, contenders=CONTENDERS, fusec_onnx_models=FUSEC_ONNX,
              log=print, status=None, profile_runs: int | None = None, tvm_tune_s: float = 0.0,
              memory: str = "default", cache_root: str | None = None) -> dict:
    """One model's contenders timed in memory mode `memory` (MEMORY_MODES; "equalised" wants
    the process started with huge pages: bench/__main__.py). `cache_root`: where fusec's compile
    caches go (cache_root/<model>/...; default a scratch folder of this process), so that a
    second process (the equalised child) finds the builds of the first."""
    import torch
    from fusec.runtime.compare import compare
    if memory not in MEMORY_MODES:
        raise ValueError(f"memory mode {memory!r}: one of {', '.join(MEMORY_MODES)}")
    equalised = memory == "equalised"
    status = status or (lambda text: None)
    model, args, cfg = build(name, size)
    row: dict = {"model": name, "size": size, "config": cfg}
    if size == "full" and name in ADJUSTED:
        row["adjusted"] = ADJUSTED[name]
    with torch.no_grad():
        want = _np(model(*args))
    row["output_shape"] = list(want.shape)
    work = scratch_dir(f"fusec-bench-models-{name}-")
    cache = os.path.join(cache_root, name) if cache_root else work
    made: list[Contender] = []
    skipped: dict[str, str] = {}
    prof_call = None

    def attempt(cname, fn):
        if cname not in contenders:
            return None
        status(f"{name}: preparing {cname}")
        try:
            c = fn()
        except Skip as e:
            skipped[cname] = str(e)
            return None
        except Exception as e:           # a failure is a result, not the end of the run
            skipped[cname] = _failure(e)
            return None
        made.append(c)
        return c

    attempt("torch", lambda: torch_eager(model, args))
    attempt("torch.compile", lambda: inductor(model, args))
    c = attempt("fusec torch.compile",
                lambda: fusec_torch(model, args, os.path.join(cache, "fusec-torch"), fresh_outputs=equalised)[0])
    if c is not None:
        prof_call = c.call
    onnx_path = os.path.join(work, f"{name}.onnx")
    need_onnx = {"fusec onnx", "onnxruntime", "tvm"} & set(contenders)
    feeds = None
    if need_onnx:
        status(f"{name}: exporting to ONNX")
        try:
            row["onnx_export_s"] = _r(export_onnx(model, args, onnx_path))
            feeds = onnx_feeds(onnx_path, args)
        except Exception as e:
            for cname in sorted(need_onnx):
                skipped[cname] = f"the ONNX export {_failure(e)}"
    if feeds is not None:
        if name in fusec_onnx_models:
            attempt("fusec onnx", lambda: fusec_onnx(onnx_path, feeds, os.path.join(cache, "fusec-onnx"),
                                                     fresh_outputs=equalised))
        elif "fusec onnx" in contenders:
            skipped["fusec onnx"] = (f"not run for {name}: the ONNX path runs for {', '.join(fusec_onnx_models)} "
                                     "(compile time on 2 cores; --fusec-onnx all runs it for every model)")
        attempt("onnxruntime", lambda: onnxruntime_contender(onnx_path, feeds, preallocate=equalised))
        attempt("tvm", lambda: tvm_contender(onnx_path, feeds, tvm_tune_s))
    # torch._dynamo.reset() (fusec's cached compile) dropped Inductor's compiled code: trace again
    # now (its caches are filled), so that no compile falls in the timing's warm-up
    for c in made:
        if c.name == "torch.compile":
            status(f"{name}: re-tracing torch.compile")
            c.call()
    for c in made:
        c.call()
    status(f"{name}: timing {len(made)} contenders")
    samples = measure({c.name: c.call for c in made}, budget)
    entries = {}
    for c in made:
        s = samples[c.name]
        e = s.as_dict()
        try:
            got = c.result()
            cmp = compare(got.astype(np.float32), want, "f32")
            e["agreement"] = {"ok": bool(cmp.ok), "max_abs": _r(cmp.max_abs, 3), "max_rel": _r(cmp.max_rel, 3),
                              "against": "torch eager"}
        except Exception as ex:
            e["agreement"] = {"ok": False, "reason": _failure(ex)}
        e["cold_s"], e["cached_s"] = _r(c.cold_s), _r(c.cached_s)
        if equalised:
            e["memory"] = EQUALISED_NOTES[c.name]
        if c.detail:
            e["detail"] = c.detail
        entries[c.name] = e
        log(f"  {c.name:20s} median {s.median_ms:9.2f} ms  min {s.min_ms:9.2f} ms  ({len(s.seconds)} runs)  "
            f"{'ok' if e['agreement']['ok'] else 'MISMATCH'}"
            + (f"  cold {c.cold_s:.1f} s" if c.cold_s is not None else "")
            + (f", cached {c.cached_s:.1f} s" if c.cached_s is not None else ""))
    for cname, why in skipped.items():
        log(f"  skip {cname}: {why}")
    row["contenders"] = entries
    row["skipped"] = skipped
    row["ratios"] = _ratios(samples)
    if prof_call is not None:
        status(f"{name}: profiling fusec's regions")
        try:
            row["fusec_split"] = profile_regions(prof_call, profile_runs or max(3, min(10, budget.min_runs)))
        except Exception as e:
            row["fusec_split"] = {"failed": _failure(e)}
    del made
    gc.collect()
    return row


def _ratios(samples: dict) -> dict:
    """fusec's median over each anchor's, and over the fastest anchor's (below 1: fusec faster)."""
    out = {}
    anchors = {n: s for n, s in samples.items() if n in ANCHORS}
    fastest = min(anchors, key=lambda n: anchors[n].median_ms) if anchors else None
    for f in FUSEC:
        if f not in samples:
            continue
        mine = {n: {"median": _r(samples[f].median_ms / s.median_ms), "paired": _r(paired_ratio(samples[f], s))}
                for n, s in anchors.items()}
        if fastest:
            mine["fastest_anchor"] = {"name": fastest, "median": _r(samples[f].median_ms / anchors[fastest].median_ms)}
        out[f] = mine
    return out


# ---- the run --------------------------------------------------------------------------------

def set_threads(n: int) -> dict:
    """Every contender's thread pool at n threads (the machine's cores)."""
    import torch
    os.environ.setdefault("TVM_NUM_THREADS", str(n))
    torch.set_num_threads(n)
    info = {"torch": torch.get_num_threads(), "tvm_env": os.environ.get("TVM_NUM_THREADS")}
    try:
        import numba
        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
        info["numba"] = numba.get_num_threads()
    except ImportError:                      # pragma: no cover
        pass
    info["onnxruntime_intra_op"] = n
    return info


def versions() -> dict:
    out = {}
    for mod in ("torch", "transformers", "onnx", "onnxruntime", "onnxscript", "tvm", "numba"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:
            out[mod] = None
    return out


def run_models(names=MODELS, size: str = "full", budget: Budget | None = None, contenders=CONTENDERS,
               fusec_onnx_models=FUSEC_ONNX, log=print, status=None, machine_info: dict | None = None,
               checkpoint: Callable[[dict], None] | None = None, tvm_tune_s: float = 0.0,
               memory: str = "default", cache_root: str | None = None) -> dict:
    """Every model of `names` in memory mode `memory` (run_model); `checkpoint`, where given,
    gets the result so far after each model (a long run that is cut short keeps what it
    measured)."""
    import fusec
    from . import machine
    from .suite import git_commit, memory_env
    budget = budget or Budget(seconds=3.0, min_runs=5, max_runs=30, warmup=1)
    info = machine_info or machine.describe()
    threads = set_threads(cores())
    rows = []
    result = {
        "schema": SCHEMA, "suite": SUITE, "size": size, "date": utc_stamp(),
        "machine": info.get("machine_id") or machine.machine_id(info.get("gpu")), "host": info,
        "fusec": {"version": fusec.__version__, "commit": git_commit()}, "versions": versions(),
        "threads": threads, "cores": cores(),
        "tvm_tune_s": tvm_tune_s,
        "budget": {"seconds": budget.seconds, "min_runs": budget.min_runs, "max_runs": budget.max_runs,
                   "warmup": budget.warmup, "quiesce_s": budget.quiesce},
        "issue_sizes": SIZES["issue"], "adjusted": ADJUSTED if size == "full" else {},
        "adjusted_why": ADJUSTED_WHY if size == "full" else None,
        "ratio_convention": "fusec's median / the other's: below 1 means fusec is faster",
        "agreement": "each contender's output against eager PyTorch's, runtime/compare.py's f32 tolerances",
        "memory": {"mode": memory, **memory_env()},
        "models": rows,
    }
    for i, name in enumerate(names, 1):
        log(f"[{name}] {SIZES[size][name]}" + (f" (adjusted: {ADJUSTED[name]})" if size == "full" and name in ADJUSTED
                                                else ""))
        t0 = time.perf_counter()
        row = run_model(name, size, budget, contenders, fusec_onnx_models, log,
                        (lambda text, i=i: status(f"[{i}/{len(names)}] {text}")) if status else None,
                        tvm_tune_s=tvm_tune_s, memory=memory, cache_root=cache_root)
        row["wall_s"] = _r(time.perf_counter() - t0)
        rows.append(row)
        if checkpoint is not None:
            checkpoint(result)
    return result


def write(result: dict, out_dir: str) -> str:
    """out_dir/models[-<size>][-equalised]-<date>.json (-equalised: `--memory equalised` alone)."""
    from . import write_result
    stem = "models" if result["size"] == "full" else f"models-{result['size']}"  # (table.py: full only)
    if result.get("memory", {}).get("mode") == "equalised":
        stem += "-equalised"
    return write_result(out_dir, stem, result)


def equalised_summary(child: dict) -> dict:
    """What the parent keeps of the equalised child's result: its memory settings and, per model,
    each contender's times, agreement and memory note, the ratios and the skips (its cold and
    cached compile figures are not kept: it found the parent's caches filled)."""
    keep = ("median_ms", "min_ms", "runs", "quiesce", "agreement", "memory")

    def entry(e: dict) -> dict:
        out = {k: e[k] for k in keep if k in e}
        d = e.get("detail") or {}
        if "tuned" in d:                   # TVM: whether MetaSchedule's tuning was applied (the table says)
            out["detail"] = {k: d[k] for k in ("tuned", "untuned_reason") if k in d}
        return out
    return {"memory": child.get("memory"), "date": child.get("date"), "wall_s": child.get("wall_s"),
            "models": [{"model": m["model"], "contenders": {n: entry(e) for n, e in m["contenders"].items()},
                        "ratios": m.get("ratios", {}), "skipped": m.get("skipped", {})}
                       for m in child.get("models", [])]}
