"""A seeded mutation fuzzer of fusec's front door: every input a user controls must end in exit
0, 1, 3 or 4 (never 2, an internal error), without a traceback and within a time limit; and,
with --targets, every program that passes the checker must compile and run on the compiled
targets with the reference's outputs, or end in a user error.

Programs start from the examples and every program of docs/FDSL.md and are mutated the way a
careless or hostile user would: extreme literals (99999999999999999999, 1e400, 3000000000 in
an i32 chain), dimensions and axes out of range, wrong operators and dtypes, nesting deeper
than the parser's limit, deleted, repeated and truncated lines, stray characters, bytes that
are not UTF-8, UTF-16 files and byte-order marks, empty and comment-only files; command lines
get odd `--bind` values (M=², M=0, M=4,M=5, unknown symbols), seeds, memory limits, chains,
flags a target refuses, paths with braces, `--inputs` files that do not match (renamed chains,
missing or extra arrays, wrong dtypes, truncated, not a zip), output paths that cannot be
written (`--save`, `--report`, `--dump-dir`, `--plot`, `fusec compile -o`), and damaged
artifacts for `fusec run`. Each case runs `fusec.cli.main` in this process, on `--target reference`.

With `--targets reference,cpu,cuda-sim,mlir-jit`, each case whose program passes the checker
also becomes a compiled case (one per distinct program): one of its chains, every symbol bound
to 1..5, a seed, one case in five `--no-fuse`, `--no-fallback`. It runs on the reference first
(the gate: the sizes must fit) and then on each compiled target in a worker process (so that a
crash or a hang in native code fails that case and the run goes on; a worker is replaced after
a crash, a hang, or once it has grown past 3 GB), where fusec checks the outputs against the
reference itself (runtime/compare.py). A case whose inputs and outputs hold more than 16,384
elements skips cuda-sim (fixed sizes stay as written, and the simulator runs every thread in
Python). A compiled run fails when it exits 3 (a mismatch), 2 or anything but 0 and 1, prints a
traceback, exits 1 without an `error:` line, crashes the worker or runs past the timeout (120 s
at least of the worker's CPU time, which a busy machine does not stretch, or five times that on
the clock). Workers plan for the test suite's snapshot of the cpu profile
(tests/data/cpu-profile.json), so a case plans alike on every machine and run. `--minimise` shrinks the first failing program of each target and kind of failure
(the problem; for an internal error, its exception and stage) by delta debugging (lines, then
expressions, statements and parameters, then sizes) while it fails the same way, and `--keep
DIR` writes it as DIR/compiled-INDEX-TARGET/min.fdsl with its command line and a
test_regression.py to start the regression test from. `--max-seconds S` starts no compiled
case after S seconds (the figures are printed all the same).

    python -m tests.fuzz -n 10000              # the long run (about two minutes on 2 cores)
    python -m tests.fuzz -n 300 --seed 7       # another sample
    python -m tests.fuzz --case 1234           # show (and run) one case of a run: its argv and program
    python -m tests.fuzz -n 10000 --keep DIR   # keep each failing case's files in DIR
    python -m tests.fuzz -n 3000 --targets reference,cpu,cuda-sim,mlir-jit --keep DIR --minimise
                        # compiled: ~260 programs, ~750 compiled runs, ~6 s a program (docs/GUIDE.md)
    python -m tests.fuzz --case 1234 --targets reference,cpu --minimise --keep DIR   # one compiled case

A case fails when it exits 2 (or anything but 0, 1, 3, 4), prints a traceback or "internal
error", exits 1 without an `error:` line, or runs past --timeout seconds. The default test
run (tests/test_fuzz.py) runs a few hundred cases, and five programs compiled on each target.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# fuzz cases are compiled once each: keep them out of the user's compile cache
os.environ.setdefault("FUSEC_NO_CACHE", "1")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
FDSL_MD = ROOT / "docs" / "FDSL.md"
MEMORY = "64M"                        # every case runs under this --max-memory (fast, small inputs)

BIG_INTS = ["99999999999999999999", "9223372036854775808", "9223372036854775807", "3000000000", "2147483648",
            "4294967296", "65536", "0", "1", "7", "123456789012345678901234567890"]
BIG_FLOATS = ["1e400", "1e-400", "1e39", "1e308", "70000.0", "0.0", "1e-45", "3.5e38", ".5e5", "1e+5"]
DTYPES = ["f16", "bf16", "f32", "f64", "i32", "i64", "bool"]
OPS = ["neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "gelu", "silu", "erf", "erfc",
       "log1p", "sin", "cos", "floor", "ceil", "reciprocal", "square", "add", "sub", "mul", "div", "pow",
       "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge", "where", "clamp", "cast", "sum", "mean", "max",
       "min", "prod", "softmax", "log_softmax", "layernorm", "rmsnorm", "batchnorm", "matmul", "conv2d",
       "transpose", "permute", "reshape", "broadcast_to", "concat", "split", "gather", "embedding",
       "take_along_axis", "gather_nd", "index", "cumsum",
       "cumprod", "argmax", "argmin", "slice", "nosuchop"]
OPERATORS = ["+", "-", "*", "/", "**", "@", "==", "!=", "<", "<=", ">", ">=", "|>"]
PUNCT = list("()[]{},:;=+-*/@<>|#.\"\n\t ") + ["->", "|>", "**", "\\"]
TOKENS = ["chain", "return", "const", "true", "false", "x", "M", "N", "-1", "0", "1.5", "axis=", "keepdims=true",
          "[", "]", "(", ")", "{", "}", "f32", "i32", "bool", "->", ",", "=", '"tanh"', "approximate=", "dtype="]
ODD_TEXT = ["\u00b2", "\u00e9", "\U0001F600", "\u2028", "\x0b", "\x0c", "\x00", "\ufeff", "\r", "\u00a0", "\u200b"]
ODD_BYTES = [b"\xff", b"\xfe", b"\xc3", b"\x80", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x00", b"\xc0\xaf"]
BIND_VALUES = ["\u00b2", "0", "-1", "99999999999", "999999999999999999999999", "1e3", "", " 4", "4.0", "0x10",
               "\u0663", "64", "1", "2", "3"]


@dataclass
class Case:
    index: int
    family: str
    program: bytes
    argv: list[str]                         # FILE stands for the program's path, DIR for the case's directory
    files: dict[str, bytes] = field(default_factory=dict)   # other files of the case (npz, artifacts)
    filename: str = "prog.fdsl"
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Result:
    case: Case
    rc: int | None
    seconds: float
    problem: str | None                     # why the case failed the contract (None: it held)
    stderr: str = ""


class Timeout(BaseException):
    """A case ran past the time limit (a BaseException: fusec's own handlers must not catch it)."""


# ---- the corpus ------------------------------------------------------------------------------

def corpus() -> list[str]:
    programs = [p.read_text(encoding="utf-8") for p in sorted(EXAMPLES.glob("*.fdsl"))]
    text = FDSL_MD.read_text(encoding="utf-8")
    for lang, body in re.findall(r"^```(\w*)[^\n]*\n(.*?)^```", text, re.S | re.M):
        if lang == "fdsl" or (lang == "" and re.search(r"^\s*chain\s", body, re.M)):
            programs.append(body)
    programs += [
        "chain f(x: i32[N]) -> i32[N] { return x + 1 }\n",
        "chain g(x: f16[4, 8]) -> f16[4, 8] { return x * 2 + 0.5 }\n",
        "chain h(x: f32[M, 6]) -> f32[M, 2, 3] { return reshape(x, [M, 2, -1]) }\n",
        "chain b(x: f32[8]) -> f32[4, 8] { return broadcast_to(x, [4, 8]) }\n",
        "const k = 3\nchain c(x: f32[M, N]) -> f32[M] { return sum(x * k, axis=-1) }\n",
    ]
    return programs


# ---- mutations -------------------------------------------------------------------------------

NUMBER = re.compile(r"(?<![\w.])(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?(?![\w.])")
DIMS = re.compile(r"\b(f16|bf16|f32|f64|i32|i64|bool)\[([^\]]*)\]")
AXIS = re.compile(r"axis=(-?\d+|\[[^\]]*\])")
NAME = re.compile(r"\b[A-Za-z_]\w*\b")


def _sub_one(rng: random.Random, pattern: re.Pattern, text: str, replace) -> str:
    matches = list(pattern.finditer(text))
    if not matches:
        return text
    m = rng.choice(matches)
    return text[:m.start()] + replace(m) + text[m.end():]


def m_literal(rng, text):
    """An extreme number in place of one of the program's (mostly outside its types)."""
    def repl(m):
        pool = BIG_FLOATS if rng.random() < 0.4 else BIG_INTS
        v = rng.choice(pool)
        return ("-" + v) if rng.random() < 0.3 else v
    inside = [span for t in DIMS.finditer(text) for span in [t.span()]]
    outside = [m for m in NUMBER.finditer(text) if not any(a <= m.start() < b for a, b in inside)]
    if outside and rng.random() < 0.8:
        m = rng.choice(outside)
        return text[:m.start()] + repl(m) + text[m.end():]
    return _sub_one(rng, NUMBER, text, repl)


def m_dims(rng, text):
    def repl(m):
        dims = [d.strip() for d in m.group(2).split(",") if d.strip()]
        choice = rng.random()
        if choice < 0.3 and dims:
            dims[rng.randrange(len(dims))] = rng.choice(["99999999999999999999", "100000", "0", "-3", "1", "Q",
                                                         "1.5", "M", "N", "2147483648", "65536"])
        elif choice < 0.5:
            dims.append(rng.choice(["1", "3", "M", "100000"]))
        elif choice < 0.7 and dims:
            dims.pop(rng.randrange(len(dims)))
        else:
            dims = [rng.choice(["100000", "4096", "M", "1"]) for _ in range(rng.randint(0, 6))]
        return f"{m.group(1)}[{', '.join(dims)}]"
    return _sub_one(rng, DIMS, text, repl)


def m_axis(rng, text):
    def repl(m):
        return "axis=" + rng.choice(["-99999999999999999999", "99999999999999999999", "7", "-7", "[0, 0]", "[]",
                                     "[0, 1, 2, 3, 4]", "1.5", "true", "x", "-0", "[-1, -1]", "M"])
    out = _sub_one(rng, AXIS, text, repl)
    if out == text:         # no axis: add one to a reduction
        out = re.sub(r"\b(sum|mean|max|min|prod|softmax)\(([^()]*)\)",
                     lambda m: f"{m.group(1)}({m.group(2)}, axis={rng.choice(['5', '-99999999999999999999', '[0,0]'])})",
                     text, count=1)
    return out


def m_op(rng, text):
    names = [m for m in NAME.finditer(text) if m.group(0) in OPS]
    if names and rng.random() < 0.6:
        m = rng.choice(names)
        return text[:m.start()] + rng.choice(OPS) + text[m.end():]
    ops = [m for m in re.finditer(r"\*\*|\|>|==|!=|<=|>=|[-+*/@<>]", text)]
    if not ops:
        return text
    m = rng.choice(ops)
    return text[:m.start()] + rng.choice(OPERATORS) + text[m.end():]


def m_dtype(rng, text):
    return _sub_one(rng, re.compile(r"\b(f16|bf16|f32|f64|i32|i64|bool)\b"), text, lambda m: rng.choice(DTYPES))


def m_nest(rng, text):
    n = rng.choice([50, 300, 400, 999, 1001, 1500, 5000])
    kind = rng.choice(["sum", "paren", "neg", "minus", "list", "pow", "pipe", "const"])
    expr = {"sum": " + ".join(["x"] * n), "paren": "(" * n + "x" + ")" * n, "neg": "neg(" * n + "x" + ")" * n,
            "minus": "-" * n + "x", "list": "reshape(x, " + "[" * n + "-1" + "]" * n + ")",
            "pow": " ** ".join(["x"] * min(n, 2000)), "pipe": "x" + " |> exp" * n,
            "const": "x * " + "-" * n + "2"}[kind]
    name = re.search(r"chain \w+\((\w+)", text)
    if name:
        expr = re.sub(r"\bx\b", name.group(1), expr)
    out = re.sub(r"return [^\n}]*", "return " + expr.replace("\\", "\\\\"), text, count=1)
    return out if out != text else "chain f(x: f32[4]) -> f32[4] {\n    return " + expr + "\n}\n"


SUBSCRIPTS = ["0", "-1", "1:3", "::-1", "...", ":", "::0", "9999", "-99999999999999999999", "M", ":M", "-M:", "N:",
              "1.5", "x", "..., ...", "None", "::2", "-4:", "[0]", "true", ":, :, :, :, :", "0, 0, 0", "1:0",
              "-1:-4:-1", "k + 1", ":N", "2::3"]


def m_subscript(rng, text):
    """A subscript (often an odd one) after a name or a closing parenthesis, or a split binding."""
    if rng.random() < 0.2:
        sizes = rng.choice(["[2, 2]", "[1, -1]", "[-1, -1]", "[0, 4]", "[M, 1]", "4", "[]", "[3, 99999999999999999999]"])
        names = rng.choice(["a, b", "a, b, c", "a, a", "M, b"])
        return re.sub(r"(\n\s*)return ", lambda m: f"{m.group(1)}{names} = split(x, {sizes}, axis={rng.choice(['0', '-1', '5'])})"
                      f"{m.group(1)}return ", text, count=1)
    items = ", ".join(rng.choice(SUBSCRIPTS) for _ in range(rng.randint(1, 3)))
    spots = [m.end() for m in re.finditer(r"\b(?!chain|return|const)[A-Za-z_]\w*\b(?!\s*[(:])|\)", text)]
    if not spots:
        return text
    i = rng.choice(spots)
    return text[:i] + f"[{items}]" + text[i:]


def m_lines(rng, text):
    lines = text.split("\n")
    if len(lines) < 2:
        return text + "\n" + text
    i = rng.randrange(len(lines))
    choice = rng.random()
    if choice < 0.35:
        del lines[i]
    elif choice < 0.65:
        lines.insert(i, lines[rng.randrange(len(lines))])
    else:
        j = rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines)


