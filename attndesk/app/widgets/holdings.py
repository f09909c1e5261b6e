"""What a widget keeps in memory, declared by the widget itself (the ``Holds`` protocol):
``holdings()`` returns the numpy arrays and torch tensors it keeps now: the result it draws, the
matrices and images of its plots. A tab's presenter holds its view's holdings in the window's memory
ledger (``tabs/presenter.py``); the ledger counts each block of memory once, so a view may declare
an array the run on screen also holds (it costs nothing until that run is replaced).

``held_by(*parts)`` gathers a widget's declaration from its parts: an array or a tensor as it is, a
widget through its own ``holdings()``, a record (a result, a dataclass, a tuple) through
``arrays_of``, the ledger's measure of a result."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from attndesk.session.ledger import arrays_of

RECORD_DEPTH = 3  # record -> its fields (intermediates, per-layer lists) -> array


@runtime_checkable
class Holds(Protocol):
    def holdings(self) -> list[Any]:
        """The arrays and tensors this widget keeps now."""
        ...


def held_by(*parts: Any) -> list[Any]:
    """The arrays and tensors ``parts`` keep (None and empty parts give nothing)."""
    found: list[Any] = []
    for part in parts:
        if part is None:
            continue
        if isinstance(part, Holds):
            found += part.holdings()
        else:
            found += arrays_of(part, RECORD_DEPTH)
    return found


__all__ = ["RECORD_DEPTH", "Holds", "held_by"]
