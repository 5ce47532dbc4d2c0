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
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


class Product:
    """One shape's inputs (seeded: x [M, K], w [K, N]), fusec's cpu build of `x @ w` and
    onnxruntime's MatMul with w a constant; `timed` checks and times any set of calls of it."""

    def __init__(self, m: int, k: int, n: int):
        import fusec
        self.m, self.k, self.n = m, k, n
        rng = np.random.default_rng(0)
        self.x = rng.standard_normal((m, k), dtype=np.float32)
        self.w = rng.standard_normal((k, n), dtype=np.float32) / np.float32(np.sqrt(k))
        self.fusec = fusec.compile(f"chain mm(x: f32[{m}, {k}], w: f32[{k}, {n}]) -> f32[{m}, {n}] {{ return x @ w }}",
                                   target="cpu", options={"baseline": False}).mm
        self.ort_constant = ort_runner(matmul_model(m, k, n, self.w), {"a": self.x})

    def timed(self, calls: dict, budget: Budget) -> dict:
        """Each call's output against NumPy's float64 product (a difference past 1e-3 of its
        largest element ends the run), then the calls timed interleaved: the shape's JSON row."""
        want = self.x.astype(np.float64) @ self.w
        diff = {}
        for name, call in calls.items():
            out = call()
            got = np.asarray(out if isinstance(out, np.ndarray) else out[0], np.float64)
            diff[name] = float(np.abs(got - want).max())
            if diff[name] > 1e-3 * np.abs(want).max():
                raise SystemExit(f"{name} at {self.m}x{self.k}x{self.n}: max abs difference {diff[name]:.3g} "
                                 "from NumPy's float64")
        samples = measure(calls, budget)
        flop = 2 * self.m * self.k * self.n
        return {"m": self.m, "k": self.k, "n": self.n, "flop": flop, "max_abs_diff": diff,
                "impls": {name: {**s.as_dict(), "gflops_at_min": flop / (s.min_ms * 1e6)} for name, s in samples.items()}}


def run_shape(m: int, k: int, n: int, budget: Budget) -> dict:
    p = Product(m, k, n)
    arg = ort_runner(matmul_model(m, k, n, None), {"a": p.x, "b": p.w})
    row = p.timed({"fusec (w an argument)": lambda: p.fusec(p.x, p.w), "onnxruntime (w a constant)": p.ort_constant.call,
                   "onnxruntime (w an input)": arg.call}, budget)
    return {**row, "ort_session_s": {"constant": p.ort_constant.setup_s, "input": arg.setup_s}}


def parse_shapes(ap: argparse.ArgumentParser, text: str, n_multiple: int = 1) -> list[tuple[int, int, int]]:
    """--shapes MxKxN,...; a malformed one, or N not a multiple of n_multiple, is a usage error."""
    shapes = []
    for s in text.split(","):
        try:
            m, k, n = (int(v) for v in s.lower().split("x"))
        except ValueError:
            ap.error(f"--shapes: {s!r} is not MxKxN")
        if n % n_multiple:
            ap.error(f"--shapes: {s!r}: N = {n} is not a multiple of {n_multiple}")
        shapes.append((m, k, n))
    return shapes


def run_all(shapes, run, stem: str, out: str) -> int:
    """run(m, k, n) for each shape, printed as it comes, then the JSON written (stem-<date>.json)."""
    rows = []
    for m, k, n in shapes:
        row = run(m, k, n)
        rows.append(row)
        print(f"{m}x{k}x{n}:")
        width = max(len(name) for name in row["impls"])
        for name, s in row["impls"].items():
            print(f"  {name:{width}} median {s['median_ms']:7.3f} ms  min {s['min_ms']:7.3f} ms  "
                  f"({s['gflops_at_min']:.0f} GFLOP/s at the min)")
    result = {"date": utc_stamp(), "machine": describe(), "threads": host_cores(), "shapes": rows}
    print(f"wrote {write_result(out, stem, result)}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=SHAPES, help="MxKxN,... (default: GPT-2's projections at the bench's size)")
    ap.add_argument("--seconds", type=float, default=4.0, help="timing budget per implementation and shape")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = ap.parse_args(argv)
    shapes = parse_shapes(ap, args.shapes)
    budget = Budget(seconds=args.seconds, min_runs=10, max_runs=400, warmup=3)
    return run_all(shapes, lambda m, k, n: run_shape(m, k, n, budget), "prepacked-weights", args.out)


if __name__ == "__main__":
    raise SystemExit(main())
