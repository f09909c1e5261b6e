"""The window's export dialog (File > Export heatmaps…, the heatmaps' export link): opened on the
map on screen, preset to the view's colormap, scale and region, with what an interactive page
adds (the run's settings, a vision run's image); one open at a time, closed with the window."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QWidget

from attndesk.attention.types import AttentionMap
from attndesk.render.bundle import run_settings, window_page_image
from attndesk.session.results import Shown
from attndesk.session.state import AppState
from attndesk.session.status import StatusModel

from ..settings import app_settings
from .export_dialog import ExportDialog


def page_extras(
    shown: Shown | None, state: AppState
) -> tuple[dict[str, Any] | None, Callable[[], dict[str, Any]] | None]:
    """(the run's settings, a vision run's image) for an interactive page of ``shown``."""
    result = None if shown is None else (shown.toy.result if shown.toy is not None else shown.layers)
    settings = None if shown is None or result is None else run_settings(shown.mode, state.target_text, result)
    image = None
    if shown is not None and shown.layers is not None and getattr(shown.layers, "grid", None) is not None:
        run, layer, colormap = shown.layers, int(shown.layer or 0), state.view.colormap  # a vision run: its image
        image = lambda: window_page_image(run, layer, colormap)  # noqa: E731
    return settings, image


class ExportDialogs:
    """Opens the export dialog over ``parent``; the status line says where an export went."""

    def __init__(self, parent: QWidget, state: AppState, status: StatusModel) -> None:
        self._parent, self._state, self._status = parent, state, status
        self._dialog: ExportDialog | None = None

    def open(self, amap: AttentionMap, target, shown: Shown | None) -> ExportDialog:
        """The dialog for ``amap`` (the map on screen) preset to ``target`` ("all", "mean", a head)."""
        view = self._state.view
        page_settings, page_image = page_extras(shown, self._state)
        dialog = ExportDialog(
            amap,
            target=target if target is not None else "all",
            colormap=view.colormap,
            shared_scale=view.shared_scale,
            parent=self._parent,
            region=view.region,
            log_scale=view.log_scale,
            settings=app_settings(),
            page_settings=page_settings,
            page_image=page_image,
        )
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)  # it holds the result: gone once closed
        dialog.destroyed.connect(lambda *_a, d=dialog: self._forget(d))
        dialog.exported.connect(lambda path: self._status.say(f"exported {path}"))
        dialog.failedExport.connect(lambda msg: self._status.fail(f"export failed: {msg}"))
        self._dialog = dialog
        dialog.open()
        return dialog

    def _forget(self, dialog: ExportDialog) -> None:
        if self._dialog is dialog:  # a newer dialog may already be open
            self._dialog = None

    def close(self) -> None:
        """Close the dialog still open (the window closes)."""
        if self._dialog is not None:
            self._dialog.close()
