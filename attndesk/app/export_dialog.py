"""The export dialog (Ctrl+E, or a heatmap's export link): what, which format, how big, where.

It only gathers choices; drawing and writing are ``attndesk.render``'s job (the same code the
``attndesk render`` command uses), so exported files look the same from the window and a script.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from PySide6.QtCore import QSettings, Signal, Slot

from attndesk.core.errors import ConfigError

from .settings import app_settings
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

FORMATS = (
    ("png", "PNG image"),
    ("svg", "SVG (vector, text labels)"),
    ("pdf", "PDF (vector, text labels)"),
    ("npy", "NumPy array (.npy, exact weights)"),
    ("csv", "CSV with token labels"),
)
IMAGE_FORMATS = ("png", "svg", "pdf")


def _settings() -> QSettings:
    return app_settings()


def kept_overview_only(result) -> bool:
    """A memory-bounded run that kept only a display overview: its ``weights`` are tile maxima,
    never to be written out as weights (export an exact region instead)."""
    plan = getattr(result, "plan", None)
    return getattr(result, "pyramid", None) is not None and plan is not None and plan.kind == "pyramid"


def _region_weights(result, which, region) -> np.ndarray:
    """Exact weights of a region ((q0, q1), (k0, k1)): [H, q, k] for "all", else [q, k]."""
    from attndesk.render.export import ExportError

    (q0, q1), (k0, k1) = region
    pyramid = getattr(result, "pyramid", None)
    num_heads = pyramid.num_heads if pyramid is not None else int(np.asarray(result.weights).shape[0])
    heads = list(range(num_heads)) if which == "all" else [which if which == "mean" else int(which)]
    out = []
    for h in heads:
        if pyramid is not None:
            try:  # recomputed exactly from the kept projections
                out.append(np.asarray(pyramid.region(h, q0, q1, k0, k1), dtype=np.float32))
            except ConfigError as exc:  # a region too large to hold at once
                raise ExportError(str(exc)) from None
        else:
            w = np.asarray(result.weights)
            cells = w[:, q0:q1, k0:k1].mean(axis=0, dtype=np.float64) if h == "mean" else w[h, q0:q1, k0:k1]
            out.append(np.asarray(cells, dtype=np.float32))
    return np.stack(out) if which == "all" else out[0]


def weights_for(result, which, region=None) -> np.ndarray:
    """The raw numbers of a target: [H, L, Lk] for "all", [L, Lk] for "mean" or one head;
    with ``region`` ((q0, q1), (k0, k1)) only those exact cells."""
    from attndesk.render.export import ExportError

    if region is not None:
        return _region_weights(result, which, region)
    if kept_overview_only(result):
        lq, lk = result.shape
        raise ExportError(
            f"this run kept only an overview of its {lq:,} x {lk:,} weights (they exceed the memory budget): "
            "zoom into an enlarged heatmap and export that exact region, export an image, or raise the memory budget"
        )
    weights = np.asarray(result.weights)
    if which == "all":
        return weights
    if which == "mean":
        return weights.mean(axis=0, dtype=np.float64).astype(weights.dtype)  # [L, Lk]
    return weights[int(which)]


def perform_export(result, which, fmt: str, path: str | os.PathLike, *, size=(1200, 1000), dpi: float = 96,
                   colormap: str = "viridis", shared_scale: bool = True, region=None) -> Path:
    """Write one export; raises ``attndesk.render.export.ExportError`` with a readable reason.

    ``region`` ((q0, q1), (k0, k1)) exports those exact cells (an image or the numbers); without it
    a memory-bounded run's image is its labelled overview and its numbers are refused."""
    from attndesk.render.export import ExportError, export_figure, export_weights
    from attndesk.render.figure import figure_from_result

    path = Path(path).expanduser()
    suffix = path.suffix.lower().lstrip(".")
    if suffix != fmt:
        raise ExportError(f"the file name {path.name!r} does not end in .{fmt}")
    if fmt in IMAGE_FORMATS:
        try:
            figure = figure_from_result(result, which, colormap=colormap, shared_scale=shared_scale, region=region)
        except (ValueError, ConfigError) as exc:
            raise ExportError(str(exc)) from None
        return export_figure(figure, path, size=tuple(size), dpi=dpi)
    if fmt == "csv" and which == "all":
        raise ExportError("a CSV holds one matrix: choose one head or the mean, or export all heads as .npy")
    queries, keys = list(result.tokens), list(result.keys)
    if region is not None:
        (q0, q1), (k0, k1) = region
        queries, keys = queries[q0:q1], keys[k0:k1]
    return export_weights(weights_for(result, which, region), queries, keys, path)


