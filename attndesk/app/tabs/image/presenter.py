"""The Image tab: a vision model's input and its attention over the image.

- The input: a sample image (``models/images.py``), a file from the dialog, or a file dropped on
  the tab or the window, written into ``state.pretrained.image`` (a new run). A file is decoded
  in a side job first: one that does not decode, or is too large, is one line on the tab and on
  the status line, and the image on screen stays. A text model given an image says so the same way.
- The query (a special token, the mean of the patches, or a patch clicked on the image), the head,
  the opacity and the colour map redraw the overlays in a side job: the large picture (one head,
  or their mean) and the grid of every head of the layer shown (or of every layer), on one
  colour scale from 0 to the largest weight drawn (the heatmaps' scale).
- The maps across layers (rollout, attention flow, gradient rollout, attention x gradient,
  integrated gradients, ``core/interp/image_maps.py``) are computed on request in a side job with
  progress and cancel.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PySide6.QtCore import QObject, QRectF, Signal
from PySide6.QtGui import QImage, QPainter
from PySide6.QtWidgets import QFileDialog

from attndesk.attention.types import head_name
from attndesk.errors import ConfigError
from attndesk.interp import image_maps
from attndesk.jobs import JobContext
from attndesk.models import VisionResult, load_pretrained, read_image, read_spec
from attndesk.models.images import DEFAULT_SAMPLE, SAMPLE, image_choice, sample_images
from attndesk.models.vision import IMAGE_SUFFIXES
from attndesk.render.overlays import blend, head_overlays, paint_overlays
from attndesk.session.results import Shown
from attndesk.session.state import IMAGE_TAB, AppState
from attndesk.session.status import StatusModel

from ...jobs.channels import IMAGE_MAP, IMAGE_OPEN, IMAGE_OVERLAYS, IMAGE_SAMPLES
from ...jobs.compute import ComputeController
from ..presenter import TabPresenter
from .view import ImageView

IMAGE_FILTER = "Images (" + " ".join(f"*{s}" for s in IMAGE_SUFFIXES) + ");;All files (*)"
GRID_PANEL = 96  # pixels per panel in the every-layer grid
NOT_VISION = "the Image tab serves vision models (ViT, DeiT, DINOv2, CLIP, SigLIP, Swin): open one's folder"


@dataclass(frozen=True)
class OverlayPictures:
    """What the tab draws for one choice: ``large`` [h, w, 3] (one head or the mean over the image),
    ``maps`` [layers or 1, heads, rows, cols] the query's weights, ``grid`` the picture of every head."""

    large: np.ndarray
    maps: np.ndarray
    grid: QImage
    value_range: tuple[float, float]


def query_maps(run: VisionResult, layers: list[int], query: int | None) -> np.ndarray:
    """[len(layers), heads, rows, cols]: each head's weights from ``query`` over the patches."""
    return np.stack([image_maps.head_maps(run, layer, query) for layer in layers])


def overlay_pictures(
    run: VisionResult,
    layer: int,
    query: int | None,
    head: int | None,
    opacity: float,
    colormap: str,
    every_layer: bool,
    *,
    ctx: JobContext | None = None,
) -> OverlayPictures:
    """Side job: the overlays of one choice (see ``OverlayPictures``), one colour scale [0, max]."""
    layers = list(range(len(run.weights))) if every_layer else [layer]
    maps = query_maps(run, layers, query)
    shown = maps[layers.index(layer)] if layer in layers else query_maps(run, [layer], query)[0]
    top = float(np.nanmax(maps)) if maps.size else 1.0
    top = top if top > 0 else 1.0
    windows = run.window_sizes is not None
    single = shown.mean(axis=0) if head is None else shown[head]
    region = run.window_map(layer) if windows else None
    large = blend(run.image, single, colormap=colormap, vmin=0.0, vmax=top, opacity=opacity, regions=region)
    who = "the mean of the patches" if query is None else run.tokens[query]
    figure = head_overlays(
        run.image,
        maps if every_layer else maps[0],
        title=f"{run.model_name}: each head's attention from {who}",
        caption=f"one colour scale, 0 to {top:.3g} (the largest weight drawn)",
        colormap=colormap,
        vmin=0.0,
        vmax=top,
        opacity=opacity,
        row_labels=[f"layer {n}" for n in layers] if every_layer else (),
        columns=maps.shape[1],
        regions=[run.window_map(n) for n in layers] if windows else None,
    )
    if every_layer:
        figure = dataclasses.replace(figure, panel=GRID_PANEL)
    width, height = figure.size()
    grid = QImage(width, height, QImage.Format.Format_RGB32)
    painter = QPainter(grid)
    paint_overlays(painter, QRectF(0, 0, width, height), figure)
    painter.end()
    return OverlayPictures(large, maps, grid, (0.0, top))


