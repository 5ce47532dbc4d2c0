"""A run's chains, sizes and inputs: the chains selected (--chain), the symbols bound (--bind,
default 64 with a note), input npz files checked against the chains (--inputs, golden files),
each chain's memory checked before anything is allocated, and the npz entries a run saves.
Every mistake is a `UsageError` that says what was expected and what was found."""
from __future__ import annotations

import re
import sys

import numpy as np

from fusec.dsl.binding import check_binding
from fusec.dsl.typed import TypedChain, TypedModule
from fusec.runtime import npz, reference
from fusec.runtime.memory import check_memory
from fusec.runtime.npz import NpzError
from fusec.runtime.targets import Target

from .. import api
from ..errors import UsageError

DEFAULT_SIZE = 64
MEMORY_FLAG = "--max-memory SIZE"


def bind_flag(values: list[str], chains: list[TypedChain], path: str) -> dict[str, int]:
    """--bind, parsed; a symbol that no selected chain has is an error (with the ones they have)."""
    bind = api.parse_bind(",".join(values))
    known = list(dict.fromkeys(s for c in chains for s in c.symbols))
    for s in bind:
        if s not in known:
            close = [k for k in known if k.lower() == s.lower()]
            hint = f"; did you mean {close[0]}?" if close else ""
            have = f"their free symbols are {', '.join(known)}" if known else "they have no free symbols"
            fixed = [c.name for c in chains if s in _declared_symbols(c)]
            why = (f"the shapes of chain '{fixed[0]}' fix {s} (the checker unified it with another size)" if fixed
                   else f"no selected chain of {path} has a symbol {s}")
            raise UsageError(f"--bind {s}={bind[s]}: {why}; {have}{hint}")
    return bind


def _declared_symbols(chain: TypedChain) -> set[str]:
    """The symbols written in a chain's parameter types (some may have been unified away)."""
    out = set()
    for p in chain.param_nodes:
        if p.span is None:
            continue
        lines = [p.span.file.line(n) for n in range(p.span.line, p.span.end_line + 1)]
        lines[-1] = lines[-1][:p.span.end_col - 1]
        lines[0] = lines[0][p.span.col - 1:]
        m = re.search(r"\[(.*)\]", " ".join(lines), re.S)
        if m:
            out |= {d.strip() for d in m.group(1).split(",") if d.strip().isidentifier()}
    return out


def plan_run(chain: TypedChain, given: dict | None, bind: dict[str, int], limit: int | None, target: str):
    """(chain, inputs or None (random ones are made when it runs), binding), its memory checked,
    and on a target that refuses them (cpu), the given index inputs out of range (a user error
    at the gather; random ones are drawn within the axis)."""
    if given is not None and chain.param_nodes:
        inputs = [_declared(given[chain.name]["in"][p.name], p.type.dtype) for p in chain.param_nodes]
        binding = reference.bind_symbols(chain, inputs, bind)
    else:
        inputs, binding = None, chain_binding(chain, bind)
    check_memory(chain, binding, limit, MEMORY_FLAG)
    if inputs is not None and Target(target).checks_index_inputs:
        reference.check_index_inputs(chain, inputs, binding)
    return chain, inputs, binding


def chain_binding(chain: TypedChain, bind: dict[str, int]) -> dict[str, int]:
    """Every symbol of the chain bound (DEFAULT_SIZE, with a note on stderr, where --bind has none)."""
    binding = {}
    for s in chain.symbols:
        if s not in bind:
            print(f"note: chain {chain.name}: {s} is not bound; using {s}={DEFAULT_SIZE} "
                  f"(set it with --bind {s}=...)", file=sys.stderr)
        binding[s] = bind.get(s, DEFAULT_SIZE)
    check_binding(chain, binding)           # a slice with a symbolic bound may not fit these sizes
    return binding


