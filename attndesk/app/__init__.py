"""The attndesk desktop window (PySide6 + pyqtgraph), a thin view over ``attndesk.core`` results.

``attndesk.app.main_window`` assembles it (``main()`` runs it). ``MainWindow`` is also offered
here, resolved on first use, so that importing ``attndesk.app.jobs.worker`` or ``attndesk.app.state``
does not build the whole window.
"""

from __future__ import annotations

__all__ = ["MainWindow"]


def __getattr__(name: str):
    if name == "MainWindow":
        from .main_window import (
            MainWindow,  # a lazy export, not a cycle: main_window never imports this package's names
        )

        return MainWindow
    raise AttributeError(f"module 'attndesk.app' has no attribute {name!r}")
