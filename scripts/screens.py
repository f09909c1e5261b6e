"""The picture review: every tab of the real window, in both modes, at two sizes, each in its
empty state and after its main action, as PNGs, a contact sheet, and the checks of
``scripts/screen_checks.py`` on each picture's widgets.

    make screens                      # render-out/screens
    .venv/bin/python scripts/screens.py OUT_DIR [--sizes 1280x800,1920x1200] [--windows toy,minilm,gpt2,vit]
        [--tabs attribution,corpus]   # only these tabs (ids as in app/tabs/registry.py)

Windows: ``toy`` (the sample sentence, random weights), ``minilm`` (the packaged
all-MiniLM-L6-v2), ``gpt2`` (a tiny random GPT-2 from tests/pretrained_models.py, for the tabs
only a decoder serves) and ``vit`` (a small random ViT: 8 x 8 patches of 8 pixels, for the Image tab and the
heatmaps over patches). Each tab is rendered once per size and window. Writes ``<window>-<size>-
<tab>-<state>.png``, ``contact-sheet.png`` and ``problems.txt`` (one line per problem, each naming
the tab, the widget and what is wrong); the exit status is 1 when any check failed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _path in (str(ROOT), str(ROOT / "tests")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from scripts.screen_checks import Axis, Box, Problem, Status, Widget, review  # noqa: E402

SIZES = ((1280, 800), (1920, 1200))
WINDOWS = ("toy", "minilm", "gpt2", "vit")
DECODER_TABS = ("generate", "patching", "attribution", "logit-lens", "circuit")  # the gpt2 window renders only these
VISION_TABS = ("image", "heatmaps", "all-layers", "corpus")  # the vit window renders only these
ONLY = {"gpt2": DECODER_TABS, "vit": VISION_TABS}
THUMB_WIDTH = 360


@dataclass
class Shot:
    """One picture: which window, size, tab and state, its file and its problems."""

    window: str
    size: tuple[int, int]
    tab: str
    state: str
    path: Path
    problems: list[Problem] = field(default_factory=list)

    @property
    def caption(self) -> str:
        return f"{self.window} {self.size[0]}x{self.size[1]} {self.tab} · {self.state}"


# -- reading a window into records ---------------------------------------------------------------
def _plain(text: str) -> str:
    from PySide6.QtGui import Qt, QTextDocumentFragment

    return QTextDocumentFragment.fromHtml(text).toPlainText() if Qt.mightBeRichText(text) else text


def _axis_texts(axis) -> list[str]:
    """The tick labels an axis draws now."""
    if not axis.style.get("showValues", True) or (hasattr(axis, "labels_shown") and not axis.labels_shown()):
        return []
    if axis._tickLevels is not None:  # fixed ticks (setTicks)
        return [str(label) for level in axis._tickLevels for _value, label in level]
    low, high = axis.range
    length = axis.geometry().width() if axis.orientation in ("top", "bottom") else axis.geometry().height()
    if length <= 0 or high <= low:
        return []
    out: list[str] = []
    for spacing, values in axis.tickValues(low, high, length):
        out += [str(s) for s in axis.tickStrings(values, axis.autoSIPrefixScale * axis.scale, spacing)]
    return out


def _scene_records(view) -> tuple[list[str], list[Axis]]:
    """Texts and axes in a QGraphicsView's scene (pyqtgraph plots, the heatmap maps)."""
    import pyqtgraph as pg
    from PySide6.QtWidgets import QGraphicsSimpleTextItem, QGraphicsTextItem

    texts: list[str] = []
    axes: list[Axis] = []
    scene = view.scene()
    if scene is None:
        return texts, axes
    for item in scene.items():
        if not item.isVisible():
            continue
        if isinstance(item, pg.AxisItem):
            texts += _axis_texts(item)
            if item.label.isVisible():
                name = f"{view.objectName() or type(view).__name__} {item.orientation} axis"
                axes.append(Axis(name, _plain(item.labelString()), item.labelUnits, float(item.autoSIPrefixScale)))
        elif isinstance(item, QGraphicsTextItem):
            texts.append(item.toPlainText())
        elif isinstance(item, QGraphicsSimpleTextItem):
            texts.append(item.text())
    return texts, axes


