"""Limits on what the front end accepts, and the recursion room it needs within them.

The parser refuses an expression nested deeper than MAX_NESTING levels (operators, calls,
parentheses and lists all count) with a diagnostic at the place; within that limit the AST
builder is iterative and the recursive walks over the AST (the checker, the AST printer) run
with enough Python recursion room for the deepest program accepted."""
from __future__ import annotations

import sys
from contextlib import contextmanager

MAX_NESTING = 1000
FRAMES_PER_LEVEL = 8          # the most Python frames one level of an AST walk takes, with margin


def _depth() -> int:
    f, n = sys._getframe(), 0
    while f is not None:
        f, n = f.f_back, n + 1
    return n


@contextmanager
def recursion_room(levels: int = MAX_NESTING):
    """Raise the recursion limit, for this block, to what a walk of `levels` levels needs."""
    old = sys.getrecursionlimit()
    need = _depth() + FRAMES_PER_LEVEL * levels + 200
    if need > old:
        sys.setrecursionlimit(need)
    try:
        yield
    finally:
        if need > old:
            sys.setrecursionlimit(old)
