"""Work around a reference-count bug of PySide6 6.12 on Python < 3.12.

On this combination every ``Signal.emit()`` drops a reference to ``True`` and every
``QTimer.start()``/``stop()`` (and more calls that return None) one to ``None`` without having
taken it. A live Qt program makes thousands of such calls, so the interpreter eventually
"deallocates" the singleton and aborts ("Fatal Python error: none_dealloc" / "bool_dealloc"),
typically at exit. Python 3.12 made these singletons immortal; here we do the same by giving them
a huge reference count. They are static objects that are never freed, so this is safe.
"""

from __future__ import annotations

import sys

_PINNED = False
_EXTRA = 1 << 40  # far more than any program run can drain


def pin_singletons() -> bool:
    """Make None/True/False effectively immortal on CPython < 3.12; True if it did anything."""
    global _PINNED
    if (_PINNED or sys.version_info >= (3, 12) or sys.implementation.name != "cpython"
            or hasattr(sys, "gettotalrefcount")):  # immortal already, or a debug build's layout
        return False
    import ctypes

    for obj in (None, True, False):
        # ob_refcnt is the first field of every CPython object (Py_ssize_t); attndesk.render
        # raises None's count too, so add only where nobody has yet
        refcount = ctypes.c_ssize_t.from_address(id(obj))
        if refcount.value < _EXTRA:
            refcount.value += _EXTRA
    _PINNED = True
    return True
