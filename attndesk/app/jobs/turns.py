"""Side jobs take turns: at most one of them computes at a time, beside the main run.

Each side job (a teaching pair, B - A, head statistics, an export, ...) is sized to the memory
budget on its own, but in the soak up to four ran at once with a run in flight and resident
memory reached 3-4 GiB at the default 2 GiB budget. A job waits here for its turn,
checking its cancel flag, so a superseded job leaves the queue at once. The main run never
waits: it is what the user asked for last.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

from attndesk.core.errors import Cancelled

POLL_S = 0.05  # how often a waiting job looks at its cancel flag


class Turns:
    """One turn at a time: ``with turns.turn(cancelled): ...`` (``cancelled() -> bool``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting = 0
        self._count = threading.Lock()

    @contextlib.contextmanager
    def turn(self, cancelled: Callable[[], bool] = lambda: False) -> Iterator[None]:
        with self._count:
            self._waiting += 1
        try:
            while not self._lock.acquire(timeout=POLL_S):
                if cancelled():
                    raise Cancelled("superseded while waiting for its turn")
        finally:
            with self._count:
                self._waiting -= 1
        try:
            yield
        finally:
            self._lock.release()

    def busy(self) -> bool:
        """A job holds the turn now."""
        return self._lock.locked()

    def waiting(self) -> int:
        """Jobs waiting for the turn now."""
        return self._waiting

    def wrap(self, fn: Callable[[], object]) -> Callable[[], object]:
        """``fn`` run in its turn (for a job that cannot be cancelled: an export)."""

        def in_turn():
            with self.turn():
                return fn()

        return in_turn


_side = Turns()


def side_turns() -> Turns:
    """The process's turns for side jobs (memory is the process's, whatever the window)."""
    return _side
