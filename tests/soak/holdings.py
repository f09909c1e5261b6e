"""What the window holds when memory peaks: its largest arrays and tensors, by attribute path.

``largest(window)`` walks the Python objects reachable from the window and attndesk's modules
breadth first (attributes, containers, closures, Qt children), so each array is named by its
shortest path, e.g. ``w.heatmapPanel._source.weights``. The soak calls it (outside the stall accounting) each time the
resident set reaches a new high-water mark, so a report says what a peak was made of.
"""

from __future__ import annotations

import sys
import types
from collections import deque

import numpy as np
import torch
from PySide6.QtCore import QObject

MIN_BYTES = 8 * 2**20  # smaller arrays are not what makes a peak
MAX_DEPTH = 14
_LEAVES = (str, bytes, int, float, bool, type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType)


def _size(obj) -> int | None:
    """Bytes of an array or a tensor's storage, None for anything else."""
    if isinstance(obj, np.ndarray):
        return obj.nbytes
    if isinstance(obj, torch.Tensor):
        try:
            return obj.untyped_storage().nbytes()
        except RuntimeError:  # a tensor without storage (meta)
            return 0
    return None


def _children(obj, path: str):
    """(child, its path) of one object: container items, attributes, closure cells, Qt children."""
    if isinstance(obj, dict):
        return [(v, f"{path}[{k!r}]"[:200]) for k, v in list(obj.items())]
    if isinstance(obj, (list, tuple, set, frozenset, deque)):
        return [(v, f"{path}[{i}]") for i, v in enumerate(list(obj)[:5000])]
    if isinstance(obj, types.MethodType):
        return [(obj.__self__, f"{path}.__self__")]
    out = []
    if isinstance(obj, QObject):
        try:
            out += [(c, f"{path}/{c.objectName() or type(c).__name__}") for c in obj.children()]
        except RuntimeError:  # its C++ object is gone
            pass
    attributes = getattr(obj, "__dict__", None)
    if isinstance(attributes, dict):
        out += [(v, f"{path}.{k}") for k, v in list(attributes.items())]
    for slot in getattr(type(obj), "__slots__", ()) or ():
        if isinstance(slot, str) and hasattr(obj, slot):
            out.append((getattr(obj, slot), f"{path}.{slot}"))
    for i, cell in enumerate(getattr(obj, "__closure__", None) or ()):
        try:
            out.append((cell.cell_contents, f"{path}.<closure {i}>"))
        except ValueError:  # an empty cell
            pass
    return out


def roots(window) -> list[tuple[object, str]]:
    """The window, and the globals of every attndesk module (the model caches live there)."""
    modules = [
        (vars(m), name) for name, m in list(sys.modules.items()) if name.startswith("attndesk") and m is not None
    ]
    return [(window, "w")] + modules


def largest(window, count: int = 12) -> list[dict]:
    """The ``count`` largest arrays reachable from the window or attndesk's modules (each storage
    once), largest first."""
    seen: set[int] = set()
    storages: set[int] = set()
    found = []
    queue = deque((root, path, 0) for root, path in roots(window))
    while queue:
        obj, path, depth = queue.popleft()
        if id(obj) in seen or depth > MAX_DEPTH or obj is None or isinstance(obj, _LEAVES):
            continue
        seen.add(id(obj))
        size = _size(obj)
        if size is not None:
            key = _storage_key(obj)
            if size >= MIN_BYTES and key not in storages:
                storages.add(key)
                found.append(
                    {"mib": round(size / 2**20, 1), "path": path, "shape": list(obj.shape), "dtype": str(obj.dtype)}
                )
            continue
        queue.extend((child, child_path, depth + 1) for child, child_path in _children(obj, path))
    return sorted(found, key=lambda f: -f["mib"])[:count]


def _storage_key(obj) -> int:
    """One key per block of memory: a tensor's storage, or the array a numpy view comes from."""
    if isinstance(obj, torch.Tensor):
        return obj.untyped_storage().data_ptr()
    base = obj
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return id(base)


class HighWater:
    """Records ``largest(window)`` when resident memory first passes ``floor`` and then each time
    it grows another ``step`` bytes beyond the last record (a few records per run)."""

    def __init__(self, rss, floor: int = 1536 * 2**20, step: int = 384 * 2**20) -> None:
        self._rss, self._next, self._step = rss, floor, step
        self.records: list[dict] = []

    def check(self, window, t: float, action: int) -> None:
        rss = self._rss()
        if window is None or rss < self._next:
            return
        self._next = rss + self._step
        self.records.append(
            {"t": round(t, 2), "action": action, "rss_mib": round(rss / 2**20, 1), "largest": largest(window)}
        )
