"""Per-stage wall-clock timing that waits for the device, so GPU timings are real."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from attndesk.jobs import JobContext

from .devices import synchronize


class TimedRun:
    """What a run's ``timings`` (stage -> seconds, maybe "total") and ``flops`` say: for the
    results of the core and the facts the window shows."""

    timings: dict[str, float]
    flops: int

    @property
    def total_seconds(self) -> float:
        return float(self.timings.get("total", sum(self.timings.values())))

    @property
    def gflops_per_second(self) -> float:
        total = self.total_seconds
        return self.flops / total / 1e9 if total > 0 else 0.0


class StageTimer:
    """Accumulates seconds per named stage, in first-seen order.

    ``timer.stage("scores")`` is a context manager; it synchronises the device before reading
    the clock at both ends, checks the job's ``ctx`` before the stage starts, and reports its
    progress after it ends (fractions follow ``plan``, the expected stage names).
    """

    def __init__(
        self,
        device: torch.device,
        *,
        plan: tuple[str, ...] = (),
        ctx: JobContext | None = None,
    ):
        self.device = device
        self.seconds: dict[str, float] = {name: 0.0 for name in plan}
        self._plan = plan
        self._ctx = ctx

    def check_cancel(self) -> None:
        if self._ctx is not None:
            self._ctx.check()

    @contextmanager
    def stage(self, name: str, *, report: bool = True) -> Iterator[None]:
        """Time one stage (again: a stage entered many times, e.g. per block, accumulates);
        ``report=False`` leaves progress to the caller (a block loop reports its own)."""
        self.check_cancel()
        synchronize(self.device)
        start = time.perf_counter()
        yield
        synchronize(self.device)
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
        if report and self._ctx is not None and name in self._plan:
            self._ctx.progress((self._plan.index(name) + 1) / len(self._plan), name)

    def total(self) -> dict[str, float]:
        """The stage timings (planned ones first, in order) followed by their sum under "total"."""
        out = dict(self.seconds)
        out["total"] = sum(self.seconds.values())
        return out


class NullTimer:
    """A timer that measures nothing: the modules' plain forward uses it."""

    @contextmanager
    def stage(self, name: str, *, report: bool = True) -> Iterator[None]:
        yield

    def check_cancel(self) -> None:
        return None


NULL_TIMER = NullTimer()
