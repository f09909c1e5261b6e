"""One memory ledger: everything a window keeps beside its work, held against one budget.

Each holding (the run on screen, a pinned A, a teaching pair, B - A, a loaded model, a view's
derived copy) is registered with ``hold``; before a new one is added, the least recently used
holdings are let go (their ``release`` callbacks run, and a line says what went) until the new
one fits. Holdings marked ``protected`` (what is on screen) are let go last, and one without a
``release`` callback is never let go: it is counted, and a holding that cannot fit beside it is
refused with a ``LedgerError`` that says how much does fit.

A holding is sized in bytes, or by the arrays and tensors it keeps: then each block of memory
counts once however many holdings share it (A pinned from the run on screen costs nothing more
until that run is replaced), and a block that has been freed no longer counts. The ledger keeps
weak references only, so registering something never keeps it alive.

Thread safety: the books are kept under a lock; release callbacks and lines run outside it,
through ``post`` (the window posts them to its GUI thread, since a release touches widgets).
"""

from __future__ import annotations

import functools
import itertools
import threading
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from attndesk.errors import ConfigError
from attndesk.system.free_memory import format_bytes

Release = Callable[[str], None]  # called with the reason (a line) when the ledger lets a holding go
Post = Callable[[Callable[[], None]], None]


class LedgerError(ConfigError):
    """A holding larger than what the budget can ever give it; the message says what fits."""


def _block(obj: Any) -> tuple[int, int, Any] | None:
    """(key, bytes, object to watch) of the memory block behind an array or a tensor, or None."""
    if isinstance(obj, np.ndarray):
        base = obj
        while isinstance(base.base, np.ndarray):
            base = base.base
        if base.base is not None:  # a view of foreign memory (a tensor's, a buffer's): count the view
            base = obj
        return id(base), int(base.nbytes), base
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return None
    if isinstance(obj, torch.Tensor):
        tensor = obj
        while tensor._base is not None:  # a view lives no longer than its base: watch the base
            tensor = tensor._base
        storage = tensor.untyped_storage()
        return storage.data_ptr() or id(tensor), int(storage.nbytes()), tensor
    return None


def _blocks(parts: Iterable[Any]) -> dict[int, tuple[int, weakref.ref | None]]:
    out: dict[int, tuple[int, weakref.ref | None]] = {}
    for part in parts:
        found = _block(part) if part is not None else None
        if found is None:
            continue
        key, size, watched = found
        try:
            ref = weakref.ref(watched)
        except TypeError:  # cannot be watched: count it for as long as it is held
            ref = None
        out[key] = (size, ref)
    return out


@dataclass(eq=False)
class Holding:
    """One registered holding (the handle ``MemoryLedger.hold`` returns)."""

    ledger: MemoryLedger
    owner: str
    label: str
    fixed: int  # bytes given as a number
    blocks: dict[int, tuple[int, weakref.ref | None]]
    release_fn: Release | None
    protected: bool
    used: int = 0
    alive: bool = True

    def touch(self) -> None:
        """Mark as used now: let go after those used before it."""
        self.ledger._touch(self)

    def release(self) -> None:
        """The owner let it go itself (no callback runs)."""
        self.ledger._drop(self)

    def live_blocks(self) -> dict[int, int]:
        """Bytes of each block still alive (a freed array no longer counts)."""
        return {k: size for k, (size, ref) in self.blocks.items() if ref is None or ref() is not None}

    @property
    def nbytes(self) -> int:
        return self.fixed + sum(self.live_blocks().values())

    def describe(self) -> str:
        return f"{self.label} ({format_bytes(self.nbytes)})"


