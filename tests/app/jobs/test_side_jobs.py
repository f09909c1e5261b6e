"""SideJobs' busy contract: a requester's ``busy(True)`` at submit is followed by exactly one
``busy(False)`` however its job ends (answered, failed, superseded by another requester,
cancelled, stopped by itself, dropped as stale for a result no longer on screen), and a job of the
same requester that replaces or follows it hands the busy state on without a gap."""

from __future__ import annotations

import itertools
import threading
import time
from types import SimpleNamespace

import pytest
from PySide6.QtCore import QObject

from attndesk.app.jobs.compute import SideJobs
from attndesk.app.jobs.worker import running_threads
from attndesk.errors import Cancelled
from attndesk.jobs.executor import Channel
from tests.conftest import TIMEOUT_MS

A, B = Channel("a"), Channel("b")


class Controller(QObject):
    """What SideJobs asks of its controller: generation numbers and the ids of the run on screen."""

    def __init__(self) -> None:
        super().__init__()
        self._ids = itertools.count(1)
        self.ids = (1, 1)

    def current_ids(self):
        return self.ids


@pytest.fixture
def controller(qapp):
    return Controller()


@pytest.fixture
def side(controller):
    jobs = SideJobs(controller)
    yield jobs
    jobs.shutdown()
    assert running_threads() == []


class Log:
    """What one requester is told, in order."""

    def __init__(self) -> None:
        self.events: list = []

    def busy(self, flag: bool) -> None:
        self.events.append(("busy", flag))

    def done(self, result) -> None:
        self.events.append(("done", result))

    def failed(self, message: str) -> None:
        self.events.append(("failed", message))

    def over(self) -> bool:
        return self.events[-1:] == [("busy", False)]


def held(release: threading.Event, started: threading.Event | None = None, result="held"):
    """A job that runs until ``release`` (or its cancel)."""

    def job(*, ctx):
        if started is not None:
            started.set()
        while not release.is_set():
            ctx.check()
            time.sleep(0.005)
        return result

    return job


def test_an_answer_or_a_failure_comes_before_the_one_busy_false(qtbot, side):
    log = Log()
    side.submit(A, lambda: 7, done=log.done, failed=log.failed, busy=log.busy, scope=None)
    qtbot.waitUntil(log.over, timeout=TIMEOUT_MS)
    assert log.events == [("busy", True), ("done", 7), ("busy", False)]

    def boom():
        raise RuntimeError("no")

    bad = Log()
    side.submit(A, boom, done=bad.done, failed=bad.failed, busy=bad.busy, scope=None)
    qtbot.waitUntil(bad.over, timeout=TIMEOUT_MS)
    assert bad.events == [("busy", True), ("failed", "RuntimeError: no"), ("busy", False)]


def test_a_channel_is_busy_until_its_answer_is_handled(qtbot, side):
    """The job's thread ends before the GUI thread handles the answer it posted: the channel
    counts as busy until then, so a wait for "no side job busy" finds every requester idle."""
    log = Log()
    side.submit(A, lambda: 7, done=log.done, busy=log.busy, scope=None)
    runner = side._channels[A].runner
    for _ in range(4000):  # the job ends in its thread; no Qt event is handled here meanwhile
        if not runner.is_busy():
            break
        time.sleep(0.005)
    assert not runner.is_busy() and log.events == [("busy", True)]
    assert side.is_busy(A) and side.any_busy()
    qtbot.waitUntil(log.over, timeout=TIMEOUT_MS)
    assert log.events == [("busy", True), ("done", 7), ("busy", False)]
    assert not side.is_busy(A) and not side.any_busy()


def test_the_same_requesters_newer_job_keeps_the_busy_state_until_it_answers(qtbot, side):
    log, release, started = Log(), threading.Event(), threading.Event()
    side.submit(A, held(release, started, "first"), done=log.done, busy=log.busy, scope=None)
    assert started.wait(TIMEOUT_MS / 1000)
    side.submit(A, lambda: "second", done=log.done, busy=log.busy, scope=None)
    qtbot.waitUntil(log.over, timeout=TIMEOUT_MS)
    qtbot.waitUntil(lambda: not side.is_busy(A), timeout=TIMEOUT_MS)
    assert log.events == [("busy", True), ("busy", True), ("done", "second"), ("busy", False)]


