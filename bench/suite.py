"""The suite: for each workload, prepare every implementation, time them interleaved, check each
against the NumPy reference (in float64), and return the results as one JSON-able dict."""
from __future__ import annotations

import gc
import os
import subprocess
import traceback
from pathlib import Path

import numpy as np

from . import machine, utc_stamp
from .anchors import CPU_ANCHORS, Impl, Skip, fusec_dynamic_impl, fusec_impls, prepare
from .timing import Budget, measure, paired_ratio
from .workloads import WORKLOADS, Workload

SCHEMA = 1
FUSEC = ("fusec fused", "fusec unfused")


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).resolve().parent, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def run_suite(workloads: tuple[Workload, ...] = WORKLOADS, size: str = "full",
              anchors: tuple[str, ...] = CPU_ANCHORS, budget: Budget = Budget(),
              target: str = "cpu", log=print, machine_info: dict | None = None,
              bandwidth: dict | None = None, gemm: dict | None = None, status=None,
              memory: str = "default") -> dict:
    """Run every workload; `log` gets one line per step (progress for a long run), `status`
    (when given) what is being done now, for a progress line. `memory`: the memory mode
    (anchors.MEMORY_MODES; "equalised" wants the process started with huge pages: __main__)."""
    status = status or (lambda text: None)
    import fusec
    info = machine_info or machine.describe()
    bandwidth = bandwidth or machine.copy_bandwidth(256 if size == "full" else 8)
    gemm = gemm if gemm is not None else machine.gemm_rate(2048 if size == "full" else 128)
    log(f"copy bandwidth {bandwidth['gbps']} GB/s; sgemm {gemm.get('gflops')} GFLOP/s")
    results = []
    for i, w in enumerate(workloads, 1):
        log(f"[{w.name}]")
        results.append(run_workload(w, size, anchors, budget, target, bandwidth, gemm, log,
                                    lambda what, i=i, w=w: status(f"[{i}/{len(workloads)}] {w.name}: {what}"),
                                    memory=memory))
        gc.collect()
    return {
        "schema": SCHEMA, "suite": "fusec-bench", "size": size, "target": target,
        "date": utc_stamp(),
        "machine": info.get("machine_id") or machine.machine_id(info.get("gpu")),
        "host": info, "fusec": {"version": fusec.__version__, "commit": git_commit()},
        "bandwidth": bandwidth, "gemm": gemm,
        "budget": {"seconds": budget.seconds, "min_runs": budget.min_runs,
                   "max_runs": budget.max_runs, "warmup": budget.warmup, "quiesce_s": budget.quiesce},
        "ratio_convention": "fusec fused time / other time: below 1 means fusec is faster",
        "memory": {"mode": memory, **memory_env()},
        "fusec_cached": "numba-cache",     # cached_s: a second load, Numba's code from its cache
        "workloads": results,
    }


def memory_env() -> dict:
    """What this process's allocators were told (the memory-equalised run sets these before it
    starts: bench/__main__.py) and the kernel's transparent huge page mode."""
    try:
        thp = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().strip()
    except OSError:
        thp = None
    return {"GLIBC_TUNABLES": os.environ.get("GLIBC_TUNABLES"),
            "THP_MEM_ALLOC_ENABLE": os.environ.get("THP_MEM_ALLOC_ENABLE"), "thp": thp}


