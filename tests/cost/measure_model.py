"""Predicted against measured on the cpu target, written as JSON (not part of the test suite:
it takes minutes and its numbers depend on the machine and its load).

    python tests/cost/measure_model.py [--out FILE] [--quick] [--rounds N] [--threads N]

1. Every benchmark workload (bench/workloads.py, at its `full` size; --quick: a quarter of the
   rows): the fused and the unfused build of the chain, predicted by the model (the measured cpu
   profile) and measured with the real runtime. A chain runs as one Numba function, so a
   kernel's own time is measured only where the build is that one kernel; otherwise the chain's
   time is compared with the sum of its kernels' predictions.
2. Tile ranking: three or more tile candidates of matmul-epilogue kernels and of a reduction
   kernel, each built from a hand plan (plan_from_dict with explicit block tiles), priced by the
   model and timed; the two rankings are compared (Kendall tau; 1 = the same order).

Timing: the builds are timed in rounds, round-robin (Executable.time: one warm-up, then repeated
runs), and per build the minimum over all runs is kept. This machine shares its cores: while another process keeps
a core busy, a parallel region waits a scheduler timeslice (milliseconds), which the minimum
filters out when at least one undisturbed run happened; the median is recorded as well.
--threads 1 runs Numba on one thread (and the model with a one-core profile), which no second
process can disturb. BLAS runs one thread per call (--blas-threads, default 1): the cpu target
calls it once per tile inside prange workers, where a multi-threaded OpenBLAS oversubscribes the
cores (on the 2-core development machine a 768x256x512 matmul epilogue took 4 ms instead of 0.9).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import replace

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

# candidates: the split loop (batches or rows) as chunk counts; 3 divides every extent below
BMM_EPILOGUE = """chain bmm_epilogue(x: f32[B, M, K], w: f32[B, K, N], r: f32[B, M, N]) -> f32[B, M, N] {
    return gelu(x @ w) + r
}
"""
RANKING = {
    # a batched matmul is one BLAS call per tile, followed by its epilogue in the same chunk
    "batched matmul epilogue (gelu(x @ w) + r)": dict(
        source=BMM_EPILOGUE, chain="bmm_epilogue", binding={"B": 12, "M": 256, "K": 256, "N": 256},
        ops=[1, 2], chunks=[1, 2, 3, 6, 12], loops=3),
    # a 2-D matmul with a zero fill is one BLAS call for all rows before the chunk loop (since
    # e7a4117): its chunking only splits the epilogue, which the model does not know yet
    "matmul epilogue (mlp_piped: gelu(x @ w1 + b1))": dict(
        fdsl="examples/mlp.fdsl", chain="mlp_piped", binding={"M": 768, "D": 256, "H": 512},
        ops=[1, 2], chunks=[1, 3, 6, 24]),
    "reduction (softmax_rows)": dict(
        fdsl="examples/softmax.fdsl", chain="softmax_rows", binding={"M": 3072, "N": 2048},
        ops=[1, 2, 4, 5], chunks=[1, 2, 3, 6, 48]),
}
# the candidates the model tells apart (predictions at least 10% apart): the claim is on these
SEPARATED = (1, 3, 6)


def interleaved(builds: dict, rounds: int, pause_s: float = 0.5) -> dict:
    """Time every build in rounds, round-robin (each round: one warm-up, then repeated runs for
    about 0.4 s), so that every build meets the quiet and the busy moments of a shared machine
    alike; per build the minimum over all runs and the median of the rounds' medians."""
    mins = {k: [] for k in builds}
    meds = {k: [] for k in builds}
    runs = {k: 0 for k in builds}
    for _ in range(rounds):
        for k, (executable, inputs) in builds.items():
            t = executable.time(inputs, min_runs=3, max_runs=40, budget_s=0.4)
            mins[k].append(t.min_s)
            meds[k].append(t.median_s)
            runs[k] += t.runs
        time.sleep(pause_s)
    return {k: {"min_s": min(mins[k]), "median_s": statistics.median(meds[k]), "runs": runs[k],
                "round_mins_s": mins[k]} for k in builds}


