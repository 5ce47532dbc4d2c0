"""The op table: each FDSL operator's signature, shape and dtype rule and NumPy semantics, together.

One op, one place (docs/ARCHITECTURE.md, "What the code taught us"): an op is one `OpDef` in the
one registry `OPS` (`registry.py`, which states an entry's contract), defined in the module of
its family, as compiler/lowering/ groups its lowering rules: `elementwise`, `reduction`, `norm`,
`contraction`, `shape`, `indexing` (slices, concat and split, gathers), `scan` (scans and
arg-reductions), `pooling` (max, average and adaptive average pooling) and `creation` (full,
full_like, arange). Importing the package registers every op, in that order.
"""
from __future__ import annotations

from ..shapes import OpError
from . import elementwise, reduction, norm, contraction, shape, indexing, scan  # noqa: F401  (each registers its ops)
from . import pooling  # noqa: F401  (registers its ops)
from . import creation  # noqa: F401  (full, full_like, arange)
from .elementwise import BINARY, BINARY_OPERATORS, COMPARE, POSITIVE_UNARY, UNARY
from .indexing import DESUGARED, Bound, IndexRangeError, bind_slice_errors, position, slice_type, split_types
from .reduction import REDUCTIONS
from .registry import OPS, REQUIRED, Arg, OpDef

__all__ = ["BINARY", "BINARY_OPERATORS", "COMPARE", "DESUGARED", "OPS", "POSITIVE_UNARY", "REDUCTIONS", "REQUIRED",
           "UNARY", "Arg", "Bound", "IndexRangeError", "OpDef", "OpError", "bind_slice_errors", "position",
           "slice_type", "split_types"]
