"""The command line's progress report for a long run: one status line on stderr, kept short.

On a terminal the line is redrawn in place (``\\r``) a few times a second; into a file or a pipe
a new line is written at most every ``every_s`` seconds, so a log of a five-minute run holds a
few dozen lines, not thousands. The core calls ``update(fraction, stage)`` from its run loop; a
run that knows its time left better (a resumed one, whose earlier part took none of this
process's time) passes it as ``eta_s``, and the line shows that one only.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60}:{seconds % 60:02d}"


class ProgressLine:
    """``with ProgressLine() as progress: run(progress=progress.update)``; the ``with`` ends the
    line on a terminal, whether the run finished, failed or was interrupted."""

    def __init__(self, stream: TextIO | None = None, *, every_s: float | None = None, prefix: str = "attndesk"):
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.tty = bool(isatty and isatty())
        self.every_s = every_s if every_s is not None else (0.25 if self.tty else 5.0)
        self.prefix = prefix
        self.start = time.monotonic()
        self._last = -float("inf")
        self._drawn = False  # a terminal line is open (no newline yet)

    def update(self, fraction: float, stage: str = "", *, eta_s: float | bool | None = True) -> None:
        """``eta_s``: True estimates the time left from the fraction and the time elapsed; a number
        is the caller's own estimate; None shows no time left."""
        now = time.monotonic()
        if now - self._last < self.every_s and fraction < 1.0:
            return
        self._last = now
        elapsed = now - self.start
        line = f"{self.prefix}: {min(max(fraction, 0.0), 1.0):4.0%} {stage}".rstrip()
        line += f", {_clock(elapsed)} elapsed"
        if eta_s is True:
            eta_s = elapsed * (1 - fraction) / fraction if 0.02 < fraction < 1.0 else None
        if eta_s is not None and fraction < 1.0:
            line += f", about {_clock(eta_s)} left"
        if self.tty:
            self.stream.write("\r" + line + "\x1b[K")  # erase what a longer previous line left
            self._drawn = True
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False

    def __enter__(self) -> ProgressLine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
