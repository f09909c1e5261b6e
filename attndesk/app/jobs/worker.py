"""The window's bridge to the one executor (``attndesk.jobs.executor``): results arrive in the GUI thread.

``JobRunner`` is one lane of a ``Channel`` on the process's executor, living in the GUI thread.
``submit(generation, fn, *args, **kwargs)`` queues the job (a newer request replaces a queued one
and cancels the running one); a worker calls ``fn``; if ``fn`` takes a ``ctx`` keyword it gets the
job's ``attndesk.jobs.JobContext``: its ``progress(fraction, message)`` crosses to the GUI thread,
it is cancelled when the job is, and ``report(item)`` queues any object (a long-lived loop that
streams results, a training run); the runner says ``reportsWaiting`` once per batch and
``take_reports()`` hands over every item queued since, in order, so a fast loop never floods the
GUI thread's event queue. The worker emits the runner's private signals, which Qt queues to the
GUI thread; there the runner drops anything from a generation older than the latest submitted one
and re-emits the rest as ``finished`` / ``failed`` / ``progress``. Nothing here knows about attention.
"""

from __future__ import annotations

import inspect
import re
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal, Slot

from attndesk.errors import Cancelled, ConfigError
from attndesk.jobs import JobContext
from attndesk.jobs.executor import Channel, Executor, Job, Lane, executor

from .channels import RUN

# At most this many progress signals per second cross to the GUI thread (a blocked core may
# report thousands of blocks; each queued signal costs the event loop a little).
_PROGRESS_INTERVAL_S = 0.05
_NUMBERS = re.compile(r"[\d.,%/]+")


def _stage_of(message: str) -> str:
    """A progress message without its counters: "block 3 of 40" and "block 4 of 40" are one stage."""
    return _NUMBERS.sub("", message)


def running_threads() -> list[threading.Thread]:
    """The executor's worker threads still alive (the test suite checks none outlives its test)."""
    return executor().threads()


