"""``JobContext``: how a long function reports progress, learns it should stop, and hands over
partial results, whoever runs it (the window's executor, the command line, a script, a test).

A function takes ``ctx: JobContext | None = None`` and calls ``ctx.progress(fraction, message)``,
``ctx.check()`` between steps (raises ``Cancelled``; ``ctx.cancelled`` reads the flag without
raising, for a loop that ends early instead), ``ctx.report(item)`` for a partial result and
``with ctx.paused():`` around a wait for its user (a paused training run: no work under way). A
context made with a ``parent`` is cancelled when its parent is and forwards to the parent what it
does not handle itself: a Stop button's flag joined to the window's job.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

ProgressFn = Callable[[float, str], None]
"""A progress callback: ``progress(fraction in [0, 1], message)``."""


class Cancelled(RuntimeError):
    """A long computation was stopped by its caller (its context was cancelled)."""


class Cancel(Protocol):
    """A cancel flag from outside a context: a ``threading.Event``, or anything with ``is_set()``."""

    def is_set(self) -> bool: ...


@dataclass(frozen=True)
class Progress:
    """How far a job is: ``fraction`` in [0, 1] and what it is doing."""

    fraction: float
    message: str = ""


class JobContext:
    """Progress, cancellation and partial results of one job (thread-safe: ``cancel`` may come
    from any thread; the job's own thread calls the rest)."""

    def __init__(
        self,
        progress: ProgressFn | None = None,
        *,
        report: Callable[[Any], None] | None = None,
        cancel: Cancel | None = None,
        should_cancel: Callable[[], bool] | None = None,
        parent: JobContext | None = None,
    ) -> None:
        self._progress, self._report, self._parent = progress, report, parent
        self._flag = threading.Event()
        self._wakers: list[Callable[[], None]] = []
        self._wakers_lock = threading.Lock()
        self._asks = [f.is_set for f in (cancel,) if f is not None] + [a for a in (should_cancel,) if a is not None]
        self._pauses = 0  # parts of this job inside ``paused()`` now
        self.last: Progress | None = None  # the latest progress reported

    @property
    def cancelled(self) -> bool:
        if self._flag.is_set() or any(ask() for ask in self._asks):
            return True
        return self._parent is not None and self._parent.cancelled

    def cancel(self) -> None:
        """Ask the job to stop: its next ``check()`` raises ``Cancelled``; ``on_cancel`` callbacks run
        here, in the caller's thread."""
        self._flag.set()
        with self._wakers_lock:
            wakers = list(self._wakers)
        for wake in wakers:
            wake()

    def on_cancel(self, wake: Callable[[], None]) -> Callable[[], None]:
        """Call ``wake()`` when ``cancel()`` is called on this context or an ancestor (a thread
        asleep on a condition wakes to look); returns the function that stops listening."""
        chain: list[JobContext] = []
        ctx: JobContext | None = self
        while ctx is not None:
            with ctx._wakers_lock:
                ctx._wakers.append(wake)
            chain.append(ctx)
            ctx = ctx._parent

        def stop_listening() -> None:
            for each in chain:
                with each._wakers_lock:
                    each._wakers.remove(wake)

        return stop_listening

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The job waits for its user inside this block (a paused training run): it computes
        nothing and may wait for ever. ``is_paused`` says so here and on every ancestor, so whoever
        runs the job can tell a paused job from one at work."""
        chain: list[JobContext] = []
        ctx: JobContext | None = self
        while ctx is not None:
            chain.append(ctx)
            ctx = ctx._parent
        for each in chain:
            with each._wakers_lock:
                each._pauses += 1
        try:
            yield
        finally:
            for each in chain:
                with each._wakers_lock:
                    each._pauses -= 1

    @property
    def is_paused(self) -> bool:
        """Whether the job (or a part of it) waits for its user now (``paused``)."""
        return self._pauses > 0

    def check(self) -> None:
        """Raise ``Cancelled`` if the job was asked to stop."""
        if self.cancelled:
            raise Cancelled("cancelled")

    def progress(self, fraction: float, message: str = "") -> None:
        self.last = Progress(float(fraction), str(message))
        if self._progress is not None:
            self._progress(float(fraction), str(message))
        elif self._parent is not None:
            self._parent.progress(fraction, message)

    def report(self, item: Any) -> None:
        """Hand over a partial result (a training step's report, a corpus pass's counts)."""
        if self._report is not None:
            self._report(item)
        elif self._parent is not None:
            self._parent.report(item)

    def scaled(self, start: float, stop: float, prefix: str = "") -> JobContext:
        """A context for one part of this job: its fractions map onto [start, stop] of this one's,
        its messages get ``prefix``; cancelling this job cancels the part."""
        span = stop - start
        return JobContext(lambda f, m: self.progress(start + span * f, prefix + m), parent=self)

    def quiet(self) -> JobContext:
        """A context for a part of this job that shows no progress; cancelling this job cancels it."""
        return JobContext(lambda fraction, message: None, parent=self)


def plain_context(progress: ProgressFn | None = None, *, report: Callable[[Any], None] | None = None) -> JobContext:
    """A context for a script, the command line (pass ``ProgressLine(...).update`` for its one
    status line on stderr) or a test: it is cancelled only by its own ``cancel()``."""
    return JobContext(progress, report=report)


def job_context(
    ctx: JobContext | None = None,
    *,
    progress: ProgressFn | None = None,
    cancel: Cancel | None = None,
    should_cancel: Callable[[], bool] | None = None,
    report: Callable[[Any], None] | None = None,
) -> JobContext:
    """The one door from the older keywords to a context: ``ctx`` as it is when nothing else is
    given, else a context over ``ctx`` (if any) that also obeys ``cancel`` (anything with
    ``is_set()``: an Event, a Stop button's flag) and ``should_cancel()`` and sends progress and
    reports to the given callbacks (to ``ctx``'s otherwise)."""
    if progress is None and cancel is None and should_cancel is None and report is None:
        return ctx if ctx is not None else JobContext()
    return JobContext(progress, report=report, cancel=cancel, should_cancel=should_cancel, parent=ctx)


__all__ = ["Cancel", "Cancelled", "JobContext", "Progress", "ProgressFn", "job_context", "plain_context"]
