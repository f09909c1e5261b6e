"""The Corpus tab: the corpus pass (``attndesk.corpus``) over a file, a folder or the bundled sample,
run as the "corpus" side job with progress and cancel (a cancelled pass resumes where it stopped),
and its store read back through the "corpus-query" side job: every DuckDB query runs off the GUI
thread, one at a time on that channel's thread, so the store's connection is never shared.

The model is the pretrained mode's (its folder, or the packaged all-MiniLM-L6-v2); the toy model
has no tokenizer or checkpoint, so in toy mode the pass uses the packaged MiniLM and says so. A
vision model runs the image pass (a folder of images, or the sample images when none is given).
Opening a text (a listed one or an atlas point) puts it in the heatmaps at that layer and head,
an image in the Image tab, switching to the store's model when another is open.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from PySide6.QtCore import QObject, QStandardPaths
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QFileDialog

from attndesk import corpus  # its names load on first use (attndesk/corpus/__init__.py)
from attndesk.app.widgets.named import named
from attndesk.errors import Cancelled, ConfigError
from attndesk.jobs import JobContext, job_context
from attndesk.models import PACKAGED_NAME, packaged_model_dir
from attndesk.render.export import ExportError
from attndesk.render.page import PageTooLarge, write_document
from attndesk.render.page_corpus import corpus_page_data
from attndesk.resources import CORPUS_SAMPLE
from attndesk.session.results import Shown
from attndesk.session.state import HEATMAPS_TAB, IMAGE_TAB, PACKAGED, AppState, Part
from attndesk.session.status import StatusModel

from ...jobs.channels import CORPUS, CORPUS_QUERY
from ...jobs.compute import ComputeController
from ...modes.pretrained.mode import folder_mode
from ...widgets.menus import MenuRegistry
from ..interp import model_family
from ..presenter import TabPresenter
from . import CorpusView
from .view import set_images

CORPUS_TAB = "corpus"
LISTED = 8  # texts listed as a head's highest and lowest
TOY_NOTE = f"toy mode: the corpus pass uses the packaged {PACKAGED_NAME} (the toy model has no tokenizer or checkpoint)"


@dataclass(frozen=True)
class PassOutcome:
    """What a pass job hands back: the store's folder, or how far a cancelled pass got (``shards``:
    the finished shards it kept)."""

    out: Path
    cancelled: bool
    done: int = 0
    total: int = 0
    shards: int = 0


def run_pass(
    data: str | None, out: str, model: str | None, max_tokens: int, cancel: threading.Event, *, ctx: JobContext
) -> PassOutcome:
    """Worker: the corpus pass, stopped by the tab's Cancel (``cancel``) or the job's own (a newer
    job, the window closing); its progress goes to the job's. The corpus package's engine (pandas,
    pyarrow, DuckDB) is loaded here, off the GUI thread, on first use."""
    seen = [0, 0]

    def counts(p) -> None:
        seen[:] = [p.done, p.total]

    try:
        corpus.analyze_corpus(
            data, out, model=model, max_tokens=max_tokens, ctx=job_context(ctx, cancel=cancel, report=counts)
        ).close()
    except Cancelled:
        kept = len(corpus.finished_shards(Path(out)))
        return PassOutcome(Path(out), True, seen[0], seen[1], kept)
    return PassOutcome(Path(out), False, *seen)


def open_store(path: str):
    """Worker: open a store and read its heads (the connection then lives on this channel's thread)."""
    store = corpus.open_corpus(path)
    store.heads  # noqa: B018 - read here, off the GUI thread
    return store


def head_detail(store, part: str, layer: int, head: int, metric: str) -> dict:
    """Worker: one head's highest and lowest texts by ``metric``, its atlas and the atlas' texts."""
    top = store.top_texts(layer, head, metric, LISTED, part=part)
    bottom = store.top_texts(layer, head, metric, LISTED, part=part, lowest=True)
    atlas = store.atlas(layer, head, part)
    ids = sorted(set(atlas["text_id"].astype(int)))
    texts = store.sql("SELECT text_id, text FROM texts WHERE text_id IN (SELECT unnest(?::INTEGER[]))", [ids])
    return {
        "part": part,
        "layer": layer,
        "head": head,
        "metric": metric,
        "top": top,
        "bottom": bottom,
        "atlas": atlas,
        "texts": dict(zip(texts["text_id"].astype(int), texts["text"])),
    }


def text_of(store, text_id: int) -> str:
    """Worker: one text of the store (an image store: the image, its path or "sample:NAME")."""
    column = "source" if store.images else "text"
    found = store.sql(f"SELECT {column} FROM texts WHERE text_id = ?", [int(text_id)])
    if found.empty:
        raise ConfigError(f"no text {text_id} in {store.path}")
    return str(found[column].iloc[0])


def write_store_page(store, path: str, texts: list[int], metric: str) -> str:
    """Worker: the store's interactive page (``render.page_corpus``) with ``texts``' attention, at
    ``path``; the line the status bar says. Texts whose attention would not fit in a page are left
    out (the line says so); a path that cannot be written is a one-line ``ConfigError``."""
    try:
        try:
            return f"exported {write_document(corpus_page_data(store, texts, metric=metric), path)}"
        except PageTooLarge as exc:
            if not texts:
                raise
            left_out = f" (without the attention of text(s) {', '.join(map(str, texts))}: {exc})"
            return f"exported {write_document(corpus_page_data(store, [], metric=metric), path)}{left_out}"
    except ExportError as exc:
        raise ConfigError(str(exc)) from None


def _close_all(stores: list) -> None:
    for store in stores:
        store.close()
    stores.clear()


class CorpusTab(TabPresenter):
    """See the module docstring. ``store`` is the open store (None before one)."""

    tab_id = CORPUS_TAB

    def __init__(
        self,
        state: AppState,
        compute: ComputeController,
        status: StatusModel,
        menus: MenuRegistry,
        view: CorpusView,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(state, compute, view, parent)
        self.status = status
        self._stores: list = []  # the open store, closed with the view (the window's jobs are joined by then)
        self._cancel: threading.Event | None = None
        self._head: tuple[str, int, int] | None = None
        self.openStoreAction = named(QAction("Open &corpus store…", view), "openCorpusStoreAction")
        self.openStoreAction.setToolTip("reopen the store of an earlier corpus pass in the Corpus tab")
        self.openStoreAction.triggered.connect(self._open_store_dialog)
        menus.add("file", self.openStoreAction, "session")
        self.exportPageAction = named(QAction("Export corpus &page (.html)…", view), "exportCorpusPageAction")
        self.exportPageAction.setToolTip(
            "the open store as one interactive page: its heads grid and roles, its texts, the attention of text 0"
        )
        self.exportPageAction.setEnabled(False)  # until a store is open
        self.exportPageAction.triggered.connect(self._export_page_dialog)
        menus.add("file", self.exportPageAction, "export")
        view.startRequested.connect(self.start)
        view.cancelRequested.connect(self.cancel)
        view.sampleRequested.connect(lambda: view.sourceEdit.setText("" if self.images() else str(CORPUS_SAMPLE)))
        view.headSelected.connect(self.select_head)
        view.metricChanged.connect(lambda _m: self._request_head())
        view.partChanged.connect(lambda _p: self._head and self.select_head(_p, *self._head[1:]))
        view.textOpened.connect(self.open_text)
        state.events.mode.connect(lambda _m: self._show_model())
        view.destroyed.connect(lambda *_a, stores=self._stores: _close_all(stores))
        self._show_model()

    @property
    def store(self):
        """The open ``CorpusStore`` (query it only through the "corpus-query" side job), or None."""
        return self._stores[0] if self._stores else None

    def show(self, shown: Shown) -> None:
        self._show_model()

    # -- the model the pass uses ----------------------------------------------------------------
    def pass_model(self) -> str | None:
        """The pretrained mode's folder, None for the packaged model (also in toy mode)."""
        mode = self.state.mode
        return mode.path if mode.kind == "pretrained" else None

    def images(self) -> bool:
        """Whether the pass reads images: the pretrained mode has a vision model open."""
        return model_family(self.state.mode) == "vision"

    def _show_model(self) -> None:
        images = self.images()
        set_images(self.view, images)
        if self.state.mode.kind != "pretrained":
            self.view.modelLabel.setText(TOY_NOTE)
        else:
            name = PACKAGED_NAME if self.state.mode.path is None else Path(self.state.mode.path).name
            what = " over a folder of images (left empty: the sample images)" if images else ""
            self.view.modelLabel.setText(f"model: {name} (the pretrained mode's){what}")

    def default_out(self, data: str) -> str:
        model_path = self.pass_model()
        model = Path(model_path).name if model_path else PACKAGED_NAME
        root = Path(QStandardPaths.writableLocation(QStandardPaths.StandardLocation.AppDataLocation)) / "corpus"
        if self.images():
            return str(root / f"{Path(data).name or 'sample-images'}-{model}-images")
        return str(root / f"{Path(data).stem or 'texts'}-{model}-{self.view.tokensSpin.value()}")

    # -- the pass -------------------------------------------------------------------------------
    def start(self) -> None:
        """Start (or resume) the pass over the chosen texts into the store folder."""
        view = self.view
        data = view.sourceEdit.text().strip()
        images = self.images()
        if not data and not images:  # an image pass left empty reads the sample images
            view.show_error("choose a file or a folder of texts (or the sample) first")
            return
        default = self.default_out(data)
        out = view.storeEdit.text().strip() or default
        if out == default:  # the app's own folder for stores is made on first use
            Path(out).parent.mkdir(parents=True, exist_ok=True)
        view.storeEdit.setText(out)
        view.show_error("")
        self._cancel = threading.Event()
        view.set_running(True)
        view.show_progress(0.0, "starting: loading the model…")
        self.compute.side.submit(
            CORPUS,
            run_pass,
            data or None,
            out,
            self.pass_model(),
            view.tokensSpin.value(),
            self._cancel,
            scope=None,
            progress=view.show_progress,
            done=self._pass_done,
            failed=self._pass_failed,
        )

    def cancel(self) -> None:
        """Stop the pass before its next batch; finished shards stay, Resume goes on from them."""
        if self._cancel is not None:
            self._cancel.set()
            self.view.show_progress(self.view.progressBar.value() / 1000, "cancelling after the current batch…")

    def is_running(self) -> bool:
        """From Start until its answer reached this tab (the job itself may have ended a moment before)."""
        return self._cancel is not None or self.compute.side.is_busy(CORPUS)

    def _pass_done(self, outcome: PassOutcome) -> None:
        self._cancel = None
        if outcome.cancelled:
            self.view.set_running(False, resumable=outcome.shards > 0)
            where = f"cancelled at {outcome.done:,} of {outcome.total:,} {'images' if self.images() else 'texts'}"
            self.view.show_progress(
                outcome.done / max(outcome.total, 1),
                f"{where}: Resume goes on from the last finished shard"
                if outcome.shards
                else f"{where}, before the first shard finished: Start runs the pass from the beginning",
            )
            return
        self.view.set_running(False)
        self.view.show_progress(1.0, f"done: {outcome.out}")
        self.open_store(outcome.out)

    def _pass_failed(self, message: str) -> None:
        self._cancel = None
        self.view.set_running(False)
        self.view.show_progress(0.0, "")
        self.view.show_error(message)

    # -- the store ------------------------------------------------------------------------------
    def open_store(self, path) -> None:
        """Open a finished store (File > Open corpus store…, or a pass that just ended)."""
        self.compute.side.submit(
            CORPUS_QUERY,
            open_store,
            str(path),
            scope=None,
            done=self._store_opened,
            failed=lambda message: self.view.show_error(f"store not opened: {message}"),
        )

    def _store_opened(self, store) -> None:
        old = self.store
        self._stores[:] = [store]
        if old is not None:
            self.compute.side.submit(CORPUS_QUERY, old.close, scope=None, done=lambda _r: None)
        model = store.manifest.get("model", {}).get("name", "?")
        texts = store.manifest.get("data", {}).get("texts", 0)
        self.view.show_error("")
        self.exportPageAction.setEnabled(not store.images)  # the page draws texts' attention
        unit = "images" if store.images else "texts"
        self.view.show_store(store.heads, f"{store.path.name}: {model}, {texts:,} {unit}", images=store.images)
        self.status.say(f"opened corpus store {store.path}", tab=CORPUS_TAB)
        first = store.heads.iloc[0] if len(store.heads) else None
        if first is not None:
            self.select_head(self.view.part(), int(first["layer"]), int(first["head"]))

    def _open_store_dialog(self) -> None:
        path = QFileDialog.getExistingDirectory(self.view, "Open corpus store")
        if path:
            self.state.view.tab = CORPUS_TAB
            self.open_store(path)

    def _export_page_dialog(self) -> None:
        if self.store is None:
            return
        start = str(Path.home() / f"corpus_{self.store.path.name}.html")
        path, _ = QFileDialog.getSaveFileName(self.view, "Export corpus page", start, "Interactive page (*.html)")
        if path:
            self.export_page(path if path.lower().endswith(".html") else path + ".html")

    def export_page(self, path, texts: tuple[int, ...] = (0,)) -> None:
        """Write the open store's page (the grid coloured by the tab's metric) as a "corpus-query" side job."""
        if self.store is None:
            return
        self.compute.side.submit(
            CORPUS_QUERY,
            write_store_page,
            self.store,
            str(path),
            list(texts),
            self.view.current_metric(),
            scope=None,
            done=self.status.say,
            failed=lambda message: self.view.show_error(f"page not exported: {message}"),
        )

    def select_head(self, part: str, layer: int, head: int) -> None:
        self._head = (part, int(layer), int(head))
        self._request_head()

    def _request_head(self) -> None:
        if self.store is None or self._head is None:
            return
        self.compute.side.submit(
            CORPUS_QUERY,
            head_detail,
            self.store,
            *self._head,
            self.view.current_metric(),
            scope=None,
            done=self.view.show_head,
            failed=self.view.show_error,
        )

    # -- opening a text in the heatmaps ----------------------------------------------------------
    def open_text(self, text_id: int) -> None:
        """The text in the heatmaps at the selected layer and head (the store's model)."""
        if self.store is None or self._head is None:
            return
        head = self._head
        self.compute.side.submit(
            CORPUS_QUERY,
            text_of,
            self.store,
            int(text_id),
            scope=None,
            done=lambda text: self._show_text(text, *head),
            failed=self.view.show_error,
        )

    def _store_mode(self):
        path = Path(self.store.manifest["model"]["path"])
        try:
            packaged = path.resolve() == packaged_model_dir().resolve()
        except ConfigError:
            packaged = False
        mode = PACKAGED if packaged else folder_mode(path)
        return mode if mode == self.state.mode else self.compute.modes.for_id(mode).admit(mode)

    def _show_text(self, text: str, part: str, layer: int, head: int) -> None:
        try:
            mode = self._store_mode()
        except ConfigError as exc:
            self.view.show_error(f"the store's model cannot be opened: {exc}")
            return
        state = self.state
        if self.store.images:  # an image: the Image tab shows it at that layer and head
            if state.mode != mode:
                state.mode = mode
            state.pretrained.image = text
            state.pretrained.layer = int(layer)
            state.view.target = int(head)
            state.view.tab = IMAGE_TAB
            return
        state.text = text
        if self.store.manifest["model"].get("family") == "encoder-decoder":
            state.target_text = text  # the pass teacher-forces the text itself through the decoder
        if state.mode != mode:
            state.mode = mode
        state.pretrained.part = cast(Part, part)  # the store's parts are the state's (corpus/batch.py SIDES)
        state.pretrained.layer = int(layer)
        state.view.target = int(head)
        state.view.tab = HEATMAPS_TAB


__all__ = ["CORPUS_TAB", "CorpusTab", "PassOutcome", "head_detail", "open_store", "run_pass", "write_store_page"]
