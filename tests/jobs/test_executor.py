"""The one executor, without Qt: a lane's newest job wins and its jobs never overlap, turned jobs
compute one at a time and wait without a thread, unturned ones run beside them, a paused job is
busy but not working, and closing the last lane joins every worker."""

from __future__ import annotations

import threading

import pytest

from attndesk.jobs import JobContext
from attndesk.jobs.executor import Channel, Executor, Job

WAIT_S = 5


class Recorder:
    """Jobs that note what ran, how many ran at once, and hold until released."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ran: list[str] = []
        self.now = self.most = 0
        self.release = threading.Event()
        self.started = {name: threading.Event() for name in "abcdef"}

    def job(self, name: str, ctx: JobContext | None = None) -> Job:
        ctx = ctx or JobContext()

        def work() -> None:
            with self.lock:
                self.ran.append(name)
                self.now += 1
                self.most = max(self.most, self.now)
            self.started[name].set()
            self.release.wait(WAIT_S)
            with self.lock:
                self.now -= 1

        return Job(work, ctx)


@pytest.fixture
def pool():
    executor = Executor(name="test-executor")
    lanes = []
    yield executor, lanes
    for lane in lanes:
        lane.close(WAIT_S)
    assert executor.threads() == []


def open_lane(pool, channel: Channel):
    executor, lanes = pool
    lane = executor.open(channel)
    lanes.append(lane)
    return lane


def test_the_newest_job_of_a_lane_wins_and_its_jobs_never_overlap(pool):
    rec = Recorder()
    lane = open_lane(pool, Channel("a", takes_turn=False))
    first = JobContext()
    lane.submit(rec.job("a", first))
    assert rec.started["a"].wait(WAIT_S)
    assert lane.submit(rec.job("b")) is None
    replaced = lane.submit(rec.job("c"))
    assert replaced is not None and first.cancelled  # "b" is handed back, "a" is told to stop
    rec.release.set()
    assert rec.started["c"].wait(WAIT_S)
    assert lane.close(WAIT_S)
    assert rec.ran == ["a", "c"] and rec.most == 1


def test_turned_jobs_take_turns_without_a_thread_and_unturned_ones_run_beside(pool):
    executor, _ = pool
    rec = Recorder()
    turned = [open_lane(pool, Channel(name)) for name in "abc"]
    for name, lane in zip("abc", turned, strict=True):
        lane.submit(rec.job(name))
    assert rec.started["a"].wait(WAIT_S)
    assert executor.waiting() == 2 and executor.turn_busy()
    assert len(executor.threads()) == 1  # the two waiting jobs hold no thread
    turned[1].cancel()  # a waiting job leaves at once
    assert executor.waiting() == 1
    open_lane(pool, Channel("d", takes_turn=False)).submit(rec.job("d"))
    assert rec.started["d"].wait(WAIT_S)  # beside the turned job
    assert rec.most == 2 and len(executor.threads()) == 2
    rec.release.set()
    assert rec.started["c"].wait(WAIT_S)
    for lane in turned:
        assert lane.close(WAIT_S)
    assert sorted(rec.ran) == ["a", "c", "d"] and not executor.turn_busy()


def test_a_paused_job_is_busy_but_not_working(pool):
    lane = open_lane(pool, Channel("train", takes_turn=False))
    paused, release = threading.Event(), threading.Event()
    ctx = JobContext()

    def work() -> None:
        with ctx.paused():
            paused.set()
            release.wait(WAIT_S)

    lane.submit(Job(work, ctx))
    assert paused.wait(WAIT_S)
    assert lane.is_busy() and not lane.is_working()
    release.set()
    assert lane.close(WAIT_S)
    assert not lane.is_busy()


def test_closing_waits_for_the_running_job_and_the_last_lane_joins_the_workers(pool):
    executor, _ = pool
    rec = Recorder()
    first, second = open_lane(pool, Channel("a", takes_turn=False)), open_lane(pool, Channel("b"))
    first.submit(rec.job("a"))
    second.submit(rec.job("b"))
    assert rec.started["a"].wait(WAIT_S) and rec.started["b"].wait(WAIT_S)
    assert not first.close(0.05)  # the job ignores its cancel: the wait runs out
    with pytest.raises(RuntimeError):
        first.submit(rec.job("c"))
    rec.release.set()
    assert second.close(WAIT_S)  # the timed-out lane closes itself once its job has ended
    for worker in executor.threads():
        worker.join(WAIT_S)
    assert executor.threads() == []


def test_workers_are_kept_and_reused_while_a_lane_is_open(pool):
    """One after another, jobs of several lanes run on the same worker (no thread per channel)."""
    ran_on = []
    for name in "abc":
        done = threading.Event()
        lane = open_lane(pool, Channel(name))
        lane.submit(Job(lambda d=done: (ran_on.append(threading.current_thread()), d.set())))
        assert done.wait(WAIT_S)
        with lane._executor._cond:  # the worker is free again once its lane is
            assert lane._executor._cond.wait_for(lambda lane=lane: lane.running is None, WAIT_S)
    assert len(ran_on) == 3 and len(set(ran_on)) == 1
