"""The attndesk desktop window (PySide6 + pyqtgraph), a thin view over ``attndesk.core`` results,
grouped by feature.

- ``window``: the window (``window.main_window`` assembles it and ``main()`` runs it) and its parts:
  tab pages, docks, actions, status bar, sessions, export dialog, warmup.
- ``tabs``: one folder per tab, its view and presenter together, the registry (``TabSpec``) and
  the one presenter base.
- ``widgets``: what tabs, docks and the window share (``MatrixPlot``, axes, pacing, menus, ...).
- ``docks``: tokens, parameters, timing.
- ``modes``: toy, long and the pretrained mode (``modes.pretrained``, with what only it uses).
- ``sources``: what a heatmap shows, without widgets; ``jobs``: the Qt bridge of the job model and
  the memory ledger wired to the window; ``settings``: what outlives a session (QSettings).

``MainWindow`` is also offered here, resolved on first use, so that importing
``attndesk.app.jobs.worker`` does not build the whole window. The window's Qt-free model (state,
session files, results, status, plans) is ``attndesk.session``.
"""

from __future__ import annotations

__all__ = ["MainWindow"]


def __getattr__(name: str):
    if name == "MainWindow":
        from .window.main_window import (
            MainWindow,  # a lazy export, not a cycle: main_window never imports this package's names
        )

        return MainWindow
    raise AttributeError(f"module 'attndesk.app' has no attribute {name!r}")