class MemoryLedger:
    """``hold(owner, label, nbytes_or_arrays, release)`` registers a holding, first letting go of
    the least recently used ones until it fits; ``set_budget`` follows the budget (a lower one
    lets go at once); ``reserve(nbytes, label)`` makes room for something about to be made.
    ``budget`` None: nothing is let go. ``say(line)`` hears what was let go (through ``post``)."""

    def __init__(
        self, budget: int | None = None, *, say: Callable[[str], None] | None = None, post: Post | None = None
    ) -> None:
        self._budget = budget
        self._say = say
        self._post: Post = post or (lambda fn: fn())
        self._lock = threading.RLock()
        self._holdings: list[Holding] = []
        self._clock = itertools.count(1)
        self.released: list[str] = []  # the lines said so far, newest last (the last 50)

    # -- queries ---------------------------------------------------------------------------------
    @property
    def budget(self) -> int | None:
        return self._budget

    def holdings(self) -> list[Holding]:
        """What is held now, least recently used first."""
        with self._lock:
            return sorted(self._holdings, key=lambda h: h.used)

    def total(self, extra: Holding | None = None) -> int:
        """Bytes held now (each shared block once), with ``extra`` as if it were held."""
        with self._lock:
            return _total(self._holdings + ([extra] if extra is not None else []))

    def free(self) -> int | None:
        """Bytes the budget has left beside what is held (None: no budget)."""
        return None if self._budget is None else max(0, self._budget - self.total())

    # -- changes ---------------------------------------------------------------------------------
    def hold(
        self,
        owner: str,
        label: str,
        size: int | Iterable[Any],
        release: Release | None = None,
        *,
        protected: bool = False,
        strict: bool = True,
    ) -> Holding:
        """Register a holding of ``size`` bytes, or of the arrays/tensors in ``size``, after letting
        go of what must go for it to fit; LedgerError when it cannot fit at all (nothing is let go).
        ``strict`` False (what already exists and is drawn: the run on screen): never refused, it
        is held after letting go of all that can go."""
        fixed, blocks = (int(size), {}) if isinstance(size, (int, np.integer)) else (0, _blocks(size))
        holding = Holding(self, owner, label, fixed, blocks, release, protected)
        with self._lock:
            holding.used = next(self._clock)
            doomed = self._make_room(holding) if strict else self._over_budget(holding)
            self._holdings.append(holding)
        self._let_go(doomed, f"to make room for {holding.describe()}")
        return holding

    def reserve(self, nbytes: int, for_label: str, *, strict: bool = True) -> None:
        """Let go of what must go for ``nbytes`` more to fit (something about to be made, not held
        yet); LedgerError, with nothing let go, when it cannot fit at all. ``strict=False`` (a run
        already planned within the budget by itself) lets go of what can go and never refuses."""
        probe = Holding(self, "", for_label, int(nbytes), {}, None, False)
        with self._lock:
            doomed = self._make_room(probe) if strict else self._over_budget(probe)
        self._let_go(doomed, f"to make room for {probe.describe()}")

    def set_budget(self, budget: int | None) -> None:
        """Follow a new budget; a lower one lets go of holdings at once (least recently used first,
        the protected last) until what is held fits."""
        with self._lock:
            self._budget = budget
            doomed = self._over_budget(None)
        if doomed and budget is not None:  # nothing is let go without a budget
            self._let_go(doomed, f"to fit the {format_bytes(budget)} memory budget")

    def release_owner(self, owner: str) -> None:
        """Forget every holding of ``owner`` (it let go of them itself)."""
        with self._lock:
            for holding in [h for h in self._holdings if h.owner == owner]:
                self._drop(holding)

    # -- internals -------------------------------------------------------------------------------
    def _touch(self, holding: Holding) -> None:
        with self._lock:
            holding.used = next(self._clock)

    def _drop(self, holding: Holding) -> None:
        with self._lock:
            if holding in self._holdings:
                self._holdings.remove(holding)
            holding.alive = False

    def _make_room(self, new: Holding) -> list[Holding]:
        """(Under the lock) take out of the books what must go for ``new`` to fit, or raise."""
        if self._budget is None:
            return []
        kept = [h for h in self._holdings if h.release_fn is None]
        floor = _total(kept + [new])
        if floor > self._budget:
            beside = _total(kept)
            fits = max(0, self._budget - beside)
            where = (
                f" beside what cannot be let go ({format_bytes(beside)}: {', '.join(h.label for h in kept)})"
                if kept
                else ""
            )
            raise LedgerError(
                f"{new.label} needs {format_bytes(new.nbytes)}; at most {format_bytes(fits)} fits "
                f"in the {format_bytes(self._budget)} memory budget{where}: raise the budget "
                "or make it smaller",
                field="memory_budget",
            )
        return self._over_budget(new)

    def _over_budget(self, new: Holding | None) -> list[Holding]:
        """(Under the lock) remove and return, least recently used first and the protected last,
        the holdings that must go for the rest (and ``new``) to fit the budget."""
        if self._budget is None:
            return []
        doomed = []
        candidates = sorted(
            (h for h in self._holdings if h.release_fn is not None), key=lambda h: (h.protected, h.used)
        )
        extra = [new] if new is not None else []
        for holding in candidates:
            total = _total(self._holdings + extra)
            if total <= self._budget:
                break
            rest = [h for h in self._holdings if h is not holding]
            if _total(rest + extra) == total:
                continue  # it shares every block with what stays (A pinned from the run on screen): keep it
            self._holdings.remove(holding)
            holding.alive = False
            doomed.append(holding)
        return doomed

    def _let_go(self, doomed: list[Holding], why: str) -> None:
        """Run the release callbacks of ``doomed`` and say what went (outside the lock)."""
        if not doomed:
            return
        line = f"let go of {', '.join(h.describe() for h in doomed)} {why}"
        with self._lock:
            self.released = (self.released + [line])[-50:]
        for holding in doomed:
            release = holding.release_fn
            if release is not None:  # only holdings with a release are ever let go
                self._post(functools.partial(release, line))
        say = self._say
        if say is not None:
            self._post(functools.partial(say, line))


def _total(holdings: list[Holding]) -> int:
    seen: dict[int, int] = {}
    fixed = 0
    for holding in holdings:
        fixed += holding.fixed
        seen.update(holding.live_blocks())
    return fixed + sum(seen.values())


def arrays_of(obj: Any, depth: int = 3) -> list[Any]:
    """The numpy arrays and torch tensors inside ``obj`` (a result, a dataclass, a container), down
    to ``depth`` levels: what a holding of ``obj`` keeps."""
    found: list[Any] = []
    _collect(obj, depth, found, set())
    return found


def _collect(obj: Any, depth: int, found: list[Any], seen: set[int]) -> None:
    if obj is None or id(obj) in seen or isinstance(obj, (str, bytes, int, float, bool, type)):
        return
    if type(obj).__module__.startswith(("torch.nn", "transformers", "PySide6")):
        return  # a model (a holding of its own) or a widget, not an array a result keeps
    seen.add(id(obj))
    if _block(obj) is not None:
        found.append(obj)
        return
    if depth <= 0:
        return
    if isinstance(obj, dict):
        children = list(obj.values())
    elif isinstance(obj, (list, tuple)):
        if len(obj) > 64 and isinstance(obj[0], (str, bytes, int, float)):
            return  # token strings, ids: nothing an array could hide in
        children = list(obj)
    else:
        children = list(getattr(obj, "__dict__", {}).values())
        children += [getattr(obj, s) for s in getattr(type(obj), "__slots__", ()) or () if hasattr(obj, s)]
    for child in children:
        _collect(child, depth - 1, found, seen)


__all__ = ["Holding", "LedgerError", "MemoryLedger", "arrays_of"]
