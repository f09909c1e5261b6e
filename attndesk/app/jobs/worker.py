"""Run any long job off the GUI thread: latest request wins, cancel is cooperative.

``JobRunner`` lives in the GUI thread and owns one ``QThread`` with a ``_Worker`` moved onto it.
``submit(generation, fn, *args, **kwargs)`` parks the job in a one-slot mailbox (a newer request
replaces a queued one) and wakes the worker through a queued signal. The worker calls ``fn``; if
``fn`` takes a ``ctx`` keyword it gets the job's ``attndesk.jobs.JobContext``: its
``progress(fraction, message)`` crosses to the GUI thread, it is cancelled when the job is, and
``report(item)`` queues any object (a long-lived loop that streams results, a training run); the
runner says ``reportsWaiting`` once per batch and ``take_reports()`` hands over every item queued
since, in order, so a fast loop never floods the GUI thread's event queue.
The worker's signals are connected to slots of the runner, so they are delivered in the GUI
thread; the runner drops anything from a generation older than the latest submitted one and
re-emits the rest as ``finished`` / ``failed`` / ``progress``. Nothing here knows about attention.
"""

from __future__ import annotations

import contextlib
import inspect
import re
import threading
import time
import traceback
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QObject, QThread, Signal, Slot

from attndesk.core.errors import Cancelled, ConfigError
from attndesk.jobs import JobContext

from .turns import Turns

_THREADS: weakref.WeakSet[QThread] = weakref.WeakSet()

# At most this many progress signals per second cross to the GUI thread (a blocked core may
# report thousands of blocks; each queued signal costs the event loop a little).
_PROGRESS_INTERVAL_S = 0.05
_NUMBERS = re.compile(r"[\d.,%/]+")


def _stage_of(message: str) -> str:
    """A progress message without its counters: "block 3 of 40" and "block 4 of 40" are one stage."""
    return _NUMBERS.sub("", message)


def running_threads() -> list[QThread]:
    """Every QThread started by a JobRunner that is still running (the test suite checks this)."""
    alive = []
    for thread in list(_THREADS):
        try:
            if thread.isRunning():
                alive.append(thread)
        except RuntimeError:  # the C++ object is already gone
            pass
    return alive