def m_chars(rng, text):
    for _ in range(rng.randint(1, 4)):
        if not text:
            break
        i = rng.randrange(len(text) + 1)
        choice = rng.random()
        if choice < 0.4:
            text = text[:i] + rng.choice(PUNCT) + text[i:]
        elif choice < 0.7:
            text = text[:i] + text[i + 1:]
        elif choice < 0.85:
            text = text[:i] + rng.choice(ODD_TEXT) + text[i:]
        else:
            text = text[:i] + " " + rng.choice(TOKENS) + " " + text[i:]
    return text


def m_truncate(rng, text):
    return text[:rng.randrange(len(text) + 1)] if text else text


def m_empty(rng, text):
    return rng.choice(["", "\n", "# only a comment\n", "   \n\t\n", "# a\n# b", "const k = 1\n", ";", "\ufeff",
                       "chain", "}", "{" * 50])


UNARY = ["neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "gelu", "silu", "erf", "erfc",
         "log1p", "sin", "cos", "floor", "ceil", "reciprocal", "square"]
BINARY = ["+", "-", "*", "/", "**", "@", "==", "<", ">=", "!=", "maximum", "minimum"]
SHAPES = ["[M, N]", "[N]", "[M, 1]", "[4, 8]", "[8]", "[2, M, N]", "[1]", "[N, M]"]


def _literal(rng) -> str:
    if rng.random() < 0.15:
        return rng.choice(BIG_INTS[:4] + BIG_FLOATS[:3])
    return rng.choice(["0", "1", "2", "-1", "0.5", "-0.0", "1e-5", "3", "1e30", "65504", "1e-30", "255",
                       "2147483647", "true", "false", "1.5", "10"])


