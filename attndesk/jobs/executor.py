"""One executor for every background job: a few worker threads, a latest-wins slot per lane,
and the turn rule. Qt-free: whoever submits a job wraps its own delivery (the window's bridge,
``app/jobs/worker.py``, posts results to the GUI thread).

- A ``Channel`` is a declaration: a name and whether its jobs take the side jobs' one turn.
- A ``Lane`` is one open use of a channel (a window's "statistics" channel, a test's runner): it
  holds at most one queued job and one running job. Submitting replaces the queued job and
  cancels the running one's context; the newer job starts once the older has ended, so a lane's
  jobs never overlap.
- The turn: jobs of channels that take turns compute one at a time, whichever lane they come
  from; a job that waits for the turn holds no thread and leaves at once when its lane is
  cancelled. Channels that must not wait (the run, presenting it, the corpus pass, training,
  small chores) are declared with ``takes_turn=False``.
- A transient lane (a widget's one-off requests: nothing tells them when the widget goes away)
  counts as open only while it has a job.
- Threads: a worker starts when a job is ready and no worker is free, and stays until no lane is
  open; the last lane to close joins every worker. The turn rule bounds how many run at once:
  the unturned lanes' jobs and one turned job. Nothing polls: workers sleep on one condition
  until a job is ready.
"""

from __future__ import annotations

import itertools
import threading
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from .context import JobContext


@dataclass(frozen=True)
class Channel:
    """A kind of background job, declared once: ``name`` (its lanes' thread-facing name) and
    ``takes_turn`` (False: a job of minutes, or one that must never wait behind another)."""

    name: str
    takes_turn: bool = True


@dataclass(eq=False)
class Job:
    """What a lane runs: ``work()`` in a worker thread (it reports its own outcome; an exception
    that escapes it is printed and the worker goes on) and the context its cancel goes to."""

    work: Callable[[], None]
    ctx: JobContext = field(default_factory=JobContext)
    tag: int = 0  # the submitter's number for it (a generation)
    holds_turn: bool = False  # set by the executor while it computes in the turn


class Lane:
    """One open use of a channel (see the module docstring); made by ``Executor.open``."""

    def __init__(self, executor: Executor, channel: Channel, transient: bool) -> None:
        self.channel, self.transient = channel, transient
        self._executor = executor
        self.pending: Job | None = None
        self.running: Job | None = None
        self.order = 0  # when its queued job was submitted: ready lanes start oldest first
        self.closed = False

    def submit(self, job: Job) -> Job | None:
        """Queue ``job``: it replaces the queued one (returned, never run) and cancels the running
        one's context. Raises RuntimeError once the lane is closed."""
        return self._executor._submit(self, job)

    def cancel(self) -> tuple[Job | None, Job | None]:
        """Drop the queued job and cancel the running one's context: (dropped, running)."""
        return self._executor._cancel(self)

    def close(self, timeout_s: float | None = None) -> bool:
        """Cancel, then wait for the running job to end; the last lane to close joins the
        workers. False only if ``timeout_s`` ran out (the lane then closes when the job ends)."""
        return self._executor._close(self, timeout_s)

    def is_busy(self) -> bool:
        """A job is queued or running (a paused one too)."""
        with self._executor._cond:
            return self.pending is not None or self.running is not None

    def is_working(self) -> bool:
        """A job is queued, or runs and does not wait for its user (``JobContext.paused``)."""
        with self._executor._cond:
            return self.pending is not None or (self.running is not None and not self.running.ctx.is_paused)


