"""A seeded fuzzer of fusec's two importers: mutated ONNX files, and random PyTorch programs
through the torch.compile backend. Every case must end in a result or a located user error.

ONNX cases start from small valid models built here with onnx.helper (an MLP, a convolution,
an embedding with layer norm, shape arithmetic over symbolic sizes, casts and scans, one with
external data) and damage them the way a broken exporter or a hostile file would: truncated and
flipped bytes, wrong element types, cycles, dangling and duplicate names, wild shapes (negative,
zero, 2**40 dimensions, odd dim_params), missing initializers, external data paths (absolute,
`..`, symlinks out of the folder, missing files, huge or negative offsets, on Constant and
ConstantOfShape attributes too), unknown ops and domains, bad opsets and IR versions,
attributes of the wrong type or value, odd names, damaged tensor data. Each case runs
`fusec import` (`fusec.cli.main`, in this process), then the imported chain with `fusec FILE
--target reference --max-memory 64M`, then `fusec.onnx.load(..., target="reference")` called on
inputs; where onnxruntime also runs the file, the outputs must agree. A secret file lies beside
the model's folder and in the working directory: a case that reads it (Python's open, seen by an
audit hook, or any read, seen by its access time) fails.

FX cases are random small modules (elementwise, reductions, matmul, views and permutes,
softmax, layer norm, where, slicing and indexing, cat, cumsum, casts) run eagerly and through
`fusec.torch.explain` (and, for some, `torch.compile(m, backend="fusec")` on fresh inputs); the
outputs must match eager within runtime/compare.py's tolerances, every op is either in a fusec
region or listed as eager with a reason, and nothing may raise.

    python -m tests.fuzz_import -n 1000                 # ONNX cases and FX cases (1 in 10)
    python -m tests.fuzz_import -n 300 --seed 7 --fx 0  # ONNX only (--fx: the FX share)
    python -m tests.fuzz_import --case 12               # show and run one case
    python -m tests.fuzz_import -n 1000 --keep DIR      # keep each failing case's files in DIR
    python -m tests.fuzz_import -n 50 --fx 1 --fx-target cpu   # FX cases compiled for the CPU

A case fails on an exit status other than 0 or 1 (or 3, 4 for the run), a traceback or
"internal error", an exit 1 whose error line does not name the model file (and, for the
mutations that have one, the node, tensor or name the mutation touched), an exception other
than fusec's UsageError/FdslError from fusec.onnx.load, an output that disagrees with
onnxruntime or eager PyTorch, a read of the secret file, or a run past --timeout seconds.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import re
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

os.environ.setdefault("FUSEC_NO_CACHE", "1")

MEMORY = "64M"
MEMORY_BYTES = 64 << 20
MODEL = "m/model.onnx"                   # the model's place inside a case's directory
SECRETS = ("secret.bin", "cwd/secret.bin")   # files no case may read
OLD_ATIME = 1000.0


class Timeout(BaseException):
    """A case ran past the time limit (a BaseException: fusec's handlers must not catch it)."""


@dataclass
class Case:
    index: int
    family: str
    what: str                                   # the mutation, in words
    model: bytes = b""
    files: dict = field(default_factory=dict)   # other files, relative to the case's directory
    links: dict = field(default_factory=dict)   # symlinks: path -> target
    expect: list = field(default_factory=list)  # an exit-1 error must name one of these
    fx_source: str | None = None                # an FX case: the module's source
    fx_seed: int = 0


@dataclass
class Result:
    case: Case
    outcome: str                                # "ok", "error", "eager", ... (what happened)
    seconds: float
    problem: str | None
    detail: str = ""
    reasons: list = field(default_factory=list)     # FX: why ops ran eagerly


# ---- seed models -----------------------------------------------------------------------------

def _onnx():
    import onnx
    from onnx import TensorProto as TP
    from onnx import helper as h
    from onnx import numpy_helper as nh
    return onnx, TP, h, nh


def _model(nodes, inputs, outputs, inits, opset=18, name="g"):
    onnx, TP, h, nh = _onnx()
    g = h.make_graph(nodes, name, inputs, outputs, inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 10
    return m


_SEEDS = None


def seeds() -> dict:
    """name -> (ModelProto, {file: bytes}): small valid models every importer path starts from."""
    global _SEEDS
    if _SEEDS is not None:
        return _SEEDS
    onnx, TP, h, nh = _onnx()
    r = np.random.default_rng(0)

    def w(name, *shape, dtype=np.float32):
        return nh.from_array(r.uniform(-1, 1, shape).astype(dtype), name)

    def i64(name, values):
        return nh.from_array(np.asarray(values, np.int64), name)
    vi = h.make_tensor_value_info
    out = {}
    out["mlp"] = (_model(
        [h.make_node("MatMul", ["x", "W"], ["h"], name="mm0"), h.make_node("Add", ["h", "b"], ["h2"], name="add0"),
         h.make_node("Relu", ["h2"], ["h3"], name="relu0"),
         h.make_node("Softmax", ["h3"], ["y"], name="softmax0", axis=-1)],
        [vi("x", TP.FLOAT, ["B", 8])], [vi("y", TP.FLOAT, ["B", 16])], [w("W", 8, 16), w("b", 16)]), {})
    out["conv"] = (_model(
        [h.make_node("Conv", ["x", "K", "kb"], ["c"], name="conv0", pads=[1, 1, 1, 1], strides=[1, 1]),
         h.make_node("Relu", ["c"], ["c2"], name="relu0"),
         h.make_node("MaxPool", ["c2"], ["p"], name="pool0", kernel_shape=[2, 2], strides=[2, 2]),
         h.make_node("GlobalAveragePool", ["p"], ["g"], name="gap0"),
         h.make_node("Flatten", ["g"], ["f"], name="flat0", axis=1),
         h.make_node("Gemm", ["f", "G", "gb"], ["y"], name="gemm0", transB=1, alpha=0.5)],
        [vi("x", TP.FLOAT, [1, 3, 8, 8])], [vi("y", TP.FLOAT, [1, 5])],
        [w("K", 4, 3, 3, 3), w("kb", 4), w("G", 5, 4), w("gb", 5)], opset=17), {})
    out["embed"] = (_model(
        [h.make_node("Gather", ["table", "ids"], ["e"], name="gather0", axis=0),
         h.make_node("LayerNormalization", ["e", "ln_s", "ln_b"], ["n"], name="ln0", axis=-1, epsilon=1e-5),
         h.make_node("Transpose", ["n"], ["t"], name="tr0", perm=[0, 2, 1]),
         h.make_node("ReduceMean", ["t", "axes"], ["y"], name="mean0", keepdims=0)],
        [vi("ids", TP.INT64, [1, 5])], [vi("y", TP.FLOAT, [1, 8])],
        [w("table", 10, 8), w("ln_s", 8), w("ln_b", 8), i64("axes", [2])]), {})
    out["shape"] = (_model(
        [h.make_node("Shape", ["x"], ["s"], name="shape0"),
         h.make_node("Slice", ["s", "z0", "two"], ["s2"], name="slice0"),
         h.make_node("Concat", ["s2", "tail"], ["tgt"], name="cat0", axis=0),
         h.make_node("Reshape", ["x", "tgt"], ["r"], name="reshape0"),
         h.make_node("Transpose", ["r"], ["t"], name="tr0", perm=[0, 2, 1, 3]),
         h.make_node("Tanh", ["t"], ["th"], name="tanh0"),
         h.make_node("Greater", ["th", "zf"], ["gt"], name="gt0"),
         h.make_node("Neg", ["th"], ["ng"], name="neg0"),
         h.make_node("Where", ["gt", "th", "ng"], ["y"], name="where0"),
         h.make_node("ReduceSum", ["x", "ax1"], ["y2"], name="sum0", keepdims=1)],
        [vi("x", TP.FLOAT, ["B", "S", 6])], [vi("y", TP.FLOAT, ["B", 3, "S", 2]), vi("y2", TP.FLOAT, ["B", 1, 6])],
        [i64("z0", [0]), i64("two", [2]), i64("tail", [3, 2]), nh.from_array(np.float32(0.0), "zf"),
         i64("ax1", [1])], opset=21), {})
    out["cast"] = (_model(
        [h.make_node("Mul", ["x", "c"], ["m"], name="mul0"),
         h.make_node("Sigmoid", ["m"], ["s"], name="sig0"),
         h.make_node("Cast", ["s"], ["d"], name="cast0", to=TP.DOUBLE),
         h.make_node("Clip", ["d", "lo", "hi"], ["cl"], name="clip0"),
         h.make_node("CumSum", ["cl", "ax"], ["cs"], name="cumsum0"),
         h.make_node("Split", ["cs", "sp"], ["a", "b2"], name="split0", axis=1),
         h.make_node("Concat", ["b2", "a"], ["y"], name="cat0", axis=1),
         h.make_node("Constant", [], ["k"], name="const0", value=nh.from_array(np.float64(2.0))),
         h.make_node("Pow", ["y", "k"], ["y2"], name="pow0")],
        [vi("x", TP.FLOAT, [4, 4])], [vi("y2", TP.DOUBLE, [4, 4])],
        [w("c", 4), nh.from_array(np.float64(0.1), "lo"), nh.from_array(np.float64(0.9), "hi"),
         i64("ax", 1), i64("sp", [1, 3])], opset=19), {})
    m = _model(
        [h.make_node("MatMul", ["x", "W"], ["h"], name="mm0"), h.make_node("Add", ["h", "b"], ["y"], name="add0")],
        [vi("x", TP.FLOAT, [2, 8])], [vi("y", TP.FLOAT, [2, 4])], [w("W", 8, 4), w("b", 4)], opset=20)
    data = _to_external(m.graph.initializer[0], "w.bin", 16)
    out["external"] = (m, {"m/w.bin": data})
    for f in sorted(EXPORTED.glob("*.onnx")):         # torch.onnx.export's own models (export_fixtures)
        p = onnx.ModelProto()
        p.ParseFromString(f.read_bytes())
        out[f.stem] = (p, {})
    _SEEDS = out
    return out


EXPORTED = Path(__file__).resolve().parent / "data" / "fuzz_import"


def export_fixtures(out: Path) -> None:
    """Write the exported seed models (tests/data/fuzz_import): two tiny modules, a transformer
    block and a conv net, through torch.onnx.export's TorchScript and dynamo exporters (opset 18)."""
    import warnings

    import onnx
    import torch
    warnings.simplefilter("ignore")
    torch.manual_seed(0)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.ln = torch.nn.Linear(8, 16), torch.nn.Linear(16, 8), torch.nn.LayerNorm(8)

        def forward(self, x):
            y = x + self.b(torch.nn.functional.gelu(self.a(self.ln(x))))
            att = torch.softmax(y @ y.transpose(-1, -2) / 3.0, dim=-1)
            return torch.cat([att @ y, y[:, :, :4].mean(-1, keepdim=True)], dim=-1)

    class Conv(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c, self.bn, self.fc = torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.Linear(4, 5)

        def forward(self, x):
            y = torch.nn.functional.max_pool2d(torch.relu(self.bn(self.c(x))), 2)
            return (torch.argmax(self.fc(y.mean((2, 3))), -1),
                    self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(y, 1), 1)))
    out.mkdir(parents=True, exist_ok=True)
    for name, m, x, dyn in [("block", Block(), torch.randn(2, 5, 8), {"x": {0: "batch"}}),
                            ("conv", Conv(), torch.randn(1, 3, 8, 8), None)]:
        m.eval()
        for style in ("legacy", "dynamo"):
            path = out / f"{name}_{style}.onnx"
            kw = {"dynamic_axes": dyn} if style == "legacy" else \
                {"dynamic_shapes": ({0: torch.export.Dim("batch")},) if dyn else None}
            with contextlib.redirect_stdout(io.StringIO()):
                torch.onnx.export(m, (x,), str(path), input_names=["x"], dynamo=style == "dynamo", opset_version=18,
                                  **kw)
            onnx.save(onnx.load(str(path)), str(path), save_as_external_data=False)
            stray = Path(str(path) + ".data")
            if stray.exists():
                stray.unlink()


def _to_external(t, location: str, offset: int = 0) -> bytes:
    """Move initializer `t`'s data to external data at `location` (offset bytes in); the file's bytes."""
    onnx, TP, h, nh = _onnx()
    raw = nh.to_array(t).astype(nh.to_array(t).dtype.newbyteorder("<")).tobytes()
    t.ClearField("raw_data")
    t.ClearField("float_data")
    t.ClearField("int64_data")
    t.data_location = TP.EXTERNAL
    del t.external_data[:]
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(len(raw)))):
        e = t.external_data.add()
        e.key, e.value = k, v
    return b"\x00" * offset + raw


