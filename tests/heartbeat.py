"""The GUI-thread heartbeat shared by the responsiveness tests and the UI benchmarks.

A Qt timer beats every 5 ms on the GUI thread; the interval between two beats is how long the event
loop could not run. With the default clock (``time.perf_counter``) that is wall time; with
``clock=time.thread_time`` it is the GUI thread's own CPU time, which does not count the thread being
descheduled on a loaded machine (``benchmarks/bench_relayout.py``). Qt only, no attndesk: the
benchmarks import it as ``tests.heartbeat``."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

from PySide6.QtCore import QEventLoop, Qt, QTimer


class Heartbeat:
    """``with Heartbeat() as beat: ...`` beats from entry to exit; ``beat.worst`` is the longest gap
    in seconds, ``beat.gaps`` all of them (the interval up to ``stop()`` counts too)."""

    def __init__(self, interval_ms: int = 5, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.beats: list[float] = []
        self._timer = QTimer(interval=interval_ms)
        self._timer.setTimerType(Qt.TimerType.PreciseTimer)
        self._timer.timeout.connect(self.beat)

    def beat(self) -> None:
        self.beats.append(self.clock())

    def start(self) -> Heartbeat:
        self.beats = [self.clock()]
        self._timer.start()
        return self

    def stop(self) -> None:
        self._timer.stop()
        self.beat()

    def __enter__(self) -> Heartbeat:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def gaps(self) -> list[float]:
        return [b - a for a, b in itertools.pairwise(self.beats)]

    @property
    def worst(self) -> float:
        return max(self.gaps, default=0.0)

    @property
    def elapsed(self) -> float:
        return self.beats[-1] - self.beats[0] if self.beats else 0.0


def run_event_loop(ms: int, until=None) -> None:
    """Run Qt's own event loop (idle in C++, as in the app: a Python polling loop would take the GIL
    from a worker) for ``ms`` milliseconds, or until the signal ``until`` is emitted if sooner."""
    loop = QEventLoop()
    QTimer.singleShot(max(1, int(ms)), loop.quit)
    if until is not None:
        until.connect(loop.quit)
    try:
        loop.exec()
    finally:
        if until is not None:
            until.disconnect(loop.quit)