class Executor:
    """See the module docstring. ``executor()`` is the process's."""

    def __init__(self, name: str = "attndesk-worker") -> None:
        self._name = name
        self._cond = threading.Condition()
        self._lanes: list[Lane] = []
        self._ready: deque[tuple[Lane, Job]] = deque()
        self._workers: list[threading.Thread] = []
        self._leaving: list[threading.Thread] = []  # told to leave: no lane is open
        self._free = 0  # workers with nothing to do
        self._turn_held = False
        self._orders = itertools.count(1)
        self._numbers = itertools.count(1)

    # -- lanes -----------------------------------------------------------------------------------
    def open(self, channel: Channel, *, transient: bool = False) -> Lane:
        lane = Lane(self, channel, transient)
        if not transient:
            with self._cond:
                self._lanes.append(lane)
        return lane

    def _submit(self, lane: Lane, job: Job) -> Job | None:
        with self._cond:
            if lane.closed:
                raise RuntimeError(f"the {lane.channel.name} lane has been closed")
            if lane not in self._lanes:  # a transient lane opens again
                self._lanes.append(lane)
            replaced, lane.pending = lane.pending, job
            lane.order = next(self._orders)
            running = lane.running
            self._dispatch()
        if running is not None:
            running.ctx.cancel()  # superseded: its answer would be dropped anyway
        return replaced

    def _cancel(self, lane: Lane) -> tuple[Job | None, Job | None]:
        with self._cond:
            dropped, lane.pending = lane.pending, None
            running = lane.running
            if lane.transient and running is None:
                self._drop(lane)
        if running is not None:
            running.ctx.cancel()
        return dropped, running

    def _close(self, lane: Lane, timeout_s: float | None) -> bool:
        lane.cancel()
        with self._cond:
            lane.closed = True
            if not self._cond.wait_for(lambda: lane.running is None, timeout_s):
                lane.transient = True  # no longer open once its job has ended
                return False
            self._drop(lane)
            leaving = [] if self._lanes else list(self._leaving)
        for worker in leaving:
            worker.join()
        return True

    def _drop(self, lane: Lane) -> None:
        """``lane`` is no longer open; with no lane left, the workers leave (under the lock)."""
        if lane in self._lanes:
            self._lanes.remove(lane)
        if not self._lanes:
            self._leaving += self._workers
            self._workers = []
            self._cond.notify_all()

    # -- what is going on --------------------------------------------------------------------------
    def turn_busy(self) -> bool:
        """A job holds the side jobs' turn now."""
        with self._cond:
            return self._turn_held

    def waiting(self) -> int:
        """Jobs queued on a lane that takes turns, waiting for the turn (or their lane's older job)."""
        with self._cond:
            return sum(1 for lane in self._lanes if lane.channel.takes_turn and lane.pending and lane.running is None)

    def working(self) -> list[str]:
        """The channel names of the lanes with a job queued or at work (a paused job is no work)."""
        with self._cond:
            return [
                lane.channel.name
                for lane in self._lanes
                if lane.pending is not None or (lane.running is not None and not lane.running.ctx.is_paused)
            ]

    def threads(self) -> list[threading.Thread]:
        """The workers still alive (those leaving too, until they have left)."""
        with self._cond:
            self._leaving = [w for w in self._leaving if w.is_alive()]
            return [w for w in self._workers + self._leaving if w.is_alive()]

    # -- scheduling (under the condition's lock) ----------------------------------------------------
    def _dispatch(self) -> None:
        """Hand every lane whose queued job may start now to a worker, oldest first."""
        ready = sorted((lane for lane in self._lanes if lane.pending and lane.running is None), key=lambda x: x.order)
        for lane in ready:
            job = lane.pending
            assert job is not None
            if lane.channel.takes_turn:
                if self._turn_held:
                    continue
                self._turn_held = job.holds_turn = True
            lane.pending, lane.running = None, job
            self._ready.append((lane, job))
        while self._free < len(self._ready):
            worker = threading.Thread(target=self._serve, name=f"{self._name}-{next(self._numbers)}", daemon=True)
            self._workers.append(worker)
            self._free += 1
            worker.start()
        self._cond.notify_all()

    def _serve(self) -> None:  # a worker thread
        me = threading.current_thread()
        with self._cond:
            while True:
                while not self._ready and me in self._workers:
                    self._cond.wait()
                if not self._ready:  # the last lane closed
                    self._free -= 1
                    return
                lane, job = self._ready.popleft()
                self._free -= 1
                self._cond.release()
                try:
                    job.work()
                except BaseException:  # the work reports its own outcome: this is a bug in it
                    traceback.print_exc()
                finally:
                    self._cond.acquire()
                lane.running = None
                if job.holds_turn:
                    self._turn_held = False
                self._free += 1
                if lane.transient and lane.pending is None:
                    self._drop(lane)
                self._dispatch()


_executor = Executor()


def executor() -> Executor:
    """The process's executor (memory and cores are the process's, whatever the window)."""
    return _executor


__all__ = ["Channel", "Executor", "Job", "Lane", "executor"]