# ---- ONNX mutations --------------------------------------------------------------------------
# each takes (rng, model, case) and edits the model (a copy) and the case (files, expect, what)

ELEM_TYPES = [0, 2, 3, 4, 5, 8, 12, 13, 14, 15, 17, 18, 19, 20, 21, 22, 23, 24, 25, 99, 1, 6, 7, 9, 10, 11, 16]
WILD_DIMS = [-1, -7, 0, 2 ** 40, 2 ** 62, 2 ** 63 - 1, 3, 1, 100000]
ODD_NAMES = ["", "x", "\x00", "a b", "1x", "chain", "return", "f32", "é", "\U0001F600", "a" * 5000, "W", "y",
             "onnx::MatMul_0", "/layer.0/Add", "\n", "B", "ghost"]
ODD_DIM_PARAMS = ["", "1", "a b", "é", "S*2", "x", "chain", "f32", "B", "N" * 300, "-1", "\x00"]


def _readers(g, name: str) -> list:
    return [n.name for n in g.node if name in n.input]


def _pick_node(rng, m):
    return rng.randrange(len(m.graph.node)) if len(m.graph.node) else None


def mu_truncate(rng, m, case):
    data = m.SerializeToString()
    cut = rng.randrange(len(data))
    case.what = f"truncated to {cut} of {len(data)} bytes"
    return data[:cut]


def mu_flip(rng, m, case):
    data = bytearray(m.SerializeToString())
    k = rng.randint(1, 8)
    for _ in range(k):
        data[rng.randrange(len(data))] = rng.randrange(256)
    case.what = f"{k} bytes overwritten"
    return bytes(data)


def mu_elem_type(rng, m, case):
    g = m.graph
    e = rng.choice(ELEM_TYPES)
    where = rng.choice(["input", "output", "initializer", "cast", "constant"])
    if where == "input" and g.input:
        v = rng.choice(list(g.input))
        v.type.tensor_type.elem_type = e
        case.expect = [v.name] + _readers(g, v.name)
    elif where == "output" and g.output:
        v = rng.choice(list(g.output))
        v.type.tensor_type.elem_type = e
    elif where == "initializer" and g.initializer:
        t = rng.choice(list(g.initializer))
        t.data_type = e
    else:
        for n in g.node:
            for a in n.attribute:
                if a.name == "to":
                    a.i = e
                elif a.name == "value" and a.type == a.TENSOR:
                    a.t.data_type = e
    case.what = f"element type {e} on a {where}"


def mu_cycle(rng, m, case):
    g = m.graph
    if len(g.node) < 2:
        return mu_dangling(rng, m, case)
    i = rng.randrange(len(g.node) - 1)
    j = rng.randrange(i, len(g.node))
    n = g.node[i]
    if not n.input:
        n.input.append(g.node[j].output[0])
    else:
        n.input[rng.randrange(len(n.input))] = g.node[j].output[0]
    case.what = f"node {i} reads node {j}'s output"


def mu_dangling(rng, m, case):
    g = m.graph
    choice = rng.random()
    if choice < 0.6 and g.node:
        n = g.node[_pick_node(rng, m)]
        name = rng.choice(["ghost", "ghost:0", "\u00e9ghost"])
        if n.input:
            n.input[rng.randrange(len(n.input))] = name
        else:
            n.input.append(name)
        case.expect = [name, n.name]
        case.what = f"node {n.name} reads {name!r}"
    elif choice < 0.8:
        g.output[0].name = "ghost_out"
        case.expect = ["ghost_out"]
        case.what = "graph output renamed to nothing"
    else:
        v = rng.choice(list(g.input))
        v.name = "ghost_in"
        case.what = "graph input renamed (its readers dangle)"


def mu_duplicate(rng, m, case):
    g = m.graph
    choice = rng.choice(["node_out", "init", "input", "init_as_out", "input_as_out", "node"])
    if choice == "node_out" and len(g.node) >= 2:
        i, j = rng.sample(range(len(g.node)), 2)
        g.node[j].output[0] = g.node[i].output[0]
    elif choice == "init" and g.initializer:
        g.initializer.append(g.initializer[rng.randrange(len(g.initializer))])
    elif choice == "input":
        g.input.append(g.input[0])
    elif choice == "init_as_out" and g.initializer:
        g.node[_pick_node(rng, m)].output[0] = rng.choice(list(g.initializer)).name
    elif choice == "input_as_out":
        g.node[_pick_node(rng, m)].output[0] = g.input[0].name
    else:
        k = _pick_node(rng, m)
        g.node.insert(k, g.node[k])
    case.what = f"duplicate name ({choice})"