def workloads(args, profile_name: str | None) -> list[dict]:
    import fusec
    from bench.workloads import WORKLOADS
    rows, builds = [], {}
    for w in WORKLOADS:
        binding = w.binding("full")
        if args.quick:
            key = next(iter(binding))
            binding[key] = max(1, binding[key] // 4)
        prog = fusec.compile(str(w.fdsl), target="cpu", options={"hw": profile_name})
        t0 = time.perf_counter()
        compiled = prog[w.chain].compiled(binding)
        inputs = w.make_inputs(binding, seed=0)
        model = compiled.plan["model"]
        rows.append({"workload": w.name, "binding": binding, "bench_bound": w.bound,
                     "compile_s": time.perf_counter() - t0,
                     "kernels": compiled.plan["kernels"], "unfused_kernels": model["unfused_launches"],
                     "model_bounds": [g["cost"]["bound"] for g in compiled.plan["groups"]],
                     "predicted": {"fused_s": model["predicted_s"], "unfused_s": model["unfused_predicted_s"],
                                   "speedup": model["predicted_speedup"],
                                   "kernels_s": [g["cost"]["time_s"] for g in compiled.plan["groups"]]},
                     "per_kernel_measured": ("the fused build is one kernel: its time is the chain's"
                                             if compiled.plan["kernels"] == 1
                                             else "chain only (one Numba function runs all kernels)")})
        builds[(w.name, "fused")] = (compiled.fused, inputs)
        builds[(w.name, "unfused")] = (compiled.unfused, inputs)
    load = os.getloadavg()[0]
    times = interleaved(builds, args.rounds, args.pause)
    for row in rows:
        f, u = times[(row["workload"], "fused")], times[(row["workload"], "unfused")]
        p = row["predicted"]
        row["measured"] = {"fused": f, "unfused": u, "speedup": u["min_s"] / f["min_s"]}
        row["ratio_measured_over_predicted"] = {"fused": f["min_s"] / p["fused_s"], "unfused": u["min_s"] / p["unfused_s"]}
        row["load"] = [load, os.getloadavg()[0]]
        r = row["ratio_measured_over_predicted"]
        print(f"{row['workload']:14} {str(row['binding']):34} predicted fused {p['fused_s'] * 1e3:9.3f} ms  measured "
              f"{f['min_s'] * 1e3:9.3f} ms (x{r['fused']:.2f})  unfused {p['unfused_s'] * 1e3:9.3f} / "
              f"{u['min_s'] * 1e3:9.3f} ms (x{r['unfused']:.2f})  bound {row['model_bounds']}", flush=True)
    return rows


def ranking(args, profile_name: str | None) -> list[dict]:
    import fusec
    from fusec.compiler.plan.autotune import kendall_tau
    from fusec.runtime import reference
    out = []
    for what, case in RANKING.items():
        source = case.get("source") or os.path.join(ROOT, case["fdsl"])
        chain = fusec.check(source).chain(case["chain"])
        rows = case["binding"][next(iter(case["binding"]))]
        inputs = reference.random_inputs(chain, case["binding"], 0)
        cands, builds = [], {}
        for chunks in case["chunks"]:
            tile = rows // chunks
            tiles = [tile] + [0] * (case.get("loops", 2) - 1)
            spec = {case["chain"]: {"groups": [{"ops": case["ops"], "block_tiles": tiles}]}}
            prog = fusec.compile(source, target="cpu",
                                 options={"plans": spec, "baseline": False, "hw": profile_name})
            compiled = prog[case["chain"]].compiled(case["binding"])
            cands.append({"chunks": chunks, "block_tiles": tiles, "predicted_s": compiled.plan["model"]["predicted_s"]})
            builds[chunks] = (compiled.fused, inputs)
        times = interleaved(builds, args.rounds, args.pause)
        for c in cands:
            c.update(times[c["chunks"]])
            print(f"{what:48} chunks {c['chunks']:3}  predicted {c['predicted_s'] * 1e3:8.3f} ms  measured "
                  f"{c['min_s'] * 1e3:8.3f} ms (median {c['median_s'] * 1e3:.3f})", flush=True)
        pred = {c["chunks"]: c["predicted_s"] for c in cands}
        meas = {c["chunks"]: c["min_s"] for c in cands}
        sp = {k: pred[k] for k in SEPARATED}
        sm = {k: meas[k] for k in SEPARATED}
        out.append({"kernel": what, "binding": case["binding"], "candidates": cands,
                    "predicted_order": sorted(pred, key=pred.get), "measured_order": sorted(meas, key=meas.get),
                    "kendall_tau": kendall_tau(pred, meas),
                    "separated": {"chunks": list(SEPARATED), "predicted_order": sorted(sp, key=sp.get),
                                  "measured_order": sorted(sm, key=sm.get), "kendall_tau": kendall_tau(sp, sm)}})
        r = out[-1]
        print(f"  all: predicted order {r['predicted_order']}, measured {r['measured_order']}, tau "
              f"{r['kendall_tau']:.2f}; chunks {list(SEPARATED)}: predicted {r['separated']['predicted_order']}, "
              f"measured {r['separated']['measured_order']}, tau {r['separated']['kendall_tau']:.2f}", flush=True)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.path.join(ROOT, "tests", "cost", "results", "model_vs_measured.json"))
    p.add_argument("--quick", action="store_true", help="a quarter of the benchmark rows")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--pause", type=float, default=0.5, help="seconds between rounds (spread over a busy machine)")
    p.add_argument("--threads", type=int, default=0, help="Numba threads (0: all cores)")
    p.add_argument("--only", choices=("workloads", "ranking"))
    p.add_argument("--blas-threads", type=int, default=1, help="OpenBLAS threads per call (0: its default)")
    args = p.parse_args()
    if args.blas_threads and "numpy" not in sys.modules:
        os.environ["OPENBLAS_NUM_THREADS"] = str(args.blas_threads)
    import numba
    from fusec.compiler.calibrate import cpu_profile
    from fusec.compiler.plan import hardware
    profile_name = None
    if args.threads:
        numba.set_num_threads(args.threads)
        # the model on as many cores as the runtime uses
        full = cpu_profile()
        share = args.threads / full.units
        one = replace(full, name=f"cpu{args.threads}", units=args.threads, peak_flops=full.peak_flops * share,
                      peak_flops_fp16=full.peak_flops_fp16 * share, cache_bandwidth=full.cache_bandwidth * share,
                      bandwidth=full.single_core_bandwidth if args.threads == 1 else full.bandwidth * share)
        hardware.register(one)
        profile_name = one.name
    result = {"machine": cpu_profile().as_dict(), "threads": numba.get_num_threads(),
              "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"),
              "profile": profile_name or "cpu", "rounds": args.rounds, "quick": args.quick,
              "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    if args.only != "ranking":
        result["workloads"] = workloads(args, profile_name)
    if args.only != "workloads":
        result["ranking"] = ranking(args, profile_name)
    if args.only and os.path.exists(args.out):        # one section again: keep the other one
        with open(args.out) as f:
            old = json.load(f)
        other = "ranking" if args.only == "workloads" else "workloads"
        if other in old:
            result[other] = old[other]
            result[f"{other}_started"] = old.get(f"{other}_started", old.get("started"))
    result[f"{args.only or 'workloads'}_started"] = result["started"]
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