def _table_texts(table) -> list[str]:
    from PySide6.QtCore import QAbstractListModel, QModelIndex, Qt

    model = table.model()
    if model is None:
        return []
    rows = model.rowCount(QModelIndex())
    cols = 1 if isinstance(model, QAbstractListModel) else model.columnCount(QModelIndex())
    out = [str(model.headerData(c, Qt.Orientation.Horizontal) or "") for c in range(cols)]
    out += [str(model.headerData(r, Qt.Orientation.Vertical) or "") for r in range(min(rows, 2000))]
    for r in range(min(rows, 2000)):
        out += [str(model.index(r, c).data() or "") for c in range(cols)]
    return out


def read_window(window, root=None) -> tuple[list[Widget], list[Axis]]:
    """Every visible widget of ``root`` (default: the window; parents first, boxes in the window's
    coordinates) with the texts it shows, and every labelled plot axis."""
    from PySide6.QtCore import QPoint, Qt
    from PySide6.QtWidgets import (
        QAbstractButton,
        QAbstractItemView,
        QAbstractScrollArea,
        QGraphicsView,
        QLabel,
        QWidget,
    )

    widgets: list[Widget] = []
    axes: list[Axis] = []

    def walk(widget, parent: int, scrolled: bool) -> None:
        if not widget.isVisible() or (widget is not window and widget.isWindow()):
            return
        origin = widget.mapTo(window, QPoint(0, 0)) if widget is not window else QPoint(0, 0)
        texts: list[str] = []
        if isinstance(widget, QLabel):
            texts.append(_plain(widget.text()))
        elif isinstance(widget, QAbstractButton):
            texts.append(widget.text())
        if isinstance(widget, QAbstractItemView):
            texts += _table_texts(widget)
        if isinstance(widget, QGraphicsView):
            scene_texts, scene_axes = _scene_records(widget)
            texts += scene_texts
            axes.extend(scene_axes)
        name = widget.objectName() or type(widget).__name__
        box = Box(origin.x(), origin.y(), widget.width(), widget.height())
        widgets.append(Widget(name, box, parent, scrolled, tuple(t for t in texts if t)))
        index = len(widgets) - 1
        inside = scrolled or isinstance(widget, QAbstractScrollArea)
        for child in widget.findChildren(QWidget, options=Qt.FindChildOption.FindDirectChildrenOnly):
            walk(child, index, inside)

    walk(window if root is None else root, -1, False)
    return widgets, axes


# -- driving the window --------------------------------------------------------------------------
def busy(window) -> bool:
    from attndesk.app.widgets.interp import RunBar
    from attndesk.jobs.executor import executor

    if window.compute.is_busy() or window.heatmapPanel.is_building() or window.status.busy:
        return True
    if executor().working():  # any channel's job queued or at work (a tab's side jobs among them)
        return True
    if any(bar.is_busy() for bar in window.findChildren(RunBar)):
        return True
    for tab_id in ("train", "corpus"):
        presenter = window.tab_presenter(tab_id)
        for name in ("is_training", "is_running"):
            if getattr(presenter, name, lambda: False)():
                return True
    return False


def settle(app, window, seconds: float = 90.0, quiet: float = 0.4) -> None:
    """Process events until nothing computes or draws for ``quiet`` seconds (or ``seconds`` pass)."""
    end, calm = time.monotonic() + seconds, None
    while time.monotonic() < end:
        app.processEvents()
        calm = None if busy(window) else (calm or time.monotonic())
        if calm and time.monotonic() - calm > quiet:
            return
        time.sleep(0.02)


def _click(button) -> None:
    if button.isEnabled():
        button.click()


def _open_preset(window, seconds: float = 60.0) -> None:
    """Open the first shipped preset and wait until its heads' heatmaps are drawn."""
    from PySide6.QtWidgets import QApplication

    view = window.tab_widget("train")
    if view.presetCombo.count() < 2:
        return
    view.presetCombo.setCurrentIndex(1)
    view.presetCombo.activated.emit(1)
    end = time.monotonic() + seconds
    while not view.probe_drawn() and time.monotonic() < end:
        QApplication.processEvents()
        time.sleep(0.02)


def _kv_lab(window, seconds: float = 120.0) -> None:
    """Run the KV cache tab's policy, wait for its pictures, then sweep its budgets (settled after)."""
    from PySide6.QtWidgets import QApplication

    view = window.tab_widget("kvcache")
    _click(view.bar.runButton)
    end = time.monotonic() + seconds
    while view.bar.is_busy() and time.monotonic() < end:
        QApplication.processEvents()
        time.sleep(0.02)
    _click(view.sweepButton)