def run_workload(w: Workload, size: str, anchors, budget: Budget, target: str,
                 bandwidth: dict, gemm: dict, log=print, status=None, memory: str = "default") -> dict:
    status = status or (lambda text: None)
    binding = w.binding(size)
    inputs = w.make_inputs(binding, seed=0)
    load_before = _loadavg()
    oracle = _oracle(w, inputs, binding)
    impls: list[Impl] = []
    skipped: dict[str, str] = {}
    status("compiling fusec's builds")
    try:
        impls += fusec_impls(w, binding, inputs, target, memory)
    except Exception as e:          # a compiler failure is a result, not the end of the suite
        skipped["fusec fused"] = skipped["fusec unfused"] = _failure(e)
    status("compiling fusec's dynamic build")      # the rows or batch taken at run time (--dynamic)
    try:
        impls.append(fusec_dynamic_impl(w, binding, inputs, target, memory))
    except Skip as e:
        skipped["fusec dynamic"] = str(e)
    except Exception as e:
        skipped["fusec dynamic"] = _failure(e)
    for a in anchors:
        status(f"preparing {a}")
        try:
            impls.append(prepare(a, w, inputs, memory))
        except Skip as e:
            skipped[a] = str(e)
        except Exception as e:
            skipped[a] = _failure(e)
    for name, note in skipped.items():
        log(f"  skip {name}: {note}")
    status(f"timing {len(impls)} implementations")
    samples = measure({i.name: i.call for i in impls}, budget)
    floor = machine.floor_ms(w.bytes(binding), w.flops(binding), bandwidth["gbps"], gemm.get("gflops"))
    out_impls = {}
    for impl in impls:
        s = samples[impl.name]
        entry = s.as_dict()
        entry.update(cold_s=_r(impl.cold_s), cached_s=_r(impl.cached_s), agreement=_agree(impl, oracle))
        if impl.detail:
            entry["detail"] = impl.detail
        if impl.notes:
            entry["notes"] = impl.notes
        out_impls[impl.name] = entry
        log(f"  {impl.name:15s} median {s.median_ms:10.3f} ms  min {s.min_ms:10.3f} ms  "
            f"({len(s.seconds)} runs)  {'ok' if entry['agreement']['ok'] else 'MISMATCH'}")
    return {
        "name": w.name, "chain": w.chain, "fdsl": f"bench/fdsl/{w.fdsl.name}", "binding": binding,
        "bound": w.bound, "bytes": w.bytes(binding), "flops": w.flops(binding), "floor": floor,
        "impls": out_impls, "skipped": skipped, "ratios": _ratios(samples, floor),
        "load_average": {"before": load_before, "after": _loadavg()},
    }


def _loadavg() -> list[float] | None:
    """The 1/5/15-minute load averages: other work on the machine while this was timed."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def _oracle(w: Workload, inputs, binding) -> np.ndarray:
    """fusec's NumPy reference executor, computing in float64."""
    import fusec
    typed = fusec.check(str(w.fdsl))
    chain = next(c for c in typed.chains if c.name == w.chain)
    return np.asarray(fusec.reference(chain, inputs, binding, compute_f64=True)[0])


def _agree(impl: Impl, oracle: np.ndarray) -> dict:
    from fusec.runtime.compare import compare
    try:
        got = impl.result()
    except Exception as e:
        return {"ok": False, "reason": _failure(e)}
    c = compare(got.astype(np.float32) if got.dtype != np.float32 else got, oracle, "f32")
    return {"ok": c.ok, "max_abs": float(f"{c.max_abs:.3g}"), "max_rel": float(f"{c.max_rel:.3g}")}


def _ratios(samples: dict, floor: dict) -> dict:
    out: dict = {}
    fused = samples.get("fusec fused")
    if fused is None:
        return out
    for name, s in samples.items():
        if name == "fusec fused":
            continue
        out[name] = {"median": _r(fused.median_ms / s.median_ms), "min": _r(fused.min_ms / s.min_ms),
                     "paired": _r(paired_ratio(fused, s))}
    if floor["ms"] > 0:
        out["floor"] = {"median": _r(fused.median_ms / floor["ms"]), "min": _r(fused.min_ms / floor["ms"])}
    return out


def _r(x):
    """Four significant digits (times span microseconds to seconds)."""
    return None if x is None else float(f"{float(x):.4g}")


def _failure(e: BaseException) -> str:
    last = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
    where = f" ({Path(last.filename).name}:{last.lineno})" if last else ""
    return f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}{where}"


def _quiesce(results: dict) -> float | None:
    """The run's --quiesce cap in seconds (None: a run from before it existed)."""
    return results.get("budget", {}).get("quiesce_s")


def write_results(results: dict, out_dir: Path) -> Path:
    """bench/results/<machine>-<date>[-<size>][-malloc-reuse][-equalised][-settle<s>|-noquiesce].json"""
    import json
    out_dir.mkdir(parents=True, exist_ok=True)
    day = results["date"][:16].replace(":", "")          # 2026-11-30T0145: one file per run
    suffix = "" if results["size"] == "full" else f"-{results['size']}"
    if results.get("host", {}).get("malloc") == "reuse":
        suffix += "-malloc-reuse"
    if results.get("memory", {}).get("mode") == "equalised":     # `--memory equalised` alone
        suffix += "-equalised"
    settle = results.get("budget", {}).get("settle_s") or 0
    if settle:                                          # runs of 2026-12-03 with --settle
        suffix += f"-settle{settle:g}"
    elif _quiesce(results) == 0:
        suffix += "-noquiesce"
    path = out_dir / f"{results['machine']}-{day}{suffix}.json"
    path.write_text(json.dumps(results, indent=1, sort_keys=False) + "\n")
    return path


