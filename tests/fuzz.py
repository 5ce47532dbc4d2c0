"""A seeded mutation fuzzer of fusec's front door: every input a user controls must end in exit
0, 1, 3 or 4 (never 2, an internal error), without a traceback and within a time limit.

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

    python -m tests.fuzz -n 10000              # the long run (about two minutes on 2 cores)
    python -m tests.fuzz -n 300 --seed 7       # another sample
    python -m tests.fuzz --case 1234           # show (and run) one case of a run: its argv and program
    python -m tests.fuzz -n 10000 --keep DIR   # keep each failing case's files in DIR

A case fails when it exits 2 (or anything but 0, 1, 3, 4), prints a traceback or "internal
error", exits 1 without an `error:` line, or runs past --timeout seconds. The default test
run (tests/test_fuzz.py) runs a few hundred cases.
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__.split("\n\n")[0])
    p.add_argument("-n", type=int, default=1000, help="cases to run (default 1000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=20.0, help="seconds per case (default 20)")
    p.add_argument("--keep", type=Path, help="write each failing case (program, files, argv, stderr) here")
    p.add_argument("--case", type=int, help="show and run one case")
    args = p.parse_args(argv)
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
    if args.case is not None:
        case = make_case(args.seed, args.case, corpus())
        print(f"case {case.index} ({case.family}): fusec {' '.join(_argv(case, Path('DIR')))}")
        print(case.program.decode("utf-8", errors="backslashreplace")[:3000])
        result = run_case(case, args.timeout)
        print(f"exit {result.rc} in {result.seconds:.2f} s: {result.problem or 'holds the contract'}")
        print(result.stderr)
        return 0 if result.problem is None else 1
    figures = fuzz(args.n, args.seed, args.timeout, args.keep, progress=max(1, args.n // 10))
    failures = figures.pop("failures")
    print(json.dumps(figures, indent=1))
    for r in failures[:20]:
        print(f"case {r.case.index} ({r.case.family}): {r.problem}\n    {r.stderr.strip().splitlines()[-1:] }")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