def image_map(folder: str | None, image, run: VisionResult, which: str, query: int | None, steps: int, *, ctx=None):
    """Side job: one map across the layers ([rows, cols]) and a line saying what it is."""
    model = load_pretrained(folder)  # cached: the run on screen loaded it
    if which == "rollout":
        return image_maps.rollout_map(run, query=query), "rollout (vit-explain's, mean of heads)"
    if which == "flow":
        return image_maps.flow_map(run, query=query, ctx=ctx), "attention flow into the query"
    if which in ("grad-rollout", "chefer"):
        gradients = image_maps.attention_gradients(model, image)
        if which == "chefer":
            return image_maps.chefer_map(run, gradients, query=query), f"attention x gradient of {gradients.label}"
        return image_maps.grad_rollout_map(run, gradients, query=query), f"gradient rollout of {gradients.label}"
    if which == "ig":
        found = image_maps.integrated_gradients_map(model, image, steps=steps, ctx=ctx)
        return found.map, (
            f"integrated gradients of {found.label}, {found.steps} steps "
            f"(completeness error {found.completeness_error:.2g})"
        )
    raise ConfigError(f"no image map {which!r}")


def sample_names(*, ctx: JobContext | None = None) -> list[str]:
    """Side job: the sample images' names (the shipped pictures, then the digits)."""
    return [s.name for s in sample_images()]


