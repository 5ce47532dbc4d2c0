"""Shape-polymorphic builds (options.dynamic, `--dynamic M,S`): the kernels read a symbol's extent
from their inputs at run time, so one build runs any extent of it. A build is planned for each
symbol's size class (`bucket`: the next power of two) on the chain lowered with static extents,
and the plan applied op for op to the chain lowered with `?` extents. See docs/GUIDE.md,
"Dynamic shapes".
"""
from __future__ import annotations


def bucket(n: int) -> int:
    """The size class of an extent: the smallest power of two >= n (n >= 1)."""
    return 1 << max(0, (int(n) - 1).bit_length())


def size_class(n: int) -> str:
    """The extents a bucket serves, as text: '513..1024' (1 for the bucket 1)."""
    b = bucket(n)
    return "1" if b == 1 else f"{b // 2 + 1}..{b}"


def planning_binding(binding: dict[str, int], dynamic) -> dict[str, int]:
    """The binding a build is planned for: each dynamic symbol at its bucket."""
    return {s: bucket(v) if s in dynamic else v for s, v in binding.items()}


def chain_dynamic(symbols, dynamic) -> tuple[str, ...]:
    """The dynamic symbols one chain has (options.dynamic may name symbols of other chains)."""
    return tuple(s for s in symbols if s in set(dynamic))


def taken_at_run_time(dynamic) -> str:
    """'M is taken at run time' / 'M, S are taken at run time': the reason plan decisions give."""
    return f"{', '.join(dynamic)} {'is' if len(dynamic) == 1 else 'are'} taken at run time"


def unknown_symbols(dynamic, chains, where: str = "this file") -> str | None:
    """Why `dynamic` names a symbol no chain has (None: every one is some chain's)."""
    symbols = sorted({s for c in chains for s in c.symbols})
    unknown = [s for s in dynamic if s not in symbols]
    if not unknown:
        return None
    return (f"no chain of {where} has the symbol{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
            f"(its symbols: {', '.join(symbols) or 'none'})")


def wrong_target(target: str) -> str | None:
    """Why a build for runtime target `target` cannot take extents at run time (None: the
    compiled targets, cpu, cuda and cuda-sim, can)."""
    if target in ("cpu", "cuda", "cuda-sim"):
        return None
    return (f"works on the compiled targets (cpu, cuda, cuda-sim), not {target}: "
            "the reference runs every extent as it comes, and mlir-jit compiles each binding")
