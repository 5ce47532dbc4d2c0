"""Lowering rules, one module per op family; importing this package registers them all in RULES."""
from . import contraction, elementwise, norm, reduction, shape  # noqa: F401  (registration)
from .registry import RULES, LoweringContext, rule

__all__ = ["RULES", "LoweringContext", "rule"]