def _expr(rng, names: list[str], depth: int) -> str:
    """A random expression over `names`: often ill-typed, sometimes extreme, always grammatical."""
    if depth <= 0 or rng.random() < 0.2:
        return rng.choice(names) if rng.random() < 0.8 else _literal(rng)
    choice = rng.random()
    sub = lambda: _expr(rng, names, depth - 1)   # noqa: E731
    if choice < 0.3:
        return f"{rng.choice(UNARY)}({sub()})"
    if choice < 0.6:
        op = rng.choice(BINARY)
        return f"{op}({sub()}, {sub()})" if op.isidentifier() else f"({sub()} {op} {sub()})"
    if choice < 0.72:
        red = rng.choice(["sum", "mean", "max", "min", "prod"])
        axis = rng.choice(["", ", axis=-1", ", axis=0", ", axis=[0, 1]", ", axis=1, keepdims=true", ", keepdims=true"])
        return f"{red}({sub()}{axis})"
    if choice < 0.8:
        return f"{rng.choice(['softmax', 'log_softmax'])}({sub()}{rng.choice(['', ', axis=0', ', axis=-1'])})"
    if choice < 0.86:
        return f"where({sub()} > {sub()}, {sub()}, {sub()})"
    if choice < 0.9:
        return f"clamp({sub()}, {_literal(rng)}, {_literal(rng)})"
    if choice < 0.95:
        return f"cast({sub()}, {rng.choice(DTYPES)})"
    return rng.choice([f"reshape({sub()}, [-1])", f"transpose({sub()})", f"broadcast_to({sub()}, [3, M, N])",
                       f"permute({sub()}, [1, 0])", f"{sub()} |> exp", f"{sub()} |> sum(axis=-1)",
                       f"{sub()}[{rng.choice(SUBSCRIPTS)}]", f"concat([{sub()}, {sub()}], axis={rng.choice(['0', '-1'])})",
                       f"gather({sub()}, cast({sub()}, i64), axis={rng.choice(['0', '-1'])})",
                       f"embedding({sub()}, cast({sub()}, i32))", f"cumsum({sub()})", f"cumprod({sub()}, axis=0)",
                       f"argmax({sub()}, axis=-1)", f"argmin({sub()}, keepdims=true)"])


def m_grammar(rng, text):
    """A new chain from the grammar: random parameters, statements and results."""
    dtype = rng.choice(["f32", "f32", "f32", "f16", "f64", "i32", "i64", "bool", "bf16"])
    params = [(f"p{i}", rng.choice([dtype, rng.choice(DTYPES)]), rng.choice(SHAPES))
              for i in range(rng.randint(1, 3))]
    names = [p for p, _, _ in params]
    lines = []
    for i in range(rng.randint(0, 3)):
        lines.append(f"    v{i} = {_expr(rng, names, rng.randint(1, 4))}")
        names.append(f"v{i}")
    results = rng.randint(1, 2)
    ret = ", ".join(_expr(rng, names, rng.randint(0, 3)) for _ in range(results))
    head = ", ".join(f"{n}: {t}{shape}" for n, t, shape in params)
    body = "\n".join(lines + [f"    return {ret}"])
    declared = ["f32"] * results
    if rng.random() < 0.85:                  # mostly: declare what the body returns, as the checker infers it
        declared = _inferred(head, body, declared)
    out = f"({', '.join(declared)})" if results > 1 else declared[0]
    return f"chain g({head}) -> {out} {{\n{body}\n}}\n"


def _inferred(head: str, body: str, declared: list[str]) -> list[str]:
    """The result types the checker infers for a generated body (where it reports them)."""
    import fusec
    from fusec.dsl.diagnostics import FdslError
    text = f"chain g({head}) -> ({', '.join(declared)}) {{\n{body}\n}}\n"
    try:
        fusec.check(text)
    except FdslError as e:
        lines = body.split("\n")
        ret_line = len(lines) + 1
        found = [d for d in e.diagnostics if d.span is not None and d.span.line == ret_line]
        for d in found:
            m = re.match(r"returns (\S+(?:\[[^\]]*\])?) but the chain declares", d.message)
            if m:
                col = d.span.col
                before = lines[-1][:col - 1].count(",") - lines[-1][:col - 1].count("(") + \
                    lines[-1][:col - 1].count(")")
                i = min(max(0, before), len(declared) - 1) if len(declared) > 1 else 0
                declared[i] = m.group(1)
    return declared


MUTATORS = {"literal": m_literal, "dims": m_dims, "axis": m_axis, "op": m_op, "dtype": m_dtype, "nest": m_nest,
            "lines": m_lines, "chars": m_chars, "truncate": m_truncate, "empty": m_empty, "grammar": m_grammar,
            "subscript": m_subscript}


def to_bytes(rng, text: str, family: str) -> bytes:
    if family != "bytes":
        return text.encode("utf-8")
    choice = rng.random()
    if choice < 0.2:
        return text.encode(rng.choice(["utf-16", "utf-16-le", "utf-16-be", "utf-32"]))
    if choice < 0.35:
        return b"\xef\xbb\xbf" + text.encode("utf-8")
    if choice < 0.45:
        return text.encode("latin-1", errors="replace") + "é".encode("latin-1")
    data = bytearray(text.encode("utf-8"))
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(data) + 1)
        data[i:i] = rng.choice(ODD_BYTES)
    if rng.random() < 0.3:
        data = data.replace(b"\n", b"\r\n")
    return bytes(data)


# ---- command lines ---------------------------------------------------------------------------

def symbols(text: str) -> list[str]:
    out = []
    for m in DIMS.finditer(text):
        out += [d.strip() for d in m.group(2).split(",") if d.strip().isidentifier()]
    return list(dict.fromkeys(out)) or ["M"]


def chains_of(text: str) -> list[str]:
    return re.findall(r"chain\s+(\w+)", text) or ["f"]


def odd_bind(rng, syms: list[str]) -> list[str]:
    s = rng.choice(syms)
    choice = rng.random()
    if choice < 0.3:
        return ["--bind", f"{s}={rng.choice(BIND_VALUES)}"]
    if choice < 0.45:
        return ["--bind", f"{s}=4,{s}=5"]
    if choice < 0.6:
        return ["--bind", f"{s.lower() if s.lower() != s else s.upper()}=4"]
    if choice < 0.7:
        return ["--bind", rng.choice(["=4", f"{s}=", f"{s}", ",", f"{s}=4,,", "4=4", f"{s}=4=4"])]
    if choice < 0.8:
        return ["--bind", f"{s}=3", "--bind", f"{s}=3"]
    return ["--bind", ",".join(f"{x}={rng.choice(['1', '2', '3', '5'])}" for x in syms)]


def odd_flags(rng, text: str) -> list[str]:
    choice = rng.random()
    if choice < 0.15:
        return ["--seed", rng.choice(["-1", "abc", "99999999999999999999999", "1.5", "", "\u00b2", "0"])]
    if choice < 0.3:
        return ["--max-memory", rng.choice(["0", "abc", "1k", "1", "-5M", "1e3", "10P", "99999999999T", "2G"])]
    if choice < 0.45:
        return ["--chain", rng.choice(chains_of(text) + ["nosuch", "", "f" * 300])]
    if choice < 0.55:
        return [rng.choice(["--explain", "--kernel-report", "--autotune", "--no-fuse", "--locations"])]
    if choice < 0.65:
        return ["--emit", rng.choice(["ast", "typed", "bogus", "plan", ""])]
    if choice < 0.72:
        return ["--disable-pass", rng.choice(["cse", "nope"]), "--emit", "typed"]
    if choice < 0.8:
        return ["--hw", rng.choice(["h200", "zzz", "CPU"]), "--emit", "ast"]
    if choice < 0.88:
        return ["--save", rng.choice(["DIR", "DIR/out.npz", "DIR/new/sub/out.npz", "/proc/nope.npz",
                                      "DIR/prog.fdsl/out.npz"])]
    if choice < 0.95:
        return ["--report", rng.choice(["DIR", "DIR/r.json", "/proc/nope.json", "DIR/prog.fdsl/r.json"])]
    return [rng.choice(["--dump-dir", "--plot"]), rng.choice(["DIR/dump", "DIR/prog.fdsl", "DIR/prog.fdsl/sub",
                                                              "/proc/nope"])] + rng.choice([[], ["--emit", "ast"]])


# ---- --inputs and artifacts --------------------------------------------------------------------