class ExportDialog(QDialog):
    exported = Signal(str)  # the written path
    failedExport = Signal(str)  # the reason

    def __init__(self, result, target="all", colormap: str = "viridis", shared_scale: bool = True,
                 parent: QWidget | None = None, region=None) -> None:
        super().__init__(parent)
        self.setObjectName("exportDialog")
        self.setWindowTitle("Export heatmaps")
        self.setMinimumWidth(560)
        self._result = result
        self._colormap = colormap
        self._shared = shared_scale
        self._name_edited = False
        self._size_set = False
        num_heads = int(np.asarray(result.weights).shape[0])

        self.targetCombo = QComboBox(objectName="exportTargetCombo")
        self.targetCombo.addItem(f"all {num_heads} heads (grid)", "all")
        self.targetCombo.addItem("mean over heads", "mean")
        self.targetCombo.addItem("one head", "head")
        self.headSpin = QSpinBox(objectName="exportHeadSpin", minimum=0, maximum=max(0, num_heads - 1))
        # the whole matrix, or the exact cells zoomed into (long runs keep only an overview)
        self.areaCombo = QComboBox(objectName="exportAreaCombo")
        whole = "whole matrix (overview: max of each tile)" if kept_overview_only(result) else "whole matrix"
        self.areaCombo.addItem(whole, None)
        if region is not None:
            (q0, q1), (k0, k1) = region
            self.areaCombo.addItem(f"zoomed region, exact: queries {q0}–{q1 - 1} × keys {k0}–{k1 - 1}",
                                   ((int(q0), int(q1)), (int(k0), int(k1))))
            self.areaCombo.setCurrentIndex(1)
        self.areaCombo.setEnabled(region is not None)
        self.formatCombo = QComboBox(objectName="exportFormatCombo")
        for fmt, label in FORMATS:
            self.formatCombo.addItem(label, fmt)
        self.widthSpin = QSpinBox(objectName="exportWidthSpin", minimum=16, maximum=16384, value=1200, suffix=" px")
        self.heightSpin = QSpinBox(objectName="exportHeightSpin", minimum=16, maximum=16384, value=1000, suffix=" px")
        self.dpiSpin = QSpinBox(objectName="exportDpiSpin", minimum=10, maximum=2400, value=96, suffix=" dpi")
        self.pathEdit = QLineEdit(objectName="exportPathEdit")
        browse = QPushButton("Browse…")
        self.errorLabel = QLabel("", objectName="exportError")
        self.errorLabel.setStyleSheet("color: #b00020;")
        self.errorLabel.setWordWrap(True)
        self.errorLabel.hide()

        target_row = QHBoxLayout()
        target_row.addWidget(self.targetCombo, 1)
        target_row.addWidget(self.headSpin)
        size_row = QHBoxLayout()
        size_row.addWidget(self.widthSpin)
        size_row.addWidget(QLabel("×"))
        size_row.addWidget(self.heightSpin)
        size_row.addWidget(self.dpiSpin)
        path_row = QHBoxLayout()
        path_row.addWidget(self.pathEdit, 1)
        path_row.addWidget(browse)
        form = QFormLayout()
        form.addRow("What", target_row)
        form.addRow("Area", self.areaCombo)
        form.addRow("Format", self.formatCombo)
        form.addRow("Size", size_row)
        form.addRow("File", path_row)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.exportButton = buttons.addButton("Export", QDialogButtonBox.ButtonRole.AcceptRole)
        self.exportButton.setObjectName("exportButton")
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.errorLabel)
        layout.addWidget(buttons)

        self.set_target(target)
        self.targetCombo.currentIndexChanged.connect(self._on_choice)
        self.headSpin.valueChanged.connect(self._on_choice)
        self.formatCombo.currentIndexChanged.connect(self._on_choice)
        self.areaCombo.currentIndexChanged.connect(self._on_choice)
        self.pathEdit.textEdited.connect(self._on_name_edited)
        browse.clicked.connect(self._browse)
        buttons.rejected.connect(self.reject)
        self.exportButton.clicked.connect(self._on_export_clicked)
        self._on_choice()

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
        saved = _settings().value("export/folder")
        return Path(saved) if isinstance(saved, str) and Path(saved).is_dir() else Path.home()

    @Slot()
    def _on_choice(self, *_args) -> None:
        from attndesk.render.export import default_filename
        from attndesk.render.figure import figure_from_result, suggested_size

        which = self.which()
        fmt = self.fmt()
        self.headSpin.setEnabled(self.targetCombo.currentData() == "head")
        image = fmt in IMAGE_FORMATS
        for w in (self.widthSpin, self.heightSpin, self.dpiSpin):
            w.setEnabled(image)
        if image and not self._size_set:
            try:
                w, h = suggested_size(figure_from_result(self._result, which, self._colormap, self._shared,
                                                         region=self.region()))
                self.widthSpin.setValue(w)
                self.heightSpin.setValue(h)
            except (ValueError, ConfigError):
                pass
        name = default_filename(self._result, which, fmt)
        if self.region() is not None:
            (q0, q1), (k0, k1) = self.region()
            name = f"{Path(name).stem}_q{q0}-{q1 - 1}_k{k0}-{k1 - 1}.{fmt}"
        current = self.pathEdit.text().strip()
        if not current or not self._name_edited:
            self.pathEdit.setText(str(self._folder() / name))
        else:  # keep the user's name, fix its extension
            self.pathEdit.setText(str(Path(current).with_suffix("." + fmt)))
        problem = ""
        if fmt == "csv" and which == "all":
            problem = "A CSV holds one matrix: choose one head or the mean (or export all heads as .npy)."
        elif not image and self.region() is None and kept_overview_only(self._result):
            problem = ("This run kept only an overview (the full weights exceed the memory budget): zoom into an "
                       "enlarged heatmap and export that exact region, or export an image of the overview.")
        self._show_error(problem)
        self.exportButton.setEnabled(not problem)

    def _on_name_edited(self, _text: str) -> None:
        self._name_edited = True

    def _browse(self) -> None:
        fmt = self.fmt()
        path, _ = QFileDialog.getSaveFileName(self, "Export to", self.pathEdit.text(), f"{fmt.upper()} (*.{fmt})")
        if path:
            if not path.lower().endswith("." + fmt):
                path += "." + fmt
            self.set_path(path)

    def _show_error(self, message: str) -> None:
        self.errorLabel.setText(message)
        self.errorLabel.setVisible(bool(message))

    # -- export --------------------------------------------------------------------------------
    def export(self) -> Path | None:
        """Write the chosen export; on failure show why (and emit failedExport), return None."""
        from attndesk.render.export import ExportError

        try:
            path = perform_export(self._result, self.which(), self.fmt(), self.pathEdit.text().strip(),
                                  size=(self.widthSpin.value(), self.heightSpin.value()), dpi=self.dpiSpin.value(),
                                  colormap=self._colormap, shared_scale=self._shared, region=self.region())
        except ExportError as exc:
            self._show_error(str(exc))
            self.failedExport.emit(str(exc))
            return None
        self._show_error("")
        _settings().setValue("export/folder", str(path.parent))
        self.exported.emit(str(path))
        return path

    @Slot()
    def _on_export_clicked(self) -> None:
        if self.export() is not None:
            self.accept()
