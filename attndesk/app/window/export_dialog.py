"""The export dialog (Ctrl+E, or a heatmap's export link): what, which format, how big, where.

It only gathers choices; drawing and writing are ``attndesk.render``'s job (the same code the
``attndesk render`` command uses), so exported files look the same from the window and a script.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from PySide6.QtCore import QSettings, Signal, Slot
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from attndesk.app.widgets.named import named
from attndesk.app.widgets.styles import ERROR_STYLE
from attndesk.attention.types import AttentionMap
from attndesk.errors import ConfigError
from attndesk.render.export import ExportError, default_filename, export_figure, export_weights
from attndesk.render.figure import figure_from_map, suggested_size_of
from attndesk.render.page import PageTooLarge, check_page_size, write_page
from attndesk.render.page_overview import write_overview_page
from attndesk.runs import select

from ..jobs.background import Background
from ..jobs.channels import EXPORT

FORMATS = (
    ("png", "PNG image"),
    ("svg", "SVG (vector, text labels)"),
    ("pdf", "PDF (vector, text labels)"),
    ("npy", "NumPy array (.npy, exact weights)"),
    ("csv", "CSV with token labels"),
    ("html", "Interactive page (.html)"),
    ("overview", "Interactive page: overview + exact view (.html)"),
)
IMAGE_FORMATS = ("png", "svg", "pdf")
_EXTENSIONS = {"overview": "html"}  # a format whose file ends otherwise than in its name


def extension(fmt: str) -> str:
    """The file extension of an export format ("overview" pages are .html files)."""
    return _EXTENSIONS.get(fmt, fmt)


def kept_overview_only(map: AttentionMap) -> bool:
    """A memory-bounded run that kept only a display overview: its ``weights`` are tile maxima,
    never to be written out as weights (export an exact region instead)."""
    return map.pyramid is not None


def weights_for(map: AttentionMap, which, region: select.Region | None = None) -> np.ndarray:
    """The raw numbers of a target: [H, L, Lk] for "all", [L, Lk] for "mean" or one head;
    with ``region`` ((q0, q1), (k0, k1)) only those exact cells. ExportError with the reason."""
    try:
        if which == select.ALL:
            return select.stack(map, which, region)
        return select.weights(map, which, region)
    except select.OverviewOnly:
        lq, lk = map.shape
        raise ExportError(
            f"this run kept only an overview of its {lq:,} x {lk:,} weights (they exceed the memory budget): "
            "zoom into an enlarged heatmap and export that exact region, export an image, or raise the memory budget"
        ) from None
    except (ValueError, ConfigError) as exc:  # a region too large to hold at once, a bad head
        raise ExportError(str(exc)) from None


def perform_export(
    map: AttentionMap,
    which,
    fmt: str,
    path: str | os.PathLike,
    *,
    size=(1200, 1000),
    dpi: float = 96,
    colormap: str = "viridis",
    shared_scale: bool = True,
    log_scale: bool = False,
    region: select.Region | None = None,
    page_settings: Mapping[str, Any] | None = None,
    page_image: Callable[[], Mapping[str, Any]] | None = None,
) -> Path:
    """Write one export of ``map``; raises ``ExportError`` with a readable reason.

    ``region`` ((q0, q1), (k0, k1)) exports those exact cells (an image or the numbers); without it
    a memory-bounded run's image is its labelled overview and its numbers are refused.
    ``page_settings``: a page's "Model and settings" table (``bundle_save.run_settings``);
    ``page_image``: a vision run's image and overlays above the page's maps (made when called)."""
    path = Path(path).expanduser()
    if path.suffix.lower().lstrip(".") != extension(fmt):
        raise ExportError(f"the file name {path.name!r} does not end in .{extension(fmt)}")
    if fmt in ("html", "overview"):
        # html: every head and the mean, self-contained (what the heatmaps tab shows); overview: the
        # whole input downsampled plus the exact region (default: its start)
        write = write_page if fmt == "html" else write_overview_page
        image = {"image": page_image()} if page_image is not None and fmt == "html" else {}
        return write(
            [map],
            map.summary,
            path,
            settings=page_settings,
            colormap=colormap,
            shared_scale=shared_scale,
            log_scale=log_scale,
            region=region,
            **image,
        )
    if fmt in IMAGE_FORMATS:
        try:
            figure = figure_from_map(
                map, which, colormap=colormap, shared_scale=shared_scale, region=region, log_scale=log_scale
            )
        except (ValueError, ConfigError) as exc:
            raise ExportError(str(exc)) from None
        return export_figure(figure, path, size=tuple(size), dpi=dpi)
    if fmt == "csv" and which == select.ALL:
        raise ExportError("a CSV holds one matrix: choose one head or the mean, or export all heads as .npy")
    queries, keys = list(map.queries), list(map.keys)
    if region is not None:
        (q0, q1), (k0, k1) = region
        queries, keys = queries[q0:q1], keys[k0:k1]
    return export_weights(weights_for(map, which, region), queries, keys, path)


def export_name(map: AttentionMap, which, fmt: str, region: select.Region | None = None) -> str:
    """The default file name: what, which settings, and the region when there is one."""
    name = default_filename(map, which, extension(fmt))
    if fmt == "overview":
        name = f"{Path(name).stem}_overview.html"
    if region is None:
        return name
    (q0, q1), (k0, k1) = region
    return f"{Path(name).stem}_q{q0}-{q1 - 1}_k{k0}-{k1 - 1}.{extension(fmt)}"


class ExportDialog(QDialog):
    """Choices for one export of ``map`` (what is on screen); ``settings`` remembers the folder;
    ``page_settings`` fills a page's "Model and settings" table."""

    exported = Signal(str)  # the written path
    failedExport = Signal(str)  # the reason

    def __init__(
        self,
        map: AttentionMap,
        target="all",
        colormap: str = "viridis",
        shared_scale: bool = True,
        parent: QWidget | None = None,
        region: select.Region | None = None,
        *,
        log_scale: bool = False,
        settings: QSettings | None = None,
        page_settings: Mapping[str, Any] | None = None,
        page_image: Callable[[], Mapping[str, Any]] | None = None,
    ) -> None:
        super().__init__(parent)
        self._page_image = page_image
        self.setObjectName("exportDialog")
        self.setWindowTitle("Export heatmaps")
        self.setMinimumWidth(560)
        self._map, self._settings, self._page_settings = map, settings, dict(page_settings or {})
        self._colormap, self._shared, self._log = colormap, shared_scale, log_scale
        self._name_edited = False
        self._size_set = False
        self._background = Background(self, EXPORT)
        self._build_controls(region)
        self._build_layout()
        self.set_target(target)
        self.targetCombo.currentIndexChanged.connect(self._on_choice)
        self.headSpin.valueChanged.connect(self._on_choice)
        self.formatCombo.currentIndexChanged.connect(self._on_choice)
        self.areaCombo.currentIndexChanged.connect(self._on_choice)
        self.pathEdit.textEdited.connect(self._on_name_edited)
        self._on_choice()

    def _build_controls(self, region) -> None:
        num_heads = self._map.num_heads
        self.targetCombo = named(QComboBox(), "exportTargetCombo")
        self.targetCombo.addItem(f"all {num_heads} heads (grid)", "all")
        self.targetCombo.addItem("mean over heads", "mean")
        self.targetCombo.addItem("one head", "head")
        self.headSpin = named(QSpinBox(), "exportHeadSpin", minimum=0, maximum=max(0, num_heads - 1))
        # the whole matrix, or the exact cells zoomed into (long runs keep only an overview)
        self.areaCombo = named(QComboBox(), "exportAreaCombo")
        whole = "whole matrix (overview: max of each tile)" if kept_overview_only(self._map) else "whole matrix"
        self.areaCombo.addItem(whole, None)
        if region is not None:
            (q0, q1), (k0, k1) = region
            self.areaCombo.addItem(
                f"zoomed region, exact: queries {q0}–{q1 - 1} × keys {k0}–{k1 - 1}",
                ((int(q0), int(q1)), (int(k0), int(k1))),
            )
            self.areaCombo.setCurrentIndex(1)
        self.areaCombo.setEnabled(region is not None)
        self.formatCombo = named(QComboBox(), "exportFormatCombo")
        for fmt, label in FORMATS:
            self.formatCombo.addItem(label, fmt)
        self.widthSpin = named(QSpinBox(), "exportWidthSpin", minimum=16, maximum=16384, value=1200, suffix=" px")
        self.heightSpin = named(QSpinBox(), "exportHeightSpin", minimum=16, maximum=16384, value=1000, suffix=" px")
        self.dpiSpin = named(QSpinBox(), "exportDpiSpin", minimum=10, maximum=2400, value=96, suffix=" dpi")
        self.pathEdit = named(QLineEdit(), "exportPathEdit")
        self.errorLabel = named(QLabel(""), "exportError")
        self.errorLabel.setStyleSheet(ERROR_STYLE)
        self.errorLabel.setWordWrap(True)
        self.errorLabel.hide()

    def _build_layout(self) -> None:
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        rows = []
        for widgets in (
            (self.targetCombo, self.headSpin),
            (self.widthSpin, QLabel("×"), self.heightSpin, self.dpiSpin),
            (self.pathEdit, browse),
        ):
            row = QHBoxLayout()
            for k, widget in enumerate(widgets):
                row.addWidget(widget, 1 if k == 0 and widget in (self.targetCombo, self.pathEdit) else 0)
            rows.append(row)
        form = QFormLayout()
        form.addRow("What", rows[0])
        form.addRow("Area", self.areaCombo)
        form.addRow("Format", self.formatCombo)
        form.addRow("Size", rows[1])
        form.addRow("File", rows[2])
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.exportButton = buttons.addButton("Export", QDialogButtonBox.ButtonRole.AcceptRole)
        self.exportButton.setObjectName("exportButton")
        buttons.rejected.connect(self.reject)
        self.exportButton.clicked.connect(self._on_export_clicked)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.errorLabel)
        layout.addWidget(buttons)

    # -- choices -------------------------------------------------------------------------------
    def set_target(self, target) -> None:
        if target in ("all", "mean"):
            self.targetCombo.setCurrentIndex(self.targetCombo.findData(target))
        else:
            self.targetCombo.setCurrentIndex(self.targetCombo.findData("head"))
            self.headSpin.setValue(int(target))
        self._on_choice()

    def which(self):
        data = self.targetCombo.currentData()
        return self.headSpin.value() if data == "head" else data

    def set_format(self, fmt: str) -> None:
        index = self.formatCombo.findData(fmt)
        if index < 0:
            raise ValueError(f"unknown export format {fmt!r}")
        self.formatCombo.setCurrentIndex(index)

    def fmt(self) -> str:
        return self.formatCombo.currentData()

    def region(self):
        """((q0, q1), (k0, k1)) when the zoomed region is chosen, else None (the whole matrix)."""
        return self.areaCombo.currentData()

    def set_path(self, path: str | os.PathLike) -> None:
        self.pathEdit.setText(str(path))
        self._name_edited = True

    def set_size(self, width: int, height: int, dpi: int = 96) -> None:
        self.widthSpin.setValue(width)
        self.heightSpin.setValue(height)
        self.dpiSpin.setValue(dpi)
        self._size_set = True

    def _folder(self) -> Path:
        current = self.pathEdit.text().strip()
        if current:
            return Path(current).expanduser().parent
        saved = self._settings.value("export/folder") if self._settings is not None else None
        return Path(saved) if isinstance(saved, str) and Path(saved).is_dir() else Path.home()

    @Slot()
    def _on_choice(self, *_args) -> None:
        which, fmt = self.which(), self.fmt()
        self.headSpin.setEnabled(self.targetCombo.currentData() == "head")
        image = fmt in IMAGE_FORMATS
        for w in (self.widthSpin, self.heightSpin, self.dpiSpin):
            w.setEnabled(image)
        if image and not self._size_set:
            try:  # from the number of panels: building the figure here would copy every weight
                width, height = suggested_size_of(self._map, which)
                self.widthSpin.setValue(width)
                self.heightSpin.setValue(height)
            except (ValueError, ConfigError):
                pass
        name = export_name(self._map, which, fmt, self.region())
        current = self.pathEdit.text().strip()
        if not current or not self._name_edited:
            self.pathEdit.setText(str(self._folder() / name))
        else:  # keep the user's name, fix its extension
            self.pathEdit.setText(str(Path(current).with_suffix("." + extension(fmt))))
        problem = ""
        if fmt == "csv" and which == "all":
            problem = "A CSV holds one matrix: choose one head or the mean (or export all heads as .npy)."
        elif not image and fmt != "overview" and self.region() is None and kept_overview_only(self._map):
            problem = (
                "This run kept only an overview (the full weights exceed the memory budget): zoom into an "
                "enlarged heatmap and export that exact region, or export an image of the overview."
            )
        if not problem and fmt == "html":
            try:
                check_page_size([self._map], region=self.region())
            except PageTooLarge as exc:
                problem = str(exc)
        self._show_error(problem)
        self.exportButton.setEnabled(not problem)

    def _on_name_edited(self, _text: str) -> None:
        self._name_edited = True

    def _browse(self) -> None:
        fmt = extension(self.fmt())
        path, _ = QFileDialog.getSaveFileName(self, "Export to", self.pathEdit.text(), f"{fmt.upper()} (*.{fmt})")
        if path:
            if not path.lower().endswith("." + fmt):
                path += "." + fmt
            self.set_path(path)

    def _show_error(self, message: str) -> None:
        self.errorLabel.setText(message)
        self.errorLabel.setVisible(bool(message))

    # -- export --------------------------------------------------------------------------------
    def _job(self):
        """The export as chosen now, as a function of nothing (it may run in another thread)."""
        map, which, fmt, path = self._map, self.which(), self.fmt(), self.pathEdit.text().strip()
        options = dict(
            size=(self.widthSpin.value(), self.heightSpin.value()),
            dpi=self.dpiSpin.value(),
            colormap=self._colormap,
            shared_scale=self._shared,
            log_scale=self._log,
            region=self.region(),
            page_settings=self._page_settings,
            page_image=self._page_image,
        )
        return lambda: perform_export(map, which, fmt, path, **options)

    def export(self) -> Path | None:
        """Write the chosen export now; on failure show why (and emit failedExport), return None."""
        try:
            path = self._job()()
        except ExportError as exc:
            self._failed(exc)
            return None
        self._written(path)
        return path

    def _written(self, path: Path) -> None:
        self._show_error("")
        if self._settings is not None:
            self._settings.setValue("export/folder", str(path.parent))
        self.exported.emit(str(path))

    def _failed(self, exc: Exception) -> None:
        self._show_error(str(exc))
        self.failedExport.emit(str(exc))

    @Slot()
    def _on_export_clicked(self) -> None:
        """Export off the GUI thread, in its turn among the side jobs (a large PNG takes seconds to draw
        and encode): the window stays live; the dialog closes once the file is written, or says
        why not and stays open."""
        if self._background.is_busy():
            return
        self.exportButton.setEnabled(False)
        self._show_error("")
        self.setWindowTitle("Export heatmaps — exporting…")
        self._background.start(self._job(), done=self._export_done, failed=self._export_failed, expected=(ExportError,))

    def _export_done(self, path: Path) -> None:
        self.setWindowTitle("Export heatmaps")
        self._written(path)
        self.accept()

    def _export_failed(self, exc: Exception) -> None:  # an ExportError (the one expected kind)
        self.setWindowTitle("Export heatmaps")
        self.exportButton.setEnabled(True)  # the choice allowed it; the file name may be fixed now
        self._failed(exc)