def mu_shape(rng, m, case):
    g = m.graph
    choice = rng.choice(["dim", "dim", "dim_param", "rank", "noshape", "init_dims", "reshape_const"])
    if choice == "dim":
        v = rng.choice(list(g.input))
        dims = v.type.tensor_type.shape.dim
        if dims:
            d = dims[rng.randrange(len(dims))]
            d.dim_value = rng.choice(WILD_DIMS)
            if d.dim_value <= 0:        # (a positive one may clash with a node further on)
                case.expect = [v.name]
    elif choice == "dim_param":
        v = rng.choice(list(g.input))
        dims = v.type.tensor_type.shape.dim
        if dims:
            dims[rng.randrange(len(dims))].dim_param = rng.choice(ODD_DIM_PARAMS)
    elif choice == "rank":
        v = rng.choice(list(g.input))
        dims = v.type.tensor_type.shape.dim
        if dims and rng.random() < 0.5:
            del dims[rng.randrange(len(dims))]
        else:
            for _ in range(rng.choice([1, 3, 40])):
                dims.add().dim_value = rng.choice([1, 2])
    elif choice == "noshape":
        v = rng.choice(list(g.input))
        v.type.tensor_type.ClearField("shape")
        case.expect = [v.name] + _readers(g, v.name)
    elif choice == "init_dims" and g.initializer:
        t = rng.choice(list(g.initializer))
        if t.dims:
            t.dims[rng.randrange(len(t.dims))] = rng.choice(WILD_DIMS)
        else:
            t.dims.append(rng.choice(WILD_DIMS))
        case.expect = [t.name]
    else:
        ints = [t for t in g.initializer if t.data_type == 7]
        if ints:
            t = ints[rng.randrange(len(ints))]
            onnx, TP, h, nh = _onnx()
            a = nh.to_array(t).copy().reshape(-1)
            if a.size:
                a[rng.randrange(a.size)] = rng.choice(WILD_DIMS + [-2, 2 ** 31])
            t.CopyFrom(nh.from_array(a.reshape(tuple(t.dims)), t.name))
    case.what = f"wild shape ({choice})"


def mu_missing_init(rng, m, case):
    g = m.graph
    if not g.initializer:
        return mu_dangling(rng, m, case)
    k = rng.randrange(len(g.initializer))
    name = g.initializer[k].name
    del g.initializer[k]
    case.expect = [name]
    case.what = f"initializer {name} removed"


ABS_SECRET = "DIR/secret.bin"          # an absolute location: DIR becomes the case's directory when it is written
EXTERNAL_KINDS = ["abs", "up", "up_cwd", "sub_up", "cwd_only", "link_file", "link_dir", "missing", "huge_offset",
                  "neg_offset", "bad_offset", "length", "no_location", "dot", "dir", "nul", "backslash", "drive",
                  "short_file", "long_name", "constant", "constant_of_shape", "ok", "ok_sub"]


def mu_external(rng, m, case):
    onnx, TP, h, nh = _onnx()
    g = m.graph
    kind = rng.choice(EXTERNAL_KINDS)
    case.what = f"external data: {kind}"
    if kind in ("constant", "constant_of_shape"):
        # a tensor attribute whose data lies in the secret file (relative: the working directory has one)
        v = nh.from_array(np.float32([1.0]), "v")
        _to_external(v, rng.choice(["secret.bin", "secret.bin", "../secret.bin", "../cwd/secret.bin", ABS_SECRET]))
        if kind == "constant":
            node = h.make_node("Constant", [], ["extc"], name="ext_const", value=v)
            g.node.insert(0, node)
            g.node.append(h.make_node("Identity", ["extc"], ["extc_out"], name="use_const"))
        else:
            g.initializer.append(nh.from_array(np.asarray([1], np.int64), "cos_shape"))
            g.node.insert(0, h.make_node("ConstantOfShape", ["cos_shape"], ["extc"], name="ext_cos", value=v))
        g.output.append(h.make_tensor_value_info("extc" if kind == "constant_of_shape" else "extc_out", TP.FLOAT, [1]))
        return
    floats = [t for t in g.initializer if t.data_type == TP.FLOAT and not t.external_data]
    if not floats:
        floats = [t for t in g.initializer if t.data_type == TP.FLOAT]
        if not floats:
            return mu_missing_init(rng, m, case)
    t = rng.choice(floats)
    case.expect = [t.name]
    loc, offset, body = {
        "abs": (ABS_SECRET, 0, None), "up": ("../secret.bin", 0, None),
        "up_cwd": ("../cwd/secret.bin", 0, None), "sub_up": ("sub/../../secret.bin", 0, None),
        "cwd_only": ("secret.bin", 0, None), "link_file": ("link.bin", 0, None),
        "link_dir": ("up/secret.bin", 0, None), "missing": ("nothing.bin", 0, None),
        "huge_offset": ("w2.bin", 2 ** 62, b""), "neg_offset": ("w2.bin", -8, b""),
        "bad_offset": ("w2.bin", 0, b""), "length": ("w2.bin", 0, b""), "no_location": ("", 0, b""),
        "dot": (".", 0, None), "dir": ("sub", 0, None), "nul": ("w2.bin\x00../../secret.bin", 0, None),
        "backslash": ("..\\secret.bin", 0, None), "drive": ("C:/secret.bin", 0, None),
        "short_file": ("w2.bin", 0, b"\x01\x02"), "long_name": ("x" * 5000, 0, None),
        "ok": ("w2.bin", 0, b""), "ok_sub": ("sub/w2.bin", 0, b""),
    }[kind]
    data = _to_external(t, loc, 0)
    if kind == "huge_offset":
        for e in t.external_data:
            if e.key == "offset":
                e.value = str(offset)
        data = data[:64]
    elif kind == "neg_offset":
        for e in t.external_data:
            if e.key == "offset":
                e.value = str(offset)
    elif kind == "bad_offset":
        for e in t.external_data:
            if e.key == "offset":
                e.value = rng.choice(["abc", "1e3", "", "0x10", "9" * 40])
    elif kind == "length":
        for e in t.external_data:
            if e.key == "length":
                e.value = rng.choice(["0", "1", "99999999999", "-4"])
    elif kind == "no_location":
        del t.external_data[:]
    name = loc if kind == "ok_sub" else loc.split("/")[-1]
    if body is not None and name:
        case.files["m/" + name] = body or data
    if kind == "dir":
        case.files["m/sub/keep"] = b""
    if kind == "link_file":
        case.links["m/link.bin"] = "../secret.bin"
    if kind == "link_dir":
        case.links["m/up"] = ".."
    if kind in ("ok", "ok_sub"):
        case.expect = []


def mu_op(rng, m, case):
    g = m.graph
    n = g.node[_pick_node(rng, m)]
    choice = rng.random()
    if choice < 0.4:
        n.op_type = rng.choice(["NoSuchOp", "", "Einsum", "If", "Loop", "NonZero", "Resize", "relu", "Add\x00",
                                "ScatterND", "TopK", "Pad", "DequantizeLinear", "Attention", "Conv"])
    elif choice < 0.7:
        n.domain = rng.choice(["com.microsoft", "ai.onnx.ml", "custom", "ai.onnx.preview.training", "\x00"])
    else:
        # a mapped op in place of another: arity and attributes are then wrong
        from fusec.onnx import mapped_ops
        n.op_type = rng.choice(mapped_ops())
    case.expect = [n.op_type, n.name] if choice < 0.7 else []      # a mapped op may fail further on
    case.what = f"node {n.name} is now {n.domain + '::' if n.domain else ''}{n.op_type!r}"


def mu_opset(rng, m, case):
    choice = rng.random()
    if choice < 0.5:
        m.opset_import[0].version = rng.choice([-1, 0, 1, 7, 13, 16, 22, 23, 10 ** 9, 2 ** 62])
    elif choice < 0.6:
        del m.opset_import[:]
    elif choice < 0.75:
        o = m.opset_import.add()
        o.domain, o.version = rng.choice([("", 7), ("", 17), ("ai.onnx", 30), ("com.microsoft", 1), ("ai.onnx.ml", 3)])
    else:
        m.ir_version = rng.choice([0, -1, 1, 3, 99, 2 ** 62])
    case.what = "opset or ir version"