def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def odd_inputs(rng, text: str) -> bytes:
    chain = rng.choice(chains_of(text))
    params = re.findall(r"(\w+)\s*:\s*(?:f16|bf16|f32|f64|i32|i64|bool)", text)
    arg = rng.choice(params) if params else "x"
    choice = rng.random()
    good = np.ones((4, 8), np.float32)
    if choice < 0.1:
        return b"not a zip at all"
    if choice < 0.2:
        data = npz_bytes({f"{chain}/in/{arg}": good})
        return data[:rng.randrange(1, len(data))]
    if choice < 0.3:
        return npz_bytes({f"{chain}z/in/{arg}": good})
    if choice < 0.4:
        return npz_bytes({f"{chain}/out/0": good})
    if choice < 0.5:
        return npz_bytes({f"{chain}/in/{arg}": good, f"{chain}/in/zzz": good})
    if choice < 0.6:
        return npz_bytes({"x": good, "a/b/c/d": good})
    if choice < 0.7:
        return npz_bytes({f"{chain}/in/{arg}": rng.choice([np.ones((0, 8), np.float32), np.ones((4, 8), np.int8),
                                                           np.array(["a", "b"]), np.ones(3, np.complex64),
                                                           np.ones((4, 8), ">f4"), np.float32(1.0),
                                                           np.ones((4, 8, 2, 2), np.float64)])})
    if choice < 0.8:
        return npz_bytes({f"{chain}/in/{p}": np.ones((4, 8), np.float32) for p in params})
    if choice < 0.9:
        buf = io.BytesIO()
        np.savez(buf, **{f"{chain}/in/{arg}": np.array([{"a": 1}], dtype=object)})
        return buf.getvalue()
    data = bytearray(npz_bytes({f"{chain}/in/{p}": np.ones((4, 8), np.float32) for p in params}))
    for _ in range(8):
        data[rng.randrange(len(data))] = rng.randrange(256)
    return bytes(data)


_ARTIFACT: dict | None = None


def artifact_files() -> dict[str, bytes] | None:
    """A small cpu artifact (compiled once per process; None where it cannot be built here)."""
    global _ARTIFACT
    if _ARTIFACT is None:
        from fusec.cli import main
        with tempfile.TemporaryDirectory(prefix="fusec-fuzz-") as tmp:
            out = Path(tmp) / "art"
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                rc = main(["compile", str(EXAMPLES / "softmax.fdsl"), "-o", str(out), "--target", "cpu",
                           "--bind", "M=4,N=8", "--chain", "softmax_rows"])
            _ARTIFACT = {p.name: p.read_bytes() for p in out.iterdir()} if rc == 0 else {}
    return _ARTIFACT or None


