"""The pretrained mode of the window: all-MiniLM-L6-v2 (or an opened BERT folder), layer by layer.

``PretrainedMode`` attaches to a ``MainWindow`` and owns everything this mode adds:

- ``modeCombo`` entries: "Pretrained: all-MiniLM-L6-v2" and one per opened folder
  (File > Open model folder..., checked with ``read_spec`` in the GUI thread: config.json only,
  milliseconds; a bad folder is one status-bar message and changes nothing).
- While a pretrained mode is on, the architecture controls show the model's fixed numbers
  read-only (a "Model" row adds layers and the token limit); scale and causal mask still act.
- The heatmap toolbar gets ``layerSpin``, ``allLayersCheck``, ``hideSpecialCheck`` and
  ``clearAblationButton``; a summary line (cosine to the normal embedding, truncation) goes under
  it; an "All layers" tab holds the ``LayerHeadGrid`` (click: open that layer/head large;
  Ctrl+click: ablate it).
- The worker loads the model (cached for the session, progress in the status bar) and runs it;
  the job hands back a ``ViewPayload`` whose ``run`` is the whole ``PretrainedResult`` and whose
  ``result`` is the selected layer. Changing the layer or hiding special tokens re-slices that
  run in the GUI thread (no new job); ablation, scale and mask changes recompute (debounced).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Qt, QTimer, Slot
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QComboBox, QFileDialog, QHBoxLayout, QLabel, QMenu, QPushButton, QVBoxLayout, QWidget,
)

from attndesk.core.errors import Cancelled, ConfigError
from attndesk.core.pretrained import (
    PACKAGED_NAME, PretrainedResult, is_loaded, load_pretrained, packaged_model_dir, pretrained_job, read_spec,
    run_pretrained,
)

from .jobs import Job, ViewPayload
from .long_source import source_for_result
from .pretrained_views import LayerHeadGrid, PretrainedControls, describe_run, export_all_weights, export_painting
from .session import Session, SessionError

PACKAGED_MODE = f"Pretrained: {PACKAGED_NAME}"
FOLDER_PREFIX = "Pretrained folder: "  # + the folder's absolute path = the mode's data (and session's mode)
GRID_TAB_TITLE = "All layers"
# what the parameters panel shows for controls a pretrained model does not have
_FIXED = {"dropout": 0.0, "training": False, "device": "cpu", "dtype": "float32", "pad_to": None, "position": "sinusoidal"}
_NOTICE_STYLE = "color: #9a4b00;"


def folder_mode(path: str | Path) -> str:
    return FOLDER_PREFIX + str(Path(path).expanduser().resolve())


def mode_folder(mode: str) -> str | None:
    """The model folder of a pretrained mode (None = the packaged model)."""
    return mode[len(FOLDER_PREFIX):] if mode.startswith(FOLDER_PREFIX) else None


def slice_payload(run: PretrainedResult, layer: int, hide_special: bool) -> ViewPayload:
    """The view of one layer of ``run`` (cheap: slicing, a mean over heads)."""
    layer = max(0, min(int(layer), run.num_layers - 1))
    notices = []
    try:
        result = run.layer_result(layer, hide_special)
    except ValueError:  # every token is special: nothing would be left
        result = run.layer_result(layer, False)
        notices.append("every token is a special token: showing them")
    notices = [f"{run.model_name} layer {layer} of {run.num_layers}", *result.notices, *notices]
    if run.altered and run.cosine_to_normal is not None:
        notices.append(f"cosine to the normal embedding {run.cosine_to_normal:.4f}")
    return ViewPayload(result, source_for_result(result), notices, run=run)


def pretrained_view_job(folder: str | None, text: str, layer: int, hide_special: bool, *, scaled: bool = True,
                        causal: bool = False, ablate=(), progress=None, should_cancel=None) -> ViewPayload:
    """Worker thread: load (cached) and run the model, then slice the chosen layer.

    The first forward pass after a load pays ~0.8 s of torch's one-off set-up (kernels, thread
    pool), mostly in layer 0; a throw-away pass on two words takes it, so the timings shown are the
    model's own."""
    report = progress or (lambda fraction, message: None)
    if not is_loaded(folder):
        model = load_pretrained(folder, lambda f, m: report(0.4 * f, f"loading model: {m}"))
        if should_cancel is not None and should_cancel():
            raise Cancelled("superseded by a newer request")
        report(0.45, "warming up (first run only)")
        run_pretrained(model, "warm up")
        stage = lambda f, m: report(0.6 + 0.4 * f, m)  # noqa: E731
    else:
        stage = report
    run = pretrained_job(folder, text, scaled=scaled, causal=causal, ablate=ablate, progress=stage,
                         should_cancel=should_cancel)
    if should_cancel is not None and should_cancel():
        raise Cancelled("superseded by a newer request")
    return slice_payload(run, layer, hide_special)


