"""This processor's pace at the GUI thread's kind of work, against the machine the perf tier's
GUI-thread CPU bounds were set on (docs/reliability.md, "Test tiers").

The bounds (a soak's stall, the CPU of one event-loop turn, a table filled per turn, ...) were
measured on an Intel Xeon with AVX-512. The same work takes longer on a slower core: on a 2-core
AMD EPYC (AVX2) the perf tier failed three of them by 20-50% while every view did what it did on
the Xeon. ``slowness()`` is the best of several runs of a fixed workload of the GUI thread's kind
(Python calls, attribute and dict traffic, small numpy arrays: what pyqtgraph and the views do) in
this thread's CPU time, over ``REFERENCE_S``, never below 1. A perf test reads the GUI thread's
CPU over it (``tests/conftest.py``, ``reference_cpu_clock``) and the soak's verdict scales its
stall by it. Measured when it is asked, not once per process: on a shared host the same core's
pace moves (the best of 7 runs was 28 ms in one process and 45-50 ms in four others within a
minute), and a bound must follow the pace its measurement ran at. Qt-free."""

from __future__ import annotations

import threading
import time

import numpy as np

# The workload's best CPU time on the reference machine: its best on the AMD EPYC, 2026-12-07 (28 ms),
# over the ratio of bench-ui's seed-step medians there and on the Xeon (34 against 24 ms at 128
# tokens, 76 against 46 ms at 512: 1.5 on average). The Xeon itself is no longer at hand.
REFERENCE_S = 0.0185
RUNS = 5


def _thread_cpu() -> float:
    """This thread's CPU time, read past ``time.thread_time`` (which a perf test reads paced)."""
    return time.clock_gettime(time.CLOCK_THREAD_CPUTIME_ID)


class _Item:
    """A stand-in for a view item: a few attributes, a method that reads them."""

    __slots__ = ("data", "h", "w", "x", "y")

    def __init__(self, x: float, y: float, w: float, h: float) -> None:
        self.x, self.y, self.w, self.h = x, y, w, h
        self.data = {"x": x, "y": y}

    def rect(self) -> tuple[float, float, float, float]:
        return self.x, self.y, self.x + self.w, self.y + self.h


def workload() -> float:
    """One run (a checksum, so nothing is optimised away)."""
    total = 0.0
    for _ in range(4):
        items = [_Item(i * 1.5, i * 0.5, 3.0, 2.0) for i in range(3000)]
        for item in items:
            left, top, right, bottom = item.rect()
            total += (right - left) * (bottom - top) + item.data["x"]
        labels = {f"L{i} H{i % 12}": i for i in range(3000)}
        total += sum(len(k) for k in sorted(labels, key=labels.__getitem__))
        for i in range(400):
            a = np.arange(i % 50 + 8, dtype=np.float64)
            total += float(np.clip(a * 0.5 - 1.0, 0.0, None).sum())
    return total


def slowness(runs: int = RUNS) -> float:
    """This processor's workload time over ``REFERENCE_S`` (the best of ``runs``), at least 1."""
    best = float("inf")
    for _ in range(runs):
        start = _thread_cpu()
        workload()
        best = min(best, _thread_cpu() - start)
    return max(1.0, best / REFERENCE_S)


class PaceSampler:
    """``with PaceSampler() as pace:`` measures ``slowness`` every ``interval_s`` in a thread of its
    own while the block runs (a child process's soak, say); ``pace.median`` of the samples (at
    least one, taken as the block ends)."""

    def __init__(self, interval_s: float = 3.0) -> None:
        self.interval_s = interval_s
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="pace-sampler", daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.samples.append(slowness(3))

    def __enter__(self) -> PaceSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if not self.samples:
            self.samples.append(slowness())

    @property
    def median(self) -> float:
        return float(np.median(self.samples))
