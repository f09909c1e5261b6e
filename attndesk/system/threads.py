"""How many threads torch's CPU ops use in a loop of small tensors: chosen by the work and by
how busy the machine is, and chosen again during long runs (a fixed count only where asked).

A thread pays off only when each op has enough work to split (``WORK_PER_THREAD``): tiny ops
gain nothing from a second thread and lose the time the threads spend meeting. And threads that
wait for each other on cores other processes hold cost far more than they bring, so a core that
other processes keep busy is not counted (see docs/benchmarks.md for the figures).

- ``choose_threads(work)``: the count for ops of about ``work`` FLOPs each, now (a pure function
  of the work, the cores, the others' load and this process's other claims; each can be given).
- ``busy_elsewhere()``: how many cores' worth of CPU other processes used lately, measured from
  the system's and this process's CPU times (a short measurement the first time).
- ``AdaptiveThreads(work)``: a long loop's choice; ``recheck()`` between iterations chooses again
  (the load is re-measured at most every ``MIN_INTERVAL_S``).
- ``torch_threads(count)``: a context manager that sets torch's count and restores it after.

Threads of one process: ``torch.set_num_threads`` with torch's OpenMP backend (the Linux wheels')
sets the count of the calling thread (OpenMP's per-thread setting, and MKL's thread-local one)
plus the default that threads which have not yet run a parallel op start with. So each job thread
of the window sets its own count inside ``torch_threads`` around its own work and restores it;
a job never changes the count of another thread already running. While inside, a count is
claimed: ``choose_threads`` in another thread counts those cores as taken, so two jobs at once
share the cores instead of each taking all of them.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psutil
import torch

# FLOPs per op that make one more thread worth its meeting cost: a [64 x 64] GEMM over a batch of
# 512 rows (4 MFLOP, a few hundred microseconds on one core).
WORK_PER_THREAD = 4e6
# The load is averaged over at least this long (CPU times tick every 10 ms), and measured again
# no sooner.
MIN_INTERVAL_S = 0.25

_lock = threading.Lock()  # guards _claims
_claims: dict[int, int] = {}  # thread ident -> the count it set inside torch_threads


def available_cores() -> int:
    """The cores this process may run on (its affinity where the system has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def _cpu_seconds() -> tuple[float, float]:
    """(busy seconds of the cores this process may use, since boot; this process's CPU seconds)."""
    per_cpu = psutil.cpu_times(percpu=True)
    if hasattr(os, "sched_getaffinity"):
        mine = [per_cpu[i] for i in sorted(os.sched_getaffinity(0)) if i < len(per_cpu)]
        per_cpu = mine or per_cpu
    busy = 0.0
    for t in per_cpu:
        total = sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)  # guest is inside user
        busy += total - t.idle - getattr(t, "iowait", 0.0)
    own = os.times()
    return busy, own.user + own.system


class LoadSampler:
    """Other processes' CPU use between two readings: the cores' busy time less this process's.
    ``clock``, ``read`` (``_cpu_seconds``'s pair) and ``sleep`` are the system's unless given."""

    def __init__(self, clock=time.monotonic, read=_cpu_seconds, sleep=time.sleep) -> None:
        self._clock, self._read, self._sleep = clock, read, sleep
        self._last = (clock(), *read())
        self._estimate: float | None = None
        self._lock = threading.Lock()

    def others(self) -> float:
        """Cores' worth of other processes' CPU since the last measurement; within
        ``MIN_INTERVAL_S`` of it, that measurement again (the first call waits out the interval)."""
        with self._lock:
            now = self._clock()
            waited = now - self._last[0]
            if waited < MIN_INTERVAL_S:
                if self._estimate is not None:
                    return self._estimate
                self._sleep(MIN_INTERVAL_S - waited)  # the first reading: a short measurement
                now = self._clock()
            busy, own = self._read()
            then, busy0, own0 = self._last
            self._estimate = max(0.0, ((busy - busy0) - (own - own0)) / (now - then))
            self._last = (now, busy, own)
            return self._estimate


_sampler = LoadSampler()  # from import on, so the first choice usually needs no wait


def busy_elsewhere() -> float:
    """Cores' worth of CPU that other processes used since the last measurement (at least
    ``MIN_INTERVAL_S`` ago; the first call may wait that long)."""
    return _sampler.others()


def claimed_elsewhere() -> int:
    """Threads set by this process's other threads inside ``torch_threads`` now."""
    me = threading.get_ident()
    with _lock:
        return sum(count for ident, count in _claims.items() if ident != me)


def choose_threads(
    work: float, *, cores: int | None = None, others: float | None = None, claimed: int | None = None
) -> int:
    """torch's thread count for ops of about ``work`` FLOPs each, between 1 and ``cores``.

    One thread per ``WORK_PER_THREAD`` of work, at most the cores that are free: ``cores``
    (default: ``available_cores()``) less those other processes keep busy (``others``, in cores,
    default ``busy_elsewhere()``: a core counts as taken from half of it on) less the threads this
    process's other jobs hold (``claimed``, default ``claimed_elsewhere()``). The load is only
    measured when the work alone would take more than one thread."""
    cores = available_cores() if cores is None else max(1, cores)
    by_work = min(cores, int(work // WORK_PER_THREAD))
    if by_work <= 1:
        return 1
    others = busy_elsewhere() if others is None else others
    claimed = claimed_elsewhere() if claimed is None else claimed
    free = cores - math.floor(others + 0.5) - claimed
    return max(1, min(by_work, free))


class AdaptiveThreads:
    """The thread count of a long loop of ops of about ``work`` FLOPs each: ``count`` is chosen
    on creation and again by each ``recheck()`` (call it between iterations), or is always
    ``fixed`` when given (a count the user forced, or a run that must repeat bit for bit)."""

    def __init__(self, work: float, *, fixed: int | None = None) -> None:
        if fixed is not None and fixed < 1:
            raise ValueError(f"a thread count must be at least 1, got {fixed}")
        self.work = float(work)
        self.fixed = fixed
        self.count = fixed if fixed is not None else choose_threads(self.work)

    def recheck(self) -> int:
        """Choose again for the load now (unless fixed); returns the count."""
        if self.fixed is None:
            self.count = choose_threads(self.work)
        return self.count


@contextmanager
def torch_threads(count: int | None) -> Iterator[int]:
    """Run the block with torch's thread count ``count`` in this thread, then restore the count
    it had (None: leave the count as it is). Yields the count in force."""
    if count is None:
        yield torch.get_num_threads()
        return
    me = threading.get_ident()
    before = torch.get_num_threads()
    with _lock:
        claimed_before = _claims.get(me)
        _claims[me] = count
    if count != before:
        torch.set_num_threads(count)
    try:
        yield count
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)
        with _lock:
            if claimed_before is None:
                _claims.pop(me, None)
            else:
                _claims[me] = claimed_before


__all__ = [
    "MIN_INTERVAL_S",
    "WORK_PER_THREAD",
    "AdaptiveThreads",
    "LoadSampler",
    "available_cores",
    "busy_elsewhere",
    "choose_threads",
    "claimed_elsewhere",
    "torch_threads",
]
