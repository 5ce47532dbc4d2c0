"""Progress on long work: one status line on stderr, redrawn in place, only on a terminal (none off
a TTY, with TERM=dumb or --quiet); `show(text)` draws it, `clear()` wipes it before anything
else is printed. See docs/GUIDE.md, "The main job" (Progress).
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from typing import Callable, TextIO


def on_terminal(stream: TextIO) -> bool:
    """True when `stream` is an interactive terminal a progress line may be drawn on."""
    if os.environ.get("TERM") == "dumb":
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):       # closed or replaced streams
        return False


class Progress:
    """A status line on `stream` (default stderr). `enabled`: force it on or off (default: on
    exactly when the stream is a terminal); `quiet` turns it off whatever the stream is."""

    def __init__(self, stream: TextIO | None = None, *, quiet: bool = False, enabled: bool | None = None):
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = not quiet and (on_terminal(self.stream) if enabled is None else enabled)
        self._width = 0                      # characters of the line now on screen (0: none)

    def show(self, text: str) -> None:
        """Replace the status line by `text` (cut to the terminal's width)."""
        if not self.enabled:
            return
        columns = shutil.get_terminal_size((80, 24)).columns
        text = " ".join(text.split())[: max(columns - 1, 10)]
        pad = max(self._width - len(text), 0)
        self._write("\r" + text + " " * pad)
        self._width = len(text) + pad

    def clear(self) -> None:
        """Wipe the status line (nothing to do when none is shown)."""
        if self.enabled and self._width:
            self._write("\r" + " " * self._width + "\r")
            self._width = 0

    def stage(self, prefix: str) -> Callable[[str], None]:
        """A callback for the compiler's stages: each stage name shown after `prefix`, with the
        seconds since the callback was made."""
        t0 = time.perf_counter()

        def show(what: str) -> None:
            self.show(f"{prefix} ({what}, {time.perf_counter() - t0:.1f} s)")
        return show

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):        # the terminal went away: stop drawing
            self.enabled = False


QUIET = Progress(enabled=False)              # the progress of a caller that asked for none