def _takes_context(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` takes a ``ctx`` keyword (any **kwargs takes it)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "ctx" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


@dataclass
class _Job:
    generation: int
    fn: Callable[..., Any]
    args: tuple
    kwargs: dict
    ctx: JobContext = field(default_factory=JobContext)  # cancelled when superseded or dropped


class _Worker(QObject):
    """Lives in the worker thread; runs whatever the mailbox holds when woken."""

    done = Signal(int, object)
    error = Signal(int, str)
    cancelled = Signal(int)
    progressed = Signal(int, float, str)
    began = Signal(int)
    reported = Signal(int)  # the first item of a new batch of reports was queued

    def __init__(self, runner: JobRunner) -> None:
        super().__init__()
        self._runner = runner

    @Slot()
    def run_pending(self) -> None:
        job = self._runner._take_pending()
        if job is None:  # a newer wake already took it
            return
        self.began.emit(job.generation)
        last_emit = [0.0]

        last_stage = [""]

        def progress(fraction: float, message: str = "") -> None:
            # a new stage always crosses (its numbers aside): a dropped "importing transformers"
            # would leave "checking the folder" on screen for the seconds the import takes
            now, stage = time.monotonic(), _stage_of(str(message))
            if fraction >= 1.0 or now - last_emit[0] >= _PROGRESS_INTERVAL_S or stage != last_stage[0]:
                last_emit[0], last_stage[0] = now, stage
                self.progressed.emit(job.generation, float(fraction), str(message))

        def report(item: object) -> None:
            self._runner._queue_report(job.generation, item, self.reported)

        ctx = JobContext(progress, report=report, parent=job.ctx)
        extra = {"ctx": ctx} if "ctx" not in job.kwargs and _takes_context(job.fn) else {}
        turns = self._runner._turns
        try:
            with turns.turn(job.ctx) if turns is not None else contextlib.nullcontext():
                result = job.fn(*job.args, **job.kwargs, **extra)
        except Exception as exc:
            if _is_cancelled(exc) or job.ctx.cancelled:
                self.cancelled.emit(job.generation)
            else:
                self.error.emit(job.generation, _describe(exc))
        else:
            if job.ctx.cancelled:
                self.cancelled.emit(job.generation)
            else:
                self.done.emit(job.generation, result)
        finally:
            self._runner._job_ended(job)


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
    """GUI-side handle: submit jobs, cancel, shut down. Signals arrive in the GUI thread."""

    finished = Signal(int, object)  # generation, result
    failed = Signal(int, str)  # generation, message
    progress = Signal(int, float, str)  # generation, fraction, message
    started = Signal(int)  # generation: the worker picked it up
    cancelled = Signal(int)  # generation: stopped on request (or superseded while running)
    reportsWaiting = Signal(int)  # generation: items queued by ``report``; fetch them with take_reports()

    _wake = Signal()

    def __init__(
        self, parent: QObject | None = None, name: str = "attndesk-worker", *, turns: Turns | None = None
    ) -> None:
        super().__init__(parent)
        self._turns = turns  # jobs wait for their turn here (shared with other runners), or not at all
        self._lock = threading.Lock()
        self._pending: _Job | None = None
        self._running: _Job | None = None
        self._latest = 0  # newest generation submitted; older results are stale
        self._name = name
        self.setObjectName(name)
        self._thread: QThread | None = None
        self._worker: _Worker | None = None
        self._shut = False
        self._reports: list[tuple[int, Any]] = []  # (generation, item) queued by a job's ``report``

    # -- public API --------------------------------------------------------------------------
    def submit(self, generation: int, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """Queue ``fn(*args, **kwargs)``; replaces a queued job and cancels a running older one."""
        if self._shut:
            raise RuntimeError("the job runner has been shut down")
        self._ensure_thread()
        with self._lock:
            self._latest = max(self._latest, generation)
            self._pending = _Job(generation, fn, args, kwargs)
            if self._running is not None and self._running.generation < generation:
                self._running.ctx.cancel()  # its result would be dropped anyway
        self._wake.emit()

    def cancel(self) -> None:
        """Drop the queued job, ask the running one to stop, and stop waiting for either."""
        with self._lock:
            dropped = self._pending
            self._pending = None
            running = self._running
            if running is not None:
                running.ctx.cancel()
            self._latest += 1  # whatever still arrives is stale now
        if dropped is not None:
            self.cancelled.emit(dropped.generation)
        if running is not None:
            self.cancelled.emit(running.generation)

    def is_busy(self) -> bool:
        """A job is queued or running (a paused one too: closing the window still ends it)."""
        with self._lock:
            return self._pending is not None or self._running is not None

    def is_working(self) -> bool:
        """A job is queued, or runs and is not waiting for its user (``JobContext.paused``: a
        paused training run is no work under way)."""
        with self._lock:
            return self._pending is not None or (self._running is not None and not self._running.ctx.is_paused)

    def take_reports(self) -> list[Any]:
        """Every item the current job queued with ``report`` since the last call, oldest first
        (items of older generations are dropped)."""
        with self._lock:
            items, self._reports = self._reports, []
        return [item for generation, item in items if self._fresh(generation)]

    def shutdown(self, timeout_s: float | None = None) -> bool:
        """Cancel, stop the thread and join it. Returns False only if ``timeout_s`` ran out."""
        self._shut = True
        self.cancel()
        thread = self._thread
        if thread is None:
            return True
        thread.quit()
        if timeout_s is None:
            thread.wait()
        elif not thread.wait(int(timeout_s * 1000)):
            return False
        self._thread = None
        if self._worker is not None:
            self._worker.deleteLater()
            self._worker = None
        return True

    # -- internals ----------------------------------------------------------------------------
    def _ensure_thread(self) -> None:
        if self._thread is not None:
            return
        thread = QThread()  # no parent: we join and drop it ourselves in shutdown()
        thread.setObjectName(self._name)
        worker = _Worker(self)
        worker.moveToThread(thread)
        self._wake.connect(worker.run_pending)  # queued: runner and worker live in different threads
        worker.done.connect(self._on_done)
        worker.error.connect(self._on_error)
        worker.cancelled.connect(self._on_cancelled)
        worker.progressed.connect(self._on_progress)
        worker.began.connect(self._on_began)
        worker.reported.connect(self._on_reported)
        _THREADS.add(thread)
        self._thread, self._worker = thread, worker
        thread.start()

    def _take_pending(self) -> _Job | None:  # worker thread
        with self._lock:
            job, self._pending = self._pending, None
            self._running = job
            return job

    def _queue_report(self, generation: int, item: Any, signal) -> None:  # worker thread
        with self._lock:
            first = not self._reports or self._reports[-1][0] != generation
            self._reports.append((generation, item))
        if first:
            signal.emit(generation)

    def _job_ended(self, job: _Job) -> None:  # worker thread
        with self._lock:
            if self._running is job:
                self._running = None

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