def _warm_imports() -> None:
    """safetensors and tokenizers take ~130 ms to import: do it while the window is idle at
    startup, not in the middle of the first load."""
    try:
        import safetensors  # noqa: F401
        import safetensors.torch  # noqa: F401
        import tokenizers  # noqa: F401
    except ImportError:  # the load itself will say what is missing
        pass


class PretrainedMode(QObject):
    """Owns the pretrained mode's widgets and state for one ``MainWindow`` (``window.pretrained``)."""

    def __init__(self, window) -> None:
        super().__init__(window)
        self.setObjectName("pretrainedMode")
        self.window = window
        self.panel = window.parametersPanel
        self._specs: dict[str, Any] = {}  # mode -> BertSpec (config.json read once)
        self._active: str | None = None  # the pretrained mode now on, or None in toy mode
        self._toy_values: dict[str, Any] | None = None  # the toy settings to give back on leaving
        self._run: PretrainedResult | None = None
        self._ablate: list[tuple[int, int]] = []
        self._shown: tuple[int, bool] | None = None  # (layer, hide_special) of the view on screen

        self.panel.modeCombo.addItem(PACKAGED_MODE, PACKAGED_MODE)
        self.panel.modeCombo.setItemData(self.panel.modeCombo.count() - 1,
                                         "the real all-MiniLM-L6-v2 encoder (6 layers x 12 heads), offline",
                                         Qt.ItemDataRole.ToolTipRole)

        # parameters dock: the numbers the locked controls cannot show
        self.modelInfo = QLabel("", objectName="pretrainedModelInfo")  # two short lines: a wrapped label squeezes in a form
        self.modelInfo.setToolTip("a pretrained model's architecture is fixed by its checkpoint; "
                                  "scale and the causal mask still act, heads can be ablated in the All layers tab")
        self.panel.add_row("Model", self.modelInfo)
        self._mask_tip = self.panel.maskCombo.toolTip()

        # one line under the heatmap toolbar (which is full already): layer, switches, run summary
        self.controls = PretrainedControls()
        self.controls.all_layers_check.setToolTip("show every layer x head in the All layers tab; click one to open it")
        self.summary = self.controls.summary
        self.header = QWidget(objectName="pretrainedHeader")
        line = QHBoxLayout(self.header)
        line.setContentsMargins(4, 0, 4, 0)
        line.addWidget(self.controls)
        line.addSpacing(12)
        line.addWidget(self.summary, 1)
        window.heatmapPanel.add_header_widget(self.header)

        # the All layers tab
        self.grid = LayerHeadGrid()
        self.gridTab = QWidget(objectName="pretrainedGridTab")
        self.gridSummary = QLabel("", objectName="pretrainedGridSummary")
        self.gridSummary.setWordWrap(True)
        self.gridScaleCombo = QComboBox(objectName="gridScaleCombo")
        self.gridScaleCombo.addItem("colour per head", "per-head")
        self.gridScaleCombo.addItem("colour shared", "shared")
        self.gridScaleCombo.setToolTip("per head: each thumbnail from 0 to its own maximum (shows every pattern); "
                                       "shared: one scale for all (compares heads)")
        self.gridExportButton = QPushButton("Export…", objectName="pretrainedGridExportButton")
        menu = QMenu(self.gridExportButton)
        self.exportGridAction = menu.addAction("Grid image (PNG, SVG or PDF)…")
        self.exportAllAction = menu.addAction("All layers' weights (.npy or .csv)…")
        self.gridExportButton.setMenu(menu)
        top = QHBoxLayout()
        top.addWidget(self.gridSummary, 1)
        top.addWidget(self.controls.clear_button)  # ablating happens here (Ctrl+click), so does undoing it
        top.addWidget(self.gridScaleCombo)
        top.addWidget(self.gridExportButton)
        box = QVBoxLayout(self.gridTab)
        box.setContentsMargins(4, 4, 4, 4)
        box.addLayout(top)
        box.addWidget(self.grid, 1)
        self.gridTabIndex = window.add_view_tab(self.gridTab, GRID_TAB_TITLE)
        window.viewTabs.setTabToolTip(self.gridTabIndex, "pretrained mode: every layer x head; click one to open it")

        # File > Open model folder…
        self.openFolderAction = QAction("Open &model folder…", window, objectName="openModelFolderAction")
        self.openFolderAction.setToolTip("a local BERT-family folder: config.json, model.safetensors, tokenizer.json")
        file_menu = next((m for m in window.openSessionAction.associatedObjects() if isinstance(m, QMenu)), None)
        if file_menu is not None:
            file_menu.insertAction(window.exportAction, self.openFolderAction)
            file_menu.insertSeparator(window.exportAction)

        self.panel.modeChanged.connect(self._on_mode)
        self.controls.layerChanged.connect(self._on_layer)
        self.controls.hideSpecialToggled.connect(self._on_hide_special)
        self.controls.allLayersToggled.connect(self.show_grid)
        self.controls.clearAblationRequested.connect(lambda: self.set_ablation([]))
        self.grid.headActivated.connect(self.open_head)
        self.grid.ablationChanged.connect(self.set_ablation)
        self.gridScaleCombo.currentIndexChanged.connect(lambda _i: self.grid.set_scale(self.gridScaleCombo.currentData()))
        window.heatmapPanel.appearanceChanged.connect(self._sync_colormap)
        window.viewTabs.currentChanged.connect(self._on_tab)
        window.runner.finished.connect(self._on_finished)
        self.openFolderAction.triggered.connect(self._open_folder_dialog)
        self.exportGridAction.triggered.connect(self._export_grid_dialog)
        self.exportAllAction.triggered.connect(self._export_all_dialog)
        self._set_visible(False)
        QTimer.singleShot(0, _warm_imports)

    # -- modes ----------------------------------------------------------------------------------
    @staticmethod
    def handles(mode: str | None) -> bool:
        return isinstance(mode, str) and (mode == PACKAGED_MODE or mode.startswith(FOLDER_PREFIX))

    def active(self) -> str | None:
        return self._active

    def run(self) -> PretrainedResult | None:
        """The last pretrained run (all layers), or None."""
        return self._run

    def spec_for(self, mode: str):
        """The mode's BertSpec (config.json, read once); ConfigError says what is wrong."""
        if mode not in self._specs:
            folder = mode_folder(mode)
            self._specs[mode] = read_spec(packaged_model_dir() if folder is None else folder)
        return self._specs[mode]

    def add_folder(self, path: str | Path) -> str:
        """Check a model folder (config.json and the files' presence) and list it as a mode; returns
        the mode. Raises ConfigError (nothing changes)."""
        folder = Path(path).expanduser()
        spec = read_spec(folder)
        try:
            if folder.resolve() == packaged_model_dir().resolve():
                return PACKAGED_MODE
        except ConfigError:
            pass
        mode = folder_mode(folder)
        combo = self.panel.modeCombo
        self._specs[mode] = spec
        if combo.findData(mode) < 0:
            combo.addItem(f"Pretrained: {folder.resolve().name}", mode)
            combo.setItemData(combo.count() - 1, str(folder.resolve()), Qt.ItemDataRole.ToolTipRole)
        return mode

    def open_folder(self, path: str | Path) -> bool:
        """File > Open model folder: on success switch to it; on failure one status message."""
        try:
            mode = self.add_folder(path)
        except ConfigError as exc:
            self.window._set_status(f"not a usable model folder: {exc}", error=True)
            return False
        combo = self.panel.modeCombo
        combo.setCurrentIndex(combo.findData(mode))
        self.window._set_status(f"model folder {Path(path).name}: loading in the background…")
        return True

    def _open_folder_dialog(self) -> None:
        path = QFileDialog.getExistingDirectory(self.window, "Open a BERT model folder "
                                                "(config.json, model.safetensors, tokenizer.json)")
        if path:
            self.open_folder(path)

    @Slot(str)
    def _on_mode(self, mode: str) -> None:
        if not self.handles(mode):
            self._leave()
            return
        try:
            spec = self.spec_for(mode)
        except ConfigError as exc:
            # e.g. the packaged model is not installed: the compute shows it next to the controls
            self._leave()
            self.window._set_status(str(exc), error=True)
            return
        if self._active is None:
            self._toy_values = self.panel.values()
        if self._active != mode:
            self._run, self._shown = None, None
            self._ablate = []
            self.grid.clear()
            self.summary.setText(f"{spec.name}: loading…" if not is_loaded(mode_folder(mode)) else "")
        self._active = mode
        self._lock(spec)
        self._set_visible(True)

    def _lock(self, spec) -> None:
        values = {"embed_dim": spec.hidden_size, "num_heads": spec.num_heads, "hidden_dim": spec.head_dim, **_FIXED}
        mask = self.panel.values().get("mask") or "none"
        if "padding" in mask:  # one text has no padding: show what acts (causal or nothing)
            values["mask"] = "causal" if "causal" in mask else "none"
        self.panel.set_architecture_locked(values)
        for w in (self.panel.dropoutSpin, self.panel.trainCheck, self.panel.deviceCombo, self.panel.dtypeCombo):
            w.setEnabled(False)
        self.panel.hiddenDimSpin.setEnabled(False)
        self.panel.maskCombo.setToolTip("pretrained model: 'causal' forces a causal mask in every layer "
                                        "(one text has no padding to mask)")
        self.controls.set_num_layers(spec.num_layers)
        self.modelInfo.setText(f"{spec.num_layers} layers × {spec.num_heads} heads, d_k {spec.head_dim}\n"
                               f"max {spec.max_positions} tokens (more are cut)")

    def _leave(self) -> None:
        if self._active is None:
            return
        self._active, self._run, self._shown = None, None, None
        self._ablate = []
        self.grid.clear()
        self.panel.set_architecture_locked(None)
        for w in (self.panel.dropoutSpin, self.panel.trainCheck, self.panel.deviceCombo, self.panel.dtypeCombo):
            w.setEnabled(True)
        self.panel.maskCombo.setToolTip(self._mask_tip)
        if self._toy_values is not None:  # scale and causal mask stay as the user left them
            live = {k: v for k, v in self.panel.values().items() if k in ("scaled", "mask")}
            if "padding" in (self._toy_values.get("mask") or ""):  # the padding the toy model had
                live["mask"] = "padding+causal" if "causal" in live["mask"] else "padding"
            self.panel.set_values({**self._toy_values, **live})
        self._set_visible(False)

    def _set_visible(self, on: bool) -> None:
        tabs = self.window.viewTabs
        index = tabs.indexOf(self.gridTab)
        if not on and tabs.currentIndex() == index:
            tabs.setCurrentWidget(self.window.heatmapPanel)
        tabs.setTabVisible(index, on)
        self.header.setVisible(on)
        self.panel.set_row_visible(self.modelInfo, on)

    # -- computing --------------------------------------------------------------------------------
    def make_job(self, mode: str, text: str, key_text: str | None = None) -> Job:
        """The worker job for the current text and toggles; ConfigError if they cannot work."""
        spec = self.spec_for(mode)
        values = self.panel.values()
        causal = "causal" in (values.get("mask") or "")
        scaled = bool(values.get("scaled", True))
        folder = mode_folder(mode)
        name = PACKAGED_NAME if folder is None else Path(folder).name
        loaded = is_loaded(folder)
        what = f"running {name}" if loaded else f"loading {name} (once per session), then running it"
        if key_text is not None:
            what += " (cross-attention is toy-model only: the key text is ignored)"
        ablate = [(l, h) for l, h in self._ablate if l < spec.num_layers and h < spec.num_heads]
        return Job(pretrained_view_job, (folder, text, self.controls.layer(), self.controls.hide_special()),
                   {"scaled": scaled, "causal": causal, "ablate": ablate}, what)

    @Slot(int, object)
    def _on_finished(self, _generation: int, payload) -> None:
        run = getattr(payload, "run", None)
        if not isinstance(run, PretrainedResult) or self._active is None:
            return
        self._run = run
        self._shown = (payload.result.extra["layer"], bool(payload.result.extra["hide_special"]))
        self.controls.set_result(run)
        self.controls.clear_button.setEnabled(bool(self._ablate))
        self._update_summary()
        self._update_grid()
        if self._shown != (self.controls.layer(), self.controls.hide_special()):
            self.reslice()  # the layer or the switch changed while it computed

    def reslice(self) -> None:
        """Show another layer / special-token choice of the last run, without recomputing."""
        if self._run is None or self._active is None:
            return
        layer, hide = self.controls.layer(), self.controls.hide_special()
        payload = slice_payload(self._run, layer, hide)
        self._shown = (layer, hide)
        self.window.show_payload(payload, new_run=False)
        self._update_summary()
        current = self.grid.current()
        if current is not None and current[0] != layer:
            self.grid.set_current(layer, current[1])

    @Slot(int)
    def _on_layer(self, _layer: int) -> None:
        self.reslice()

    @Slot(bool)
    def _on_hide_special(self, _on: bool) -> None:
        self.reslice()
        self._update_grid()

    def set_ablation(self, pairs) -> None:
        """Heads (layer, head) whose output is zeroed; recomputes (debounced)."""
        pairs = sorted({(int(l), int(h)) for l, h in pairs})
        if pairs == self._ablate:
            return
        self._ablate = pairs
        self.grid.set_ablated(pairs)
        self.controls.clear_button.setEnabled(bool(pairs))
        if self._active is not None:
            self.summary.setText(self.summary.text().split(" · ")[0] + " · recomputing with "
                                 f"{len(pairs)} head{'s' if len(pairs) != 1 else ''} ablated…")
            self.window.schedule_compute()

    def ablation(self) -> list[tuple[int, int]]:
        return list(self._ablate)

    def _update_summary(self) -> None:
        run = self._run
        if run is None:
            return
        text = describe_run(run)
        if run.ablate:
            text += " · ablated " + ", ".join(f"L{l}H{h}" for l, h in run.ablate)
        style = _NOTICE_STYLE if run.dropped_tokens else ""
        self.gridSummary.setText(text)  # the grid's own caption covers hidden tokens over all layers
        payload = self.window.displayed_payload()
        if payload is not None and payload.run is run and payload.result.extra.get("hide_special"):
            text += " · " + payload.result.extra["legend"]  # this layer's hidden share
        self.summary.setText(text)
        for label in (self.summary, self.gridSummary):
            label.setStyleSheet(style)

    def _update_grid(self) -> None:
        if self._run is None:
            return
        self.grid.set_result(self._run, hide_special=self.controls.hide_special())
        self.grid.set_ablated(self._ablate)  # heads toggled while this run computed stay marked

    # -- the grid ---------------------------------------------------------------------------------
    @Slot(bool)
    def show_grid(self, on: bool) -> None:
        tabs = self.window.viewTabs
        target = self.gridTab if on else self.window.heatmapPanel
        if tabs.currentWidget() is not target:
            tabs.setCurrentWidget(target)

    @Slot(int)
    def _on_tab(self, _index: int) -> None:
        on = self.window.viewTabs.currentWidget() is self.gridTab
        if self.controls.all_layers() != on:
            self.controls.all_layers_check.blockSignals(True)
            self.controls.all_layers_check.setChecked(on)
            self.controls.all_layers_check.blockSignals(False)
            self.controls.layer_spin.setEnabled(not on)

    @Slot(int, int)
    def open_head(self, layer: int, head: int) -> None:
        """Open one thumbnail large: that layer, that head, in the Heatmaps tab."""
        self.grid.set_current(layer, head)
        self.window.heatmapPanel.set_view_target(int(head))
        self.show_grid(False)
        if self.controls.layer() != layer:
            self.controls.layer_spin.setValue(int(layer))  # re-slices
        elif self._shown is not None and self._shown[0] != layer:
            self.reslice()

    @Slot()
    def _sync_colormap(self) -> None:
        self.grid.set_colormap(self.window.heatmapPanel.colormap_name())

    # -- export -----------------------------------------------------------------------------------
    def export_grid(self, path: str | Path, size: tuple[int, int] | None = None) -> Path:
        """The layers x heads grid as PNG/SVG/PDF; ExportError says why not."""
        from attndesk.render.export import ExportError

        painting = self.grid.painting()
        if painting is None:
            raise ExportError("nothing to export yet: wait for a pretrained result")
        return export_painting(painting, path, size=size)

    def export_all(self, path: str | Path) -> Path:
        """Every layer's weights as .npy ([layers, heads, L, L]) or .csv; ExportError says why not."""
        from attndesk.render.export import ExportError

        if self._run is None:
            raise ExportError("nothing to export yet: wait for a pretrained result")
        return export_all_weights(self._run, path, hide_special=self.controls.hide_special())

    def _default_name(self, ext: str) -> str:
        tag = self._run.file_tag(None) if self._run is not None else "pretrained"
        hidden = "_nospecial" if self.controls.hide_special() else ""
        return f"attn_{tag}{hidden}.{ext}"

    def _export_dialog(self, title: str, ext: str, filters: str, write) -> None:
        from attndesk.render.export import ExportError

        path, _ = QFileDialog.getSaveFileName(self.window, title, self._default_name(ext), filters)
        if not path:
            return
        try:
            written = write(path)
        except ExportError as exc:
            self.window._set_status(f"export failed: {exc}", error=True)
        else:
            self.window._set_status(f"exported {written}")

    def _export_grid_dialog(self) -> None:
        self._export_dialog("Export the layers × heads grid", "png", "PNG (*.png);;SVG (*.svg);;PDF (*.pdf)",
                            self.export_grid)

    def _export_all_dialog(self) -> None:
        self._export_dialog("Export every layer's weights", "npy", "NumPy (*.npy);;CSV (*.csv)", self.export_all)

    # -- sessions ---------------------------------------------------------------------------------
    def fill_session(self, session: Session) -> Session:
        """Add the pretrained state to a session being saved (toy settings stay in ``config``)."""
        if not self.handles(session.mode):
            return session
        if self._toy_values is not None:  # the locked controls show the model, not the user's toy settings
            live = {k: session.config[k] for k in ("scaled", "mask") if k in session.config}
            if "padding" in (self._toy_values.get("mask") or ""):
                live["mask"] = "padding+causal" if "causal" in live.get("mask", "") else "padding"
            session.config = {**session.config, **self._toy_values, **live}
        session.pretrained = {
            "folder": mode_folder(session.mode), "layer": self.controls.layer(),
            "hide_special": self.controls.hide_special(), "all_layers": self.controls.all_layers(),
            "ablate": [list(p) for p in self._ablate],
        }
        return session

    def prepare_session(self, session: Session) -> None:
        """Before a session is applied: make its mode available (an opened folder is checked
        again); SessionError if it cannot be, and nothing has changed."""
        folder = (session.pretrained or {}).get("folder") or mode_folder(session.mode)
        if session.mode.startswith(FOLDER_PREFIX) and folder:
            try:
                mode = self.add_folder(folder)
            except ConfigError as exc:
                raise SessionError(f"the session's model folder cannot be used: {exc}") from None
            session.mode = mode
        elif self.handles(session.mode):
            try:
                self.spec_for(session.mode)
            except ConfigError as exc:
                raise SessionError(f"the session's model cannot be used: {exc}") from None
        self._toy_values = dict(session.config)  # what leaving the pretrained mode gives back

    def apply_session(self, session: Session) -> None:
        """After the window applied a session: its layer, switches and ablations."""
        if not self.handles(session.mode) or self._active is None:
            return
        spec = self.spec_for(self._active)
        self._lock(spec)  # set_values just showed the toy settings in the locked controls
        state = session.pretrained or {}
        self._ablate = sorted({(l, h) for l, h in state.get("ablate", [])
                               if l < spec.num_layers and h < spec.num_heads})
        self.grid.set_ablated(self._ablate)
        self.controls.clear_button.setEnabled(bool(self._ablate))
        self.controls.layer_spin.setValue(min(int(state.get("layer", 0)), spec.num_layers - 1))
        self.controls.hide_special_check.setChecked(bool(state.get("hide_special", False)))
        self.controls.all_layers_check.setChecked(bool(state.get("all_layers", False)))


README_SENTENCE = "The animal didn't cross the street because it was too tired."


def write_grid_png(path: str | Path = "resources/pretrained_grid.png", text: str = README_SENTENCE,
                   size: tuple[int, int] = (1240, 640)) -> Path:
    """The README's layers x heads picture (needs a QGuiApplication; offscreen is fine):
    ``QT_QPA_PLATFORM=offscreen python -c "from PySide6.QtWidgets import QApplication as A; a = A([]);
    from attndesk.app.pretrained_mode import write_grid_png; write_grid_png()"``."""
    from attndesk.core.pretrained import load_pretrained, run_pretrained

    from .pretrained_views import LayerGridPainting, grid_caption

    run = run_pretrained(load_pretrained(), text)
    keep = run.visible_indices(True)
    weights = run.weights[:, :, keep][..., keep]  # [N, H, L', L']: special tokens hidden, not re-normalised
    hidden = float(1.0 - weights.sum(-1).mean())
    caption = (f'{run.model_name}, {run.num_layers} layers x {run.num_heads} heads, "{text}" · '
               + grid_caption("per-head", True, hidden))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return export_painting(LayerGridPainting(weights, caption=caption), path, size=size)