def odd_artifact(rng, files: dict[str, bytes]) -> dict[str, bytes]:
    files = dict(files)
    name = rng.choice(sorted(files))
    choice = rng.random()
    if choice < 0.25:
        del files[name]
    elif choice < 0.5:
        data = bytearray(files[name])
        for _ in range(rng.randint(1, 5)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        files[name] = bytes(data)
    elif choice < 0.65:
        files[name] = files[name][:rng.randrange(len(files[name]))]
    else:
        m = json.loads(files["manifest.json"])
        edit = rng.choice(["list", "format", "binding", "target", "chains", "files", "host", "module", "drop"])
        if edit == "list":
            m = [1, 2]
        elif edit == "format":
            m = {"format": rng.choice([1, 3, "2", None])}
        elif edit == "binding":
            m["chains"]["softmax_rows"]["binding"]["M"] = rng.choice(["four", 0, -1, 5, 2.5, None, True])
        elif edit == "target":
            m["target"] = rng.choice(["gpu", "", 7, "reference"])
        elif edit == "chains":
            m["chains"] = rng.choice([{}, [], {"nosuch": m["chains"]["softmax_rows"]}])
        elif edit == "files":
            m["files"] = {"../etc/passwd": "sha256:0", **m["files"]}
        elif edit == "host":
            m["chains"]["softmax_rows"]["builds"]["fused"]["host"] = rng.choice(["no such", "nope", 3])
        elif edit == "module":
            m["chains"]["softmax_rows"]["builds"]["fused"]["module"] = rng.choice(["../x.py", "nope.py", 3])
        else:
            m.pop(rng.choice(sorted(m)))
        files["manifest.json"] = json.dumps(m).encode()
    return files


# ---- generating and running cases --------------------------------------------------------------

FAMILY_WEIGHTS = {"grammar": 14, "literal": 10, "dims": 9, "axis": 7, "op": 8, "dtype": 6, "nest": 7, "lines": 7, "chars": 9,
                  "truncate": 5, "empty": 3, "bytes": 7, "bind": 9, "flags": 8, "inputs": 6, "paths": 2,
                  "artifact": 3, "subscript": 7}


def make_case(seed: int, index: int, programs: list[str]) -> Case:
    rng = random.Random(f"{seed}:{index}")
    family = rng.choices(list(FAMILY_WEIGHTS), weights=list(FAMILY_WEIGHTS.values()))[0]
    text = rng.choice(programs)
    if family == "grammar":
        text = m_grammar(rng, text)
        if rng.random() < 0.3:
            text = MUTATORS[rng.choice(["literal", "dims", "axis", "op", "dtype"])](rng, text)
    elif family in MUTATORS:
        text = MUTATORS[family](rng, text)
        for _ in range(rng.choice([0, 0, 1, 2])):           # sometimes a second or third mutation
            text = MUTATORS[rng.choice(["literal", "dims", "axis", "op", "dtype", "lines", "chars"])](rng, text)
    elif family == "bytes":
        text = MUTATORS[rng.choice(["literal", "chars", "lines"])](rng, text) if rng.random() < 0.3 else text
    argv = ["FILE", "--target", "reference", "--max-memory", MEMORY]
    syms = symbols(text)
    if family == "bind":
        argv += odd_bind(rng, syms)
    elif rng.random() < 0.5:
        argv += ["--bind", ",".join(f"{s}={rng.choice([1, 2, 3, 4, 8])}" for s in syms)]
    if family == "flags":
        argv += odd_flags(rng, text)
    case = Case(index, family, to_bytes(rng, text, family), argv)
    if family == "inputs":
        case.files["in.npz"] = odd_inputs(rng, text)
        case.argv += ["--inputs", "DIR/in.npz"]
    if family == "paths":
        case.filename = rng.choice(["p{0}.fdsl", "{", "x}{.fdsl", "a b{c}.fdsl", "chain f() {.fdsl"])
        choice = rng.random()
        if choice < 0.3:
            case.argv = ["test", "FILE"]
        elif choice < 0.5:                  # an -o that cannot be an artifact: refused before compiling
            case.files["file"] = b""
            case.argv = ["compile", "FILE", "--target", "cpu", "--max-memory", MEMORY,
                         "-o", rng.choice(["FILE", "DIR", "DIR/file", "DIR/file/sub"])]
    if family == "artifact":
        files = artifact_files()
        if files is None:
            return make_case(seed, index + 10 ** 9, programs)      # no MLIR here: another family
        for name, data in odd_artifact(rng, files).items():
            case.files[f"art/{name}"] = data
        case.argv = ["run", "DIR/art", "--max-memory", MEMORY]
    return case


def _argv(case: Case, directory: Path) -> list[str]:
    path = str(directory / case.filename)
    return [path if a == "FILE" else a.replace("DIR", str(directory)) for a in case.argv]


def _contract(rc, out: str, err: str) -> str | None:
    if rc not in (0, 1, 3, 4):                  # 4: a fused kernel failed and fell back (right outputs)
        return f"exit {rc}"
    if "Traceback (most recent call last)" in err or "Traceback (most recent call last)" in out:
        return "a traceback"
    if "internal error" in err:
        return "an internal error message"
    if rc == 1 and not re.search(r"(^|\n)(\S.*:\d+:\d+: error: |fusec: error: )", err):
        return "exit 1 without an error: line"
    return None


def run_case(case: Case, timeout_s: float) -> Result:
    from fusec.cli import main
    with tempfile.TemporaryDirectory(prefix="fusec-fuzz-") as tmp:
        directory = Path(tmp)
        (directory / case.filename).write_bytes(case.program)
        for name, data in case.files.items():
            (directory / name).parent.mkdir(parents=True, exist_ok=True)
            (directory / name).write_bytes(data)
        argv = _argv(case, directory)
        out, err = io.StringIO(), io.StringIO()

        def expire(signum, frame):
            raise Timeout()
        previous = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        t0 = time.perf_counter()
        rc, problem = None, None
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = main(argv)
        except Timeout:
            problem = f"a timeout ({timeout_s:g} s)"
        except SystemExit as e:
            rc = e.code
        except BaseException as e:               # anything main let out is a failure of the contract
            problem = f"{type(e).__name__} escaped main: {e}"
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        seconds = time.perf_counter() - t0
        if problem is None:
            problem = _contract(rc, out.getvalue(), err.getvalue())
        return Result(case, rc, seconds, problem, err.getvalue()[-4000:])


def keep(result: Result, directory: Path) -> Path:
    d = directory / f"case-{result.case.index}"
    d.mkdir(parents=True, exist_ok=True)
    (d / result.case.filename).write_bytes(result.case.program)
    for name, data in result.case.files.items():
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_bytes(data)
    (d / "argv.json").write_text(json.dumps(_argv(result.case, d)))
    (d / "stderr.txt").write_text(result.stderr)
    return d


def fuzz(n: int, seed: int = 0, timeout_s: float = 20.0, keep_dir: Path | None = None, progress=None) -> dict:
    """Run cases 0..n-1 of `seed`; returns the figures (and the failing results)."""
    programs = corpus()
    t0 = time.perf_counter()
    codes: Counter = Counter()
    families: dict[str, Counter] = {}
    failures: list[Result] = []
    slowest = (0.0, -1)
    for i in range(n):
        result = run_case(make_case(seed, i, programs), timeout_s)
        codes[str(result.rc) if result.problem is None or result.rc is not None else "none"] += 1
        families.setdefault(result.case.family, Counter())[str(result.rc)] += 1
        slowest = max(slowest, (result.seconds, i))
        if result.problem:
            failures.append(result)
            if keep_dir is not None:
                keep(result, keep_dir)
        if progress and (i + 1) % progress == 0:
            print(f"  {i + 1}/{n} cases, {len(failures)} failing, {time.perf_counter() - t0:.0f} s", flush=True)
    problems = Counter(r.problem.split(":")[0] for r in failures)
    return {"cases": n, "seed": seed, "seconds": time.perf_counter() - t0, "exit_codes": dict(sorted(codes.items())),
            "families": {k: dict(sorted(v.items())) for k, v in sorted(families.items())},
            "internal_errors": sum(1 for r in failures if r.rc == 2),
            "tracebacks": sum(1 for r in failures if r.problem == "a traceback"),
            "timeouts": sum(1 for r in failures if r.problem.startswith("a timeout")),
            "failing": len(failures), "problems": dict(problems),
            "slowest_s": round(slowest[0], 3), "slowest_case": slowest[1], "failures": failures}


# ---- compiled targets (--targets) --------------------------------------------------------------
#
# A case whose program passes the checker becomes a compiled case: the same program with a clean
# command line (one chain, tiny sizes, a seed, sometimes --no-fuse, never --fallback), run first
# on the reference (the gate: the checker and the sizes must accept it) and then on each compiled
# target, where fusec checks its outputs against the reference itself (runtime/compare.py). Each
# compiled run happens in a worker process, so that a crash or a hang in a kernel (native code
# that no signal interrupts) is a failure of that case, not the end of the run.

COMPILED_TARGETS = ("cpu", "cuda-sim", "mlir-jit")
TINY = (1, 2, 3, 4, 5)                  # the sizes a compiled case binds (every symbol)
WORKER_MAX_RSS_MB = 3000                 # a worker is replaced once it has grown past this
WALL_FACTOR = 5                          # a run's wall-clock limit: this many times its CPU-time limit
SIMULATED_ELEMENTS = 1 << 14             # cuda-sim runs kernels as Python: larger cases skip it


@dataclass
class CompiledCase:
    index: int
    family: str                          # the family of the case it came from
    program: bytes
    chain: str
    bind: dict[str, int]
    seed: int
    fuse: bool
    elements: int = 0                    # of the chain's inputs and outputs at `bind`

    def argv(self, target: str) -> list[str]:
        argv = ["FILE", "--target", target, "--max-memory", MEMORY, "--chain", self.chain, "--seed", str(self.seed),
                "--no-fallback", "-q"]
        if self.bind:
            argv += ["--bind", ",".join(f"{k}={v}" for k, v in self.bind.items())]
        return argv + ([] if self.fuse else ["--no-fuse"])

    def key(self) -> tuple:
        return (self.program, self.chain, tuple(sorted(self.bind.items())), self.seed, self.fuse)


def compiled_case(case: Case, seed: int = 0) -> CompiledCase | None:
    """The compiled case of a fuzz case: None where its program does not pass the checker or has
    no chain (it then only runs on the reference, as before)."""
    import fusec
    try:
        text = case.program.decode("utf-8")
        typed = fusec.check(text)
    except Exception:               # noqa: BLE001 - any refusal: not a program to compile
        return None
    if not typed.chains:
        return None
    rng = random.Random(f"compiled:{seed}:{zlib.crc32(case.program)}")   # one compiled case per program
    chain = rng.choice(typed.chains)
    bind = {s: rng.choice(TINY) for s in chain.symbols}
    return CompiledCase(case.index, case.family, case.program, chain.name, bind, rng.randrange(1000),
                        rng.random() >= 0.2, _elements(chain, bind))


def _elements(chain, bind: dict[str, int]) -> int:
    try:
        types = [p.type for p in chain.param_nodes] + list(chain.output_types)
        return sum(int(np.prod(t.concrete(bind))) for t in types)
    except Exception:                   # noqa: BLE001 - a size the checker left open: let the gate say
        return 0


def too_large(cc: CompiledCase, target: str) -> bool:
    """A case too large to simulate in the time limit: fixed sizes such as 768 x 3072 stay as
    written (only the symbols are bound tiny), and the simulator runs each thread in Python."""
    return target == "cuda-sim" and cc.elements > SIMULATED_ELEMENTS


_PLANNING_DIR: str | None = None


def planning_cache_dir() -> str | None:
    """A cache directory whose cpu profile is the test suite's snapshot (tests/data/cpu-profile.json,
    as tests/conftest.py does), so that a case plans the same way on every run and no worker
    measures the machine first (10 s, more on a busy one); FUSEC_TEST_MEASURED_CPU=1 keeps the
    user's cache directory, as in the suite. Inside the suite, its directory is used."""
    global _PLANNING_DIR
    if os.environ.get("FUSEC_TEST_MEASURED_CPU") == "1" or "fusec-tests-" in os.environ.get("FUSEC_CACHE_DIR", ""):
        return None
    if _PLANNING_DIR is None:
        import atexit
        import shutil
        from fusec.compiler.plan.hardware import profile_key
        root = Path(tempfile.mkdtemp(prefix="fusec-fuzz-cache-"))
        atexit.register(shutil.rmtree, root, True)
        profile = json.loads((ROOT / "tests" / "data" / "cpu-profile.json").read_text())
        (root / "hardware-cpu.json").write_text(json.dumps({"key": profile_key(), "profile": profile}))
        _PLANNING_DIR = str(root)
    return _PLANNING_DIR


class Worker:
    """A child process that runs `fusec.cli.main(argv)` for each request (JSON lines on its stdin,
    replies on a pipe of their own: whatever fusec or Numba write to the process's stdout and
    stderr goes to a log file, not into the replies)."""

    def __init__(self):
        self.proc = None
        self.started = 0

    def _start(self):
        r, w = os.pipe()
        self.log = tempfile.TemporaryFile()
        env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", FUSEC_NO_CACHE="1", PYTHONPATH=str(ROOT))
        if (planning := planning_cache_dir()) is not None:
            env["FUSEC_CACHE_DIR"] = planning
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker", str(w)],
                                     stdin=subprocess.PIPE, stdout=self.log, stderr=self.log, pass_fds=(w,),
                                     env=env, cwd=str(ROOT))
        os.close(w)
        self.replies = os.fdopen(r, "r")
        self.started += 1

    def _cpu_seconds(self) -> float:
        """The worker's CPU time so far (user and system; 0 where /proc cannot tell)."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return 0.0

    def close(self):
        if self.proc is not None:
            with contextlib.suppress(Exception):
                self.proc.stdin.close()
            with contextlib.suppress(Exception):
                self.proc.wait(timeout=10)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.replies.close()
            self.log.close()
            self.proc = None

    def run(self, argv: list[str], timeout_s: float) -> dict:
        """{"rc", "out", "err", "seconds", "problem" (None: it ended; else why not), "rss_mb"}."""
        if self.proc is None:
            self._start()
        t0 = time.perf_counter()
        self.proc.stdin.write((json.dumps(argv) + "\n").encode())
        self.proc.stdin.flush()
        cpu0 = self._cpu_seconds()
        # a hang is a run past `timeout_s` of the worker's own CPU time (on a machine that others
        # share, the wall clock says more about them), or past WALL_FACTOR times it on the clock
        while True:
            ready, _, _ = select.select([self.replies], [], [], 1.0)
            wall = time.perf_counter() - t0
            if ready or self._cpu_seconds() - cpu0 > timeout_s or wall > WALL_FACTOR * timeout_s:
                break
        line = self.replies.readline() if ready else None
        if not line:
            if ready:                            # the worker died: a crash (a signal, or exit)
                self.proc.wait()
                why = f"a crash (worker ended with {self.proc.returncode})"
            else:
                self.proc.kill()
                why = f"a timeout ({timeout_s:g} s)"
            self.log.seek(0)
            tail = self.log.read()[-3000:].decode("utf-8", "replace")
            self.close()
            return {"rc": None, "out": "", "err": tail, "seconds": time.perf_counter() - t0, "problem": why}
        reply = json.loads(line)
        if reply.get("rss_mb", 0) > WORKER_MAX_RSS_MB:
            self.close()
        return reply


def worker_main(fd: int) -> int:
    """The worker's loop (python tests/fuzz.py --worker FD)."""
    import resource
    replies = os.fdopen(fd, "w")
    for line in sys.stdin:
        argv = json.loads(line)
        if argv[:1] == ["--fuzz-selftest"]:  # the harness's own test: a hang, a busy loop or a crash
            if argv[1] == "spin":
                while True:
                    pass
            time.sleep(3600) if argv[1] == "hang" else os.abort()
        out, err = io.StringIO(), io.StringIO()
        t0 = time.perf_counter()
        rc, problem = None, None
        try:
            from fusec.cli import main as fusec_main
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = fusec_main(argv)
        except SystemExit as e:
            rc = e.code
        except BaseException as e:           # noqa: BLE001 - anything main let out breaks the contract
            problem = f"{type(e).__name__} escaped main: {e}"
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        replies.write(json.dumps({"rc": rc, "out": out.getvalue()[-4000:], "err": err.getvalue()[-4000:],
                                  "seconds": time.perf_counter() - t0, "problem": problem, "rss_mb": rss}) + "\n")
        replies.flush()
    return 0