# tab -> its main action (the tabs not named here show their result as soon as they open)
ACTIONS: dict[str, Callable] = {
    "compare": lambda w: _click(w.tab_widget("compare").pinButton),
    "online-softmax": lambda w: _click(w.tab_widget("online-softmax").nextButton),
    "train": _open_preset,
    "kvcache": _kv_lab,
    "corpus": lambda w: (_click(w.tab_widget("corpus").sampleButton), _click(w.tab_widget("corpus").startButton)),
    "generate": lambda w: _click(w.tab_widget("generate").stepButton),
    "patching": lambda w: _click(w.tab_widget("patching").bar.runButton),
    "attribution": lambda w: _click(w.tab_widget("attribution").bar.runButton),
    "logit-lens": lambda w: _click(w.tab_widget("logit-lens").bar.runButton),
    "circuit": lambda w: _click(w.tab_widget("circuit").bar.runButton),
    "image": lambda w: _image_action(w),
}


def _image_action(window) -> None:
    """Click a patch of the image (its query) and compute the rollout map."""
    from PySide6.QtCore import QEvent, QPointF, Qt
    from PySide6.QtGui import QMouseEvent
    from PySide6.QtWidgets import QApplication

    view = window.tab_widget("image")
    rows, cols = view.canvas._grid
    if rows and cols:
        at = view.canvas.patch_center(rows // 3, cols // 3)
        for kind in (QEvent.Type.MouseButtonPress, QEvent.Type.MouseButtonRelease):
            event = QMouseEvent(
                kind,
                QPointF(at),
                QPointF(at),
                Qt.MouseButton.LeftButton,
                Qt.MouseButton.LeftButton,
                Qt.KeyboardModifier.NoModifier,
            )
            QApplication.sendEvent(view.canvas, event)
    view.mapCombo.setCurrentIndex(view.mapCombo.findData("rollout"))
    _click(view.computeButton)


def _open(kind: str, size: tuple[int, int], folder: Path, app):
    from attndesk.app import MainWindow

    window = MainWindow(restore=False)
    window.resize(*size)
    window.show()
    settle(app, window)
    if kind == "minilm":
        from attndesk.models import packaged_model_dir

        window.pretrained.open_folder(packaged_model_dir())
    elif kind == "gpt2":
        from pretrained_models import build

        path = folder / "gpt2"
        if not path.exists():
            build("gpt2", path, seed=3, initializer_range=0.5)
        window.pretrained.open_folder(path)
    elif kind == "vit":
        from pretrained_models import build_vision

        path = folder / "vit"
        if not path.exists():
            build_vision("vit", path, seed=3, side=64, image_size=64, num_hidden_layers=3, initializer_range=0.3)
        window.pretrained.open_folder(path)
    settle(app, window)
    return window


def render(out: Path, sizes=SIZES, windows=WINDOWS, log=print, tabs: tuple[str, ...] = ()) -> list[Shot]:
    """Every picture of the review into ``out`` (see the module docstring); ``tabs``: only these."""
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([sys.argv[0]])
    app.setApplicationName("attndesk")  # its data folder is the app's (under the temporary XDG_DATA_HOME)
    out.mkdir(parents=True, exist_ok=True)
    shots: list[Shot] = []
    with tempfile.TemporaryDirectory(prefix="attndesk-screens-") as tmp:
        for kind in windows:
            for size in sizes:
                window = _open(kind, size, Path(tmp), app)
                try:
                    shots += _review_window(app, window, kind, size, out, log, tabs)
                finally:
                    window.close()
                    window.deleteLater()
                    app.processEvents()
    return shots


class _Author:
    """Which tab's action wrote the status message now shown ("" while no action runs)."""

    def __init__(self, window) -> None:
        self.acting = self.wrote = ""
        window.status.events.message.connect(self._said)

    def _said(self, _message: str) -> None:
        self.wrote = self.acting


def _review_window(app, window, kind: str, size, out: Path, log, only: tuple[str, ...] = ()) -> list[Shot]:
    author = _Author(window)
    shots = []
    shown = [
        t for t, _title in window.shown_tabs() if (kind not in ONLY or t in ONLY[kind]) and (not only or t in only)
    ]
    for tab in shown:
        window.state.view.tab = tab
        settle(app, window)
        for state in ("empty", "after") if tab in ACTIONS else ("shown",):
            if state == "after":
                author.acting = tab
                ACTIONS[tab](window)
                settle(app, window, seconds=180)
                author.acting = ""
            shot = _shoot(window, kind, size, tab, state, out, Status(window.status.message, author.wrote))
            shots.append(shot)
            log(f"{shot.caption}: {len(shot.problems)} problem(s)")
    return shots


def _shoot(window, kind: str, size, tab: str, state: str, out: Path, status: Status) -> Shot:
    shown = window.displayed_result()
    tokens = list(shown.queries.tokens) if shown is not None else []
    widgets, axes = read_window(window)
    page, _page_axes = read_window(window, window.tab_page(tab))  # the tokens a tab lists: on its own page
    path = out / f"{kind}-{size[0]}x{size[1]}-{tab}-{state}.png"
    window.grab().save(str(path))
    problems = review(tab, widgets, axes, status, tokens, page)
    if window.viewTabs.currentWidget() is not window.tab_page(tab):  # another tab took the front
        front = window.viewTabs.tabText(window.viewTabs.currentIndex())
        problems.insert(0, Problem(tab, "viewTabs", f"the {front} tab is on screen instead"))
    return Shot(kind, size, tab, state, path, problems)


# -- the contact sheet -----------------------------------------------------------------------------
def contact_sheet(shots: list[Shot], path: Path, columns: int = 6) -> Path:
    """One PNG: a thumbnail of every picture with its caption and its number of problems."""
    from PIL import Image, ImageDraw

    thumbs = []
    for shot in shots:
        image = Image.open(shot.path).convert("RGB")
        image.thumbnail((THUMB_WIDTH, THUMB_WIDTH))
        thumbs.append(image)
    cell_h = max((t.height for t in thumbs), default=0) + 34
    rows = -(-len(thumbs) // columns)
    sheet = Image.new("RGB", (columns * (THUMB_WIDTH + 8) + 8, rows * cell_h + 8), "white")
    draw = ImageDraw.Draw(sheet)
    for i, (shot, thumb) in enumerate(zip(shots, thumbs, strict=True)):
        x, y = 8 + (i % columns) * (THUMB_WIDTH + 8), 8 + (i // columns) * cell_h
        sheet.paste(thumb, (x, y))
        draw.text((x, y + thumb.height + 2), shot.caption, fill="black")
        if shot.problems:
            draw.text((x, y + thumb.height + 15), f"{len(shot.problems)} problem(s)", fill=(200, 0, 0))
    sheet.save(path)
    return path


def _sizes(text: str) -> tuple[tuple[int, int], ...]:
    try:
        return tuple((int(w), int(h)) for w, h in (s.lower().split("x") for s in text.split(",")))
    except ValueError:
        raise argparse.ArgumentTypeError(f"sizes are WxH[,WxH], got {text!r}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default=str(ROOT / "render-out" / "screens"))
    parser.add_argument("--sizes", type=_sizes, default=SIZES, help="WxH[,WxH] (default 1280x800,1920x1200)")
    parser.add_argument("--windows", default=",".join(WINDOWS), help="of toy, minilm, gpt2, vit (default all)")
    parser.add_argument("--tabs", default="", help="only these tab ids, e.g. attribution,corpus (default every tab)")
    args = parser.parse_args(argv)
    windows = tuple(args.windows.split(","))
    if unknown := set(windows) - set(WINDOWS):
        print(f"screens: unknown window(s) {sorted(unknown)}; choose from {', '.join(WINDOWS)}", file=sys.stderr)
        return 2
    tabs = tuple(t for t in args.tabs.split(",") if t)
    from attndesk.app.tabs.registry import TABS

    if unknown := set(tabs) - {t.id for t in TABS}:
        print(
            f"screens: unknown tab(s) {sorted(unknown)}; choose from {', '.join(t.id for t in TABS)}", file=sys.stderr
        )
        return 2
    # the user's settings and data folder (corpus stores) stay out of the pictures and untouched
    os.environ.setdefault("ATTNDESK_SETTINGS_ORG", "attndesk-screens")
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    out = Path(args.out)
    with tempfile.TemporaryDirectory(prefix="attndesk-screens-data-") as data:
        os.environ["XDG_DATA_HOME"] = data
        shots = render(out, args.sizes, windows, tabs=tabs)
    sheet = contact_sheet(shots, out / "contact-sheet.png")
    problems = [f"{shot.caption}: {p}" for shot in shots for p in shot.problems]
    (out / "problems.txt").write_text("".join(f"{line}\n" for line in problems))
    print(f"{len(shots)} pictures, {len(problems)} problem(s); contact sheet {sheet}")
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