def mu_attr(rng, m, case):
    onnx, TP, h, nh = _onnx()
    nodes = [n for n in m.graph.node if n.attribute] or list(m.graph.node)
    n = rng.choice(nodes)
    choice = rng.random()
    if n.attribute and choice < 0.45:
        a = n.attribute[rng.randrange(len(n.attribute))]
        name = a.name
        new = rng.choice([1.5, "same", [1, 2, 3], [], [0.5], nh.from_array(np.int64([1, 2])), 2 ** 62, -99, 99,
                          "\x00", b"\xff\xfe"])
        n.attribute.remove(a)
        n.attribute.append(h.make_attribute(name, new))
    elif n.attribute and choice < 0.75:
        a = n.attribute[rng.randrange(len(n.attribute))]
        if a.type == a.INT:
            a.i = rng.choice([2 ** 62, -(2 ** 62), 99, -99, 0, -1, 5])
        elif a.type == a.INTS and a.ints:
            a.ints[rng.randrange(len(a.ints))] = rng.choice([2 ** 40, -99, 99, 0, -1])
            if rng.random() < 0.3:
                a.ints.append(0)
        elif a.type == a.FLOAT:
            a.f = rng.choice([float("nan"), float("inf"), -1.0, 0.0, 1e38])
        else:
            a.type = rng.choice([0, 1, 2, 3, 4, 5, 6, 7, 8])
    elif choice < 0.9:
        n.attribute.append(h.make_attribute(rng.choice(["axis", "perm", "keepdims", "nosuch", "", "axes", "to"]),
                                            rng.choice([1, -5, [9, 9], "x", 0.25])))
    else:
        if n.attribute:
            n.attribute.append(n.attribute[0])      # the same attribute twice
    case.what = f"attributes of node {n.name} ({n.op_type})"


def mu_names(rng, m, case):
    g = m.graph
    choice = rng.random()
    name = rng.choice(ODD_NAMES)
    if choice < 0.3:
        g.name = name
    elif choice < 0.6:
        # rename a tensor everywhere
        old = rng.choice([v.name for v in g.input] + [t.name for t in g.initializer] +
                         [o for n in g.node for o in n.output])
        for v in list(g.input) + list(g.output):
            if v.name == old:
                v.name = name
        for t in g.initializer:
            if t.name == old:
                t.name = name
        for n in g.node:
            for k, x in enumerate(n.input):
                if x == old:
                    n.input[k] = name
            for k, x in enumerate(n.output):
                if x == old:
                    n.output[k] = name
    else:
        g.node[_pick_node(rng, m)].name = name
    case.what = f"odd name {name[:20]!r}"


def mu_data(rng, m, case):
    onnx, TP, h, nh = _onnx()
    g = m.graph
    inits = [t for t in g.initializer if not t.external_data]
    if not inits:
        return mu_flip(rng, m, case)
    t = rng.choice(inits)
    case.expect = [t.name]
    choice = rng.choice(["short", "long", "both", "typed", "location", "segment", "string", "nan"])
    if choice == "short" and t.raw_data:
        t.raw_data = t.raw_data[:rng.randrange(len(t.raw_data))]
    elif choice == "long":
        if t.raw_data:
            t.raw_data = t.raw_data + b"\x00" * rng.choice([1, 4, 100])
        else:
            t.float_data.extend([1.0])
    elif choice == "both":
        t.float_data.extend([1.0] * 3)
    elif choice == "typed":
        t.ClearField("raw_data")
        t.int64_data.extend([1] * 5)
    elif choice == "location":
        t.data_location = 1        # external, without external_data
    elif choice == "segment":
        t.segment.begin, t.segment.end = 0, 1
    elif choice == "string":
        t.data_type = TP.STRING
        t.ClearField("raw_data")
        t.string_data.extend([b"abc"])
    else:
        a = nh.to_array(t).copy()
        if a.dtype.kind == "f" and a.size:
            a.reshape(-1)[rng.randrange(a.size)] = rng.choice([np.nan, np.inf, -np.inf, 1e38])
            t.CopyFrom(nh.from_array(a, t.name))
            case.expect = []
    case.what = f"initializer {t.name} data ({choice})"


