"""The compute controller: the one place that decides when to run, and which results are current.

It watches the ``AppState``. On every change it asks the active mode for a ``Request`` (a cheap
validation and a key naming the run's inputs) and compares the key with the last run's:

- a new key runs at once when nothing is in flight: there is no debounce;
- while a run is in flight (from submission until its result is drawn), changes are coalesced:
  when it ends, the newest state runs, so dragging a spin box shows intermediate results. A run
  in flight longer than ``PATIENCE_S`` (a long document, a model loading) gives way at once;
- the same key with other presentation choices (another layer of the same run) is presented
  again without a job;
- a config the core refuses is reported (``problemChanged``) and nothing runs until it is fixed.

Staleness has one rule here: every run and every presentation takes the next number from one
counter (``run_id`` / ``shown_id``), and a result, a plan or a side job's answer is used only
while its number is still the current one. ``SideJobs`` gives views their background work
(statistics, B - A, teaching pairs, zoom pictures) under the same rule. The ``JobRunner``s stay
the transport: lanes of the one executor (``attndesk.jobs.executor``), a newer job replacing a
queued one.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal, Slot

from attndesk.errors import ConfigError
from attndesk.jobs.executor import Channel
from attndesk.session.results import ConfigProblem, Held, InputProblem, Request, Shown, done_line
from attndesk.session.state import AppState, ModeChoice, ModeId
from attndesk.session.status import StatusModel

from . import channels
from .holdings import WindowLedger
from .worker import JobRunner

PATIENCE_S = 0.3  # a run in flight this long is not an "intermediate result": a newer request replaces it
PRESENT_TIMEOUT_MS = 3000  # a result nobody acknowledges as drawn ends its flight anyway


class Modes:
    """The modes of one window, by ``ModeId.kind``, and every mode's combo entries."""

    def __init__(self, modes: list[Any]) -> None:
        self._all = list(modes)
        self._by_kind = {m.kind: m for m in modes if m.kind}

    def __iter__(self):
        return iter(self._all)

    def for_id(self, mode_id: ModeId):
        return self._by_kind[mode_id.kind]

    def choices(self) -> list[ModeChoice]:
        return [choice for mode in self._all for choice in mode.choices()]

    def choice(self, mode_id: ModeId) -> ModeChoice | None:
        return next((c for c in self.choices() if c.id == mode_id), None)


@dataclass
class _Flight:
    run_id: int
    request: Request
    started: float
    explicit: bool
    published: bool = False  # the result is out, waiting to be drawn


