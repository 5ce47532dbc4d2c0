"""What a name means while a chain is checked (`Binding`), and POISON, the value of whatever
failed to check: a use of a poisoned value reports nothing more, so independent mistakes all
show up in one run."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .source import Span


class Poison:
    """The type of POISON, the one value of a failed expression or statement."""


POISON = Poison()


@dataclass(frozen=True)
class Binding:
    """What a name means in a chain: a node, a weak scalar, or poison; and where it was defined."""
    value: Any                 # int node id | Weak | POISON
    span: Span
    what: str                  # 'parameter' | 'value' | 'const'