def _takes_context(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` takes a ``ctx`` keyword (any **kwargs takes it)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "ctx" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def _is_cancelled(exc: BaseException) -> bool:
    return isinstance(exc, Cancelled)


# how allocators say they ran out: Python, CUDA ("CUDA out of memory"), torch's CPU allocator
# ("DefaultCPUAllocator: can't allocate memory: you tried to allocate 80000000000 bytes")
_OUT_OF_MEMORY = ("out of memory", "can't allocate memory", "cannot allocate memory")


def _describe(exc: BaseException) -> str:
    """A one-line message for the status bar; the traceback goes to stderr for bug reports."""
    expected = isinstance(exc, ConfigError)
    text = " ".join(str(exc).split())
    if isinstance(exc, MemoryError) or any(s in text.lower() for s in _OUT_OF_MEMORY):
        wanted = re.search(r"allocate (\d+) bytes", text)
        what = (
            f"{int(wanted.group(1)) / 2**30:,.1f} GiB were asked for"
            if wanted
            else (text[:200] or "the allocation failed")
        )
        return f"out of memory: {what}; try a shorter text, fewer heads or a smaller memory budget"
    if not expected:
        traceback.print_exception(exc)
    text = text[:300]
    if expected:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class JobRunner(QObject):
    """GUI-side handle of one lane: submit jobs, cancel, shut down. Signals arrive in the GUI thread."""

    finished = Signal(int, object)  # generation, result
    failed = Signal(int, str)  # generation, message
    progress = Signal(int, float, str)  # generation, fraction, message
    started = Signal(int)  # generation: a worker picked it up
    cancelled = Signal(int)  # generation: stopped on request (or superseded while running)
    reportsWaiting = Signal(int)  # generation: items queued by ``report``; fetch them with take_reports()

    # emitted by the worker thread, queued to the runner's slots in the GUI thread
    _began = Signal(int)
    _done = Signal(int, object)
    _error = Signal(int, str)
    _stopped = Signal(int)
    _progressed = Signal(int, float, str)
    _reported = Signal(int)

    def __init__(self, parent: QObject | None = None, channel: Channel = RUN, *, on: Executor | None = None) -> None:
        super().__init__(parent)
        self.channel = channel
        self.setObjectName(f"attndesk-{channel.name}")
        self._executor = on or executor()
        self._lane: Lane | None = None  # opened by the first submit: a runner never used holds nothing
        self._shut = False
        self._latest = 0  # newest generation submitted; older results are stale
        self._lock = threading.Lock()
        self._reports: list[tuple[int, Any]] = []  # (generation, item) queued by a job's ``report``
        self._began.connect(self._on_began)
        self._done.connect(self._on_done)
        self._error.connect(self._on_error)
        self._stopped.connect(self._on_cancelled)
        self._progressed.connect(self._on_progress)
        self._reported.connect(self._on_reported)

    # -- public API --------------------------------------------------------------------------
    def submit(self, generation: int, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """Queue ``fn(*args, **kwargs)``; replaces a queued job and cancels a running older one."""
        ctx = JobContext()  # cancelled when superseded or dropped
        job = Job(lambda: self._work(generation, ctx, fn, args, kwargs), ctx, tag=generation)
        self._latest = max(self._latest, generation)
        if self._shut:
            raise RuntimeError("the job runner has been shut down")
        if self._lane is None:
            self._lane = self._executor.open(self.channel)
        self._lane.submit(job)

    def cancel(self) -> None:
        """Drop the queued job, ask the running one to stop, and stop waiting for either."""
        dropped, running = self._lane.cancel() if self._lane is not None else (None, None)
        self._latest += 1  # whatever still arrives is stale now
        for job in (dropped, running):
            if job is not None:
                self.cancelled.emit(job.tag)

    def is_busy(self) -> bool:
        """A job is queued or running (a paused one too: closing the window still ends it)."""
        return self._lane is not None and self._lane.is_busy()

    def is_working(self) -> bool:
        """A job is queued, or runs and is not waiting for its user (``JobContext.paused``: a
        paused training run is no work under way)."""
        return self._lane is not None and self._lane.is_working()

    def take_reports(self) -> list[Any]:
        """Every item the current job queued with ``report`` since the last call, oldest first
        (items of older generations are dropped)."""
        with self._lock:
            items, self._reports = self._reports, []
        return [item for generation, item in items if self._fresh(generation)]

    def shutdown(self, timeout_s: float | None = None) -> bool:
        """Cancel, wait for the running job and close the lane. Returns False only if
        ``timeout_s`` ran out."""
        self._shut = True
        self.cancel()
        return self._lane is None or self._lane.close(timeout_s)

    # -- internals ----------------------------------------------------------------------------
    def _work(self, generation: int, job_ctx: JobContext, fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
        """A worker thread runs the job: its outcome goes to the GUI thread as a signal."""
        if job_ctx.cancelled:  # cancelled before it started
            self._stopped.emit(generation)
            return
        self._began.emit(generation)
        last_emit, last_stage = [0.0], [""]

        def progress(fraction: float, message: str = "") -> None:
            # a new stage always crosses (its numbers aside): a dropped "importing transformers"
            # would leave "checking the folder" on screen for the seconds the import takes
            now, stage = time.monotonic(), _stage_of(str(message))
            if fraction >= 1.0 or now - last_emit[0] >= _PROGRESS_INTERVAL_S or stage != last_stage[0]:
                last_emit[0], last_stage[0] = now, stage
                self._progressed.emit(generation, float(fraction), str(message))

        def report(item: object) -> None:
            with self._lock:
                first = not self._reports or self._reports[-1][0] != generation
                self._reports.append((generation, item))
            if first:
                self._reported.emit(generation)

        ctx = JobContext(progress, report=report, parent=job_ctx)
        extra = {"ctx": ctx} if "ctx" not in kwargs and _takes_context(fn) else {}
        try:
            result = fn(*args, **kwargs, **extra)
        except Exception as exc:
            if _is_cancelled(exc) or job_ctx.cancelled:
                self._stopped.emit(generation)
            else:
                self._error.emit(generation, _describe(exc))
        else:
            if job_ctx.cancelled:
                self._stopped.emit(generation)
            else:
                self._done.emit(generation, result)

    def _fresh(self, generation: int) -> bool:
        return generation >= self._latest

    @Slot(int)
    def _on_began(self, generation: int) -> None:
        if self._fresh(generation):
            self.started.emit(generation)

    @Slot(int, object)
    def _on_done(self, generation: int, result: object) -> None:
        if self._fresh(generation):
            self.finished.emit(generation, result)

    @Slot(int, str)
    def _on_error(self, generation: int, message: str) -> None:
        if self._fresh(generation):
            self.failed.emit(generation, message)

    @Slot(int)
    def _on_cancelled(self, generation: int) -> None:
        if self._fresh(generation):
            self.cancelled.emit(generation)

    @Slot(int)
    def _on_reported(self, generation: int) -> None:
        if self._fresh(generation):
            self.reportsWaiting.emit(generation)

    @Slot(int, float, str)
    def _on_progress(self, generation: int, fraction: float, message: str) -> None:
        if self._fresh(generation):
            self.progress.emit(generation, fraction, message)