def _listing(keys: list[str], limit: int = 8) -> str:
    keys = sorted(keys)
    if not keys:
        return "nothing"
    shown = ", ".join(keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def read_npz(flag: str, path: str, limit: int | None) -> dict:
    """An npz file in the golden layout (runtime/npz.py); one that cannot be read is a UsageError."""
    try:
        return npz.load_npz(path, max_bytes=limit)
    except NpzError as e:
        raise UsageError(f"{flag} {e}") from None


def read_inputs(flag: str, paths: list[str], limit: int | None) -> tuple[dict, str]:
    """One or more --inputs files read and merged (golden layout): (the merged entries, the files
    as messages name them). A key two files hold with different arrays (or messages) is an
    error; the same array twice is kept once. The memory limit covers all of them together."""
    merged: dict = {}
    origin: dict[str, str] = {}
    left = limit
    for path in paths:
        given = read_npz(flag, path, left)
        for cname, entry in given.items():
            into = merged.setdefault(cname, {p: {} for p in entry})
            for part, arrays in entry.items():
                for key, x in arrays.items():
                    full = f"{cname}/{part}/{key}"
                    if key in into.setdefault(part, {}):
                        y = into[part][key]
                        same = (x == y) if isinstance(x, str) else (
                            isinstance(y, np.ndarray) and x.dtype == y.dtype and x.shape == y.shape
                            and np.array_equal(x, y, equal_nan=x.dtype.kind in "fc"))
                        if not same:
                            raise UsageError(f"{flag} {path} holds {full}, which {origin[full]} holds too, with another "
                                             "value; give each input once")
                        continue
                    into[part][key] = x
                    origin[full] = path
                    if left is not None and isinstance(x, np.ndarray):
                        left -= x.nbytes
    return merged, " + ".join(paths)


def load_inputs(flag: str, path: str, chains: list[TypedChain], source: str, limit: int | None,
                 known: list[str] | None = None, given: dict | None = None, choose: str = "") -> dict:
    """An npz of inputs (the golden layout; `given`: already read) that matches the chains
    exactly: every chain it holds is one of the file's (`known`, default: the selected ones),
    every selected chain with parameters has all of them and nothing else, and its outputs are
    numbered within the chain's. Anything else is an error that lists what the file holds and
    what is expected."""
    given = read_npz(flag, path, limit) if given is None else given
    known = set(known if known is not None else [c.name for c in chains])
    held = [f"{c}/{part}/{k}" for c, e in given.items() for part in ("in", "out", "failed") for k in e[part]]
    for cname in given:
        if cname not in known:
            raise UsageError(f"{flag} {path} holds chain '{cname}', which {source} does not define (its chains: "
                             f"{', '.join(sorted(known))}); the file holds {_listing(held)}")
    for c in chains:
        entry = given.get(c.name, {"in": {}, "out": {}, "failed": {}})
        params = [p.name for p in c.param_nodes]
        want = [f"{c.name}/in/{p}" for p in params]
        missing = [w for w, p in zip(want, params) if p not in entry["in"]]
        if missing and c.name not in given and len(chains) > 1:     # a file for some of the chains
            raise UsageError(f"{flag} {path} holds no inputs for chain '{c.name}' (it takes {_listing(want)}; the "
                             f"file holds {_listing(held)}){choose}")
        if missing:
            raise UsageError(f"{flag} {path} has no {missing[0]} for chain '{c.name}' (the chain takes "
                             f"{_listing(want)}; the file holds {_listing(held)})")
        extra = sorted(set(entry["in"]) - set(params))
        if extra:
            raise UsageError(f"{flag} {path} holds {c.name}/in/{extra[0]}, which is not a parameter of chain "
                             f"'{c.name}' (it takes {_listing(want)})")
        n = len(c.outputs)
        for part in ("out", "failed"):
            bad = sorted(k for k in entry[part] if int(k) >= n)
            if bad:
                raise UsageError(f"{flag} {path} holds {c.name}/{part}/{bad[0]}, but chain '{c.name}' has "
                                 f"{n} output{'s' if n != 1 else ''} (0 to {n - 1})")
    return given


def npz_entry(chain: TypedChain, inputs, outputs) -> tuple[dict, list]:
    """One chain's npz entry: inputs by parameter name, outputs in order (runtime/npz.py)."""
    return {p.name: x for p, x in zip(chain.param_nodes, inputs)}, list(outputs)


def read_chains(file: str, names: list[str]) -> tuple[str, str, TypedModule, list[TypedChain]]:
    """The FDSL file read and checked, and the chains --chain names in it: (text, path, typed,
    chains)."""
    text, path = api.read_file(file)
    typed = api.check(api.parse_text(text, path))
    return text, path, typed, select_chains(typed, names)


def select_chains(typed: TypedModule, names: list[str]) -> list[TypedChain]:
    """The chains --chain names (all when none), in the file's order."""
    if not typed.chains:
        raise UsageError(f"{typed.file.path} defines no chain; there is nothing to run")
    if not names:
        return list(typed.chains)
    known = {c.name for c in typed.chains}
    for n in names:
        if n not in known:
            raise UsageError(f"no chain named '{n}' in {typed.file.path} (chains: {', '.join(sorted(known))})")
    return [c for c in typed.chains if c.name in names]


def _declared(x: np.ndarray, dtype) -> np.ndarray:
    """npz stores bf16 as f32 (runtime/npz.py): convert back when the value is exactly bf16."""
    if dtype.name == "bf16" and x.dtype == np.float32:
        y = x.astype(dtype.np)
        if np.array_equal(y.astype(np.float32), x, equal_nan=True):
            return y
    return x
