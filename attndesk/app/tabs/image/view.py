"""The Image tab's view: a vision model's input image and its attention drawn over it.

- ``imageInputRow``: ``imageSampleCombo`` (the sample images), ``openImageButton`` (a PNG/JPEG
  file) and ``imageNameLabel``; a file dropped anywhere on the view opens it too (``imageDropped``).
- ``imageCanvas`` (``ImageCanvas``): the image with one head's attention from the query over it,
  the patch grid drawn on top and the query's patch outlined; a click on a patch makes it the
  query (``patchClicked``).
- ``imageQueryCombo`` (the class token, a register, the mean of the patches, or the clicked
  patch), ``imageHeadCombo`` (each head, or their mean), ``imageOpacitySlider``,
  ``imageColormapCombo`` and ``imageAllLayersCheck`` (the grid below: every head of the layer, or
  of every layer).
- ``imageHeadsLabel``: the grid of every head's overlay (one picture, one colour scale).
- The maps row: ``imageMapCombo``, ``imageStepsSpin`` (integrated gradients' steps),
  ``computeImageMapButton``, ``cancelImageMapButton``, ``imageMapProgress`` and ``imageMapCanvas``.

The view only shows what it is given and says what the user did (signals).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QImage, QPainter, QPen, QPixmap
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSlider,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from attndesk.app.widgets.named import named
from attndesk.render.cells import rgb_image
from attndesk.render.colormaps import COLORMAPS

from ...widgets.holdings import held_by

# name shown -> the map's id (app/tabs/image.py computes each)
IMAGE_MAPS = (
    ("rollout", "rollout"),
    ("attention flow", "flow"),
    ("gradient rollout", "grad-rollout"),
    ("attention x gradient (Chefer)", "chefer"),
    ("integrated gradients", "ig"),
)


class ImageCanvas(QWidget):
    """A picture [h, w, 3] uint8 scaled to fit (aspect kept), the patch grid of ``grid`` over it and
    the ``marked`` patch outlined; ``patchClicked(row, col)`` on a click inside the picture."""

    patchClicked = Signal(int, int)

    def __init__(self, name: str, placeholder: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName(name)
        self.placeholder = placeholder  # said in the empty widget
        self.setMinimumSize(200, 180)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self._image: QImage | None = None
        self._pixels: np.ndarray | None = None
        self._grid = (0, 0)
        self._marked: tuple[int, int] | None = None
        self.setCursor(Qt.CursorShape.PointingHandCursor)

    def holdings(self) -> list:
        """What this view keeps (``widgets/holdings.py``): its pixels."""
        return held_by(self._pixels)

    def set_picture(self, pixels: np.ndarray | None, grid: tuple[int, int], marked: tuple[int, int] | None) -> None:
        self._pixels = None if pixels is None else np.ascontiguousarray(pixels, dtype=np.uint8)
        self._image = None if self._pixels is None else rgb_image(self._pixels)
        self._grid, self._marked = (int(grid[0]), int(grid[1])), marked
        self.update()

    def pixels(self) -> np.ndarray | None:
        """The picture drawn (before scaling): what the tests compare with ``blend``."""
        return self._pixels

    def target(self) -> QRectF:
        """Where the picture lies in the widget."""
        if self._image is None or self._image.width() == 0:
            return QRectF()
        w, h = self._image.width(), self._image.height()
        scale = min(self.width() / w, self.height() / h)
        return QRectF((self.width() - w * scale) / 2, (self.height() - h * scale) / 2, w * scale, h * scale)

    def patch_center(self, row: int, col: int) -> QPointF:
        where, (rows, cols) = self.target(), self._grid
        return QPointF(
            where.left() + (col + 0.5) * where.width() / cols, where.top() + (row + 0.5) * where.height() / rows
        )

    def paintEvent(self, _event) -> None:
        painter = QPainter(self)
        painter.fillRect(self.rect(), QColor(250, 250, 250))
        if self._image is None:
            painter.setPen(QColor(110, 110, 110))
            painter.drawText(
                self.rect(), int(Qt.AlignmentFlag.AlignCenter | Qt.TextFlag.TextWordWrap), self.placeholder
            )
            painter.end()
            return
        where = self.target()
        painter.drawImage(where, self._image)
        rows, cols = self._grid
        if rows and cols:
            painter.setPen(QPen(QColor(255, 255, 255, 110), 1))
            for r in range(1, rows):
                y = where.top() + r * where.height() / rows
                painter.drawLine(QPointF(where.left(), y), QPointF(where.right(), y))
            for c in range(1, cols):
                x = where.left() + c * where.width() / cols
                painter.drawLine(QPointF(x, where.top()), QPointF(x, where.bottom()))
            if self._marked is not None:
                r, c = self._marked
                painter.setPen(QPen(QColor(230, 30, 30), 2))
                painter.drawRect(
                    QRectF(
                        where.left() + c * where.width() / cols,
                        where.top() + r * where.height() / rows,
                        where.width() / cols,
                        where.height() / rows,
                    )
                )
        painter.end()

    def mousePressEvent(self, event) -> None:
        where, (rows, cols) = self.target(), self._grid
        pos = event.position()
        if not rows or not cols or not where.contains(pos):
            return
        row = min(rows - 1, int((pos.y() - where.top()) / where.height() * rows))
        col = min(cols - 1, int((pos.x() - where.left()) / where.width() * cols))
        self.patchClicked.emit(row, col)


class ImageView(QWidget):
    """See the module docstring."""

    sampleChosen = Signal(str)  # a sample image's name
    openRequested = Signal()
    imageDropped = Signal(str)  # a dropped file's path
    queryChosen = Signal(object)  # a token index, or None: the mean of the patches
    settingsChanged = Signal()  # head, opacity, all layers
    colormapChosen = Signal(str)
    computeMapRequested = Signal(str, int)  # map id, integrated gradients' steps
    cancelMapRequested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("imageView")
        self.setAcceptDrops(True)
        self._build()
        self._lay_out()
        self.sampleCombo.activated.connect(lambda i: self.sampleChosen.emit(self.sampleCombo.itemData(i)))
        self.openButton.clicked.connect(lambda _c=False: self.openRequested.emit())
        self.queryCombo.activated.connect(lambda i: self.queryChosen.emit(self.queryCombo.itemData(i)))
        self.headCombo.activated.connect(lambda _i: self.settingsChanged.emit())
        self.opacitySlider.valueChanged.connect(lambda _v: self.settingsChanged.emit())
        self.allLayersCheck.toggled.connect(lambda _on: self.settingsChanged.emit())
        self.colormapCombo.activated.connect(lambda i: self.colormapChosen.emit(self.colormapCombo.itemText(i)))
        self.computeButton.clicked.connect(
            lambda _c=False: self.computeMapRequested.emit(self.mapCombo.currentData(), self.stepsSpin.value())
        )
        self.cancelButton.clicked.connect(lambda _c=False: self.cancelMapRequested.emit())
        self.mapCombo.currentIndexChanged.connect(
            lambda _i: self.stepsSpin.setEnabled(self.mapCombo.currentData() == "ig")
        )
        self.set_map_busy(False)
        self.stepsSpin.setEnabled(False)

    def holdings(self) -> list:
        """What this view keeps (``widgets/holdings.py``): the image and the map drawn over it."""
        return held_by(self.canvas, self.mapCanvas)

    def _build(self) -> None:
        self.sampleCombo = named(QComboBox(), "imageSampleCombo")
        self.sampleCombo.setToolTip("the sample images attndesk ships, and scikit-learn's 8x8 digits")
        self.openButton = named(QPushButton("Open image…"), "openImageButton")
        self.openButton.setToolTip("a PNG or JPEG file (or drop one on this tab)")
        self.nameLabel = named(QLabel(""), "imageNameLabel")
        self.nameLabel.setWordWrap(True)
        self.messageLabel = named(QLabel(""), "imageMessageLabel")
        self.messageLabel.setWordWrap(True)
        self.messageLabel.setStyleSheet("color: #9a4b00;")
        self.messageLabel.hide()
        self.canvas = ImageCanvas("imageCanvas", "the image appears here once the model has run on it")
        self.canvas.setToolTip("click a patch to see where it looks")
        self.queryCombo = named(QComboBox(), "imageQueryCombo")
        self.queryCombo.setToolTip(
            "the token whose attention is drawn: a special token, or a patch clicked on the image"
        )
        self.headCombo = named(QComboBox(), "imageHeadCombo")
        self.headCombo.setToolTip("the head drawn large (the grid below has them all)")
        self.opacitySlider = named(QSlider(Qt.Orientation.Horizontal), "imageOpacitySlider")
        self.opacitySlider.setRange(0, 100)
        self.opacitySlider.setValue(60)
        self.opacitySlider.setMaximumWidth(140)
        self.opacitySlider.setToolTip("how much of the colour covers the image")
        self.colormapCombo = named(QComboBox(), "imageColormapCombo")
        self.colormapCombo.addItems(list(COLORMAPS))
        self.colormapCombo.setToolTip("the colour map (the heatmaps' too)")
        self.allLayersCheck = named(QCheckBox("every layer"), "imageAllLayersCheck")
        self.allLayersCheck.setToolTip("the grid below: every head of every layer (else of the layer shown)")
        self.scaleLabel = named(QLabel(""), "imageScaleLabel")
        self.headsLabel = named(QLabel(), "imageHeadsLabel")
        self.headsLabel.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        self.headsScroll = named(QScrollArea(), "imageHeadsScroll")
        self.headsScroll.setWidget(self.headsLabel)
        self.headsScroll.setWidgetResizable(True)
        self.mapCombo = named(QComboBox(), "imageMapCombo")
        for label, key in IMAGE_MAPS:
            self.mapCombo.addItem(label, key)
        self.mapCombo.setToolTip("a map across the layers (gradient maps explain the top class, or the pooled output)")
        self.stepsSpin = named(QSpinBox(), "imageStepsSpin")
        self.stepsSpin.setRange(1, 1024)
        self.stepsSpin.setValue(32)
        self.stepsSpin.setPrefix("steps ")
        self.stepsSpin.setToolTip("integrated gradients' steps: more are slower and closer to complete")
        self.computeButton = named(QPushButton("Compute"), "computeImageMapButton")
        self.cancelButton = named(QPushButton("Cancel"), "cancelImageMapButton")
        self.mapProgress = named(QProgressBar(), "imageMapProgress")
        self.mapProgress.setRange(0, 1000)
        self.mapProgress.setMaximumWidth(160)
        self.mapStatus = named(QLabel(""), "imageMapStatus")
        self.mapStatus.setWordWrap(True)
        self.mapCanvas = ImageCanvas(
            "imageMapCanvas", "choose a map above and press Compute: it is drawn here, over the image"
        )
        self.mapCanvas.setToolTip("the map over the image, on its own range")

    def _lay_out(self) -> None:
        source = named(QWidget(), "imageInputRow")
        row = QHBoxLayout(source)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(QLabel("Image:"))
        row.addWidget(self.sampleCombo)
        row.addWidget(self.openButton)
        row.addWidget(self.nameLabel, 1)
        controls = QHBoxLayout()
        for label, widget in (
            ("query", self.queryCombo),
            ("head", self.headCombo),
            ("opacity", self.opacitySlider),
            ("colours", self.colormapCombo),
        ):
            controls.addWidget(QLabel(label))
            controls.addWidget(widget)
        controls.addWidget(self.allLayersCheck)
        controls.addWidget(self.scaleLabel, 1)
        maps = QHBoxLayout()
        for item in (self.mapCombo, self.stepsSpin, self.computeButton, self.cancelButton, self.mapProgress):
            maps.addWidget(item)
        maps.addStretch(1)
        right = QVBoxLayout()
        right.addLayout(maps)
        right.addWidget(self.mapStatus)
        right.addWidget(self.mapCanvas, 1)
        pictures = QHBoxLayout()
        pictures.addWidget(self.canvas, 1)
        pictures.addLayout(right, 1)
        box = QVBoxLayout(self)
        box.setContentsMargins(4, 4, 4, 4)
        box.addWidget(source)
        box.addWidget(self.messageLabel)
        box.addLayout(controls)
        box.addLayout(pictures, 3)
        box.addWidget(self.headsScroll, 2)

    # -- setters ----------------------------------------------------------------------------------
    def set_samples(self, names: list[str], current: str) -> None:
        self.sampleCombo.blockSignals(True)
        self.sampleCombo.clear()
        self.sampleCombo.addItem("(a file)" if current not in names else "", "")
        for name in names:
            self.sampleCombo.addItem(name, name)
        self.sampleCombo.setCurrentIndex(max(0, self.sampleCombo.findData(current)) if current in names else 0)
        self.sampleCombo.model().item(0).setEnabled(False)  # type: ignore[attr-defined]
        self.sampleCombo.blockSignals(False)

    def set_image_name(self, text: str) -> None:
        self.nameLabel.setText(text)

    def set_message(self, text: str) -> None:
        """One line about the input (a refused image; the model is not a vision model); "" hides it."""
        self.messageLabel.setText(text)
        self.messageLabel.setVisible(bool(text))

    def set_queries(self, items: list[tuple[str, object]], current: object) -> None:
        self.queryCombo.blockSignals(True)
        self.queryCombo.clear()
        for label, value in items:
            self.queryCombo.addItem(label, value)
        index = next((i for i, (_label, value) in enumerate(items) if value == current), 0)
        self.queryCombo.setCurrentIndex(index)
        self.queryCombo.blockSignals(False)

    def set_heads(self, count: int, layer: int) -> None:
        current = self.head()
        self.headCombo.blockSignals(True)
        self.headCombo.clear()
        self.headCombo.addItem("mean of heads", None)
        for h in range(count):
            self.headCombo.addItem(f"L{layer} H{h}", h)
        index = self.headCombo.findData(current) if current is not None else 0
        self.headCombo.setCurrentIndex(max(0, index))
        self.headCombo.blockSignals(False)

    def set_colormap(self, name: str) -> None:
        self.colormapCombo.blockSignals(True)
        self.colormapCombo.setCurrentText(name)
        self.colormapCombo.blockSignals(False)

    def set_heads_picture(self, image: QImage | None) -> None:
        self.headsLabel.setPixmap(QPixmap() if image is None else QPixmap.fromImage(image))

    def heads_picture(self) -> QImage:
        return self.headsLabel.pixmap().toImage()

    def set_map_busy(self, busy: bool) -> None:
        self.computeButton.setEnabled(not busy)
        self.cancelButton.setEnabled(busy)
        if not busy:
            self.mapProgress.setValue(0)

    def set_map_progress(self, fraction: float, message: str) -> None:
        self.mapProgress.setValue(round(1000 * max(0.0, min(1.0, fraction))))
        self.mapStatus.setText(message)

    # -- what the user chose ----------------------------------------------------------------------
    def head(self) -> int | None:
        data = self.headCombo.currentData()
        return None if data is None else int(data)

    def opacity(self) -> float:
        return self.opacitySlider.value() / 100.0

    def all_layers(self) -> bool:
        return self.allLayersCheck.isChecked()

    # -- drag and drop ----------------------------------------------------------------------------
    def dragEnterEvent(self, event) -> None:
        if event.mimeData().hasUrls():
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:
        files = [u.toLocalFile() for u in event.mimeData().urls() if u.isLocalFile()]
        if files:
            event.acceptProposedAction()
            self.imageDropped.emit(str(Path(files[0])))


__all__ = ["IMAGE_MAPS", "ImageCanvas", "ImageView"]
