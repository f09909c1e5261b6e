"""The generic job worker: latest request wins, cancel, progress, errors, clean shutdown."""

from __future__ import annotations

import threading

import pytest
from PySide6.QtCore import QObject, QThread, Slot

from attndesk.app.jobs.worker import JobRunner, running_threads
from attndesk.errors import Cancelled


class Recorder(QObject):
    """Collects the runner's signals in the GUI thread (and checks that it is the GUI thread)."""

    def __init__(self, runner: JobRunner):
        super().__init__()
        self.finished, self.failed, self.cancelled, self.progress = [], [], [], []
        self.threads = set()
        runner.finished.connect(self.on_finished)
        runner.failed.connect(self.on_failed)
        runner.cancelled.connect(self.on_cancelled)
        runner.progress.connect(self.on_progress)

    def _note(self):
        self.threads.add(QThread.currentThread())

    @Slot(int, object)
    def on_finished(self, gen, result):
        self._note()
        self.finished.append((gen, result))

    @Slot(int, str)
    def on_failed(self, gen, msg):
        self._note()
        self.failed.append((gen, msg))

    @Slot(int)
    def on_cancelled(self, gen):
        self.cancelled.append(gen)

    @Slot(int, float, str)
    def on_progress(self, gen, frac, msg):
        self._note()
        self.progress.append((gen, frac, msg))


@pytest.fixture
def runner(qapp):
    r = JobRunner()
    yield r
    r.shutdown(timeout_s=10)
    assert running_threads() == []


def test_result_arrives_in_gui_thread_with_its_generation(qtbot, runner):
    rec = Recorder(runner)
    worker_thread = []

    def job(a, b, *, scale=1):
        worker_thread.append(threading.current_thread())
        return (a + b) * scale

    with qtbot.waitSignal(runner.finished, timeout=5000):
        runner.submit(1, job, 2, 3, scale=10)
    assert rec.finished == [(1, 50)]
    assert worker_thread[0] is not threading.main_thread()
    assert rec.threads == {QThread.currentThread()}  # delivered to the GUI thread
    assert len(running_threads()) == 1


def test_the_job_context_is_passed_only_when_accepted(qtbot, runner):
    seen = {}

    def wants_both(ctx):
        ctx.progress(0.5, "half")
        seen["cancel"] = ctx.cancelled
        return "ok"

    def wants_none(x):
        return x * 2

    rec = Recorder(runner)
    with qtbot.waitSignal(runner.finished, timeout=5000):
        runner.submit(1, wants_both)
    assert seen["cancel"] is False
    assert rec.finished[-1] == (1, "ok")
    assert (1, 0.5, "half") in rec.progress
    with qtbot.waitSignal(runner.finished, timeout=5000):
        runner.submit(2, wants_none, 21)
    assert rec.finished[-1] == (2, 42)


def test_newer_request_replaces_queued_and_cancels_running(qtbot, runner):
    """Job 1 blocks; job 2 is queued then replaced by job 3: only job 3's result is shown."""
    release = threading.Event()
    started = threading.Event()
    calls = []

    def slow(tag, ctx):
        calls.append(tag)
        started.set()
        while not release.wait(0.01):
            if ctx.cancelled:
                raise Cancelled("superseded")
        return tag

    def quick(tag):
        calls.append(tag)
        return tag

    rec = Recorder(runner)
    runner.submit(1, slow, "first")
    assert started.wait(5)
    runner.submit(2, quick, "second")  # queued behind the running job...
    runner.submit(3, quick, "third")  # ...and replaced before it ever runs
    with qtbot.waitSignal(runner.finished, timeout=5000):
        release.set()
    assert rec.finished == [(3, "third")]
    assert calls == ["first", "third"]  # "second" never ran; "first" was cancelled, not shown


