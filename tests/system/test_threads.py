"""The thread policy: the count by the work and the load (faked: no clock is read), the load
measured from CPU times, and the context manager that sets torch's count and restores it."""

from __future__ import annotations

import threading

import pytest
import torch

from attndesk.system import threads
from attndesk.system.threads import (
    MIN_INTERVAL_S,
    WORK_PER_THREAD,
    AdaptiveThreads,
    LoadSampler,
    choose_threads,
    torch_threads,
)

BIG = 1e12  # work enough for any number of threads


@pytest.mark.parametrize("work", [0, 1e3, WORK_PER_THREAD, 2 * WORK_PER_THREAD - 1])
def test_tiny_work_takes_one_thread_even_when_idle(work):
    assert choose_threads(work, cores=8, others=0.0, claimed=0) == 1


def test_tiny_work_does_not_measure_the_load(monkeypatch):
    def measured():
        raise AssertionError("the load was measured for work that takes one thread anyway")

    monkeypatch.setattr(threads, "busy_elsewhere", measured)
    assert choose_threads(1e3, cores=8) == 1


@pytest.mark.parametrize(("cores", "expected"), [(1, 1), (2, 2), (4, 4), (16, 16)])
def test_large_work_on_an_idle_machine_takes_every_core_never_more(cores, expected):
    assert choose_threads(BIG, cores=cores, others=0.0, claimed=0) == expected


def test_the_work_sets_how_many_threads_pay():
    assert choose_threads(3 * WORK_PER_THREAD, cores=16, others=0.0, claimed=0) == 3


@pytest.mark.parametrize(
    ("others", "expected"),
    [(0.0, 2), (0.4, 2), (0.6, 1), (1.0, 1), (2.0, 1), (5.0, 1)],
)
def test_cores_other_processes_keep_busy_are_not_counted(others, expected):
    assert choose_threads(BIG, cores=2, others=others, claimed=0) == expected


def test_on_a_busy_machine_large_work_takes_one_thread():
    assert choose_threads(BIG, cores=2, others=2.0, claimed=0) == 1
    assert choose_threads(BIG, cores=8, others=3.0, claimed=0) == 5


def test_threads_this_process_claimed_elsewhere_are_taken():
    assert choose_threads(BIG, cores=4, others=0.0, claimed=3) == 1
    assert choose_threads(BIG, cores=4, others=0.0, claimed=1) == 3


def test_the_default_cores_are_the_processes_own(monkeypatch):
    monkeypatch.setattr(threads, "available_cores", lambda: 3)
    assert choose_threads(BIG, others=0.0, claimed=0) == 3


def test_the_count_is_chosen_again_when_the_load_changes(monkeypatch):
    load = [0.0]
    monkeypatch.setattr(threads, "available_cores", lambda: 2)
    monkeypatch.setattr(threads, "busy_elsewhere", lambda: load[0])
    adaptive = AdaptiveThreads(BIG)
    assert adaptive.count == 2
    load[0] = 2.0
    assert adaptive.recheck() == 1 and adaptive.count == 1
    load[0] = 0.1
    assert adaptive.recheck() == 2


def test_a_fixed_count_is_kept_whatever_the_load(monkeypatch):
    monkeypatch.setattr(threads, "busy_elsewhere", lambda: 10.0)
    adaptive = AdaptiveThreads(BIG, fixed=3)
    assert adaptive.count == 3 and adaptive.recheck() == 3
    with pytest.raises(ValueError, match="at least 1"):
        AdaptiveThreads(BIG, fixed=0)


class FakeSystem:
    """A clock and the CPU seconds (busy cores, this process) that a test moves by hand."""

    def __init__(self) -> None:
        self.now, self.busy, self.own, self.slept = 100.0, 50.0, 5.0, []

    def clock(self) -> float:
        return self.now

    def read(self) -> tuple[float, float]:
        return self.busy, self.own

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.advance(seconds, others=2.0, own=0.0)

    def advance(self, seconds: float, *, others: float, own: float) -> None:
        self.now += seconds
        self.own += own * seconds
        self.busy += (others + own) * seconds


def test_the_load_is_the_cores_busy_time_less_this_processes():
    system = FakeSystem()
    sampler = LoadSampler(system.clock, system.read, system.sleep)
    system.advance(1.0, others=1.5, own=0.5)
    assert sampler.others() == pytest.approx(1.5)
    system.advance(2.0, others=0.25, own=2.0)  # this process's own threads are not "others"
    assert sampler.others() == pytest.approx(0.25)
    assert system.slept == []


def test_the_load_is_measured_again_no_sooner_than_the_interval():
    system = FakeSystem()
    sampler = LoadSampler(system.clock, system.read, system.sleep)
    system.advance(1.0, others=1.0, own=0.0)
    assert sampler.others() == pytest.approx(1.0)
    system.advance(MIN_INTERVAL_S / 2, others=2.0, own=0.0)
    assert sampler.others() == pytest.approx(1.0)  # too soon: the last measurement
    system.advance(MIN_INTERVAL_S, others=2.0, own=0.0)
    assert sampler.others() == pytest.approx(2.0)


def test_the_first_reading_waits_out_a_short_measurement():
    system = FakeSystem()
    sampler = LoadSampler(system.clock, system.read, system.sleep)
    system.advance(0.05, others=2.0, own=0.0)
    assert sampler.others() == pytest.approx(2.0)
    assert system.slept == [pytest.approx(MIN_INTERVAL_S - 0.05)]


def test_the_context_manager_sets_the_count_and_restores_it():
    before = torch.get_num_threads()
    other = 1 if before != 1 else 2
    with torch_threads(other) as count:
        assert count == other and torch.get_num_threads() == other
        with torch_threads(before):
            assert torch.get_num_threads() == before
        assert torch.get_num_threads() == other
    assert torch.get_num_threads() == before


def test_the_context_manager_restores_after_an_exception():
    before = torch.get_num_threads()
    with pytest.raises(RuntimeError), torch_threads(before + 1):
        raise RuntimeError("inside")
    assert torch.get_num_threads() == before


def test_none_leaves_the_count_alone():
    before = torch.get_num_threads()
    with torch_threads(None) as count:
        assert count == before == torch.get_num_threads()


def test_a_job_thread_sets_its_own_count_and_claims_it():
    """With torch's OpenMP backend the count is the calling thread's: a job thread's setting does
    not change the main thread's, and while inside, other threads count its threads as taken."""
    main_before = torch.get_num_threads()
    inside, leave = threading.Event(), threading.Event()
    seen: dict[str, int] = {}

    def job() -> None:
        with torch_threads(main_before + 2):
            seen["job"] = torch.get_num_threads()
            inside.set()
            leave.wait(30)

    worker = threading.Thread(target=job)
    worker.start()
    try:
        assert inside.wait(30)
        assert seen["job"] == main_before + 2
        assert torch.get_num_threads() == main_before
        assert threads.claimed_elsewhere() == main_before + 2
        assert choose_threads(BIG, cores=main_before + 2, others=0.0) == 1
    finally:
        leave.set()
        worker.join(30)
    assert threads.claimed_elsewhere() == 0
