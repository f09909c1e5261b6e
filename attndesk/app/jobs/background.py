"""One short job of a widget (an export) on the one executor, answered in the GUI thread.

``Background(owner, channel).start(fn, done=..., failed=..., expected=(ExportError,))``: ``fn()``
runs on a transient lane of the executor (``attndesk.jobs.executor``: open only while it has a
job, since nothing tells it when its widget goes away); ``done(result)`` or ``failed(exc)`` (an
exception of the ``expected`` types) is called in the GUI thread, only for the newest job and only
while ``owner`` still exists (a dialog closed during its export is never touched). A newer job
replaces one still queued. Any other exception is re-raised in the GUI thread: a bug stays
visible. The compute controller's side jobs are for work tied to a result; this is for a user's
one-off request whose widget may go away (an export, a derived heatmap source), and ``forget()``
drops the answer of a job whose request was replaced.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import shiboken6
from PySide6.QtCore import QObject, Signal, Slot

from attndesk.jobs.executor import Channel, Job, executor


class _Carrier(QObject):
    """Lives in the GUI thread, unparented: a worker may still hold it after the owner died."""

    answered = Signal(int, object, object)  # token, result, exception


class Background(QObject):
    """See the module docstring."""

    def __init__(self, owner: QObject, channel: Channel) -> None:
        super().__init__()
        self._owner = owner
        self._lane = executor().open(channel, transient=True)
        self._token = 0
        self._running = 0  # jobs whose answer has not come back to the GUI thread yet
        self._callbacks: tuple[Callable[[Any], None], Callable[[Exception], None], tuple] | None = None
        self._carrier = _Carrier()
        self._carrier.answered.connect(self._answer)

    def start(
        self,
        fn: Callable[[], Any],
        *,
        done: Callable[[Any], None],
        failed: Callable[[Exception], None],
        expected: tuple[type[Exception], ...] = (),
    ) -> None:
        self._token += 1
        self._callbacks = (done, failed, expected)
        carrier, token = self._carrier, self._token

        def work() -> None:
            try:
                result, error = fn(), None
            except Exception as exc:
                result, error = None, exc
            carrier.answered.emit(token, result, error)

        replaced = self._lane.submit(Job(work, tag=token))
        self._running += 1 if replaced is None else 0  # a replaced job never runs, never answers

    def forget(self) -> None:
        """Drop the answer of the job still running, if any (what it was for has been replaced)."""
        self._token += 1
        self._callbacks = None

    def is_busy(self) -> bool:
        """A job is queued or running, or its answer is on its way to the GUI thread."""
        return self._running > 0

    @Slot(int, object, object)
    def _answer(self, token: int, result: Any, error: Exception | None) -> None:
        self._running -= 1
        if token != self._token or self._callbacks is None or not shiboken6.isValid(self._owner):
            return
        done, failed, expected = self._callbacks
        self._callbacks = None
        if error is None:
            done(result)
        elif isinstance(error, expected):
            failed(error)
        else:
            raise error