class ComputeController(QObject):
    """Owns the main worker and the side jobs; publishes ``Shown`` results (see the module doc)."""

    published = Signal(object)  # Shown: a new run's result, or another view of the current run
    failed = Signal(str)  # a run failed; the previous result stays
    held = Signal(object)  # Held: a long run waits for an explicit Run (F5)
    planned = Signal(object)  # the current run's RunPlan, reported by the worker before the result
    progressed = Signal(float, str)
    cancelled = Signal()
    problemChanged = Signal(object)  # a ConfigProblem for the controls, or None
    busyChanged = Signal(bool)
    cancelRequested = Signal()  # Esc / Cancel: side work the user started (a generation) stops too
    _announced = Signal(int, object)  # (run_id, report) from the worker thread

    def __init__(self, state: AppState, modes: Modes, status: StatusModel, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.state, self.modes, self.status = state, modes, status
        self._ids = itertools.count(1)
        self._flight: _Flight | None = None
        self._dirty = False
        self._last: tuple[Any, frozenset[str]] | None = None  # (key, needs) of the last run asked for
        self._shown: Shown | None = None
        self._problem: ConfigProblem | None = None
        self._closed = False
        self._scheduled = False
        self.runner = JobRunner(self, channels.RUN)
        self.runner.finished.connect(self._on_finished)
        self.runner.failed.connect(self._on_failed)
        self.runner.cancelled.connect(self._on_cancelled)
        self.runner.progress.connect(self._on_progress)
        self._announced.connect(self._on_announced)
        self._present_timer = QTimer(self, singleShot=True, interval=PRESENT_TIMEOUT_MS)
        self._present_timer.timeout.connect(self._end_flight)
        self.side = SideJobs(self)
        # every holding of the window against the one memory budget (app/jobs/holdings.py)
        self.holdings = WindowLedger(
            state, status, lambda channel, fn: self.side.submit(channel, fn, done=lambda _r: None, scope=None), self
        )
        self.ledger = self.holdings.ledger
        for group in (state.events, state.view.events, state.pretrained.events):
            group.connect(self._on_state_changed)

    # -- public API -----------------------------------------------------------------------------
    def shown(self) -> Shown | None:
        """The result on screen (or on its way there), or None before the first."""
        return self._shown

    def current_ids(self) -> tuple[int, int]:
        """(run_id, shown_id) of the result on screen; (0, 0) before the first."""
        return (self._shown.run_id, self._shown.shown_id) if self._shown is not None else (0, 0)

    def is_busy(self) -> bool:
        return self._flight is not None and not self._flight.published

    def any_job_running(self) -> bool:
        """Whether a run or a side job is queued or running (closing then waits for it)."""
        return self.runner.is_busy() or self.side.any_busy()

    def is_pending(self) -> bool:
        """Whether a run is in flight or about to start (a change waits for the next loop turn)."""
        return self._scheduled or self._dirty or self.is_busy()

    def problem(self) -> ConfigProblem | None:
        """The config problem shown next to the controls, or None."""
        return self._problem

    @Slot()
    def run_now(self) -> None:
        """Run the current state now, even when it was run before or is a long run (Run, F5)."""
        self.evaluate(explicit=True)

    @Slot()
    def cancel(self) -> None:
        """Stop the run in flight and forget the changes waiting for it (Esc); the result on
        screen stays. The next change runs again."""
        self.cancelRequested.emit()
        if self.is_busy():
            self.runner.cancel()
        elif self._dirty:
            self._dirty = False
            self._last = None
            self.status.say("cancelled")
            self.cancelled.emit()

    def presented(self, shown_id: int) -> None:
        """The window drew the published result ``shown_id``: the run's flight ends."""
        if (
            self._flight is not None
            and self._flight.published
            and self._shown is not None
            and self._shown.shown_id == shown_id
        ):
            self._end_flight()

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._present_timer.stop()
        self.holdings.shutdown()
        self.runner.shutdown()
        self.side.shutdown()
        for mode in self.modes:
            mode.shutdown()

    # -- deciding -------------------------------------------------------------------------------
    def _on_state_changed(self, *_info: Any) -> None:
        """Several fields often change together (a session, a mode switch): look once they all have."""
        if not self._scheduled and not self._closed:
            self._scheduled = True
            QTimer.singleShot(0, self, self._scheduled_evaluate)

    def _scheduled_evaluate(self) -> None:
        self._scheduled = False
        self.evaluate()

    def evaluate(self, explicit: bool = False) -> None:
        """Run, re-present or wait, as the module docstring says (the only entry point)."""
        if self._closed:
            return
        request = self._request()
        if request is None:
            return
        if not explicit and self._answers(request):
            self._dirty = False
            self._represent_if_needed()
            return
        flight = self._flight
        if flight is not None and not explicit and time.monotonic() - flight.started < PATIENCE_S:
            self._dirty = True  # runs when the flight ends: newest state wins
            return
        self._submit(request, explicit)

    def _request(self) -> Request | None:
        mode = self.modes.for_id(self.state.mode)
        try:
            request = mode.request(self.state)
        except InputProblem as exc:
            self._refuse(None, str(exc))
            return None
        except ConfigError as exc:
            self._refuse(ConfigProblem(str(exc), getattr(exc, "field", None)), f"fix the parameters: {exc}")
            return None
        self._set_problem(None)
        return request

    def _answers(self, request: Request) -> bool:
        """Whether the last run asked for (whatever became of it) is this request."""
        return self._last is not None and self._last[0] == request.key and request.needs <= self._last[1]

    def _refuse(self, problem: ConfigProblem | None, message: str) -> None:
        """Nothing runs until the input is fixed: stop what is in flight, say why."""
        self._set_problem(problem)
        self._last = None
        self._dirty = False
        if self._flight is not None:
            self.runner.cancel()
            self._flight = None
        self.status.fail(message)
        self._set_busy(False)

    def _set_problem(self, problem: ConfigProblem | None) -> None:
        if problem != self._problem:
            self._problem = problem
            self.problemChanged.emit(problem)

    def _submit(self, request: Request, explicit: bool) -> None:
        run_id = next(self._ids)
        self._flight = _Flight(run_id, request, time.monotonic(), explicit)
        self._last = (request.key, request.needs)
        self._dirty = False
        self._present_timer.stop()
        job = request.job
        kwargs = dict(job.kwargs)
        if job.announce:
            kwargs["announce"] = lambda report, i=run_id: self._announced.emit(i, report)
        if "explicit" in kwargs:
            kwargs["explicit"] = explicit
        self.runner.submit(run_id, job.fn, *job.args, **kwargs)
        self.status.say(f"{job.description}…")
        self._set_busy(True)

    def _represent_if_needed(self) -> None:
        """Another view of the run on screen (e.g. another layer): built by a side job (a heatmap
        source of hundreds of tokens takes longer than a GUI-thread turn), newest choice wins."""
        shown = self._shown
        if shown is None or shown.mode != self.state.mode:
            return
        mode = self.modes.for_id(shown.mode)
        key = mode.present_key(self.state)
        if key == shown.present_key:
            self.side.cancel(channels.PRESENT)  # back to what is on screen: an older request is moot
            return
        self.side.submit(
            channels.PRESENT,
            mode.present,
            shown,
            key,
            scope="run",
            done=lambda again: self._presented(shown, again),
            failed=lambda message: self.status.fail(f"error: {message}"),
        )

    def _presented(self, base: Shown, again: Shown) -> None:
        again = again.replace(run_id=base.run_id, shown_id=next(self._ids), asked=base.asked, new_run=False)
        self._publish(again)
        self._represent_if_needed()  # the choice may have moved on while it was built

    # -- results --------------------------------------------------------------------------------
    def _current(self, run_id: int) -> bool:
        return self._flight is not None and self._flight.run_id == run_id and not self._flight.published

    @Slot(int, object)
    def _on_finished(self, run_id: int, answer: object) -> None:
        if not self._current(run_id):
            return
        if isinstance(answer, Held):
            self._flight = None
            self._set_busy(False)
            self.held.emit(answer)
            self._resume()
            return
        if not isinstance(answer, Shown):
            self._on_failed(run_id, f"the job returned {type(answer).__name__}, not a result")
            return
        flight = self._flight
        assert flight is not None, "checked by _current"
        shown = answer.replace(run_id=run_id, shown_id=next(self._ids), asked=flight.request.needs, new_run=True)
        flight.published = True
        self._set_busy(False)
        self._present_timer.start()
        self._publish(shown)
        self._represent_if_needed()  # e.g. the layer changed while it ran

    def _publish(self, shown: Shown) -> None:
        self._shown = shown
        self.status.say(done_line(shown))
        self.holdings.hold_run(shown)
        self.side.on_published(shown)
        self.published.emit(shown)

    @Slot(int, str)
    def _on_failed(self, run_id: int, message: str) -> None:
        if not self._current(run_id):
            return
        self._flight = None
        self._set_busy(False)
        keep = " (the previous result is still shown)" if self._shown is not None else ""
        self.status.fail(f"error: {message}{keep}")
        self.failed.emit(message)
        self._resume()

    @Slot(int)
    def _on_cancelled(self, run_id: int) -> None:
        if not self._current(run_id):
            return
        self._flight = None
        self._dirty = False
        self._last = None  # the next change runs, whatever it is
        self._set_busy(False)
        keep = "; the previous result is still shown" if self._shown is not None else ""
        self.status.say(f"cancelled{keep}")
        self.cancelled.emit()

    @Slot(int, float, str)
    def _on_progress(self, run_id: int, fraction: float, message: str) -> None:
        if not self._current(run_id):
            return
        self.status.progress = max(0.0, min(1.0, fraction))
        if message:
            self.status.say(f"computing: {message} ({fraction:.0%})")
        self.progressed.emit(fraction, message)

    @Slot(int, object)
    def _on_announced(self, run_id: int, report: object) -> None:
        if not self._current(run_id):
            return
        self.holdings.reserve_plan(report)
        self.planned.emit(report)

    @Slot()
    def _end_flight(self) -> None:
        self._present_timer.stop()
        if self._flight is not None and self._flight.published:
            self._flight = None
            self._resume()

    def _resume(self) -> None:
        """A flight ended: if the state moved meanwhile, its newest value runs now."""
        if self._dirty and not self._closed:
            self._dirty = False
            QTimer.singleShot(0, self, self.evaluate)  # after the drawing that ended the flight

    def _set_busy(self, busy: bool) -> None:
        if self.status.busy != busy:
            self.status.set_busy(busy)
            self.busyChanged.emit(busy)


def _declared(channel: Channel) -> Channel:
    """A channel must be a declaration (a name would silently match nothing)."""
    if not isinstance(channel, Channel):
        raise TypeError(f"not a Channel (declare it in app/jobs/channels.py): {channel!r}")
    return channel


@dataclass
class _Channel:
    runner: JobRunner
    tag: int = 0
    scope: str | None = None  # "run" or "shown": the answer counts only for that result
    bound: int = 0
    done: Callable[[Any], object] | None = None  # what it returns is ignored
    failed: Callable[[str], None] | None = None
    progress: Callable[[float, str], None] | None = None
    reported: Callable[[list], None] | None = None
    busy: Callable[[bool], None] | None = None  # shows the requester's job in flight; None: shown idle
    unanswered: bool = False  # the newest job's answer is still to be handled in the GUI thread


class SideJobs(QObject):
    """Background work beside the main run, one lane per channel on the one executor (opened on first use).

    ``submit(channel, fn, *args, done=..., failed=..., scope="run", **kwargs)``: the newest job of a channel
    replaces an older one; ``progress(fraction, message)``, if given, gets the job's progress reports
    (a ``fn`` taking a ``ctx``, see ``worker``); ``done(result)`` is called in the GUI thread only if the job is still
    the channel's newest and, with ``scope`` "run" (or "shown"), the result it was asked for is
    still the one on screen. A new run cancels the "run"-scoped jobs, any new presentation the
    "shown"-scoped ones; ``scope=None`` jobs (a timing comparison) are never cancelled by results.
    Channels that take turns compute one at a time (``attndesk.jobs.executor``; ``channels.py``
    declares which). A job that streams (its ``fn`` calls ``ctx.report``, see ``worker``) hands its
    items to ``reported(items)`` in the GUI thread, in batches, under the same rules as ``done``.

    ``busy(flag)``, if given, shows that the requester's job is in flight (a progress bar, a Cancel
    button): ``busy(True)`` at ``submit`` and ``busy(False)`` exactly once when it is over, however
    it ends: after ``done`` or ``failed`` returns (unless that submitted the channel's next job with
    the same ``busy``), or at once when it is cancelled (``cancel``, a new result for a scoped job,
    the job stopping itself), its answer is dropped as stale, or another requester's job replaces it.
    A superseded job of the same requester hands the busy state on to the newer one.
    """

    def __init__(self, controller: ComputeController) -> None:
        super().__init__(controller)
        self._controller = controller
        self._channels: dict[Channel, _Channel] = {}
        self._closed = False

    def submit(
        self,
        channel: Channel,
        fn: Callable[..., Any],
        *args: Any,
        done: Callable[[Any], object],
        failed: Callable[[str], None] | None = None,
        scope: str | None = "run",
        progress: Callable[[float, str], None] | None = None,
        reported: Callable[[list], None] | None = None,
        busy: Callable[[bool], None] | None = None,
        **kwargs: Any,
    ) -> None:
        if self._closed:
            return
        ch = self._channel(_declared(channel))
        if ch.busy is not None and ch.busy != busy:
            self._idle(ch)  # another requester's job replaces this one's
        ch.tag = next(self._controller._ids)
        ch.scope, ch.done, ch.failed, ch.progress, ch.reported = scope, done, failed, progress, reported
        ch.bound = self._id_for(scope)
        ch.unanswered = True
        ch.runner.submit(ch.tag, fn, *args, **kwargs)
        if busy is not None:
            ch.busy = busy
            busy(True)

    def cancel(self, channel: Channel) -> None:
        """Stop the channel's job: no callback but ``busy(False)`` follows."""
        ch = self._channels.get(_declared(channel))
        if ch is not None:
            self._forget(ch)
            ch.runner.cancel()

    def is_busy(self, channel: Channel) -> bool:
        """The channel's job is queued or running, or its answer (posted from the worker thread)
        is still to be handled: a requester's bar goes idle only then."""
        ch = self._channels.get(_declared(channel))
        return ch is not None and (ch.unanswered or ch.runner.is_busy())

    def any_busy(self) -> bool:
        return any(ch.unanswered or ch.runner.is_busy() for ch in self._channels.values())

    def on_published(self, shown: Shown) -> None:
        for channel, ch in self._channels.items():
            stale = (ch.scope == "run" and ch.bound != shown.run_id) or (
                ch.scope == "shown" and ch.bound != shown.shown_id
            )
            if stale and ch.runner.is_busy():
                self.cancel(channel)

    def shutdown(self) -> None:
        """Cancel and join every channel; the window is closing, so no requester is told."""
        self._closed = True
        for ch in self._channels.values():
            ch.busy = None
            self._forget(ch)
            ch.runner.shutdown()

    def _id_for(self, scope: str | None) -> int:
        run_id, shown_id = self._controller.current_ids()
        return {"run": run_id, "shown": shown_id}.get(scope or "", 0)

    def _channel(self, channel: Channel) -> _Channel:
        if channel not in self._channels:
            runner = JobRunner(self, channel)
            ch = _Channel(runner)
            runner.finished.connect(lambda tag, result, ch=ch: self._answer(ch, tag, result, None))
            runner.failed.connect(lambda tag, message, ch=ch: self._answer(ch, tag, None, message))
            runner.cancelled.connect(lambda tag, ch=ch: self._stopped(ch, tag))
            runner.progress.connect(lambda tag, fraction, message, ch=ch: self._progress(ch, tag, fraction, message))
            runner.reportsWaiting.connect(lambda tag, ch=ch: self._hand_reports(ch, tag))
            self._channels[channel] = ch
        return self._channels[channel]

    def _progress(self, ch: _Channel, tag: int, fraction: float, message: str) -> None:
        if tag == ch.tag and ch.progress is not None:
            ch.progress(fraction, message)

    def _current(self, ch: _Channel, tag: int) -> bool:
        return tag == ch.tag and (ch.scope is None or ch.bound == self._id_for(ch.scope))

    def _hand_reports(self, ch: _Channel, tag: int) -> None:
        items = ch.runner.take_reports()
        if items and ch.reported is not None and self._current(ch, tag):
            ch.reported(items)

    def _answer(self, ch: _Channel, tag: int, result: Any, message: str | None) -> None:
        if tag != ch.tag:
            return  # an older job of the channel: the newer one answers
        if ch.scope is not None and ch.bound != self._id_for(ch.scope):
            self._forget(ch)  # for a result no longer on screen
            return
        if ch.reported is not None:  # the items queued before the job ended come first
            self._hand_reports(ch, tag)
        callback = ch.done if message is None else ch.failed
        ch.done = ch.failed = ch.progress = ch.reported = None
        ch.unanswered = False  # (the callback may submit the channel's next job)
        try:
            if callback is not None:
                callback(result if message is None else message)
        finally:
            if ch.tag == tag:  # the callback did not submit the channel's next job
                self._idle(ch)

    def _stopped(self, ch: _Channel, tag: int) -> None:
        """The runner says the channel's job was cancelled (here, or by the job itself)."""
        if tag == ch.tag:
            self._forget(ch)

    def _forget(self, ch: _Channel) -> None:
        """The channel's job will not answer: drop its callbacks, show it idle."""
        ch.done = ch.failed = ch.progress = ch.reported = None
        ch.unanswered = False
        self._idle(ch)

    @staticmethod
    def _idle(ch: _Channel) -> None:
        busy, ch.busy = ch.busy, None
        if busy is not None:
            busy(False)


__all__ = ["PATIENCE_S", "ComputeController", "Modes", "SideJobs"]
