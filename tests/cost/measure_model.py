"""Predicted against measured on the cpu target, written as JSON (not part of the test suite:
it takes minutes and its numbers depend on the machine and its load).

    python tests/cost/measure_model.py [--out FILE] [--quick] [--rounds N] [--threads N]

1. Every benchmark workload (bench/workloads.py, at its `full` size; --quick: a quarter of the
   rows): the fused and the unfused build of the chain, predicted by the model (the measured cpu
   profile) and measured with the real runtime. A chain runs as one Numba function, so a
   kernel's own time is measured only where the build is that one kernel; otherwise the chain's
   time is compared with the sum of its kernels' predictions.
2. Tile ranking: three or more tile candidates of one matmul-epilogue kernel and one reduction
   kernel, each built from a hand plan (plan_from_dict with explicit block tiles), priced by the
   model and timed; the two rankings are compared (Kendall tau; 1 = the same order).

Timing: each build is timed in several rounds (Executable.time: one warm-up, then repeated runs)
and the minimum over all runs is kept. This machine shares its cores: while another process keeps
a core busy, a parallel region waits a scheduler timeslice (milliseconds), which the minimum
filters out when at least one undisturbed run happened; the median is recorded as well.
--threads 1 runs Numba on one thread (and the model with a one-core profile), which no second
process can disturb.
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

# candidates: rows per prange chunk, given as chunk counts (768 = 2^8 * 3 and 3072 = 2^10 * 3 rows: 3 divides)
RANKING = {
    "matmul epilogue (mlp_piped: gelu(x @ w1 + b1))": dict(
        fdsl="examples/mlp.fdsl", chain="mlp_piped", binding={"M": 768, "D": 256, "H": 512},
        ops=[1, 2], chunks=[1, 3, 6, 24]),
    "reduction (softmax_rows)": dict(
        fdsl="examples/softmax.fdsl", chain="softmax_rows", binding={"M": 3072, "N": 2048},
        ops=[1, 2, 4, 5], chunks=[1, 2, 3, 6, 48]),
}


def timed(executable, inputs, rounds: int) -> dict:
    mins, meds, runs = [], [], 0
    for _ in range(rounds):
        t = executable.time(inputs, min_runs=5, max_runs=60, budget_s=0.6)
        mins.append(t.min_s)
        meds.append(t.median_s)
        runs += t.runs
    return {"min_s": min(mins), "median_s": statistics.median(meds), "runs": runs}


def workloads(args, profile_name: str | None) -> list[dict]:
    import fusec
    from bench.workloads import WORKLOADS
    out = []
    for w in WORKLOADS:
        binding = w.binding("full")
        if args.quick:
            key = next(iter(binding))
            binding[key] = max(1, binding[key] // 4)
        prog = fusec.compile(str(w.fdsl), target="cpu", options={"hw": profile_name})
        chain = prog[w.chain]
        t0 = time.perf_counter()
        compiled = chain.compiled(binding)
        inputs = w.make_inputs(binding, seed=0)
        model = compiled.plan["model"]
        row = {"workload": w.name, "binding": binding, "bench_bound": w.bound, "compile_s": time.perf_counter() - t0,
               "kernels": compiled.plan["kernels"], "unfused_kernels": model["unfused_launches"],
               "model_bounds": [g["cost"]["bound"] for g in compiled.plan["groups"]],
               "predicted": {"fused_s": model["predicted_s"], "unfused_s": model["unfused_predicted_s"],
                             "speedup": model["predicted_speedup"],
                             "kernels_s": [g["cost"]["time_s"] for g in compiled.plan["groups"]]},
               "load_before": os.getloadavg()[0]}
        row["measured"] = {"fused": timed(compiled.fused, inputs, args.rounds),
                           "unfused": timed(compiled.unfused, inputs, args.rounds)}
        m = row["measured"]
        row["measured"]["speedup"] = m["unfused"]["min_s"] / m["fused"]["min_s"]
        row["ratio_measured_over_predicted"] = {
            "fused": m["fused"]["min_s"] / model["predicted_s"],
            "unfused": m["unfused"]["min_s"] / model["unfused_predicted_s"]}
        row["per_kernel_measured"] = ("the fused build is one kernel: its time is the chain's"
                                      if row["kernels"] == 1 else "chain only (one Numba function runs all kernels)")
        row["load_after"] = os.getloadavg()[0]
        out.append(row)
        print(f"{w.name:14} {str(binding):34} predicted fused {model['predicted_s'] * 1e3:9.3f} ms  measured "
              f"{m['fused']['min_s'] * 1e3:9.3f} ms (x{row['ratio_measured_over_predicted']['fused']:.2f})  unfused "
              f"{model['unfused_predicted_s'] * 1e3:9.3f} / {m['unfused']['min_s'] * 1e3:9.3f} ms "
              f"(x{row['ratio_measured_over_predicted']['unfused']:.2f})  bound {row['model_bounds']}", flush=True)
    return out


def ranking(args, profile_name: str | None) -> list[dict]:
    import fusec
    from fusec.compiler.autotune import kendall_tau
    from fusec.runtime import reference
    out = []
    for what, case in RANKING.items():
        prog_typed = fusec.check(os.path.join(ROOT, case["fdsl"]))
        chain = prog_typed.chain(case["chain"])
        rows = case["binding"][next(iter(case["binding"]))]
        inputs = reference.random_inputs(chain, case["binding"], 0)
        cands = []
        for chunks in case["chunks"]:
            tile = rows // chunks
            spec = {case["chain"]: {"groups": [{"ops": case["ops"], "block_tiles": [tile, 0]}]}}
            prog = fusec.compile(os.path.join(ROOT, case["fdsl"]), target="cpu",
                                 options={"plans": spec, "baseline": False, "hw": profile_name})
            compiled = prog[case["chain"]].compiled(case["binding"])
            predicted = compiled.plan["model"]["predicted_s"]
            measured = timed(compiled.fused, inputs, args.rounds)
            cands.append({"chunks": chunks, "block_tiles": [tile, 0], "predicted_s": predicted, **measured})
            print(f"{what:48} chunks {chunks:3}  predicted {predicted * 1e3:8.3f} ms  measured "
                  f"{measured['min_s'] * 1e3:8.3f} ms (median {measured['median_s'] * 1e3:.3f})", flush=True)
        pred = {c["chunks"]: c["predicted_s"] for c in cands}
        meas = {c["chunks"]: c["min_s"] for c in cands}
        out.append({"kernel": what, "binding": case["binding"], "candidates": cands,
                    "predicted_order": sorted(pred, key=pred.get), "measured_order": sorted(meas, key=meas.get),
                    "kendall_tau": kendall_tau(pred, meas)})
        print(f"  predicted order {out[-1]['predicted_order']}, measured {out[-1]['measured_order']}, "
              f"tau {out[-1]['kendall_tau']:.2f}", flush=True)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.path.join(ROOT, "tests", "cost", "results", "model_vs_measured.json"))
    p.add_argument("--quick", action="store_true", help="a quarter of the benchmark rows")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--threads", type=int, default=0, help="Numba threads (0: all cores)")
    p.add_argument("--only", choices=("workloads", "ranking"))
    args = p.parse_args()
    import numba
    from fusec.compiler import hardware
    profile_name = None
    if args.threads:
        numba.set_num_threads(args.threads)
        # the model on as many cores as the runtime uses
        one = replace(hardware.cpu_profile(), name=f"cpu{args.threads}", units=args.threads,
                      bandwidth=hardware.cpu_profile().single_core_bandwidth or hardware.cpu_profile().bandwidth)
        hardware.register(one)
        profile_name = one.name
    result = {"machine": hardware.cpu_profile().as_dict(), "threads": numba.get_num_threads(),
              "profile": profile_name or "cpu", "rounds": args.rounds, "quick": args.quick,
              "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    if args.only != "ranking":
        result["workloads"] = workloads(args, profile_name)
    if args.only != "workloads":
        result["ranking"] = ranking(args, profile_name)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