def test_cancel_stops_waiting_and_drops_late_result(qtbot, runner):
    started = threading.Event()
    release = threading.Event()

    def ignores_cancel():
        started.set()
        release.wait(5)
        return "late"

    rec = Recorder(runner)
    runner.submit(1, ignores_cancel)
    assert started.wait(5)
    with qtbot.waitSignal(runner.cancelled, timeout=1000):
        runner.cancel()
    release.set()
    # the job finishes, but its result is stale now: wait until the worker is idle
    qtbot.waitUntil(lambda: not runner.is_busy(), timeout=5000)
    qtbot.wait(50)
    assert rec.finished == []
    assert rec.cancelled and rec.cancelled[0] == 1


def test_failure_becomes_a_message_and_the_worker_keeps_working(qtbot, runner):
    def boom():
        raise RuntimeError("CUDA out of memory. Tried to allocate 8.00 GiB")

    rec = Recorder(runner)
    with qtbot.waitSignal(runner.failed, timeout=5000):
        runner.submit(1, boom)
    gen, message = rec.failed[0]
    assert gen == 1 and message.startswith("out of memory") and "\n" not in message
    with qtbot.waitSignal(runner.finished, timeout=5000):
        runner.submit(2, lambda: 7)
    assert rec.finished == [(2, 7)]


def test_shutdown_joins_a_running_cooperative_job(qtbot, qapp):
    runner = JobRunner()
    started = threading.Event()

    def spin(ctx):
        started.set()
        while not ctx.cancelled:
            threading.Event().wait(0.005)
        raise Cancelled("stopped")

    runner.submit(1, spin)
    assert started.wait(5)
    assert runner.shutdown(timeout_s=5)
    assert running_threads() == []
    with pytest.raises(RuntimeError):
        runner.submit(2, lambda: 1)


def test_progress_is_throttled(qtbot, runner):
    def chatty(ctx):
        for i in range(20000):
            ctx.progress(i / 20000, "block")
        ctx.progress(1.0, "done")
        return "ok"

    rec = Recorder(runner)
    with qtbot.waitSignal(runner.finished, timeout=10000):
        runner.submit(1, chatty)
    qtbot.wait(20)
    assert 1 <= len(rec.progress) < 500
    assert rec.progress[-1][1] == 1.0


def test_reports_stream_in_order_in_batches_with_one_signal_per_batch(qtbot, runner):
    rec = Recorder(runner)
    batches, signals = [], []
    release = threading.Event()

    def on_waiting(gen):
        signals.append(gen)
        batches.append(runner.take_reports())

    runner.reportsWaiting.connect(on_waiting)

    def stream(*, ctx):
        for i in range(500):
            ctx.report(i)
            if i == 0:
                release.wait(5)  # the first batch is taken before the rest are queued
        return "done"

    def first_batch_taken():
        release.set()
        return bool(batches)

    with qtbot.waitSignal(runner.finished, timeout=10000):
        runner.submit(1, stream)
        qtbot.waitUntil(first_batch_taken, timeout=10000)
    batches.append(runner.take_reports())  # what came after the last signal
    assert [i for batch in batches for i in batch] == list(range(500))
    assert len(signals) < 500 and set(signals) == {1}  # coalesced: far fewer signals than items
    assert rec.finished == [(1, "done")] and runner.take_reports() == []


def test_a_job_waiting_for_its_user_is_busy_but_not_working(qtbot, runner):
    """A paused job (``ctx.paused``) still holds the runner (closing ends it) but does no work."""
    started, go, paused, release = (threading.Event() for _ in range(4))

    def waits(*, ctx):
        started.set()
        go.wait(5)
        with ctx.paused():
            paused.set()
            release.wait(5)
        return "resumed"

    runner.submit(1, waits)
    assert started.wait(5)
    assert runner.is_busy() and runner.is_working()  # running, not paused yet
    go.set()
    assert paused.wait(5)
    assert runner.is_busy() and not runner.is_working()
    release.set()
    with qtbot.waitSignal(runner.finished, timeout=5000):
        pass
    qtbot.waitUntil(lambda: not runner.is_busy(), timeout=5000)
    assert not runner.is_working()
