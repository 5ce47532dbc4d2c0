"""The benchmark section of docs/PERFORMANCE.md, generated from bench/results/*.json (never typed
by hand): for each machine, its newest full-size result as a table of medians (minimums in
parentheses), the floor, and fusec's ratios. It is written between the bench markers of the
performance page (`python -m bench table`), not into the README."""
from __future__ import annotations

import json
from pathlib import Path

START, END = "<!-- bench:start -->", "<!-- bench:end -->"
# the page whose bench markers the table goes between
DOC = Path(__file__).resolve().parent.parent / "docs" / "PERFORMANCE.md"
COLUMNS = ("fusec fused", "fusec unfused", "fusec dynamic", "numpy", "cupy", "torch", "torch.compile", "jax.jit",
           "onnxruntime", "tvm")
COMPILED = ("torch.compile", "jax.jit", "onnxruntime", "tvm")

# bench/timing.py shuffles each round's order from this run on (before, it rotated it)
SHUFFLED_SINCE = "2026-12-03T07:29"


def load_results(directory: Path) -> list[dict]:
    out = []
    for p in sorted(directory.glob("*.json")):
        try:
            r = json.loads(p.read_text())
        except ValueError:
            continue
        if r.get("suite") == "fusec-bench":
            r["_file"] = p.name
            out.append(r)
    return out


def newest_per_machine(results: list[dict], size: str = "full") -> list[dict]:
    """The newest result per machine, allocator mode and timing mode (quiesced, plain, or the
    settle time of a run of 2026-12-03 with `--settle`)."""
    best: dict[tuple, dict] = {}
    for r in results:
        if r.get("size") != size:
            continue
        budget = r.get("budget", {})
        key = (r["machine"], r.get("host", {}).get("malloc", "default"), budget.get("settle_s") or 0,
               bool(budget.get("quiesce_s")), r.get("memory", {}).get("mode", "default"))
        if key not in best or (r["date"], r["_file"]) > (best[key]["date"], best[key]["_file"]):
            best[key] = r
    return [best[k] for k in sorted(best)]


def _ms(entry: dict | None) -> str:
    if not entry:
        return "–"
    return f"{_num(entry['median_ms'])} ({_num(entry['min_ms'])})"


def _num(x: float) -> str:
    return f"{x:.3g}" if x < 100 else f"{x:.0f}"


def _ratio(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}×"


def render_result(r: dict, accuracy: dict | None = None) -> str:
    """One micro-suite result; `accuracy` (a `python -m bench.accuracy` result of the same cpu)
    adds each column's max ulp under its times."""
    present = [c for c in COLUMNS if any(c in w["impls"] for w in r["workloads"])]
    dynamic = "fusec dynamic" in present
    ulps = _ulp_row(accuracy, present, 1, 3 + dynamic)
    lines = _rows(r["workloads"], present, dynamic) + ulps
    equalised = r.get("equalised")
    if equalised:
        lines = ["Memory as each tool's users call it (fresh outputs for NumPy, torch, torch.compile, jax.jit "
                 "and onnxruntime's `run`; fusec's planned output buffers; TVM's VM pool):", ""] + lines
        mem = equalised["memory"]
        lines += ["", "Memory-equalised (a child process with " + ", ".join(
            f"`{k}={mem.get(k)}`" for k in ("GLIBC_TUNABLES", "THP_MEM_ALLOC_ENABLE"))
                  + f", transparent huge pages `{mem.get('thp')}`; fusec hands back a fresh output each call, torch "
                  "eager writes into a preallocated output where its last op takes `out=`, onnxruntime binds "
                  "preallocated outputs):", ""]
        lines += _rows(equalised["workloads"], present, dynamic) + ulps
    return _rest(r, dynamic, lines + _ulp_note(accuracy))


