"""`fusec import MODEL.onnx -o OUT.fdsl`: an ONNX model's graph written as one FDSL chain
(OUT.fdsl) and its initializers as that chain's inputs in the golden layout (OUT.npz,
`CHAIN/in/ARG`), so that `fusec OUT.fdsl --inputs OUT.npz --inputs x.npz` runs it. The
importer is fusec/frontends/ (through fusec.onnx); it needs the onnx package. Exit 0, or 1 with
one line naming the node on a model fusec cannot import.
"""
from __future__ import annotations

import argparse
import os

from fusec.runtime import npz
from fusec.runtime.files import atomic_write
from fusec.runtime.memory import format_bytes
from fusec.runtime.npz import NpzError

from ..errors import UsageError
from .args import Parser, check_output_file, size_arg


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="fusec import", description="Write an ONNX model (opsets 17-21) as one FDSL chain, and its "
                "initializers as the chain's inputs in an npz beside it.")
    p.add_argument("model", metavar="MODEL.onnx")
    p.add_argument("-o", "--output", metavar="OUT.fdsl",
                   help="the FDSL file to write (default: MODEL with .fdsl for .onnx); the initializers go to the "
                        "same path with .npz")
    p.add_argument("--chain", metavar="NAME", help="the chain's name (default: the graph's name, made an identifier)")
    p.add_argument("--max-memory", type=size_arg, metavar="SIZE",
                   help="refuse a model file, or initializers together, larger than SIZE (8G, 512M, bytes; default: a "
                        "quarter of this machine's memory), before reading them")
    return p


def npz_path(fdsl: str) -> str:
    root, ext = os.path.splitext(fdsl)
    return (root if ext == ".fdsl" else fdsl) + ".npz"


def run(args: argparse.Namespace) -> int:
    from fusec.onnx import import_model
    out = args.output or os.path.splitext(args.model)[0] + ".fdsl"
    if args.chain is not None and not (args.chain.isidentifier() and args.chain.isascii()):
        raise UsageError(f"--chain {args.chain!r} is not an FDSL identifier")
    weights_path = npz_path(out)
    for path in (out, weights_path):
        check_output_file("-o", path)
    if os.path.abspath(out) == os.path.abspath(args.model):
        raise UsageError(f"-o {out} would overwrite the model")
    imp = import_model(args.model, max_memory=args.max_memory, chain_name=args.chain)
    try:
        npz.save(weights_path, {imp.chain: (imp.weights, [])})
    except NpzError as e:
        raise UsageError(f"-o: {e}") from None
    try:
        atomic_write(out, imp.text)
    except OSError as e:
        raise UsageError(f"-o {out}: cannot write it: {e.strerror or e}") from None
    size = sum(a.nbytes for a in imp.weights.values())
    ins = ", ".join(p for _, p in imp.inputs) or "none"
    print(f"wrote {out}: chain {imp.chain} ({imp.nodes} ONNX nodes, {imp.statements} statements; inputs {ins})")
    print(f"wrote {weights_path}: {len(imp.weights)} weight{'s' if len(imp.weights) != 1 else ''} "
          f"({format_bytes(size)}) as {imp.chain}/in/NAME")
    print(f"run it: fusec {out} --inputs {weights_path} --inputs INPUTS.npz "
          f"(INPUTS.npz: {', '.join(f'{imp.chain}/in/{p}' for _, p in imp.inputs) or 'nothing more'})")
    return 0