def compiled_contract(rc, out: str, err: str) -> str | None:
    """The contract of a compiled run: the base contract, and no numerics mismatch (exit 3) and no
    fallback (exit 4: it cannot happen with --no-fallback)."""
    if rc == 3:
        return "a mismatch (exit 3)"
    if rc == 4:
        return "a fallback (exit 4)"
    return _contract(rc, out, err)


def failure_kind(problem: str | None, err: str) -> str | None:
    """What a minimised program must keep failing with: the problem and, for an internal error,
    the exception's type (and stage); for a mismatch, nothing more."""
    if problem is None:
        return None
    if problem.startswith("exit 2") or problem == "an internal error message":
        m = re.search(r"internal error(?: in stage (\S+))?: (\w+)", err)
        return f"internal error {m.group(2)}" + (f" in {m.group(1)}" if m.group(1) else "") if m else "exit 2"
    if problem.startswith("a timeout") or problem.startswith("a crash"):
        return problem.split(" (")[0]
    return problem.split(":")[0]


@dataclass
class CompiledResult:
    case: CompiledCase
    target: str
    rc: int | None
    seconds: float
    problem: str | None
    stderr: str = ""
    kind: str | None = None


def run_compiled_target(cc: CompiledCase, target: str, worker: "Worker", timeout_s: float) -> CompiledResult:
    with tempfile.TemporaryDirectory(prefix="fusec-cfuzz-") as tmp:
        path = Path(tmp) / "prog.fdsl"
        path.write_bytes(cc.program)
        argv = [str(path) if a == "FILE" else a for a in cc.argv(target)]
        reply = worker.run(argv, timeout_s)
    problem = reply["problem"] or compiled_contract(reply["rc"], reply["out"], reply["err"])
    err = reply["err"].replace(str(path), "prog.fdsl")
    return CompiledResult(cc, target, reply["rc"], reply["seconds"], problem, err, failure_kind(problem, err))


def gate(cc: CompiledCase, timeout_s: float) -> Result:
    """The compiled case on the reference, in this process: exit 0 lets it go on to the targets."""
    case = Case(cc.index, cc.family, cc.program, cc.argv("reference"))
    return run_case(case, timeout_s)


# ---- minimising a failing program --------------------------------------------------------------

def _split_top(text: str, sep: str = ",") -> list[tuple[int, int]]:
    """Spans of `text`'s parts between top-level separators (outside (), [] and {})."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append((start, i))
            start = i + 1
    parts.append((start, len(text)))
    return parts


def _closing(text: str, i: int) -> int | None:
    """The index of the bracket closing the one at text[i]."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    depth = 0
    for j in range(i, len(text)):
        if text[j] in pairs:
            depth += 1
        elif text[j] in ")]}":
            depth -= 1
            if depth == 0:
                return j
    return None


BINOPS = re.compile(r"\s(\*\*|\|>|==|!=|<=|>=|[-+*/@<>])\s")


def _operands(inner: str) -> list[str]:
    """The operands of a parenthesised binary expression's top level ('a + b * c' -> a, b * c...)."""
    pieces, ops = _operand_list(inner)
    return [p for p in pieces if p] if ops else []


def _sites(text: str) -> list[tuple[int, int]]:
    """Spans of expressions: call arguments, parenthesised groups, right-hand sides and results."""
    out = []
    for m in re.finditer(r"\(", text):
        close = _closing(text, m.start())
        if close is not None:
            out += [(m.start() + 1 + a, m.start() + 1 + b) for a, b in _split_top(text[m.start() + 1:close])]
    for m in re.finditer(r"^\s*(?:return\b|\w+(?:\s*,\s*\w+)*\s*=(?!=))([^\n]*)", text, re.M):
        out += [(m.start(1) + a, m.start(1) + b) for a, b in _split_top(m.group(1))]
    return out


def _operand_list(inner: str) -> tuple[list[str], list[str]]:
    """A binary expression's top-level operands and the operators between them."""
    cuts, depth, last = [], 0, 0
    for m in BINOPS.finditer(inner):
        before = inner[last:m.start()]
        depth += sum(before.count(c) for c in "([{") - sum(before.count(c) for c in ")]}")
        last = m.start()
        if depth == 0:
            cuts.append(m)
    pieces, ops, start = [], [], 0
    for m in cuts:
        pieces.append(inner[start:m.start()].strip())
        ops.append(m.group(1))
        start = m.end()
    pieces.append(inner[start:].strip())
    return pieces, ops


