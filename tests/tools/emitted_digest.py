"""The emitted module of every chain of `examples/` and `bench/fdsl/`, at two bindings, fused and
unfused, on cpu and cuda, written to a directory, so that a refactor can show it changed no
emitted byte:

    python -m tests.tools.emitted_digest /tmp/before        # on the commit before
    python -m tests.tools.emitted_digest /tmp/after         # on the change
    diff -r /tmp/before /tmp/after                           # nothing: byte-identical

The cpu builds plan for the suite's fixed profile (tests/data/cpu-profile.json), the cuda builds
for the H200 profile, so the result does not depend on this machine. `--plans` also writes each
build's plan text (`--emit plan`), `-k WORD` keeps the files whose name holds WORD."""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BINDINGS = (32, 128)          # every symbol of a chain at this size


def _files(keep: str | None) -> list[Path]:
    files = sorted((ROOT / "examples").glob("*.fdsl")) + sorted((ROOT / "bench" / "fdsl").glob("*.fdsl"))
    return [f for f in files if keep is None or keep in str(f.relative_to(ROOT))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--plans", action="store_true", help="also write each build's plan text")
    ap.add_argument("-k", dest="keep", help="only the files whose path holds this")
    args = ap.parse_args(argv)
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
    os.environ["FUSEC_CACHE_DIR"] = tempfile.mkdtemp(prefix="fusec-digest-")
    from fusec.compiler.options import CompileOptions
    from fusec.compiler.pipeline import compile_source
    from fusec.compiler.plan.hardware import get, profile_from_dict
    from fusec.dsl.parser import parse_text

    cpu = profile_from_dict(json.loads((ROOT / "tests" / "data" / "cpu-profile.json").read_text()))
    profiles = {"cpu": cpu, "gpu": get("h200")}
    args.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for f in _files(args.keep):
        text = f.read_text()
        ast = parse_text(text, str(f))
        for chain in [c.name for c in ast.chains]:
            symbols = sorted(set(re.findall(r"\b[A-Z][A-Za-z0-9_]*\b", _signature(text, chain))))
            for size in BINDINGS:
                binding = {s: size for s in symbols}
                for target, profile in profiles.items():
                    for fuse in (True, False):
                        name = f"{f.parent.name}.{f.stem}.{chain}.{size}.{target}.{'fused' if fuse else 'unfused'}"
                        opts = CompileOptions(target=target, hardware=profile, fuse=fuse)
                        try:
                            st = compile_source(text, str(f.relative_to(ROOT)), chain, binding, options=opts)
                            (args.out / f"{name}.py").write_text(st.texts["kernels"])
                            if args.plans:
                                (args.out / f"{name}.plan.txt").write_text(st.texts["plan"])
                        except Exception as e:       # a build that fails is recorded, not skipped
                            failed += 1
                            (args.out / f"{name}.error.txt").write_text(f"{type(e).__name__}: {str(e).splitlines()[0]}\n")
                        print(name, file=sys.stderr)
    print(f"{len(list(args.out.iterdir()))} files in {args.out}; {failed} builds failed")
    return 0


def _signature(text: str, chain: str) -> str:
    m = re.search(rf"chain\s+{re.escape(chain)}\s*\((.*?)\{{", text, re.S)
    return m.group(1) if m else ""


if __name__ == "__main__":
    sys.exit(main())
