"""Keep a known PySide6 bug from aborting the interpreter.

PySide6 6.12.0 on Python < 3.12 drops a reference it never took on every ``Signal.emit()``
(to ``True``) and on every C++ call returning void (to ``None``). A live Qt program makes
thousands of those, so the interpreter eventually "deallocates" a singleton and aborts
("Fatal Python error: none_dealloc" / "bool_dealloc"). pyproject keeps PySide6 below 6.12;
this guard protects an environment that has it anyway. Python 3.12 made these singletons
immortal; here the same is done by giving them a count no program can drain. They are static
objects that are never freed, so the extra count changes nothing else.
"""

from __future__ import annotations

import sys
from importlib import metadata

_EXTRA = 1 << 40  # far more than any run can drain
_done = False


def _pyside_version() -> tuple[int, int]:
    for dist in ("PySide6-Essentials", "PySide6"):
        try:
            major, minor = metadata.version(dist).split(".")[:2]
            return int(major), int(minor)
        except (metadata.PackageNotFoundError, ValueError):
            continue
    return (0, 0)


def pin_singletons(*, force: bool = False) -> bool:
    """Make None/True/False immortal on CPython < 3.12 with PySide6 >= 6.12; True if it acted."""
    global _done
    if _done or sys.version_info >= (3, 12) or sys.implementation.name != "cpython":
        return False
    if hasattr(sys, "gettotalrefcount"):  # a debug build lays objects out differently
        return False
    if not force and _pyside_version() < (6, 12):
        return False
    import ctypes

    for obj in (None, True, False):
        refcount = ctypes.c_ssize_t.from_address(id(obj))  # ob_refcnt: first field of a PyObject
        if refcount.value < _EXTRA:
            refcount.value += _EXTRA
    _done = True
    return True
