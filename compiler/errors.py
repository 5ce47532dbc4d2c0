"""Compiler errors. A CompilerInternalError is always our bug, never the user's: `fusec` prints it
and exits 2 with the stage that failed and where its IR was dumped."""
from __future__ import annotations


class CompilerInternalError(Exception):
    """A compiler stage produced IR that does not verify, or met a case it does not handle."""

    def __init__(self, stage: str, message: str, dump_path: str | None = None):
        self.stage = stage
        self.message = message
        self.dump_path = dump_path
        super().__init__(self.render())

    def render(self) -> str:
        out = f"internal compiler error in stage '{self.stage}': {self.message}"
        if self.dump_path:
            out += f"\n  the IR at that point was dumped to {self.dump_path}"
        return out

    def with_dump(self, dump_path: str) -> "CompilerInternalError":
        return CompilerInternalError(self.stage, self.message, dump_path)


class CacheError(Exception):
    """The fusec cache directory ($FUSEC_CACHE_DIR, else ~/.cache/fusec) cannot be used (it is
    a file, say): a user error, exit 1, with the path."""