def mu_graph(rng, m, case):
    onnx, TP, h, nh = _onnx()
    g = m.graph
    choice = rng.choice(["no_outputs", "drop_node", "shuffle", "unused", "empty", "input_is_output",
                         "init_is_output", "subgraph", "empty_output_name"])
    if choice == "no_outputs":
        del g.output[:]
    elif choice == "drop_node":
        del g.node[_pick_node(rng, m)]
    elif choice == "shuffle":
        nodes = list(g.node)
        rng.shuffle(nodes)
        del g.node[:]
        g.node.extend(nodes)
        case.expect = []
    elif choice == "unused":
        g.node.append(h.make_node("NoSuchOp", [g.input[0].name], ["unused"], name="unused0"))
    elif choice == "empty":
        del g.node[:]
    elif choice == "input_is_output":
        g.output.append(g.input[0])
    elif choice == "init_is_output" and g.initializer:
        t = g.initializer[0]
        g.output.append(h.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    elif choice == "subgraph":
        sub = h.make_graph([h.make_node("Identity", [g.input[0].name], ["sub_y"])], "sub", [],
                           [h.make_tensor_value_info("sub_y", TP.FLOAT, None)])
        g.node.append(h.make_node("If", ["cond"], ["if_y"], name="if0", then_branch=sub, else_branch=sub))
        g.initializer.append(nh.from_array(np.bool_(True), "cond"))
        g.output.append(h.make_tensor_value_info("if_y", TP.FLOAT, None))
    else:
        g.node[_pick_node(rng, m)].output[0] = ""
    case.what = f"graph ({choice})"


MUTATIONS = {"truncate": (mu_truncate, 5), "flip": (mu_flip, 9), "elem_type": (mu_elem_type, 8),
             "cycle": (mu_cycle, 5), "dangling": (mu_dangling, 6), "duplicate": (mu_duplicate, 6),
             "shape": (mu_shape, 12), "missing_init": (mu_missing_init, 4), "external": (mu_external, 12),
             "op": (mu_op, 8), "opset": (mu_opset, 5), "attr": (mu_attr, 12), "names": (mu_names, 7),
             "data": (mu_data, 7), "graph": (mu_graph, 6), "seed": (None, 2), "combo": (None, 6)}
STRUCTURAL = ["elem_type", "cycle", "dangling", "duplicate", "shape", "missing_init", "op", "attr", "names", "data",
              "graph"]


def make_onnx_case(seed: int, index: int, attempt: int = 0) -> Case:
    onnx, TP, h, nh = _onnx()
    rng = random.Random(f"onnx:{seed}:{index}" + (f":{attempt}" if attempt else ""))
    family = rng.choices(list(MUTATIONS), weights=[w for _, w in MUTATIONS.values()])[0]
    name = rng.choice(sorted(seeds()))
    proto, files = seeds()[name]
    m = onnx.ModelProto()
    m.CopyFrom(proto)
    case = Case(index, family, f"{name}: unchanged", files=dict(files))
    data = None
    try:
        if family == "combo":
            whats = []
            for f in rng.sample(STRUCTURAL, rng.randint(2, 3)):
                MUTATIONS[f][0](rng, m, case)
                whats.append(case.what)
            case.what = "; ".join(whats)
            case.expect = []
        elif family != "seed":
            data = MUTATIONS[family][0](rng, m, case)
    except Exception as e:      # a mutation protobuf or onnx itself refuses, or a graph left empty: another
        if attempt >= 20:
            raise
        case = make_onnx_case(seed, index, attempt + 1)
        case.what += f" (instead of a {family} mutation protobuf refused: {e})"[:200]
        return case
    if family not in ("combo", "seed") and case.what != f"{name}: unchanged":
        case.what = f"{name}: {case.what}"
    case.model = data if isinstance(data, bytes) else m.SerializeToString()
    return case


# ---- running an ONNX case ---------------------------------------------------------------------

_SECRET_HITS: list = []
_WATCHED: set = set()


def _audit(event, args):
    if event == "open" and _WATCHED and args and isinstance(args[0], (str, bytes, os.PathLike)):
        p = os.fsdecode(args[0])
        if p.endswith("secret.bin") and os.path.realpath(p) in _WATCHED:
            _SECRET_HITS.append(p)


_HOOKED = False


def _hook():
    global _HOOKED
    if not _HOOKED:
        sys.addaudithook(_audit)
        _HOOKED = True


def _write(case: Case, d: Path) -> None:
    (d / "m").mkdir()
    (d / "cwd").mkdir()
    (d / "out").mkdir()
    model = case.model
    if ABS_SECRET.encode() in model:        # the absolute location, made this case's
        onnx = _onnx()[0]
        p = onnx.ModelProto()
        p.ParseFromString(model)
        for t in list(p.graph.initializer) + [a.t for n in p.graph.node for a in n.attribute if a.HasField("t")]:
            for e in t.external_data:
                if e.value == ABS_SECRET:
                    e.value = str(d / "secret.bin")
        model = p.SerializeToString()
    (d / MODEL).write_bytes(model)
    for rel, data in case.files.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_bytes(data)
    for rel, target in case.links.items():
        os.symlink(target, d / rel)
    secret = np.full(64, 42.0, np.float32).tobytes()
    for rel in SECRETS:
        (d / rel).write_bytes(secret)
        os.utime(d / rel, (OLD_ATIME, time.time()))


def _secret_read(d: Path) -> str | None:
    if _SECRET_HITS:
        return f"opened {_SECRET_HITS[0]}"
    for rel in SECRETS:
        if os.stat(d / rel).st_atime != OLD_ATIME:
            return f"read {rel} (its access time moved)"
    return None


def _located(err: str, case: Case, path: str) -> str | None:
    """None if an exit-1 error names the model (and what the mutation touched), else why not."""
    line = next((ln for ln in err.splitlines() if "error:" in ln), None)
    if line is None:
        return "exit 1 without an error: line"
    if "model.onnx" not in line and "model" not in line:
        return f"the error does not name the model file: {line[:300]}"
    shown = [e for e in case.expect if e]
    if shown:
        printable = ["".join(c if c.isprintable() else repr(c)[1:-1] for c in e) for e in shown]
        if not any(p[:400] in line for p in printable):
            return f"the error names none of {[p[:40] for p in printable]}: {line[:300]}"
    return None


def _cli(argv: list[str]) -> tuple[int | None, str, str]:
    from fusec.cli import main
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(argv)
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    return rc, out.getvalue(), err.getvalue()


def _cli_problem(rc, out, err, allowed) -> str | None:
    if rc not in allowed:
        return f"exit {rc}: {err.strip()[-300:]}"
    if "Traceback (most recent call last)" in err + out:
        return "a traceback"
    if "internal error" in err:
        return "an internal error message"
    return None


def _feeds(proto, rng: np.random.Generator) -> dict | None:
    """Inputs for the model's graph inputs (dim_params are 2), or None where that cannot be."""
    from fusec.frontends.onnx_file import ONNX_DTYPES, np_dtype
    inits = {t.name for t in proto.graph.initializer}
    feeds = {}
    for v in proto.graph.input:
        if v.name in inits:
            continue
        tt = v.type.tensor_type
        if tt.elem_type not in ONNX_DTYPES or not tt.HasField("shape"):
            return None
        shape = [d.dim_value if d.HasField("dim_value") else 2 for d in tt.shape.dim]
        if any(s <= 0 or s > 64 for s in shape) or len(shape) > 8:
            return None
        dt = np_dtype(ONNX_DTYPES[tt.elem_type][1])
        if dt.kind in "iu":
            feeds[v.name] = rng.integers(0, 3, shape).astype(dt)
        elif dt.kind == "b":
            feeds[v.name] = rng.random(shape) < 0.5
        else:
            feeds[v.name] = rng.uniform(-2, 2, shape).astype(dt)
    return feeds


def _array(t):
    from onnx import numpy_helper
    try:
        a = numpy_helper.to_array(t) if not t.external_data else None
    except Exception:
        return None
    return a if a is not None and a.dtype.kind == "f" else None


def _ort(path: str, feeds: dict):
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    try:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.log_severity_level = 4
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"]).run(None, feeds)
    except Exception:
        return None


def run_onnx_case(case: Case, timeout_s: float) -> Result:
    from fusec.dsl.diagnostics import FdslError
    from fusec.errors import UsageError
    _hook()
    t0 = time.perf_counter()
    outcome, problem, detail = "?", None, ""
    with tempfile.TemporaryDirectory(prefix="fusec-ifuzz-") as tmp:
        d = Path(tmp)
        _write(case, d)
        path = str(d / MODEL)
        _WATCHED.clear()
        _WATCHED.update(os.path.realpath(d / rel) for rel in SECRETS)
        _SECRET_HITS.clear()
        cwd = os.getcwd()
        os.chdir(d / "cwd")

        def expire(signum, frame):
            raise Timeout()
        previous = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        try:
            fdsl = str(d / "out" / "model.fdsl")
            rc, out, err = _cli(["import", path, "-o", fdsl, "--max-memory", MEMORY])
            detail = err.strip()[-600:]
            problem = _cli_problem(rc, out, err, (0, 1)) or (_located(err, case, path) if rc == 1 else None)
            outcome = "import ok" if rc == 0 else "import refused"
            if problem is None and rc == 0:
                text = Path(fdsl).read_text()
                head = text.split("->", 1)[0]
                syms = sorted({s for s in re.findall(r"\[([^\]]*)\]", head) for s in re.split(r",\s*", s)
                               if s and not s.lstrip("-").isdigit()})
                argv = [fdsl, "--inputs", str(d / "out" / "model.npz"), "--target", "reference",
                        "--max-memory", MEMORY, "--seed", "1"]
                if syms:
                    argv += ["--bind", ",".join(f"{s}=2" for s in syms)]
                rc2, out2, err2 = _cli(argv)
                problem = _cli_problem(rc2, out2, err2, (0, 1, 3, 4))
                if problem is None and rc2 == 1 and not re.search(r"error: ", err2):
                    problem = "run: exit 1 without an error: line"
                if problem:
                    problem = "run of the imported chain: " + problem
                    detail = err2.strip()[-600:]
                outcome = "ran" if rc2 == 0 else f"run exit {rc2}"
            if problem is None:
                problem, o = _load_and_compare(case, path, rc == 0, UsageError, FdslError)
                outcome = o or outcome
        except Timeout:
            problem = f"a timeout ({timeout_s:g} s)"
        except BaseException as e:           # anything that escaped is a failure of the contract
            problem = f"{type(e).__name__} escaped: {e}"[:500]
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            os.chdir(cwd)
        leak = _secret_read(d)
        _WATCHED.clear()
        if leak and problem is None:
            problem = f"a read outside the model's folder: {leak}"
    return Result(case, outcome, time.perf_counter() - t0, problem, detail)


def _load_and_compare(case, path, imported: bool, UsageError, FdslError):
    import fusec.onnx as fonnx
    from fusec.runtime.compare import compare
    try:
        model = fonnx.load(path, target="reference", max_memory=MEMORY_BYTES, cache=False)
    except (UsageError, FdslError) as e:
        if imported:
            return f"fusec import took it but fusec.onnx.load refused it: {e}"[:500], None
        return None, None
    if not imported:
        return "fusec.onnx.load took a model fusec import refused", None
    onnx = _onnx()[0]
    proto = onnx.ModelProto()
    proto.ParseFromString(Path(path).read_bytes())
    feeds = _feeds(proto, np.random.default_rng(case.index))
    if feeds is None:
        return None, "loaded"
    try:
        got = model(**feeds)
    except (UsageError, FdslError):
        return None, "load ok, call refused"
    want = _ort(path, feeds)
    if want is None:
        return None, "ran (no onnxruntime result)"
    if len(want) != len(got):
        return f"{len(got)} outputs, onnxruntime gives {len(want)}", None
    from fusec.frontends.onnx_import import NP_TO_FDSL
    # an f64 output computed from f32 values is as exact as f32 (two libraries round differently)
    elems = {t.data_type for t in proto.graph.initializer} | {v.type.tensor_type.elem_type for v in proto.graph.input}
    loosest = "f16" if 10 in elems or 16 in elems else "f32" if 1 in elems else None
    # NaN: onnxruntime's ArgMax skips it, its Clip, Relu and MaxPool may drop it; FDSL's follow
    # IEEE and PyTorch (docs/FDSL.md, "NaN and special values"). Where the weights hold a NaN, an
    # infinity or a value near the float range, only the positions finite in both are compared.
    special = any((~np.isfinite(a)).any() or (np.abs(a) > 1e30).any()
                  for a in (_array(t) for t in proto.graph.initializer) if a is not None)
    for k, (g, w) in enumerate(zip(got, want)):
        w = np.asarray(w)
        dt = NP_TO_FDSL.get(w.dtype.name)
        if dt is None or (special and dt in ("i32", "i64", "bool")):
            continue
        if special and g.shape == w.shape:
            both = np.isfinite(g) & np.isfinite(w)
            g, w = np.where(both, g, 0).astype(g.dtype), np.where(both, w, 0).astype(w.dtype)
        if dt == "f64" and loosest:
            dt = loosest
        if g.shape != w.shape:
            return f"output {k}: shape {g.shape}, onnxruntime's {w.shape}", None
        c = compare(g, w, dt)
        if not c.ok:
            return f"output {k} disagrees with onnxruntime: {c}"[:500], None
    return None, "matches onnxruntime"


# ---- FX cases ----------------------------------------------------------------------------------

@dataclass
class _V:
    name: str
    shape: tuple
    dtype: str = "float32"


class _Gen:
    """A random module: statements over a pool of values whose shapes are tracked."""

    def __init__(self, rng: random.Random, dtype: str = "float32"):
        self.rng = rng
        self.dt = dtype
        self.lines: list[str] = []
        self.init: list[str] = []
        self.pool: list[_V] = []
        self.k = 0

    def fresh(self, prefix="v"):
        self.k += 1
        return f"{prefix}{self.k}"

    def let(self, expr: str, shape, dtype=None) -> _V:
        v = _V(self.fresh(), tuple(shape), dtype or self.dt)
        self.lines.append(f"{v.name} = {expr}")
        self.pool.append(v)
        return v

    def param(self, shape) -> str:
        name = self.fresh("p")
        self.init.append(f"self.{name} = torch.nn.Parameter(torch.randn({tuple(shape)}, generator=g)"
                         f".to(torch.{self.dt}))")
        return f"self.{name}"

    def floats(self):
        return [v for v in self.pool if v.dtype == self.dt]

    def step(self):
        rng = self.rng
        x = rng.choice(self.floats())
        r, s = len(x.shape), x.shape
        op = rng.choice(["unary", "unary", "binary", "binary", "reduce", "matmul", "view", "permute", "softmax",
                         "layernorm", "where", "slice", "index", "cat", "cumsum", "cast", "clamp", "scalar",
                         "argmax", "compare", "pow", "expand", "masked_fill", "full_reduce", "embedding", "bmm",
                         "repeat", "mixed"])
        if op == "unary":
            f = rng.choice(["torch.tanh({})", "torch.sigmoid({})", "torch.relu({})", "torch.exp(torch.tanh({}))",
                            "torch.abs({})", "-{}", "torch.sin({})", "F.gelu({})", "F.silu({})", "{} * {}",
                            "torch.sqrt(torch.abs({}) + 1.0)", "torch.log1p(torch.abs({}))", "torch.rsqrt({} * {} + 1)",
                            "torch.floor({})", "F.gelu({}, approximate='tanh')", "torch.erf({})"])
            return self.let(f.format(*[x.name] * f.count("{}")), s)
        if op == "binary":
            others = [v for v in self.floats() if _broadcasts(v.shape, s)]
            y = rng.choice(others)
            f = rng.choice(["+", "-", "*", "/ (torch.abs({}) + 1.0)", "max", "min"])
            if f == "max":
                return self.let(f"torch.maximum({x.name}, {y.name})", _bshape(s, y.shape))
            if f == "min":
                return self.let(f"torch.minimum({x.name}, {y.name})", _bshape(s, y.shape))
            if "{}" in f:
                return self.let(f"{x.name} {f.format(y.name)}", _bshape(s, y.shape))
            return self.let(f"{x.name} {f} {y.name}", _bshape(s, y.shape))
        if op == "reduce" and r >= 1:
            d = rng.randrange(-r, r)
            keep = rng.random() < 0.5
            f = rng.choice(["sum", "mean", "amax", "amin", "max", "var", "norm"])
            shape = tuple(1 if k == d % r else n for k, n in enumerate(s)) if keep else \
                tuple(n for k, n in enumerate(s) if k != d % r)
            if f == "max":
                return self.let(f"{x.name}.max(dim={d}, keepdim={keep}).values", shape)
            if f == "var":
                return self.let(f"{x.name}.var(dim={d}, keepdim={keep}, unbiased=False)", shape)
            if f == "norm":
                return self.let(f"torch.linalg.vector_norm({x.name}, dim={d}, keepdim={keep})", shape)
            return self.let(f"{x.name}.{f}(dim={d}, keepdim={keep})", shape)
        if op == "matmul" and r >= 1:
            n = rng.choice([2, 3, 5])
            if r >= 2 and rng.random() < 0.3:
                return self.let(f"{x.name} @ {x.name}.transpose(-1, -2)", s[:-1] + (s[-2],))
            if rng.random() < 0.5:
                return self.let(f"{x.name} @ {self.param((s[-1], n))}", s[:-1] + (n,))
            return self.let(f"F.linear({x.name}, {self.param((n, s[-1]))}, {self.param((n,))})", s[:-1] + (n,))
        if op == "view" and r >= 1:
            choice = rng.random()
            if choice < 0.3 and r >= 2:
                return self.let(f"{x.name}.reshape({s[:-2] + (s[-2] * s[-1],)})", s[:-2] + (s[-2] * s[-1],))
            if choice < 0.5:
                d = rng.randrange(r + 1)
                return self.let(f"{x.name}.unsqueeze({d})", s[:d] + (1,) + s[d:])
            if choice < 0.7 and 1 in s:
                d = s.index(1)
                return self.let(f"{x.name}.squeeze({d})", s[:d] + s[d + 1:])
            if choice < 0.85:
                return self.let(f"{x.name}.flatten()", (int(np.prod(s)),))
            return self.let(f"{x.name}.reshape(-1, {s[-1]})", (int(np.prod(s[:-1])), s[-1]))
        if op == "permute" and r >= 2:
            perm = list(range(r))
            rng.shuffle(perm)
            if rng.random() < 0.5:
                return self.let(f"{x.name}.permute({tuple(perm)}).contiguous()", tuple(s[p] for p in perm))
            return self.let(f"{x.name}.transpose(0, {r - 1})", (s[-1],) + s[1:-1] + (s[0],))
        if op == "softmax" and r >= 1:
            d = rng.randrange(-r, r)
            f = rng.choice(["torch.softmax", "torch.log_softmax"])
            return self.let(f"{f}({x.name}, dim={d})", s)
        if op == "layernorm" and r >= 1:
            if rng.random() < 0.5:
                return self.let(f"F.layer_norm({x.name}, ({s[-1]},))", s)
            return self.let(f"F.layer_norm({x.name}, ({s[-1]},), {self.param((s[-1],))}, {self.param((s[-1],))}, "
                            "eps=1e-5)", s)
        if op == "where":
            others = [v for v in self.floats() if v.shape == s]
            y = rng.choice(others)
            other = rng.choice([y.name, "0.0", "float('-inf')"])
            return self.let(f"torch.where({x.name} > {rng.choice(['0', '0.5', y.name])}, {x.name}, {other})", s)
        if op == "slice" and r >= 1:
            d = rng.randrange(r)
            n = s[d]
            choice = rng.random()
            pre = ":, " * d
            if choice < 0.4 and n >= 2:
                return self.let(f"{x.name}[{pre}1:]", s[:d] + (n - 1,) + s[d + 1:])
            if choice < 0.6:
                return self.let(f"{x.name}[{pre}::2]", s[:d] + ((n + 1) // 2,) + s[d + 1:])
            if choice < 0.8 and r >= 2:
                return self.let(f"{x.name}[{pre}{n - 1}]", s[:d] + s[d + 1:])
            return self.let(f"{x.name}.narrow({d}, 0, {max(1, n // 2)})", s[:d] + (max(1, n // 2),) + s[d + 1:])
        if op == "index" and r >= 1:
            d = rng.randrange(r)
            m = rng.choice([1, 2, 4])
            idx = self.fresh("i")
            self.init.append(f"self.register_buffer('{idx}', torch.randint(0, {s[d]}, ({m},), generator=g))")
            choice = rng.random()
            if choice < 0.4:
                return self.let(f"torch.index_select({x.name}, {d}, self.{idx})", s[:d] + (m,) + s[d + 1:])
            if choice < 0.7 and d == 0:
                return self.let(f"{x.name}[self.{idx}]", (m,) + s[1:])
            gshape = s[:d] + (m,) + s[d + 1:]
            gi = self.fresh("gi")
            self.init.append(f"self.register_buffer('{gi}', torch.randint(0, {s[d]}, {gshape}, generator=g))")
            return self.let(f"torch.gather({x.name}, {d}, self.{gi})", gshape)
        if op == "cat" and r >= 1:
            d = rng.randrange(r)
            others = [v for v in self.floats() if len(v.shape) == r and all(v.shape[k] == s[k] for k in range(r)
                                                                             if k != d)]
            y = rng.choice(others)
            if rng.random() < 0.2:
                others = [v for v in self.floats() if v.shape == s]
                return self.let(f"torch.stack([{x.name}, {rng.choice(others).name}], dim={d})", s[:d] + (2,) + s[d:])
            return self.let(f"torch.cat([{x.name}, {y.name}], dim={d})", s[:d] + (s[d] + y.shape[d],) + s[d + 1:])
        if op == "cumsum" and r >= 1:
            return self.let(f"torch.cumsum({x.name}, dim={rng.randrange(-r, r)})", s)
        if op == "cast":
            dt = rng.choice(["float64", "float32", "float16", "bfloat16"])
            return self.let(f"{x.name}.to(torch.{dt}).to(torch.{self.dt})", s)
        if op == "argmax" and r >= 1:
            d = rng.randrange(-r, r)
            f = rng.choice(["argmax", "argmin"])
            v = self.let(f"{x.name}.{f}(dim={d})", tuple(n for k, n in enumerate(s) if k != d % r), "int64")
            if rng.random() < 0.5:
                return self.let(f"{v.name}.to(torch.{self.dt})", v.shape)
            return v
        if op == "compare":
            others = [v for v in self.floats() if _broadcasts(v.shape, s)]
            y = rng.choice(others)
            c = rng.choice([">", "<", ">=", "==", "!="])
            v = self.let(f"({x.name} {c} {y.name})", _bshape(s, y.shape), "bool")
            if rng.random() < 0.6:
                return self.let(rng.choice([f"{v.name}.to(torch.{self.dt})", f"torch.where({v.name}, {x.name}, 1.0)"])
                                if v.shape == s else f"{v.name}.to(torch.{self.dt})", v.shape)
            return v
        if op == "pow":
            return self.let(rng.choice([f"{x.name} ** 2", f"torch.pow(torch.abs({x.name}) + 1.0, 1.5)",
                                        f"torch.pow(2.0, {x.name})", f"{x.name} ** 3"]), s)
        if op == "expand":
            return self.let(f"{x.name}.unsqueeze(0).expand(3, {', '.join(['-1'] * r)})", (3,) + s)
        if op == "masked_fill":
            fill = rng.choice(["0.0", "-1e4", "float('-inf')"])
            return self.let(f"{x.name}.masked_fill({x.name} < 0, {fill})", s)
        if op == "full_reduce":
            return self.let(f"{x.name}.{rng.choice(['sum', 'mean', 'amax', 'amin'])}()", ())
        if op == "embedding" and r >= 1:
            idx = self.fresh("e")
            n = rng.choice([1, 3])
            self.init.append(f"self.register_buffer('{idx}', torch.randint(0, {s[0]}, (2, {n}), generator=g))")
            return self.let(f"F.embedding(self.{idx}, {x.name}.reshape({s[0]}, -1))",
                            (2, n, int(np.prod(s[1:])) if r > 1 else 1))
        if op == "mixed" and r >= 1:          # tensors of two dtypes in one op: PyTorch promotes
            return self.let(rng.choice([f"{x.name} + torch.arange({s[-1]})", f"{x.name} * ({x.name} > 0).long()",
                                        f"{x.name} / {x.name}.argmax(dim=-1, keepdim=True).clamp(min=1)",
                                        f"({x.name} > torch.arange({s[-1]})).to(torch.{self.dt}) * {x.name}"]), s)
        if op == "bmm" and r == 3:
            return self.let(f"torch.bmm({x.name}, {x.name}.transpose(1, 2))", (s[0], s[1], s[1]))
        if op == "repeat" and r >= 1:
            reps = tuple(rng.choice([1, 2]) for _ in range(r))
            return self.let(f"{x.name}.repeat{reps}", tuple(a * b for a, b in zip(s, reps)))
        if op == "clamp":
            return self.let(f"torch.clamp({x.name}, {rng.choice(['-0.5', 'None'])}, {rng.choice(['0.5', '2.0'])})",
                            s)
        return self.let(f"{x.name} * {rng.choice(['2.0', '0.5', '-1.0', '3'])} + {rng.choice(['1.0', '0'])}", s)


def _broadcasts(a: tuple, b: tuple) -> bool:
    return all(x == y or x == 1 or y == 1 for x, y in zip(reversed(a), reversed(b)))


def _bshape(a: tuple, b: tuple) -> tuple:
    r = max(len(a), len(b))
    a, b = (1,) * (r - len(a)) + a, (1,) * (r - len(b)) + b
    return tuple(max(x, y) for x, y in zip(a, b))


FX_DTYPES = ["float32"] * 6 + ["float64", "float16", "bfloat16"]


def fx_program(rng: random.Random, dtype: str = "float32") -> tuple[str, list]:
    """A random module's source and its inputs' shapes."""
    g = _Gen(rng, dtype)
    shapes = []
    base = tuple(rng.choice([1, 2, 3, 4, 5, 7]) for _ in range(rng.randint(1, 3)))
    for k in range(rng.randint(1, 3)):
        shape = base if k == 0 or rng.random() < 0.6 else base[rng.randint(0, len(base) - 1):]
        g.pool.append(_V(f"x{k}", shape, dtype))
        shapes.append(shape)
    for _ in range(rng.randint(2, 7)):
        try:
            g.step()
        except (IndexError, ValueError):
            pass
    outs = [g.pool[-1].name]
    if rng.random() < 0.3 and len(g.pool) > 2:
        outs.append(g.pool[-2].name)
    args = ", ".join(f"x{k}" for k in range(len(shapes)))
    body = "\n".join(f"        {ln}" for ln in g.lines) or "        pass"
    init = "\n".join(f"        {ln}" for ln in g.init)
    src = (f"class M(torch.nn.Module):\n    def __init__(self, g):\n        super().__init__()\n{init}\n"
           f"        pass\n\n    def forward(self, {args}):\n{body}\n        return {', '.join(outs)}\n")
    return src, shapes


def make_fx_case(seed: int, index: int) -> Case:
    rng = random.Random(f"fx:{seed}:{index}")
    dtype = rng.choice(FX_DTYPES)
    src, shapes = fx_program(rng, dtype)
    case = Case(index, "fx", f"{dtype} inputs {shapes}", fx_source=src, fx_seed=rng.randrange(2 ** 31))
    case.fx_shapes, case.fx_dtype = shapes, dtype
    case.fx_by_name = rng.random() < 0.25
    case.fx_dynamic = rng.random() < 0.25          # the first input's dim 0 a symbol (maybe_mark_dynamic)
    case.fx_strided = rng.random() < 0.2           # the first input a permuted view (not contiguous)
    case.fx_specials = [(k, rng.random(), rng.choice(["nan", "inf", "-inf", "1e4", "-0.0"]))
                        for k in range(len(shapes)) if rng.random() < 0.2]
    if case.fx_dynamic:
        case.what += " (dynamic dim 0)"
    if case.fx_specials:
        case.what += f" (specials {[v for _, _, v in case.fx_specials]})"
    return case


def _fx_inputs(case: Case, gen) -> list:
    import torch
    dt = getattr(torch, case.fx_dtype)
    xs = [torch.randn(s, generator=gen).to(dt) for s in case.fx_shapes]
    for k, where, value in case.fx_specials:
        flat = xs[k].view(-1)
        flat[int(where * flat.numel())] = float(value)
    if getattr(case, "fx_strided", False) and xs[0].dim() >= 2:      # the same values, not contiguous
        rev = tuple(reversed(range(xs[0].dim())))
        xs[0] = xs[0].permute(*rev).contiguous().permute(*rev)
    return xs


def run_fx_case(case: Case, timeout_s: float, target: str = "reference") -> Result:
    import copy

    import torch

    import fusec.torch as ft
    torch.manual_seed(case.fx_seed)
    ns = {"torch": torch, "F": torch.nn.functional}
    t0 = time.perf_counter()
    problem, outcome, detail, reasons = None, "?", "", []
    gen = torch.Generator().manual_seed(case.fx_seed)
    exec(case.fx_source, ns)                           # noqa: S102 - our own generated source
    m = ns["M"](gen).eval()
    inputs = _fx_inputs(case, gen)
    try:
        with torch.no_grad(), warnings_off():
            want = m(*inputs)
            truth = copy.deepcopy(m).double()(*[x.double() for x in inputs])
    except Exception as e:
        return Result(case, "invalid program", time.perf_counter() - t0, None, f"eager: {e}")

    def expire(signum, frame):
        raise Timeout()
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        if case.fx_dynamic and inputs[0].dim() and inputs[0].shape[0] >= 2:
            torch._dynamo.maybe_mark_dynamic(inputs[0], 0)
        with warnings_off():
            # verify off: a wrong region must show as wrong outputs here, not run eagerly
            report = ft.explain(m, *inputs, options={"target": target, "verify": False})
        problem = _fx_compare(report.outputs, want, truth)
        if problem is None:
            problem = _fx_report(report)
        outcome = "all in fusec" if report.in_fusec == report.aten_ops else \
            "all eager" if report.in_fusec == 0 else "part eager"
        detail = str(report)[-1500:]
        reasons = [f"aten.{name}: " + re.sub(r"\d+", "N", x)[:90] for name, e in report.eager.items()
                   for x in e["reasons"]]
        if problem is None and case.fx_by_name:
            torch._dynamo.reset()
            c = torch.compile(m, backend="fusec", options={"target": target, "verify": False})
            fresh = _fx_inputs(case, gen)
            with torch.no_grad(), warnings_off():
                got, want2 = c(*fresh), m(*fresh)
                truth2 = copy.deepcopy(m).double()(*[x.double() for x in fresh])
            problem = _fx_compare(got, want2, truth2)
            if problem:
                problem = "torch.compile(backend='fusec') on fresh inputs: " + problem
    except Timeout:
        problem = f"a timeout ({timeout_s:g} s)"
    except BaseException as e:
        import traceback
        problem = f"{type(e).__name__} escaped: {str(e)[:400]}"
        detail = traceback.format_exc()[-2000:]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        torch._dynamo.reset()
    return Result(case, outcome, time.perf_counter() - t0, problem, detail, reasons)


@contextlib.contextmanager
def warnings_off():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _fx_compare(got, want, truth=None) -> str | None:
    """None if fusec's outputs match eager's (runtime/compare.py's tolerances for their dtype;
    a float output as close to the float64 run as eager's passes too: compare_to_truth)."""
    import torch

    from fusec.runtime.compare import compare_to_truth
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    truth = list(truth) if isinstance(truth, (tuple, list)) else [truth] * len(want)
    if len(got) != len(want):
        return f"{len(got)} outputs, eager gives {len(want)}"
    names = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
             torch.int64: "i64", torch.int32: "i32", torch.bool: "bool"}

    def arr(t):
        if t is None:
            return None
        t = t.detach()
        return t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()
    for k, (g, w, t) in enumerate(zip(got, want, truth)):
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"output {k}: {g.dtype}{list(g.shape)}, eager gives {w.dtype}{list(w.shape)}"
        dt = names.get(w.dtype, "f32")
        c = compare_to_truth(arr(g), arr(w), arr(t) if t is not None and w.dtype.is_floating_point else None, dt)
        if not c.ok and t is not None and w.dtype.is_floating_point and c.specials.mismatches:
            # a NaN or an infinity where eager has another: the float64 run decides (PyTorch's
            # vectorised f32 gelu gives NaN for +inf, its scalar and f64 paths inf, as FDSL)
            c64 = compare_to_truth(arr(g), arr(t.to(w.dtype)), None, dt)
            if c64.ok:
                continue
        if not c.ok:
            return f"output {k} disagrees with eager: {c}"[:600]
    return None


def _fx_report(report) -> str | None:
    eager = sum(e["count"] for e in report.eager.values())
    if report.in_fusec + eager != report.aten_ops:
        return f"the report loses ops: {report.aten_ops} ATen ops, {report.in_fusec} in fusec, {eager} eager"
    for r in report.regions:
        if r.eager_reason is not None and not r.eager_reason.strip():
            return f"{r.name} runs eagerly without a reason"
    for name, e in report.eager.items():
        if not e["reasons"] or not all(isinstance(x, str) and x for x in e["reasons"]):
            return f"aten.{name} runs eagerly without a reason"
    return None


# ---- the run -------------------------------------------------------------------------------------

def make_case(seed: int, index: int, fx_share: float) -> Case:
    rng = random.Random(f"kind:{seed}:{index}")
    return make_fx_case(seed, index) if rng.random() < fx_share else make_onnx_case(seed, index)


def run_case(case: Case, timeout_s: float, fx_target: str = "reference") -> Result:
    return run_fx_case(case, timeout_s, fx_target) if case.fx_source is not None else run_onnx_case(case, timeout_s)


def keep(result: Result, directory: Path) -> Path:
    c = result.case
    d = directory / f"case-{c.index}"
    d.mkdir(parents=True, exist_ok=True)
    if c.fx_source is not None:
        (d / "module.py").write_text(c.fx_source + f"\n# inputs: {c.fx_shapes}, seed {c.fx_seed}\n")
    else:
        (d / "m").mkdir(exist_ok=True)
        (d / MODEL).write_bytes(c.model)
        for rel, data in c.files.items():
            (d / rel).parent.mkdir(parents=True, exist_ok=True)
            (d / rel).write_bytes(data)
    (d / "problem.txt").write_text(f"{c.family}: {c.what}\n{result.problem}\n\n{result.detail}\n")
    return d


def fuzz(n: int, seed: int = 0, timeout_s: float = 30.0, fx_share: float = 0.1, keep_dir: Path | None = None,
         progress=None, fx_target: str = "reference") -> dict:
    """Run cases 0..n-1 of `seed`; returns the figures (and the failing results)."""
    t0 = time.perf_counter()
    outcomes: dict[str, Counter] = {}
    failures: list[Result] = []
    slowest = (0.0, -1)
    eager: Counter = Counter()
    for i in range(n):
        case = make_case(seed, i, fx_share)
        result = run_case(case, timeout_s, fx_target)
        key = result.outcome if result.problem is None else "FAILED"
        outcomes.setdefault(case.family, Counter())[key] += 1
        slowest = max(slowest, (result.seconds, i))
        eager.update(set(result.reasons))
        if result.problem:
            failures.append(result)
            if keep_dir is not None:
                keep(result, keep_dir)
        if progress and (i + 1) % progress == 0:
            print(f"  {i + 1}/{n} cases, {len(failures)} failing, {time.perf_counter() - t0:.0f} s", flush=True)
    total: Counter = Counter()
    for c in outcomes.values():
        total.update(c)
    return {"cases": n, "seed": seed, "seconds": round(time.perf_counter() - t0, 1),
            "onnx_cases": sum(sum(c.values()) for f, c in outcomes.items() if f != "fx"),
            "fx_cases": sum(outcomes.get("fx", Counter()).values()),
            "outcomes": dict(sorted(total.items())),
            "families": {k: dict(sorted(v.items())) for k, v in sorted(outcomes.items())},
            "fx_eager_reasons": dict(eager.most_common(12)),
            "failing": len(failures), "timeouts": sum(1 for r in failures if r.problem.startswith("a timeout")),
            "slowest_s": round(slowest[0], 3), "slowest_case": slowest[1], "failures": failures}


def _fixed_cpu_profile() -> None:
    """Plan for the suite's snapshot of a cpu profile (as tests/conftest.py does), in a cache
    directory of this run's own, rather than measure this machine (10 s) with the cache off."""
    import atexit
    import shutil

    from fusec.compiler.plan.hardware import profile_key
    root = Path(tempfile.mkdtemp(prefix="fusec-ifuzz-cache-"))
    atexit.register(shutil.rmtree, root, True)
    os.environ["FUSEC_CACHE_DIR"] = str(root)
    profile = json.loads((Path(__file__).parent / "data" / "cpu-profile.json").read_text())
    (root / "hardware-cpu.json").write_text(json.dumps({"key": profile_key(), "profile": profile}))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.fuzz_import", description=__doc__.split("\n\n")[0])
    p.add_argument("-n", type=int, default=1000, help="cases to run (default 1000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fx", type=float, default=0.1, help="the share of FX cases (default 0.1)")
    p.add_argument("--fx-target", default="reference", choices=["reference", "cpu", "cuda-sim", "cuda"],
                   help="where the FX cases' fusec regions run (default reference; cpu compiles each, ~5 s a case)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per case (default 30)")
    p.add_argument("--keep", type=Path, help="write each failing case (model or module, problem) here")
    p.add_argument("--case", type=int, help="show and run one case")
    p.add_argument("--export-fixtures", type=Path, metavar="DIR",
                   help="write the torch.onnx.export seed models to DIR (they live in tests/data/fuzz_import)")
    args = p.parse_args(argv)
    if args.export_fixtures:
        export_fixtures(args.export_fixtures)
        return 0
    if args.fx_target == "cuda-sim":
        os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
    if args.fx_target != "reference" and "FUSEC_CACHE_DIR" not in os.environ:
        _fixed_cpu_profile()
    if args.case is not None:
        case = make_case(args.seed, args.case, args.fx)
        print(f"case {case.index} ({case.family}): {case.what}")
        if case.fx_source:
            print(case.fx_source)
        result = run_case(case, args.timeout, args.fx_target)
        print(f"{result.outcome} in {result.seconds:.2f} s: {result.problem or 'holds the contract'}")
        print(result.detail)
        return 0 if result.problem is None else 1
    figures = fuzz(args.n, args.seed, args.timeout, args.fx, args.keep, progress=max(1, args.n // 10),
                   fx_target=args.fx_target)
    failures = figures.pop("failures")
    print(json.dumps(figures, indent=1))
    for r in failures[:30]:
        print(f"case {r.case.index} ({r.case.family}: {r.case.what[:120]}): {r.problem[:400]}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