def test_another_requesters_job_on_the_channel_ends_the_first_ones_busy_state(qtbot, side):
    first, second, release = Log(), Log(), threading.Event()
    side.submit(A, held(release), done=first.done, busy=first.busy, scope=None)
    side.submit(A, lambda: 2, done=second.done, busy=second.busy, scope=None)
    assert first.events == [("busy", True), ("busy", False)]  # at once: its answer will never come
    qtbot.waitUntil(second.over, timeout=TIMEOUT_MS)
    assert second.events == [("busy", True), ("done", 2), ("busy", False)]


def test_cancel_ends_the_busy_state_at_once_and_the_job_gives_no_answer(qtbot, side):
    log, release, started = Log(), threading.Event(), threading.Event()
    side.submit(A, held(release, started), done=log.done, failed=log.failed, busy=log.busy, scope=None)
    assert started.wait(TIMEOUT_MS / 1000)
    side.cancel(A)
    assert log.events == [("busy", True), ("busy", False)]
    qtbot.waitUntil(lambda: not side.is_busy(A), timeout=TIMEOUT_MS)
    assert log.events == [("busy", True), ("busy", False)]


def test_a_job_that_stops_itself_ends_the_busy_state(qtbot, side):
    """A job may raise Cancelled though nobody cancelled it (a part of it stopped): it has no
    answer, and its requester must not wait for one."""

    def stops():
        raise Cancelled("a part of it was stopped")

    log = Log()
    side.submit(A, stops, done=log.done, failed=log.failed, busy=log.busy, scope=None)
    qtbot.waitUntil(log.over, timeout=TIMEOUT_MS)
    assert log.events == [("busy", True), ("busy", False)]


def test_a_scoped_job_ends_its_busy_state_when_a_new_run_replaces_its_result(qtbot, side, controller):
    # running when the new run is published: cancelled then
    log, release, started = Log(), threading.Event(), threading.Event()
    side.submit(A, held(release, started), done=log.done, busy=log.busy, scope="run")
    assert started.wait(TIMEOUT_MS / 1000)
    controller.ids = (2, 2)
    side.on_published(SimpleNamespace(run_id=2, shown_id=2))
    assert log.events == [("busy", True), ("busy", False)]
    qtbot.waitUntil(lambda: not side.is_busy(A), timeout=TIMEOUT_MS)
    # finished before the new run came: its answer, stale once it arrives, is dropped
    stale = Log()
    side.submit(B, lambda: "old", done=stale.done, busy=stale.busy, scope="run")
    controller.ids = (3, 3)  # the new run is on screen before the answer is delivered
    qtbot.waitUntil(stale.over, timeout=TIMEOUT_MS)
    assert stale.events == [("busy", True), ("busy", False)]


def test_an_answer_that_submits_the_next_step_keeps_the_busy_state_without_a_gap(qtbot, side):
    log, steps = Log(), []

    def stepped(result):
        steps.append(result)
        if result < 3:
            side.submit(A, lambda n=result + 1: n, done=stepped, busy=log.busy, scope=None)

    side.submit(A, lambda: 1, done=stepped, busy=log.busy, scope=None)
    qtbot.waitUntil(log.over, timeout=TIMEOUT_MS)
    assert steps == [1, 2, 3]
    assert log.events == [("busy", True)] * 3 + [("busy", False)]


def test_shutdown_joins_the_jobs_and_tells_no_requester(qtbot, side):
    """The window is closing: its widgets are not called back while it goes."""
    log, release, started = Log(), threading.Event(), threading.Event()
    side.submit(A, held(release, started), done=log.done, busy=log.busy, scope=None)
    assert started.wait(TIMEOUT_MS / 1000)
    side.shutdown()
    assert log.events == [("busy", True)] and running_threads() == []


def test_a_channel_is_a_declaration_not_a_name(side):
    """A name would match no lane: ``is_busy("a")`` would say False for ever, whatever runs."""
    for ask in (side.is_busy, side.cancel):
        with pytest.raises(TypeError, match="declare it"):
            ask("a")
