"""The memory ledger: least recently used let go first, the protected last, the budget followed,
and a holding that cannot fit refused with what fits."""

import gc
import threading

import numpy as np
import pytest
import torch

from attndesk.session.ledger import LedgerError, MemoryLedger, arrays_of

MiB = 2**20


class Owner:
    """Something that keeps arrays and lets go of them when told (records the reason)."""

    def __init__(self):
        self.kept: dict[str, np.ndarray] = {}
        self.reasons: dict[str, str] = {}

    def keep(self, ledger, name, mib, **kw):
        self.kept[name] = np.ones(mib * MiB, dtype=np.uint8)
        return ledger.hold("owner", name, [self.kept[name]], lambda why, n=name: self._drop(n, why), **kw)

    def _drop(self, name, why):
        self.reasons[name] = why
        del self.kept[name]


def test_the_least_recently_used_goes_first_and_says_so():
    lines = []
    ledger, owner = MemoryLedger(10 * MiB, say=lines.append), Owner()
    a = owner.keep(ledger, "a", 4)
    owner.keep(ledger, "b", 4)
    a.touch()  # a was used after b: b goes first
    owner.keep(ledger, "c", 4)
    assert sorted(owner.kept) == ["a", "c"]
    assert ledger.total() == 8 * MiB <= ledger.budget
    assert lines == ["let go of b (4.0 MiB) to make room for c (4.0 MiB)"]
    assert owner.reasons["b"] == lines[0]
    assert [h.label for h in ledger.holdings()] == ["a", "c"]


def test_protected_holdings_are_let_go_last():
    ledger, owner = MemoryLedger(10 * MiB), Owner()
    owner.keep(ledger, "on screen", 4, protected=True)
    owner.keep(ledger, "old", 3)
    owner.keep(ledger, "older", 2)
    owner.keep(ledger, "new", 5)  # 14 > 10: the two unprotected go, the protected one stays
    assert sorted(owner.kept) == ["new", "on screen"]
    owner.keep(ledger, "newer", 7)  # now only the protected one (and "new", used earlier) can make room
    assert sorted(owner.kept) == ["newer"]


def test_lowering_the_budget_lets_go_at_once_and_raising_keeps_everything():
    ledger, owner = MemoryLedger(16 * MiB), Owner()
    for name in "abc":
        owner.keep(ledger, name, 4)
    ledger.set_budget(64 * MiB)
    assert sorted(owner.kept) == ["a", "b", "c"]
    ledger.set_budget(9 * MiB)
    assert sorted(owner.kept) == ["b", "c"] and ledger.total() <= 9 * MiB
    assert "to fit the 9.0 MiB memory budget" in owner.reasons["a"]
    ledger.set_budget(None)  # no budget: nothing goes
    owner.keep(ledger, "d", 40)
    assert sorted(owner.kept) == ["b", "c", "d"]


def test_a_holding_that_cannot_fit_is_refused_with_what_fits_and_nothing_let_go():
    ledger, owner = MemoryLedger(10 * MiB), Owner()
    run = np.ones(6 * MiB, dtype=np.uint8)
    ledger.hold("window", "the run on screen", [run], None, protected=True)  # never let go
    owner.keep(ledger, "a", 2)
    with pytest.raises(LedgerError) as info:
        ledger.reserve(5 * MiB, "B − A")
    message = str(info.value)
    assert "B − A needs 5.0 MiB; at most 4.0 MiB fits in the 10.0 MiB memory budget" in message
    assert "the run on screen" in message and info.value.field == "memory_budget"
    assert sorted(owner.kept) == ["a"]  # refused before anything was let go
    ledger.reserve(4 * MiB, "B − A")  # fits once "a" goes
    assert owner.kept == {}
    # what exists already (strict=False) is held anyway, after letting go of all that can go
    huge = ledger.hold("window", "a larger run", 20 * MiB, None, strict=False)
    assert huge in ledger.holdings()


def test_shared_blocks_count_once_and_freed_ones_not_at_all():
    ledger = MemoryLedger(100 * MiB)
    weights = np.zeros((4, 256, 256), dtype=np.float32)  # 1 MiB
    run = ledger.hold("window", "run", [weights, weights[0]], None)
    pin = ledger.hold("compare", "pinned A", [weights[1:]], lambda why: None)  # a view of the same block
    assert ledger.total() == weights.nbytes == run.nbytes == pin.nbytes
    tensor = torch.zeros(256, 1024)  # 1 MiB storage, seen through two views
    ledger.hold("model", "model", [tensor, tensor[:10], tensor.t()], lambda why: None)
    assert ledger.total() == 2 * MiB
    del tensor, weights
    gc.collect()
    assert ledger.total() == 0  # the ledger keeps no array alive: freed blocks no longer count
    run.release()
    assert [h.label for h in ledger.holdings()] == ["pinned A", "model"]
    ledger.release_owner("model")
    assert [h.label for h in ledger.holdings()] == ["pinned A"]


def test_releases_go_through_post_outside_the_lock():
    posted = []
    ledger = MemoryLedger(4 * MiB, post=posted.append)
    ran = []

    def release(why):  # a release that uses the ledger itself must not deadlock
        ran.append((why, threading.current_thread().name, ledger.total()))

    ledger.hold("view", "a", 3 * MiB, release)
    worker = threading.Thread(target=lambda: ledger.hold("job", "b", 2 * MiB, None), name="job")
    worker.start()
    worker.join()
    assert ran == [] and len(posted) == 1  # nothing ran on the job's thread: it was posted
    posted[0]()
    assert ran == [("let go of a (3.0 MiB) to make room for b (2.0 MiB)", "MainThread", 2 * MiB)]


def test_arrays_of_finds_the_arrays_a_result_keeps():
    class Result:
        def __init__(self):
            self.weights = np.ones((2, 3))
            self.extra = {"t": torch.ones(3), "names": ["x"]}
            self.nested = (np.zeros(2),)

    found = arrays_of(Result())
    assert sorted(type(x).__name__ for x in found) == ["Tensor", "ndarray", "ndarray"]


def test_a_holding_that_frees_nothing_is_kept():
    ledger, owner = MemoryLedger(10 * MiB), Owner()
    run = np.ones(8 * MiB, dtype=np.uint8)
    ledger.hold("window", "run", [run], None, protected=True)
    pinned = ledger.hold("compare", "pinned A", [run], lambda why: owner.reasons.setdefault("A", why))
    owner.keep(ledger, "b", 2)
    ledger.set_budget(4 * MiB)  # over budget, but letting A go frees nothing: only b goes
    assert pinned in ledger.holdings() and "A" not in owner.reasons and "b" not in owner.kept
    assert ledger.free() == 0