def _rows(workloads: list[dict], present: list[str], dynamic: bool) -> list[str]:
    head = ["workload"] + present + ["floor", "fused / best compiled", "fused / floor"] + (["dynamic / static"] if dynamic else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for w in workloads:
        cells = [w["name"]] + [_ms(w["impls"].get(c)) for c in present]
        fl = w["floor"]
        cells.append(f"{_num(fl['ms'])} ({fl['bound']})")
        best = _best_compiled(w)
        cells.append(f"{_ratio(best[1])} vs {best[0]}" if best else "–")
        cells.append(_ratio(w["ratios"].get("floor", {}).get("median")))
        if dynamic:
            d, f = w["impls"].get("fusec dynamic"), w["impls"].get("fusec fused")
            cells.append(_ratio(d["median_ms"] / f["median_ms"]) if d and f else "–")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _untuned(r: dict) -> str | None:
    """Why TVM ran untuned in this run (MetaSchedule's failure), if it did."""
    for w in r["workloads"]:
        d = w["impls"].get("tvm", {}).get("detail", {})
        if d and not d.get("tuned", True):
            return d.get("untuned_reason", "?")
    return None


def _rest(r: dict, dynamic: bool, lines: list[str]) -> str:
    host = r.get("host", {})
    desc = host.get("gpu") or f"{host.get('cpu', '?')}, {host.get('cores', '?')} cores"
    extra = f"; sgemm {r['gemm']['gflops']} GFLOP/s" if r.get("gemm", {}).get("gflops") else ""
    bad = [f"{w['name']}/{n}" for w in r["workloads"] for n, e in w["impls"].items()
           if not e.get("agreement", {}).get("ok", True)]
    skipped = sorted({f"{n} ({note.split(':')[0]})" for w in r["workloads"] for n, note in w["skipped"].items()})
    malloc = r.get("host", {}).get("malloc", "default")
    mode = (" Freed memory kept for reuse (`--malloc-reuse`): no page faults for fresh outputs."
            if malloc == "reuse" else "")
    if r.get("memory", {}).get("mode") == "equalised":
        mode += " Memory-equalised run alone (`--memory equalised`): huge pages, fresh fusec outputs, preallocated torch and onnxruntime outputs."
    notes = [f"**{r['machine']}** ({desc}), {r['date'][:10]}, target `{r['target']}`, fusec "
             f"{r['fusec'].get('commit') or r['fusec']['version']}: copy bandwidth "
             f"{r['bandwidth']['gbps']} GB/s{extra}.{mode} From `bench/results/{r['_file']}`.", ""]
    notes += lines
    notes.append("")
    order = ("rounds in a shuffled order" if r["date"] >= SHUFFLED_SINCE else
             "rounds in a rotated order, which timed each implementation right after the same other one")
    settle = r.get("budget", {}).get("settle_s") or 0
    if settle:
        order += f"; {settle:g} s idle before each call that follows another implementation's (`--settle`)"
    quiesce = r.get("budget", {}).get("quiesce_s")
    if quiesce:
        order += (f"; before each timed call, up to {quiesce:g} s for the process's other threads to go idle, "
                  "then one untimed call (`--quiesce`)")
    elif quiesce == 0:
        order += "; `--quiesce 0`: no wait for other threads, no untimed call before a timed one"
    notes.append(f"Milliseconds, median (minimum) of interleaved runs after warm-up ({order}). Ratios are fusec "
                 "fused's median over the other's (below 1: fusec is faster); best compiled is the "
                 "fastest of torch.compile, jax.jit, onnxruntime and TVM present. The floor is the workload's compulsory bytes at "
                 "the measured copy bandwidth, or its flops at the measured sgemm rate, whichever is "
                 "larger." + (" fusec dynamic: the fused build with the workload's rows, tokens, images or "
                              "batch taken at run time (`--dynamic`, planned for its size class; "
                              "bench/workloads.py DYNAMIC_SYMBOL); dynamic / static is its median over fusec "
                              "fused's." if dynamic else ""))
    notes += ["", *_compile_table(r)]
    if r.get("compile_scaling"):
        notes += ["", _scaling_line(r["compile_scaling"])]
    if bad:
        notes.append(f"Numerical disagreement with the NumPy reference: {', '.join(bad)}.")
    if skipped:
        notes.append(f"Not run: {', '.join(skipped)}.")
    untuned = _untuned(r)
    if untuned:
        notes.append(f"TVM ran untuned (DLight's default cpu schedules): MetaSchedule {untuned}.")
    return "\n".join(notes)


def _secs(x) -> str:
    return "–" if x is None else f"{x:.2f}"


def _compile_table(r: dict) -> list[str]:
    """Cold (first call, compilation included) and cached (a later process) seconds."""
    tools = [c for c in ("fusec fused", "torch.compile", "jax.jit", "onnxruntime", "tvm")
             if any(c in w["impls"] for w in r["workloads"])]
    head = ["compile s, cold / cached"] + tools
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for w in r["workloads"]:
        cells = [w["name"]]
        for t in tools:
            e = w["impls"].get(t)
            cells.append(f"{_secs(e.get('cold_s'))} / {_secs(e.get('cached_s'))}" if e else "–")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    cached = ("loading the artifact (no MLIR) and Numba's machine code from its cache"
              if r.get("fusec_cached") == "numba-cache" else
              "loading the artifact (no MLIR) and Numba's jit, which this run did not cache")
    lines.append("fusec cold: MLIR compile of the fused and unfused builds plus Numba's jit of the fused "
                 f"one; cached: {cached}. torch.compile cached: a fresh trace finding inductor's caches "
                 "filled; jax.jit cached: JAX's persistent compilation cache. onnxruntime cold: session creation "
                 "and first run (the ONNX export not counted); TVM cold: import, build and first run.")
    return lines


def _scaling_line(sc: dict) -> str:
    parts = []
    for kind, v in sc["kinds"].items():
        sizes = ", ".join(f"n={row['n']}: {sum(x for k, x in row['stages_s'].items() if k != 'numba jit'):.2f} s"
                          + (f" (+{row['stages_s']['numba jit']:.1f} s jit)" if "numba jit" in row["stages_s"] else "")
                          for row in v["rows"])
        parts.append(f"{kind} chains {sizes}; growth n^{v['exponent']}")
    return ("Compile-time scaling (front end to emitted source, cpu target): " + "; ".join(parts) + ".")


def _best_compiled(w: dict) -> tuple[str, float] | None:
    cands = [(c, w["impls"][c]["median_ms"]) for c in COMPILED if c in w["impls"]]
    if not cands or "fusec fused" not in w["impls"]:
        return None
    name, ms = min(cands, key=lambda x: x[1])
    return name, w["impls"]["fusec fused"]["median_ms"] / ms


# the contender of `python -m bench.accuracy` whose exp/tanh/erf each column's implementation calls
ACCURACY_OF = {"fusec fused": "fusec", "fusec unfused": "fusec", "fusec dynamic": "fusec",
               "fusec torch.compile": "fusec", "fusec onnx": "fusec", "numpy": "numpy", "torch": "torch",
               "torch.compile": "torch.compile", "jax.jit": "jax.jit", "onnxruntime": "onnxruntime",
               "tvm": "tvm fastmath"}
ULP_FUNCTIONS = ("exp", "tanh", "erf")


def load_accuracy(directory: Path) -> dict[str, dict]:
    """The newest `python -m bench.accuracy` result per cpu model (its `machine.cpu`)."""
    return _newest(directory, "accuracy-*.json", lambda r: "accuracy" in r,
                   lambda r: r.get("machine", {}).get("cpu", "?"))


def _newest(directory: Path, pattern: str, accept, key) -> dict[str, dict]:
    """Of the JSON results in `directory` named like `pattern` that `accept` takes, the newest
    (by date, then file name) per `key(result)`; each with its file name as `_file`."""
    best: dict[str, dict] = {}
    for p in sorted(directory.glob(pattern)):
        try:
            r = json.loads(p.read_text())
        except ValueError:
            continue
        if not accept(r):
            continue
        r["_file"] = p.name
        k = key(r)
        if k not in best or (r["date"], p.name) > (best[k]["date"], best[k]["_file"]):
            best[k] = r
    return best


def _ulp_cell(acc: dict, column: str) -> str:
    """`exp / tanh / erf` max ulp of the accuracy contender behind `column`; – where not measured."""
    entry = acc["accuracy"]["contenders"].get(ACCURACY_OF.get(column, ""), {})
    if not entry or "skipped" in entry:
        return "–"
    return " / ".join(_ulp(entry.get(f, {}).get("max_ulp")) for f in ULP_FUNCTIONS)


def _ulp(v) -> str:
    if v is None:
        return "–"
    return f"{v:.3g}" if v < 1e4 else f"{v:.1e}".replace("e+0", "e").replace("e+", "e")


def _ulp_row(acc: dict | None, present: list[str], lead: int, tail: int) -> list[str]:
    """A table row of each column's max ulp (exp / tanh / erf) from accuracy result `acc`: `lead`
    cells before the columns (the row's label first), `tail` empty cells after."""
    if not acc:
        return []
    cells = ["max ulp exp / tanh / erf"] + [""] * (lead - 1) + [_ulp_cell(acc, c) for c in present] + [""] * tail
    return ["| " + " | ".join(cells) + " |"]


def _ulp_note(acc: dict | None) -> list[str]:
    if not acc:
        return []
    return ["", f"max ulp: the largest error over each function's sampled f32 range, from "
                f"`bench/results/{acc['_file']}` (`python -m bench.accuracy`, {acc['date'][:10]}; "
                "docs/PERFORMANCE.md, Transcendental accuracy). fusec's columns are its default math; `--math accurate` "
                "gives " + " / ".join(_ulp(acc["accuracy"]["contenders"].get("fusec accurate", {}).get(f, {}).get("max_ulp"))
                             for f in ULP_FUNCTIONS)
                + " ulp at about 2x the time. TVM's column is its FastMathTransform forms, as the bench builds it."]


def render(results: list[dict], accuracy: dict[str, dict] | None = None) -> str:
    """The benchmark section: the newest result per machine and mode; `accuracy` (load_accuracy's
    per-cpu results) puts each contender's max ulp beside its times."""
    accuracy = accuracy or {}
    chosen = newest_per_machine(results)
    if not chosen:
        return "No benchmark results yet: run `python -m bench`."
    parts = ["## Benchmarks", "",
             "Generated by `python -m bench` (or `python -m bench table`) from `bench/results/`; "
             "do not edit by hand. Reproduce: `pip install -e '.[bench]'`, then "
             "`env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m bench` (about 15 minutes on 2 "
             "cores for one memory mode; the default `--memory both` runs the suite again in a child process "
             "with memory equalised, and TVM's bounded MetaSchedule try adds up to `--tvm-tune` seconds; "
             "`--memory default`, `--only NAME`, `--malloc-reuse`, `--quiesce 0` (no wait for another library's idle threads "
             "and no untimed call before each timed one), `--size tiny` for a plumbing check). The "
             "chains are `bench/fdsl/*.fdsl`; the other implementations, `bench/workloads.py`.", "",
             "How it times (`bench/timing.py`): a workload's implementations run in rounds, in a shuffled "
             "order, in one process. Before each timed call it waits (at most 1 s) until the process's other "
             "threads have stopped running, as read from `/proc/self/task/*/schedstat`, then makes one untimed "
             "call of the same implementation: each is timed in its own steady state, as in a program calling "
             "it in a loop, and not in the spinning of the previous one's idle pool (NumPy's OpenBLAS worker "
             "spins about 0.1 s after each matmul, and on two cores took CPU from whatever was timed next: "
             "`python -m bench.threads --only mlp` counts each thread's CPU time during every timed call). "
             "Runs from before 2026-12-03T09:05, and runs with `--quiesce 0`, timed without it."]
    for r in chosen:
        parts += ["", render_result(r, accuracy.get(r.get("host", {}).get("cpu", "?")))]
    if not any(r.get("target") == "cuda" for r in chosen):
        parts += ["", "No GPU result yet: `python -m bench.gpu prepare build/gpu-bench` here, then "
                  "`python -m bench.gpu run build/gpu-bench --out $OUT` on the GPU machine (carrying "
                  "build/gpu-bench) writes one; copy it into bench/results/ and run `python -m bench table`."]
    return "\n".join(parts)


MODEL_SUITE = "fusec-bench-models"
MODEL_COLUMNS = ("fusec torch.compile", "fusec onnx", "torch", "torch.compile", "onnxruntime", "tvm")
MODEL_ANCHORS = ("torch", "torch.compile", "onnxruntime", "tvm")


def load_model_results(directory: Path, size: str = "full") -> list[dict]:
    """The newest `python -m bench --models` result per machine and memory mode at `size` (a run
    with `--memory equalised` alone beside the default one, which holds the equalised timing of
    `--memory both`)."""
    best = _newest(directory, "models-*.json", lambda r: r.get("suite") == MODEL_SUITE and r.get("size") == size,
                   lambda r: (r["machine"], r.get("memory", {}).get("mode", "default")))
    return [best[k] for k in sorted(best)]


def _size_text(cfg: dict) -> str:
    keys = (("layers", "L"), ("hidden", "h"), ("heads", "heads "), ("kv_heads", "kv "), ("intermediate", "ff "),
            ("seq", "seq "), ("image", "img "), ("patch", "patch "), ("batch", "batch "))
    return ", ".join(f"{short}{cfg[k]}" for k, short in keys if k in cfg)


def _model_rows(rows: list[dict], configs: dict, present: list[str], bad: list[str], tag: str = "") -> list[str]:
    """The times table of a `--models` result's rows (or its equalised run's: `configs` gives
    each model's sizes, `tag` marks its disagreements in `bad`)."""
    head = ["model", "size"] + present + ["fusec / fastest anchor"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in rows:
        cells = [m["model"], _size_text(configs.get(m["model"], {}))]
        for c in present:
            e = m["contenders"].get(c)
            if e and not e.get("agreement", {}).get("ok", True):
                bad.append(f"{m['model']}/{c}{tag}")
            untuned = c == "tvm" and e and not e.get("detail", {}).get("tuned", True)
            cells.append(_ms(e) + ("" if not e or e.get("agreement", {}).get("ok", True) else " ✗")
                         + (" untuned" if untuned else ""))
        ratios = []
        for f in ("fusec torch.compile", "fusec onnx"):
            fa = m.get("ratios", {}).get(f, {}).get("fastest_anchor")
            if fa:
                ratios.append(f"{_ratio(fa['median'])} vs {fa['name']}" + (" (onnx)" if f == "fusec onnx" else ""))
        cells.append("; ".join(ratios) or "–")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _memory_text(mem: dict | None) -> str:
    mem = mem or {}
    return (", ".join(f"`{k}={mem.get(k)}`" for k in ("GLIBC_TUNABLES", "THP_MEM_ALLOC_ENABLE"))
            + f", transparent huge pages `{mem.get('thp')}`")


MODELS_DEFAULT_MEMORY = ("memory as each tool's users call it (fresh outputs from torch, torch.compile, onnxruntime's "
                         "`run` and TVM's VM; fusec's planned pool of output buffers)")
MODELS_EQUALISED_MEMORY = ("fusec hands back a fresh output each call (`fresh_outputs`), onnxruntime writes into "
                           "preallocated outputs (IOBinding); torch's, torch.compile's and TVM's outputs are "
                           "allocated by the model either way (a forward takes no output buffer)")


def render_models(r: dict, accuracy: dict | None = None) -> str:
    """One `--models` result: times (with each contender's max ulp when `accuracy` is given),
    the memory-equalised times where the run made them (`--memory both`), compile and
    preparation times (of the default run), fusec's split, the skips."""
    rows = r["models"]
    configs = {m["model"]: m.get("config", {}) for m in rows}
    eq = r.get("equalised") or {}
    eq_rows = eq.get("models") or []
    present = [c for c in MODEL_COLUMNS if any(c in m["contenders"] for m in rows + eq_rows)]
    bad: list[str] = []
    lines = _model_rows(rows, configs, present, bad)
    lines += _ulp_row(accuracy, present, 2, 1)
    mode = r.get("memory", {}).get("mode")
    if eq:
        lines = [f"With {MODELS_DEFAULT_MEMORY}:", ""] + lines
        if eq_rows:
            lines += ["", f"Memory-equalised (a child process with {_memory_text(eq.get('memory'))}; "
                      f"{MODELS_EQUALISED_MEMORY}):", ""]
            lines += _model_rows(eq_rows, configs, present, bad, " (equalised)") + _ulp_row(accuracy, present, 2, 1)
        if eq.get("failed"):
            lines += ["", f"The memory-equalised run failed ({eq['failed']})"
                      + ("; the models above are those it finished." if eq_rows else ".")]
    elif mode == "equalised":
        lines = [f"Memory-equalised run alone (`--memory equalised`: {_memory_text(r.get('memory'))}; "
                 f"{MODELS_EQUALISED_MEMORY}):", ""] + lines
    elif mode == "default":
        lines = [f"With {MODELS_DEFAULT_MEMORY} (`--memory default`: no memory-equalised run):", ""] + lines
    host = r.get("host", {})
    desc = f"{host.get('cpu', '?')}, {host.get('cores', '?')} cores"
    v = r.get("versions", {})
    out = [f"### Models (`python -m bench --models`)", "",
           f"**{r['machine']}** ({desc}), {r['date'][:10]}, fusec {r['fusec'].get('commit') or r['fusec']['version']}; "
           f"torch {v.get('torch')}, onnxruntime {v.get('onnxruntime')}, tvm {v.get('tvm')}; every pool at "
           f"{r.get('cores')} threads. Command: `{r.get('command', 'python -m bench --models')}`. "
           f"From `bench/results/{r['_file']}`.", ""]
    out += lines
    out += ["", "Milliseconds, median (minimum) of interleaved runs (bench/timing.py, quiesced), random weights, "
            "f32, inference. torch.compile is Inductor with `freezing` on; onnxruntime runs the "
            "`torch.onnx.export(dynamo=True)` graph at ORT_ENABLE_ALL without spinning; fusec onnx is that graph "
            "through `fusec.onnx.load`. Each output is compared with eager PyTorch's in the run (✗: disagrees). "
            "Ratios: fusec's median over the fastest anchor's (below 1: fusec is faster)"
            + (", each within its memory mode." if eq else ".")]
    out += _ulp_note(accuracy)
    adjusted = r.get("adjusted") or {}
    if adjusted:
        out.append("Sizes: the issue's, with " + "; ".join(f"{k}: {t}" for k, t in adjusted.items())
                   + (f" ({r['adjusted_why']})." if r.get("adjusted_why") else "."))
    # compile / preparation
    head = ["cold / cached s", "fusec torch.compile", "fusec onnx", "torch.compile", "onnxruntime session",
            "tvm build", "onnx export"]
    lines = ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in rows:
        cs = m["contenders"]

        def pair(c):
            e = cs.get(c)
            return f"{_secs(e.get('cold_s'))} / {_secs(e.get('cached_s'))}" if e else "–"

        def prep(c):
            e = cs.get(c)
            return _secs((e or {}).get("detail", {}).get("setup_s")) if e else "–"
        lines.append("| " + " | ".join([m["model"], pair("fusec torch.compile"), pair("fusec onnx"),
                                         pair("torch.compile"), prep("onnxruntime"), prep("tvm"), _secs(m.get("onnx_export_s"))]) + " |")
    out += lines
    out += ["", "Each figure includes the first call. fusec cold: the first compile into an empty cache (Numba's "
            "jit included); cached: a fresh trace (torch.compile) or load (ONNX) finding the builds in the cache. "
            "torch.compile: the first compile, then a fresh trace with Inductor's caches filled. onnxruntime: the "
            "session's creation; tvm: import and build (MetaSchedule's tuning not included)."
            + (" All from the default run: the memory-equalised child found its caches filled." if eq else "")]
    # fusec's split
    head = ["fusec (torch.compile)", "ATen ops in fusec", "regions / kernels", "ops left to eager",
            "call", "in regions", "outside regions", "predicted (cost model)", "slowest predicted kernels"]
    lines = ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in rows:
        e = m["contenders"].get("fusec torch.compile")
        sp = m.get("fusec_split") or {}
        if not e or "call_ms" not in sp:
            continue
        d = e.get("detail", {})
        pred = sum(x.get("predicted_ms") or 0 for x in sp.get("regions", []) if x.get("predicted_ms") is not None)
        top = sorted(sp.get("kernels", []), key=lambda k: -(k.get("predicted_ms") or 0))[:3]
        eager = ", ".join(f"{k}×{n}" for k, n in sorted(d.get("eager_ops", {}).items())) or "none"
        lines.append("| " + " | ".join([
            m["model"], f"{d.get('in_fusec')}/{d.get('aten_ops')}", f"{d.get('regions')} / {d.get('kernels')}",
            eager, f"{_num(sp['call_ms'])} ms", f"{_num(sp['in_regions_ms'])} ms",
            f"{(sp.get('outside_share') or 0):.1%}", f"{_num(pred)} ms",
            ", ".join(f"k{k['kernel']} {k.get('template')} {_num(k.get('predicted_ms') or 0)} ms" for k in top)]) + " |")
    out += lines
    out += ["", "The cpu build runs a region's chain as one Numba function: the measured time is per region "
            "(conversions included), the cost model's prediction per kernel (every kernel's is in the JSON, "
            "`fusec_split.kernels`). Outside regions: the rest of the call (ops left to eager PyTorch, glue, "
            "dynamo's guards)."]
    skips = [f"{m['model']}/{c}: {why}" for m in rows for c, why in m.get("skipped", {}).items()]
    default_skips = {(m["model"], c) for m in rows for c in m.get("skipped", {})}
    skips += [f"{m['model']}/{c} (memory-equalised): {why}" for m in eq_rows for c, why in m.get("skipped", {}).items()
              if (m["model"], c) not in default_skips]
    untuned = sorted({m["contenders"]["tvm"]["detail"].get("untuned_reason", "?") for m in rows
                      if "tvm" in m["contenders"] and not m["contenders"]["tvm"].get("detail", {}).get("tuned", True)})
    if untuned:
        out += ["", "TVM untuned (DLight's default cpu schedules, no MetaSchedule): " + "; ".join(untuned) + "."]
    if bad:
        out.append(f"Outputs that disagree with eager PyTorch: {', '.join(bad)}.")
    if skips:
        out += ["", "Not run: " + "; ".join(skips) + "."]
    return "\n".join(out)


def update_doc(doc: Path, results_dir: Path) -> bool:
    """Replace the text between the bench markers of `doc` (docs/PERFORMANCE.md); True if it changed."""
    text = doc.read_text(encoding="utf-8")
    if START not in text or END not in text:
        raise ValueError(f"{doc} has no {START} ... {END} section")
    before, rest = text.split(START, 1)
    _, after = rest.split(END, 1)
    accuracy = load_accuracy(results_dir)
    body = render(load_results(results_dir), accuracy)
    for r in load_model_results(results_dir):
        body += "\n\n" + render_models(r, accuracy.get(r.get("host", {}).get("cpu", "?")))
    new = f"{before}{START}\n{body}\n{END}{after}"
    if new != text:
        doc.write_text(new, encoding="utf-8")
    return new != text
