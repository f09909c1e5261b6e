"""Widgets with their object name, Qt properties and signal connections, typed.

PySide6's constructors take a widget's Qt properties and signals as keywords
(``QLabel("x", objectName="title", wordWrap=True)``), but its type stubs do not declare them, so
mypy could not check those calls. ``named(QLabel("x"), "title", wordWrap=True)`` does the same
after construction and returns the widget with its own type."""

from __future__ import annotations

from typing import Any, TypeVar

from PySide6.QtCore import QObject, SignalInstance

W = TypeVar("W", bound=QObject)


def named(obj: W, name: str = "", /, **properties: Any) -> W:
    """``obj`` with ``name`` as its object name, each keyword set as its Qt property or, for a
    signal, connected to the value. An unknown keyword raises TypeError, as the constructor does."""
    if name:
        obj.setObjectName(name)
    meta = obj.metaObject()
    for key, value in properties.items():
        signal = getattr(obj, key, None)
        if isinstance(signal, SignalInstance):
            signal.connect(value)
        elif meta.indexOfProperty(key) < 0:
            raise TypeError(f"{type(obj).__name__} has no Qt property or signal {key!r}")
        elif not obj.setProperty(key, value):
            raise TypeError(f"{type(obj).__name__}.{key} cannot be set to {value!r}")
    return obj