class ImageTab(TabPresenter):
    tab_id = IMAGE_TAB
    drawn = Signal()  # the overlays of the current choice are on screen (tests wait for it)
    mapDrawn = Signal()

    def __init__(
        self,
        state: AppState,
        compute: ComputeController,
        status: StatusModel,
        view: ImageView,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(state, compute, view, parent)
        self.status = status
        self._run: VisionResult | None = None
        self._query: int | None = 0
        self._patch: int | None = None  # the clicked patch's token, offered in the query list
        self._pictures: OverlayPictures | None = None
        self._map_query = ""  # the query the map in flight explains
        self._samples: list[str] | None = None  # listed in a side job when the tab is first shown
        self._listing = False  # that job is under way
        view.set_colormap(state.view.colormap)
        view.sampleChosen.connect(lambda name: setattr(state.pretrained, "image", SAMPLE + name))
        view.openRequested.connect(self._open_dialog)
        view.imageDropped.connect(self.open_image)
        view.queryChosen.connect(self.set_query)
        view.canvas.patchClicked.connect(self.click_patch)
        view.settingsChanged.connect(self.redraw)
        view.colormapChosen.connect(lambda name: setattr(state.view, "colormap", name))
        view.computeMapRequested.connect(self.compute_map)
        view.cancelMapRequested.connect(self.cancel_map)
        state.view.events.colormap.connect(self._on_colormap)
        state.pretrained.events.image.connect(lambda _choice: self._show_choice())
        state.view.events.tab.connect(lambda _tab: self._show_choice())
        state.pretrained.events.layer.connect(lambda _layer: self.redraw())
        self._show_choice()

    # -- the input --------------------------------------------------------------------------------
    def _show_choice(self) -> None:
        """The sample list and the image's name, while the tab is on screen (it is shown only for a
        vision model): a window that never shows the tab never lists the samples. The list is made
        in a side job the first time (the digits come from scikit-learn, whose import takes a
        second of the GUI thread otherwise); the image's name shows meanwhile."""
        if not self.visible():
            return
        if self._samples is None:
            if not self._listing:
                self._listing = True
                self.compute.side.submit(
                    IMAGE_SAMPLES,
                    sample_names,
                    done=self._listed,
                    failed=self._not_listed,
                    scope=None,
                )
            self.view.set_image_name(self._choice_name())
            return
        choice = self.state.pretrained.image
        if choice and not choice.startswith(SAMPLE):  # a file: the list says so, the label names it
            self.view.set_samples(self._samples, "")
            self.view.set_image_name(self._choice_name())
            return
        self.view.set_samples(self._samples, choice[len(SAMPLE) :] or DEFAULT_SAMPLE)
        self.view.set_image_name("")

    @property
    def listed(self) -> bool:
        """The sample list is in (it is made when the tab is first shown)."""
        return self._samples is not None

    def _listed(self, names: list[str]) -> None:
        self._samples, self._listing = names, False
        self._show_choice()

    def _not_listed(self, message: str) -> None:
        self.status.fail(f"the sample images could not be listed: {message}")
        self._listed([])

    def _choice_name(self) -> str:
        choice = self.state.pretrained.image
        if choice and not choice.startswith(SAMPLE):
            return f"{Path(choice).name} ({choice})"
        return choice[len(SAMPLE) :] or DEFAULT_SAMPLE

    def is_vision(self) -> bool:
        mode = self.state.mode
        if mode.kind != "pretrained" or mode.path is None:
            return False
        try:
            return read_spec(mode.path).family == "vision"
        except ConfigError:
            return False

    def _open_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.view.window(), "Open an image", "", IMAGE_FILTER)
        if path:
            self.open_image(path)

    def open_image(self, path: str) -> None:
        """A file as the model's input: decoded in a side job; refused in one line (nothing changes)."""
        if not self.is_vision():
            self._refuse(
                f"not opened: {Path(path).name} is an image, and the model on screen is a text model: it reads text"
            )
            return
        self.compute.side.submit(
            IMAGE_OPEN,
            read_image,
            path,
            done=lambda _image: self._opened(path),
            failed=lambda message: self._refuse(f"not opened: {message}"),
            scope=None,
        )

    def _opened(self, path: str) -> None:
        self.view.set_message("")
        self.state.pretrained.image = str(path)
        self.state.view.tab = IMAGE_TAB
        self.status.say(f"opened {Path(path).name}: running the model on it…")

    def _refuse(self, message: str) -> None:
        self.view.set_message(message)
        self.status.fail(message)

    # -- the run ----------------------------------------------------------------------------------
    def key(self, shown: Shown):
        return shown.run_id

    def show(self, shown: Shown) -> None:
        run = shown.layers
        if not isinstance(run, VisionResult):
            self._run = None
            self.view.set_message(NOT_VISION)
            return
        self.view.set_message("")
        fresh = self._run is None or self._run.tokens != run.tokens
        self._run = run
        if fresh:
            self._query = image_maps.default_query(run)
            self._patch = None
        self.view.mapCanvas.set_picture(None, (0, 0), None)
        self.view.mapStatus.setText("")
        self._fill_queries()
        self.redraw()

    def _fill_queries(self) -> None:
        run = self._run
        assert run is not None, "a vision run"
        items: list[tuple[str, object]] = [(run.tokens[i], i) for i in range(run.specials)]
        items.append(("mean of the patches", None))
        if self._patch is not None:
            items.append((f"patch {run.tokens[self._patch]}", self._patch))
        self.view.set_queries(items, self._query)

    def set_query(self, query: int | None) -> None:
        self._query = query
        self.redraw()

    def click_patch(self, row: int, col: int) -> None:
        """A click on the image: that patch's token becomes the query."""
        run = self._run
        if run is None:
            return
        cols = run.grid[1]
        self._patch = run.specials + row * cols + col
        self._query = self._patch
        self._fill_queries()
        self.redraw()

    def query(self) -> int | None:
        return self._query

    def _on_colormap(self, name: str) -> None:
        self.view.set_colormap(name)
        self.redraw()

    def redraw(self) -> None:
        run = self._run
        if run is None or not self.visible():
            return
        layer = max(0, min(int(self.state.pretrained.layer), len(run.weights) - 1))
        self.view.set_heads(run.weights.shape[1], layer)
        self.compute.side.submit(
            IMAGE_OVERLAYS,
            overlay_pictures,
            run,
            layer,
            self._query,
            self.view.head(),
            self.view.opacity(),
            self.state.view.colormap,
            self.view.all_layers(),
            done=self._show_pictures,
            failed=self._refuse,
        )

    def _show_pictures(self, pictures: OverlayPictures) -> None:
        run = self._run
        if run is None:
            return
        self._pictures = pictures
        marked = None
        if self._query is not None and self._query >= run.specials:
            marked = divmod(self._query - run.specials, run.grid[1])
        self.view.canvas.set_picture(pictures.large, run.grid, marked)
        self.view.set_heads_picture(pictures.grid)
        head = self.view.head()
        layer = int(self.state.pretrained.layer)
        who = "mean of heads" if head is None else head_name(layer, head)
        self.view.scaleLabel.setText(f"{who} · colours 0 to {pictures.value_range[1]:.3g}")
        self.drawn.emit()

    def pictures(self) -> OverlayPictures | None:
        return self._pictures

    # -- maps across layers -----------------------------------------------------------------------
    def compute_map(self, which: str, steps: int) -> None:
        run = self._run
        if run is None:
            return
        try:
            _name, image = image_choice(self.state.pretrained.image)
        except ConfigError as exc:
            self._refuse(str(exc))
            return
        self._map_query = "the mean of the patches" if self._query is None else run.tokens[self._query]
        self.view.set_map_progress(0.0, "computing…")
        self.compute.side.submit(
            IMAGE_MAP,
            image_map,
            self.state.mode.path,
            image,
            run,
            which,
            self._query,
            steps,
            done=self._show_map,
            failed=self._map_failed,
            progress=self.view.set_map_progress,
            busy=self.view.set_map_busy,  # a new run drops the map: its button comes back then too
        )

    def cancel_map(self) -> None:
        self.compute.side.cancel(IMAGE_MAP)  # the map's controls go idle (set_map_busy)
        self.view.mapStatus.setText("cancelled")

    def _show_map(self, answer) -> None:
        values, what = answer
        run = self._run
        if run is None:
            return
        values = np.asarray(values, dtype=np.float64)
        low, high = float(np.nanmin(values)), float(np.nanmax(values))
        picture = blend(
            run.image,
            values,
            colormap=self.state.view.colormap,
            vmin=low,
            vmax=high if high > low else low + 1.0,
            opacity=self.view.opacity(),
        )
        self.view.mapCanvas.set_picture(picture, run.grid, None)
        self.view.mapStatus.setText(f"{what}, from {self._map_query}; colours {low:.3g} to {high:.3g}")
        self.mapDrawn.emit()

    def _map_failed(self, message: str) -> None:
        self.view.mapStatus.setText(message)

    def release(self) -> None:
        self.compute.side.cancel(IMAGE_OVERLAYS)
        self._pictures = None
        self.view.canvas.set_picture(None, (0, 0), None)
        self.view.set_heads_picture(None)


__all__ = ["IMAGE_TAB", "ImageTab", "overlay_pictures", "query_maps"]
