"""The attndesk desktop window (PySide6 + pyqtgraph), a thin view over ``attndesk.core`` results.

``MainWindow`` is imported lazily so that ``attndesk.app.worker`` and friends can be used
without building the whole window.
"""

from __future__ import annotations

import sys

from attndesk.qtfix import pin_singletons

pin_singletons()  # before any signal is emitted: see attndesk.qtfix

__all__ = ["MainWindow", "main"]


def __getattr__(name: str):
    if name == "MainWindow":
        from .main_window import MainWindow

        return MainWindow
    raise AttributeError(f"module 'attndesk.app' has no attribute {name!r}")


def main(argv: list[str] | None = None) -> int:
    """Create the QApplication, show the window and run the event loop; returns the exit code."""
    from PySide6.QtWidgets import QApplication

    from .main_window import MainWindow, settings_org

    app = QApplication.instance() or QApplication(list(sys.argv if argv is None else argv))
    app.setOrganizationName(settings_org())
    app.setApplicationName("attndesk")
    window = MainWindow()
    window.show()
    return app.exec()
