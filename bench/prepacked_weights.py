"""fusec's `x @ w` beside onnxruntime's MatMul with `w` a constant and with `w` an input, at the
transformer models' projection shapes (issue 39: where fusec is behind onnxruntime, and why).

    python -m bench.prepacked_weights [--shapes 128x768x2304,...] [--seconds 4] [--out bench/results]

onnxruntime packs a constant MatMul operand (an initializer) into its kernel's layout once, when
the session is created (MLAS's prepacking); an operand given as an input it packs on every call,
as OpenBLAS does with every operand of every `?gemm` call that fusec's cpu build makes (a
region's weights are its arguments: neither frontend hands fusec a constant). The three are timed
interleaved in one process (bench/timing.py), every pool on the host's cores, onnxruntime as the
models bench runs it (bench/runtimes.py: ort_runner), each output checked against NumPy's in
float64; writes prepacked-weights-<date>.json.
"""
from __future__ import annotations

import argparse
import os

import numpy as np

from . import utc_stamp, write_result
from .machine import describe
from .runtimes import host_cores, ort_runner
from .timing import Budget, measure

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# GPT-2 at the models bench's size (sequence 128, batch 1, hidden 768): QKV, the attention's output,
# the MLP's two; Llama's and BERT's are of the same kind
SHAPES = "128x768x2304,128x768x768,128x768x3072,128x3072x768"


def matmul_model(m: int, k: int, n: int, w: np.ndarray | None):
    """An ONNX graph c = a @ b; b an initializer holding `w`, or an input when `w` is None."""
    from onnx import TensorProto, helper, numpy_helper
    inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k])]
    inits = []
    if w is None:
        inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, [k, n]))
    else:
        inits.append(numpy_helper.from_array(w, "b"))
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"])], "matmul", inputs,
                              [helper.make_tensor_value_info("c", TensorProto.FLOAT, [m, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def run_shape(m: int, k: int, n: int, budget: Budget) -> dict:
    import fusec
    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, k), dtype=np.float32)
    w = rng.standard_normal((k, n), dtype=np.float32) / np.float32(np.sqrt(k))
    mm = fusec.compile(f"chain mm(x: f32[{m}, {k}], w: f32[{k}, {n}]) -> f32[{m}, {n}] {{ return x @ w }}",
                       target="cpu", options={"baseline": False}).mm
    const = ort_runner(matmul_model(m, k, n, w), {"a": x})
    arg = ort_runner(matmul_model(m, k, n, None), {"a": x, "b": w})
    calls = {"fusec (w an argument)": lambda: mm(x, w), "onnxruntime (w a constant)": const.call,
             "onnxruntime (w an input)": arg.call}
    want = x.astype(np.float64) @ w
    agree = {}
    for name, call in calls.items():
        out = call()
        got = np.asarray(out if isinstance(out, np.ndarray) else out[0], np.float64)
        agree[name] = float(np.abs(got - want).max())
        if agree[name] > 1e-3 * np.abs(want).max():
            raise SystemExit(f"{name} at {m}x{k}x{n}: max abs difference {agree[name]:.3g} from NumPy's float64")
    samples = measure(calls, budget)
    flop = 2 * m * k * n
    return {"m": m, "k": k, "n": n, "flop": flop, "max_abs_diff": agree,
            "ort_session_s": {"constant": const.setup_s, "input": arg.setup_s},
            "impls": {name: {**s.as_dict(), "gflops_at_min": flop / (s.min_ms * 1e6)} for name, s in samples.items()}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=SHAPES, help="MxKxN,... (default: GPT-2's projections at the bench's size)")
    ap.add_argument("--seconds", type=float, default=4.0, help="timing budget per implementation and shape")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = ap.parse_args(argv)
    shapes = []
    for s in args.shapes.split(","):
        try:
            m, k, n = (int(v) for v in s.lower().split("x"))
        except ValueError:
            ap.error(f"--shapes: {s!r} is not MxKxN")
        shapes.append((m, k, n))
    budget = Budget(seconds=args.seconds, min_runs=10, max_runs=400, warmup=3)
    rows = []
    for m, k, n in shapes:
        row = run_shape(m, k, n, budget)
        rows.append(row)
        print(f"{m}x{k}x{n}:")
        for name, s in row["impls"].items():
            print(f"  {name:28} median {s['median_ms']:7.3f} ms  min {s['min_ms']:7.3f} ms  "
                  f"({s['gflops_at_min']:.0f} GFLOP/s at the min)")
    result = {"date": utc_stamp(), "machine": describe(), "threads": host_cores(), "shapes": rows}
    print(f"wrote {write_result(args.out, 'prepacked-weights', result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