def ddmin_operands(text: str, interesting, budget) -> None:
    """Delta debugging inside long expressions (`x |> exp |> exp ...`, `a + b + ...`): drop
    chunks of operands (each with its operator) while the failure persists."""
    for a, b in sorted(_sites(text), key=lambda ab: ab[0] - ab[1]):
        pieces, ops = _operand_list(text[a:b])
        if len(pieces) < 8 or not all(pieces):
            continue
        lead = " " if text[a:a + 1] == " " else ""
        n = 2
        while len(pieces) >= 2 and budget():
            chunk = max(1, len(pieces) // n)
            for start in range(1, len(pieces), chunk):       # the first operand stays
                cand_p, cand_o = pieces[:start] + pieces[start + chunk:], ops[:start - 1] + ops[start - 1 + chunk:]
                expr = cand_p[0] + "".join(f" {o} {q}" for o, q in zip(cand_o, cand_p[1:]))
                if interesting(text[:a] + lead + expr + text[b:]):
                    return                                  # the text moved: the caller starts again
            if chunk == 1:
                break
            n = min(len(pieces), n * 2)
        return


def expression_candidates(text: str) -> list[str]:
    """Smaller programs: a call replaced by one of its arguments, an expression by one of its
    operands, a parenthesis, keyword argument, subscript or unused parameter dropped, a
    statement's name replaced by a parameter."""
    out = []
    for m in re.finditer(r"([A-Za-z_]\w*)?\(", text):
        open_at = m.end() - 1
        close = _closing(text, open_at)
        if close is None or m.group(1) == "chain" or re.search(r"chain\s+\w*\s*$", text[:m.start()]):
            continue
        inner = text[open_at + 1:close]
        if m.group(1):                                  # a call: each positional argument in its place
            for a, b in _split_top(inner):
                arg = inner[a:b].strip()
                if arg and not re.match(r"\w+\s*=(?!=)", arg):
                    out.append(text[:m.start()] + arg + text[close + 1:])
            for a, b in _split_top(inner):              # a keyword argument dropped
                if re.match(r"\s*\w+\s*=(?!=)", inner[a:b]):
                    rest = (inner[:a].rstrip().rstrip(",") + inner[b:]) if a else inner[b + 1:]
                    out.append(text[:open_at + 1] + rest + text[close:])
        elif "," not in inner:                          # a parenthesis dropped
            out.append(text[:open_at] + inner + text[close + 1:])
    for a, b in _sites(text):                           # an expression replaced by one of its operands
        for piece in _operands(text[a:b]):
            out.append(text[:a] + (" " if text[a:a + 1] == " " else "") + piece + text[b:])
    for m in re.finditer(r"(?<=[\w)\]])\[", text):      # a subscript dropped (not a type's shape)
        if re.search(r"(f16|bf16|f32|f64|i32|i64|bool)$", text[:m.start()]):
            continue
        close = _closing(text, m.start())
        if close is not None:
            out.append(text[:m.start()] + text[close + 1:])
    params = list(re.finditer(r"(\w+)\s*:\s*(?:f16|bf16|f32|f64|i32|i64|bool)\b(\[[^\]]*\])?", text))
    for m in params:                                    # a parameter dropped (the gate refuses a used one)
        a, b = m.span()
        rest = text[b:]
        if re.match(r"\s*,", rest):
            out.append(text[:a] + re.sub(r"^\s*,\s*", "", rest))
        elif re.search(r",\s*$", text[:a]):
            out.append(re.sub(r",\s*$", "", text[:a]) + rest)
    names = [m.group(1) for m in params]
    for m in re.finditer(r"^(\s*)(\w+)\s*=(?!=)[^\n]*\n", text, re.M):   # a statement gone, its name a parameter's
        after = text[m.end():]
        for p in names[:2]:
            out.append(text[:m.start()] + re.sub(rf"\b{m.group(2)}\b", p, after))
    return [c for c in dict.fromkeys(out) if c != text]


def fix_declared(text: str) -> str:
    """`text` with each chain's declared result types set to what its body returns (where the
    checker's only complaint is that they differ): a smaller body keeps passing the checker."""
    import fusec
    from fusec.dsl.diagnostics import FdslError
    for _ in range(4):
        try:
            fusec.check(text)
            return text
        except FdslError as e:
            diags = [d for d in e.diagnostics if d.span is not None]
        except Exception:               # noqa: BLE001
            return text
        lines = text.split("\n")
        changed = False
        for d in diags:
            m = re.match(r"returns (.+) but the chain declares (.+)$", d.message)
            if not m:
                continue
            ret_line = lines[d.span.line - 1]
            at = ret_line.find("return")
            if at < 0:
                continue
            spans = _split_top(ret_line[at + 6:])
            k = sum(1 for a, _ in spans if at + 6 + a < d.span.col - 1) - 1
            header_at = max(i for i in range(d.span.line) if re.match(r"\s*chain\s", lines[i]) or i == 0)
            head = "\n".join(lines[header_at:d.span.line])
            arrow = re.search(r"->\s*", head)
            brace = head.find("{", arrow.end()) if arrow else -1
            if brace < 0:
                continue
            declared = head[arrow.end():brace].strip()
            types = ([declared[1:-1][a:b].strip() for a, b in _split_top(declared[1:-1])]
                     if declared.startswith("(") else [declared])
            k = min(max(k, 0), len(types) - 1)
            types[k] = m.group(1)
            new = f"({', '.join(types)}) " if len(types) > 1 else types[0] + " "
            head = head[:arrow.end()] + new + head[brace:]
            lines[header_at:d.span.line] = head.split("\n")
            changed = True
            break
        if not changed:
            return text
        text = "\n".join(lines)
    return text


def ddmin_lines(text: str, interesting, budget) -> str:
    """Delta debugging over the program's lines: drop chunks while the failure persists."""
    lines = text.split("\n")
    n = 2
    while len(lines) >= 2 and budget():
        chunk = max(1, len(lines) // n)
        reduced = False
        for start in range(0, len(lines), chunk):
            if not budget():
                break
            cand = lines[:start] + lines[start + chunk:]
            if cand and interesting("\n".join(cand)):
                lines, n, reduced = cand, max(n - 1, 2), True
                break
        if not reduced:
            if chunk == 1:
                break
            n = min(len(lines), n * 2)
    return "\n".join(lines)


def still_fails(target: str, kind: str, worker: Worker, timeout_s: float):
    """The minimiser's test: a candidate passes the gate (the checker, on the reference) and
    fails on `target` with the same kind of failure."""
    def fails(c: CompiledCase) -> bool:
        if target == "reference":
            r = gate(c, timeout_s)
            return failure_kind(r.problem, r.stderr) == kind
        return gate(c, timeout_s).rc == 0 and run_compiled_target(c, target, worker, timeout_s).kind == kind
    return fails


def _rebind(cc: CompiledCase) -> CompiledCase:
    """`cc` binding only the symbols its chain still has (a smaller program may have fewer)."""
    import fusec
    from dataclasses import replace
    try:
        chain = next(c for c in fusec.check(cc.program.decode()).chains if c.name == cc.chain)
    except Exception:                   # noqa: BLE001 - the gate refuses it anyway
        return cc
    bind = {s: cc.bind.get(s, 1) for s in chain.symbols}
    return replace(cc, bind=bind, elements=_elements(chain, bind))


def minimise(cc: CompiledCase, fails, max_tries: int = 200, max_seconds: float = 600.0) -> tuple[CompiledCase, int]:
    """The smallest program (and sizes) found for which `fails` (still_fails) holds: lines
    dropped by delta debugging, then expressions replaced by their operands and statements by
    parameters, then sizes, until nothing smaller fails. Returns the case and the number of
    candidates tried."""
    from dataclasses import replace
    t0 = time.perf_counter()
    tried: dict[tuple, bool] = {}

    def budget() -> bool:
        return len(tried) < max_tries and time.perf_counter() - t0 < max_seconds

    def check(c: CompiledCase) -> bool:
        if c.key() not in tried:
            tried[c.key()] = fails(c)
        return tried[c.key()]

    def interesting(text: str) -> bool:
        nonlocal cc
        cand = _rebind(replace(cc, program=fix_declared(text).encode()))
        if len(cand.program) > len(cc.program) + 40 or not check(cand):
            return False
        cc = cand
        return True

    changed = True
    while changed and budget():
        before = cc.program
        ddmin_lines(cc.program.decode(), interesting, budget)
        for _ in range(64):                               # long expressions, halved while they fail
            size = len(cc.program)
            ddmin_operands(cc.program.decode(), interesting, budget)
            if len(cc.program) >= size or not budget():
                break
        progress = True
        while progress and budget():
            progress = False
            for cand in sorted(expression_candidates(cc.program.decode()), key=len):
                if not budget():
                    break
                if len(cand) < len(cc.program) and interesting(cand):
                    progress = True
                    break
        changed = cc.program != before
    for sym in list(cc.bind):                        # sizes: as small as still fails
        for v in sorted(set(TINY) - {cc.bind[sym]}):
            if v >= cc.bind[sym] or not budget():
                break
            cand = replace(cc, bind={**cc.bind, sym: v})
            if check(cand):
                cc = cand
                break
    if cc.fuse is False and budget() and check(replace(cc, fuse=True)):
        cc = replace(cc, fuse=True)
    return cc, len(tried)


def keep_compiled(r: CompiledResult, directory: Path, minimised: CompiledCase | None = None) -> Path:
    """A failing compiled case in DIR/compiled-INDEX-TARGET: prog.fdsl, argv.json, stderr.txt, and
    min.fdsl with min-argv.json where it was minimised."""
    d = directory / f"compiled-{r.case.index}-{r.target}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "prog.fdsl").write_bytes(r.case.program)
    (d / "argv.json").write_text(json.dumps(["prog.fdsl" if a == "FILE" else a for a in r.case.argv(r.target)]))
    (d / "stderr.txt").write_text(f"{r.problem} [{r.kind}]\n{r.stderr}")
    if minimised is not None:
        (d / "min.fdsl").write_bytes(minimised.program)
        argv = minimised.argv(r.target)
        (d / "min-argv.json").write_text(json.dumps(["min.fdsl" if a == "FILE" else a for a in argv]))
        (d / "test_regression.py").write_text(REGRESSION.format(
            target=r.target, fn=re.sub(r"\W", "_", r.target), kind=r.kind, index=r.case.index, program=minimised.program.decode().rstrip("\n"),
            argv=json.dumps(argv[1:])))
    return d


REGRESSION = '''"""Regression (found by `python -m tests.fuzz --targets ...`, case {index}): on {target}, this
program ended in {kind}. It must match the reference or end in a located user error."""
from fusec.cli import main

SRC = """\\
{program}
"""


def test_it_runs_on_{fn}(tmp_path, capsys):
    path = tmp_path / "min.fdsl"
    path.write_text(SRC)
    rc = main([str(path)] + {argv})
    err = capsys.readouterr().err
    assert rc in (0, 1) and "internal error" not in err and "Traceback" not in err, err
'''


def _refusal(err: str) -> str:
    """A short name for a compiled target's user error (the figures count them by kind)."""
    line = next((ln for ln in err.splitlines() if "error:" in ln), err.strip()[:80])
    line = re.sub(r"^.*?error: ", "", line)
    line = re.sub(r"'[^']*'|\b\d+\b|\[[^\]]*\]", "_", line)
    return line[:90]


def fuzz_compiled(cases: list[Case], targets: list[str], timeout_s: float, keep_dir: Path | None = None,
                  minimise_failures: bool = False, progress=None, seed: int = 0, limit: int | None = None,
                  max_seconds: float | None = None) -> dict:
    """The compiled cases of `cases` (those whose program passes the checker), each distinct one
    run on the reference and then on every compiled target of `targets` (at most `limit` programs
    compiled; no new case after `max_seconds`). The first failure of each target and kind is
    minimised with `minimise_failures`."""
    targets = [t for t in targets if t != "reference"]
    worker = Worker()
    t0 = time.perf_counter()
    seen: set = set()
    per: dict[str, dict] = {t: {"runs": 0, "ok": 0, "user_errors": 0, "failing": 0, "seconds": 0.0, "max_s": 0.0}
                            for t in ["reference"] + targets}
    refusals: dict[str, Counter] = {t: Counter() for t in per}
    failures: list[CompiledResult] = []
    counts = Counter()
    minimised: set[tuple[str, str]] = set()
    try:
        for n_case, case in enumerate(cases):
            if progress and n_case and n_case % progress == 0:
                done = sum(per[t]["runs"] for t in targets)
                print(f"  {n_case}/{len(cases)} cases, {counts['programs compiled']} programs, {done} compiled runs, "
                      f"{len(failures)} failing, {time.perf_counter() - t0:.0f} s", flush=True)
            if limit is not None and counts["programs compiled"] >= limit:
                break
            if max_seconds is not None and time.perf_counter() - t0 > max_seconds:
                counts["cases left when the time was up"] = len(cases) - n_case
                break
            cc = compiled_case(case, seed)
            if cc is None:
                counts["not checked"] += 1
                continue
            if cc.key() in seen:
                counts["duplicates"] += 1
                continue
            seen.add(cc.key())
            g = gate(cc, timeout_s)
            results = [CompiledResult(cc, "reference", g.rc, g.seconds, g.problem, g.stderr,
                                      failure_kind(g.problem, g.stderr))]
            if g.rc == 0 and g.problem is None:
                counts["programs compiled"] += 1
                for t in targets:
                    if too_large(cc, t):
                        counts[f"too large for {t} (> {SIMULATED_ELEMENTS} elements)"] += 1
                    else:
                        results.append(run_compiled_target(cc, t, worker, timeout_s))
            else:
                counts["refused by the gate"] += 1
            for r in results:
                f = per[r.target]
                f["runs"] += 1
                f["seconds"] += r.seconds
                f["max_s"] = max(f["max_s"], r.seconds)
                if r.problem:
                    f["failing"] += 1
                    failures.append(r)
                    small = None
                    if minimise_failures and r.kind and (r.target, r.kind) not in minimised:
                        minimised.add((r.target, r.kind))
                        small, tries = minimise(cc, still_fails(r.target, r.kind, worker, timeout_s), max_seconds=300)
                        print(f"  case {cc.index} on {r.target} ({r.kind}): minimised to {len(small.program)} "
                              f"bytes in {tries} tries", flush=True)
                    if keep_dir is not None:
                        keep_compiled(r, keep_dir, small)
                elif r.rc == 0:
                    f["ok"] += 1
                else:
                    f["user_errors"] += 1
                    refusals[r.target][_refusal(r.stderr)] += 1
    finally:
        restarts = worker.started
        worker.close()
    for f in per.values():
        f["mean_s"] = round(f["seconds"] / f["runs"], 3) if f["runs"] else None
        f["seconds"], f["max_s"] = round(f["seconds"], 1), round(f["max_s"], 2)
    compiled_runs = sum(per[t]["runs"] for t in targets)
    seconds = time.perf_counter() - t0
    return {"targets": per, "compiled_runs": compiled_runs, "seconds": round(seconds, 1),
            "runs_per_minute": round(60 * compiled_runs / seconds, 1) if seconds else None,
            "cases": dict(counts), "workers_started": restarts,
            "refusals": {t: dict(c.most_common(8)) for t, c in refusals.items() if c},
            "failing": len(failures), "kinds": dict(Counter(f"{r.target}: {r.kind}" for r in failures)),
            "failures": failures}


def parse_targets(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in names if t not in ("reference",) + COMPILED_TARGETS]
    if bad:
        raise SystemExit(f"--targets: unknown {', '.join(bad)} (reference, {', '.join(COMPILED_TARGETS)})")
    return names


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__.split("\n\n")[0])
    p.add_argument("-n", type=int, default=1000, help="cases to run (default 1000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=20.0, help="seconds per case (default 20; 120 per compiled run)")
    p.add_argument("--keep", type=Path, help="write each failing case (program, files, argv, stderr) here")
    p.add_argument("--case", type=int, help="show and run one case")
    p.add_argument("--targets", type=parse_targets, default=["reference"],
                   help="reference (default) and compiled targets (cpu, cuda-sim, mlir-jit) on which each "
                        "program that passes the checker is also compiled and run, e.g. reference,cpu,cuda-sim")
    p.add_argument("--minimise", action="store_true",
                   help="minimise each failing compiled case (written to --keep DIR as min.fdsl)")
    p.add_argument("--max-seconds", type=float, help="compiled cases: start no new case after this many seconds")
    p.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker is not None:
        return worker_main(args.worker)
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
    compiled = [t for t in args.targets if t != "reference"]
    compiled_timeout = max(args.timeout, 120.0)
    if args.case is not None:
        case = make_case(args.seed, args.case, corpus())
        print(f"case {case.index} ({case.family}): fusec {' '.join(_argv(case, Path('DIR')))}")
        print(case.program.decode("utf-8", errors="backslashreplace")[:3000])
        result = run_case(case, args.timeout)
        print(f"exit {result.rc} in {result.seconds:.2f} s: {result.problem or 'holds the contract'}")
        print(result.stderr)
        failed = result.problem is not None
        cc = compiled_case(case, args.seed) if compiled else None
        if cc is not None:
            print(f"compiled case: fusec {' '.join(cc.argv('TARGET'))}")
            cfig = fuzz_compiled([case], args.targets, compiled_timeout, args.keep, args.minimise, seed=args.seed)
            for target, f in cfig["targets"].items():
                print(f"  {target}: {f['runs']} run, {f['ok']} ok, {f['user_errors']} user errors, "
                      f"{f['failing']} failing, {f['seconds']} s")
            for r in cfig["failures"]:
                print(f"  {r.target}: exit {r.rc}: {r.problem} [{r.kind}]\n    " + r.stderr.strip().replace("\n", "\n    "))
            failed |= bool(cfig["failures"])
        return 1 if failed else 0
    figures = fuzz(args.n, args.seed, args.timeout, args.keep, progress=max(1, args.n // 10))
    failures = figures.pop("failures")
    print(json.dumps(figures, indent=1))
    for r in failures[:20]:
        print(f"case {r.case.index} ({r.case.family}): {r.problem}\n    {r.stderr.strip().splitlines()[-1:] }")
    if not compiled:
        return 1 if failures else 0
    programs = corpus()
    cfig = fuzz_compiled([make_case(args.seed, i, programs) for i in range(args.n)], args.targets, compiled_timeout,
                         args.keep, args.minimise, progress=max(1, args.n // 20), seed=args.seed,
                         max_seconds=args.max_seconds)
    cfailures = cfig.pop("failures")
    print(json.dumps(cfig, indent=1))
    for r in cfailures[:30]:
        print(f"compiled case {r.case.index} ({r.case.family}) on {r.target}: {r.problem} [{r.kind}]\n"
              f"    {r.stderr.strip().splitlines()[-1:]}")
    return 1 if failures or cfailures else 0


if __name__ == "__main__":
    sys.exit(main())
