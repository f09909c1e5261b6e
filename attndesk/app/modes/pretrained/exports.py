"""The pretrained mode's File menu exports: the layers × heads grid as a picture (PNG, SVG, PDF) and
every layer's weights (.npy, .csv).

A writer captures what to write in the GUI thread (``ExportError``: nothing to export) and writes it
when called: directly from ``export_grid`` / ``export_all``, in a pool thread from the menus."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QFileDialog, QWidget

from attndesk.models import PretrainedResult
from attndesk.render.export import ExportError
from attndesk.session.status import StatusModel

from ...jobs.background import Background
from ...jobs.channels import FILES
from .grid import LayerHeadGrid
from .painting import export_all_weights, export_painting

_NOTHING = "nothing to export yet: wait for a pretrained result"


class PretrainedExports:
    """Writes what ``grid`` paints and what ``run()`` computed; ``options()`` is (hide special
    tokens, part shown), ``status()`` the window's status line, ``parent()`` the dialogs' parent."""

    def __init__(
        self,
        owner: QObject,
        grid: LayerHeadGrid,
        run: Callable[[], PretrainedResult | None],
        options: Callable[[], tuple[bool, str]],
        status: Callable[[], StatusModel],
        parent: Callable[[], QWidget | None],
    ) -> None:
        self._grid, self._run, self._options, self._status, self._parent = grid, run, options, status, parent
        self._exports = Background(owner, FILES)  # File menu exports, written off the GUI thread

    def export_grid(self, path: str | Path, size: tuple[int, int] | None = None) -> Path:
        """The layers x heads grid as PNG/SVG/PDF; ExportError says why not."""
        return self.grid_writer(path, size)()

    def export_all(self, path: str | Path) -> Path:
        """Every layer's weights as .npy ([layers, heads, L, L]) or .csv; ExportError says why not."""
        return self.weights_writer(path)()

    def grid_writer(self, path: str | Path, size: tuple[int, int] | None = None) -> Callable[[], Path]:
        painting = self._grid.painting()
        if painting is None:
            raise ExportError(_NOTHING)
        return lambda: export_painting(painting, path, size=size)

    def weights_writer(self, path: str | Path) -> Callable[[], Path]:
        run = self._run()
        if run is None:
            raise ExportError(_NOTHING)
        hide, part = self._options()
        return lambda: export_all_weights(run, path, hide_special=hide, part=part)

    def default_name(self, ext: str) -> str:
        hide, part = self._options()
        run = self._run()
        tag = run.file_tag(None, part=part) if run is not None else "pretrained"
        hidden = "_nospecial" if hide else ""
        return f"attn_{tag}{hidden}.{ext}"

    def export_dialog(self, title: str, ext: str, filters: str, writer: Callable[[str], Callable[[], Path]]) -> None:
        """Ask where, then write there in a pool thread; the status line says how it went."""
        path, _ = QFileDialog.getSaveFileName(self._parent(), title, self.default_name(ext), filters)
        if not path:
            return
        fail = lambda exc: self._status().fail(f"export failed: {exc}")  # noqa: E731
        try:
            write = writer(path)
        except ExportError as exc:
            fail(exc)
            return
        self._status().say(f"exporting {Path(path).name}…")
        self._exports.start(
            write, done=lambda written: self._status().say(f"exported {written}"), failed=fail, expected=(ExportError,)
        )

    def export_grid_dialog(self) -> None:
        self.export_dialog(
            "Export the layers × heads grid", "png", "PNG (*.png);;SVG (*.svg);;PDF (*.pdf)", self.grid_writer
        )

    def export_all_dialog(self) -> None:
        self.export_dialog("Export every layer's weights", "npy", "NumPy (*.npy);;CSV (*.csv)", self.weights_writer)

    def exporting(self) -> bool:
        """Whether an export from the File menu is being written."""
        return self._exports.is_busy()
