"""Side jobs take turns: at most one of them computes at a time, beside the main run.

Each side job (a teaching pair, B - A, head statistics, an export, ...) is sized to the memory
budget on its own, but in the soak up to four ran at once with a run in flight and resident
memory reached 3-4 GiB at the default 2 GiB budget. A job waits here for its turn, asleep until
the turn is free or its job context is cancelled (no polling), so a superseded job leaves the
queue at once. The main run never waits: it is what the user asked for last.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

from attndesk.core.errors import Cancelled
from attndesk.jobs import JobContext


class Turns:
    """One turn at a time: ``with turns.turn(ctx): ...`` (``ctx``: the waiting job's context)."""

    def __init__(self) -> None:
        self._free = threading.Condition()
        self._held = False
        self._waiting = 0

    @contextlib.contextmanager
    def turn(self, ctx: JobContext | None = None) -> Iterator[None]:
        with self._free:
            self._waiting += 1
            stop_listening = ctx.on_cancel(self._wake) if ctx is not None else None
            try:
                while self._held:
                    if ctx is not None and ctx.cancelled:
                        raise Cancelled("superseded while waiting for its turn")
                    self._free.wait()
                self._held = True
            finally:
                self._waiting -= 1
                if stop_listening is not None:
                    stop_listening()
        try:
            yield
        finally:
            with self._free:
                self._held = False
                self._free.notify_all()

    def _wake(self) -> None:
        """A waiting job was cancelled: every waiter looks at its context again."""
        with self._free:
            self._free.notify_all()

    def busy(self) -> bool:
        """A job holds the turn now."""
        return self._held

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
