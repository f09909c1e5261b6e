"""Side jobs take turns on the one executor (attndesk/jobs/executor.py): one computes at a time and a
waiting one holds no thread, a waiting job can be cancelled, the main run and the channels declared
``takes_turn=False`` never wait."""

from __future__ import annotations

import itertools
import threading
import time

import pytest
from PySide6.QtCore import QObject

from attndesk.app.jobs.channels import COMPARE, CORPUS, CORPUS_QUERY, MEMORY, PRESENT, STATISTICS, TEACHING
from attndesk.app.jobs.compute import SideJobs
from attndesk.app.jobs.worker import JobRunner, running_threads
from attndesk.jobs import JobContext
from attndesk.jobs.executor import executor


class Overlap:
    """Jobs that note how many of them run at once; each holds until released."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = self.most = self.ran = 0
        self.release = threading.Event()

    def job(self, ctx: JobContext):
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        try:
            while not self.release.is_set():
                ctx.check()
                time.sleep(0.005)
            with self.lock:
                self.ran += 1
            return "done"
        finally:
            with self.lock:
                self.now -= 1


class Controller(QObject):
    """What SideJobs asks of its controller: generation numbers and the ids on screen."""

    def __init__(self) -> None:
        super().__init__()
        self._ids = itertools.count(1)

    def current_ids(self):
        return 0, 0


@pytest.fixture
def side(qapp):
    controller = Controller()
    jobs = SideJobs(controller)
    yield jobs
    jobs.shutdown()
    assert running_threads() == []


def test_side_channels_compute_one_at_a_time(qtbot, side):
    overlap, answers = Overlap(), []
    for channel in (STATISTICS, TEACHING, COMPARE):
        side.submit(channel, overlap.job, done=answers.append, scope=None)
    qtbot.waitUntil(lambda: overlap.now == 1 and executor().waiting() == 2, timeout=5000)
    time.sleep(0.2)
    assert overlap.most == 1  # the other two wait their turn...
    assert len(running_threads()) == 1  # ...and hold no thread while they wait
    overlap.release.set()
    qtbot.waitUntil(lambda: len(answers) == 3, timeout=5000)
    assert overlap.most == 1 and answers == ["done"] * 3


def test_unturned_channels_and_the_main_run_do_not_wait(qtbot, side, qapp):
    assert not PRESENT.takes_turn and not MEMORY.takes_turn
    overlap, answers = Overlap(), []
    side.submit(STATISTICS, overlap.job, done=answers.append, scope=None)
    qtbot.waitUntil(lambda: executor().turn_busy(), timeout=5000)
    side.submit(PRESENT, overlap.job, done=answers.append, scope=None)
    main = JobRunner()
    try:
        main.submit(1, overlap.job)
        qtbot.waitUntil(lambda: overlap.now == 3, timeout=5000)  # all three at once
    finally:
        overlap.release.set()
        main.shutdown(timeout_s=5)
    qtbot.waitUntil(lambda: len(answers) == 2, timeout=5000)


@pytest.mark.perf
def test_a_job_waiting_for_its_turn_is_cancelled_and_shut_down_at_once(qtbot, side):
    overlap, answers = Overlap(), []
    side.submit(STATISTICS, overlap.job, done=answers.append, scope=None)
    qtbot.waitUntil(lambda: overlap.now == 1, timeout=5000)
    side.submit(TEACHING, overlap.job, done=answers.append, scope=None)
    qtbot.waitUntil(lambda: executor().waiting() == 1, timeout=5000)
    side.cancel(TEACHING)
    qtbot.waitUntil(lambda: executor().waiting() == 0, timeout=2000)
    start = time.monotonic()
    side.shutdown()  # cancels the running one too, and joins both threads
    assert time.monotonic() - start < 2 and running_threads() == [] and answers == []
    assert overlap.ran == 0 and not executor().turn_busy()


def test_a_side_job_forwards_its_progress_and_a_long_corpus_pass_takes_no_turn(qtbot, side):
    assert not CORPUS.takes_turn and not CORPUS_QUERY.takes_turn  # minutes long: it must not stall the tabs' side jobs
    reports, answers = [], []

    def job(ctx):
        for step in range(3):
            ctx.progress((step + 1) / 3, f"step {step + 1} of 3")
            time.sleep(0.06)  # more than the worker's progress interval: every report crosses
        return "done"

    side.submit(CORPUS, job, done=answers.append, scope=None, progress=lambda f, m: reports.append((f, m)))
    qtbot.waitUntil(lambda: answers == ["done"], timeout=5000)
    assert reports == [(1 / 3, "step 1 of 3"), (2 / 3, "step 2 of 3"), (1.0, "step 3 of 3")]
    side.submit(CORPUS, job, done=answers.append, scope=None, progress=lambda f, m: reports.append((f, m)))
    side.cancel(CORPUS)  # a cancelled job's reports and answer go nowhere
    qtbot.waitUntil(lambda: not side.is_busy(CORPUS), timeout=5000)
    assert len(reports) == 3 and answers == ["done"]
