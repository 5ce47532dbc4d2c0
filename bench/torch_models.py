"""Real models through `torch.compile(backend="fusec")` on the cpu, against eager PyTorch and
`torch.compile` (TorchInductor).

    python -m bench.torch_models [--only gpt2,resnet18] [--seconds 2] [--out bench/results]

The models are the tests' (tests/frontends/torch_models.py: GPT-2, Llama, BERT and ViT from
transformers with 2 layers and hidden 128, ResNet-18 at 64x64, batch 2, random weights). Per
model: the ATen compute ops, how many run in fusec kernels, the regions and kernels, the ops left
to eager; the first compile (a fresh compile cache) and the cached one (dynamo reset, the same
cache: fusec's builds load); and the run times of fusec, eager and Inductor, timed interleaved in
one process (bench/timing.py). Writes torch-models-<date>.json. On hosts that set
OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE run it as `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE
python -m bench.torch_models`.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from . import utc_stamp, write_result
from .timing import Budget, measure

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _first(out):
    import torch
    if isinstance(out, torch.Tensor):
        return out
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]


def run_model(name: str, make, seconds: float) -> dict:
    import torch
    import fusec.torch as ft
    model, args = make()
    row = {"model": name}
    with torch.no_grad():
        want = _first(model(*args))
        cache = tempfile.mkdtemp(prefix="fusec-torch-bench-")
        opts = {"target": "cpu", "cache": True, "cache_dir": cache}
        torch._dynamo.reset()
        t0 = time.perf_counter()
        report = ft.explain(model, *args, options=opts)
        row["compile_first_s"] = round(time.perf_counter() - t0, 2)
        torch._dynamo.reset()
        t0 = time.perf_counter()
        again = ft.explain(model, *args, options=opts)
        row["compile_cached_s"] = round(time.perf_counter() - t0, 2)
        row.update(aten_ops=report.aten_ops, in_fusec=report.in_fusec, coverage=round(report.coverage, 4),
                   regions=report.partitions, kernels=report.kernels,
                   eager={k: v["count"] for k, v in report.eager.items()},
                   cache_hits=sum(c == "hit" for r in again.regions for c in r.cache))
        row["max_abs_err"] = float((_first(report.outputs) - want).abs().max())
        torch._dynamo.reset()
        fused = torch.compile(model, backend=ft.make_backend(opts))
        fused(*args)
        inductor = torch.compile(model)
        t0 = time.perf_counter()
        inductor(*args)
        row["inductor_compile_s"] = round(time.perf_counter() - t0, 2)
        samples = measure({"fusec": lambda: fused(*args), "eager": lambda: model(*args),
                           "inductor": lambda: inductor(*args)}, Budget(seconds=seconds))
    row["times"] = {k: v.as_dict() for k, v in samples.items()}
    f, e, i = (samples[k].median_ms for k in ("fusec", "eager", "inductor"))
    row["speedup"] = {"vs_eager": round(e / f, 3), "vs_inductor": round(i / f, 3)}
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help="comma-separated model names")
    ap.add_argument("--seconds", type=float, default=2.0, help="timing budget per implementation")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = ap.parse_args(argv)
    sys.path.insert(0, os.path.join(ROOT, "tests", "frontends"))
    from torch_models import MODELS
    import torch
    names = [n for n in args.only.split(",") if n] or list(MODELS)
    rows = []
    for name in names:
        row = run_model(name, MODELS[name], args.seconds)
        t = row["times"]
        print(f"{name:9} {row['aten_ops']:4} ops, {row['coverage']:.1%} in fusec, {row['kernels']:3} kernels; "
              f"compile {row['compile_first_s']:.1f} s (cached {row['compile_cached_s']:.1f} s); "
              f"run fusec {t['fusec']['median_ms']:.2f} ms, eager {t['eager']['median_ms']:.2f} ms, "
              f"inductor {t['inductor']['median_ms']:.2f} ms", flush=True)
        rows.append(row)
    result = {"date": utc_stamp(), "torch": torch.__version__, "threads": torch.get_num_threads(),
              "command": "python -m bench.torch_models " + " ".join(argv or sys.argv[1:]), "models": rows}
    print(write_result(args.out, "torch-models", result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
