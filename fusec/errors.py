"""Errors the front door distinguishes: user mistakes (exit 1), numerics failures (exit 3)."""
from __future__ import annotations


class UsageError(Exception):
    """A mistake in how fusec was called (a missing file, a bad --bind): exit 1, no traceback."""


class NumericsError(Exception):
    """A compiled result disagreed with the reference beyond tolerance: exit 3."""
