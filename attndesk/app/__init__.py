"""The attndesk desktop window (PySide6 + pyqtgraph), a thin view over ``attndesk.core`` results.

``attndesk.app.main_window`` assembles it (``main()`` runs it) from its parts: ``window_tabs`` (the
registry's tabs, their views, presenters and empty states), ``window_docks``, ``window_menus`` (the
menus and the window's own actions), ``window_status`` (the status bar), ``window_sessions``
(session files and the settings kept between launches) and ``window_export`` (the export
dialog). ``MainWindow`` is also offered
here, resolved on first use, so that importing ``attndesk.app.jobs.worker`` or ``attndesk.app.state``
does not build the whole window.

Beside them: ``tabs`` (the registry and each tab's presenter), ``views`` and ``panels`` (the
widgets), ``modes`` (toy and long; ``pretrained`` is the pretrained mode with what only it uses),
``sources`` (what a heatmap shows, without widgets), ``jobs`` (everything off the GUI thread),
``export_dialog``, ``menus``, ``settings``, ``styles`` (style sheets set only when they change),
``warmup`` (the tab pages not shown yet, prepared while the window idles) and ``named`` (a
widget's name and Qt properties, typed). ``state``, ``status``, ``plans``,
``results``, ``session`` and ``bundle_save`` are the old paths of ``attndesk.session`` and
``attndesk.render.bundle``, re-exported.
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
