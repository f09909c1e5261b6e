"""The pretrained mode: all-MiniLM-L6-v2 (or an opened model folder), layer by layer.

- Mode combo entries: the packaged model, and one per folder opened with File > Open model
  folder… (checked with ``read_spec`` in the GUI thread: config.json only, milliseconds; a bad
  folder is one status line and changes nothing).
- While it is on, the parameters panel shows the model's fixed architecture read-only (a "Model"
  row adds layers and the token limit); scale and the causal mask still act.
- The heatmap header gets the layer, "all layers" and "hide [CLS]/[SEP]" controls and a summary
  line; an "All layers" tab holds the ``LayerHeadGrid`` (click: open that layer and head large;
  Ctrl+click: ablate it).
- The job loads the model (cached for the session, progress in the status line), runs it and
  presents the chosen layer; another layer or hiding the special tokens is another presentation
  of the same run (no job). Ablations, scale and mask are inputs of the run.

Every choice lives in the state (``state.pretrained``, ``state.view``); the widgets here write
into it and redraw from it and from the published results.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QComboBox, QFileDialog, QHBoxLayout, QLabel, QMenu, QPushButton, QVBoxLayout, QWidget

from attndesk.core.errors import Cancelled, ConfigError
from attndesk.core.pretrained import (
    PACKAGED_NAME, ModelSpec, PretrainedResult, is_loaded, load_pretrained, packaged_model_dir, pretrained_job, read_spec,
    run_pretrained,
)
from attndesk.core.types import AttentionMap
from attndesk.render.export import ExportError

from ..panels.long_source import source_for_map
from ..pretrained_views import (
    LayerGridPainting, LayerHeadGrid, PretrainedControls, describe_run, export_all_weights, export_painting,
    grid_caption, grid_painting, grid_weights,
)
from ..results import InputProblem, Job, Request, RunFacts, Shown, TokenRows, notices_of
from ..state import HEATMAPS_TAB, PACKAGED, AppState, ModeId
from .base import Assembly, ModeBase, ModeChoice, PanelView

GRID_TAB = "all-layers"
GRID_TAB_TITLE = "All layers"
PRETRAINED_VIEWS = frozenset({"heatmaps", "positions", "head-stats", "compare", "rollout", GRID_TAB})
_NOTICE_STYLE = "color: #9a4b00;"
_MASK_TIP = "pretrained model: 'causal' forces a causal mask in every layer (one text has no padding to mask)"


def folder_mode(path: str | Path) -> ModeId:
    return ModeId(kind="pretrained", path=str(Path(path).expanduser().resolve()))


def layer_map(run: PretrainedResult, layer: int, hide_special: bool) -> tuple[AttentionMap, bool, list[str]]:
    """(the layer's map, whether special tokens are hidden, notices): with every token special,
    hiding them would leave nothing, so they are shown, with a notice."""
    if hide_special:
        try:
            return run.layer_map(layer, hide_special=True), True, []
        except ValueError:
            pass
    notices = ["every token is a special token: showing them"] if hide_special else []
    return run.layer_map(layer), False, notices


def pretrained_shown(run: PretrainedResult, mode: ModeId, layer: int, hide_special: bool) -> Shown:
    """One layer of ``run`` as the window presents it: its map and heatmap source (call it in a
    worker: the source's mean and tiles are O(H L^2))."""
    layer = max(0, min(int(layer), run.num_layers - 1))
    amap, hidden, notices = layer_map(run, layer, hide_special)
    keep = run.visible_indices(hidden)
    notices = [f"{run.model_name} layer {layer} of {run.num_layers}", *run.notices, *notices]
    if run.altered and run.cosine_to_normal is not None:
        notices.append(f"cosine to the normal embedding {run.cosine_to_normal:.4f}")
    facts = RunFacts(dict(run.timings), int(run.flops), int(run.peak_bytes), run.device, "float32")
    output = run.hidden_states[layer + 1][keep] if run.hidden_states is not None else None  # [Lq', E]
    return Shown(
        mode=mode, map=amap, source=source_for_map(amap), facts=facts,
        queries=TokenRows(list(amap.queries), run.token_ids[keep], None), keys=None, notices=notices_of(notices),
        layers=run, layer=layer, output=output, present_key=(layer, bool(hide_special)),
    )


def pretrained_run(mode: ModeId, text: str, layer: int, hide_special: bool, *, scaled: bool = True,
                   causal: bool = False, ablate=(), progress=None, should_cancel=None) -> Shown:
    """The worker's job: load (cached) and run the model, then present the chosen layer.

    The first forward pass after a load pays ~0.8 s of torch's one-off set-up (kernels, thread
    pool), mostly in layer 0; a throw-away pass on two words takes it, so the timings shown are
    the model's own."""
    report = progress or (lambda fraction, message: None)
    if not is_loaded(mode.path):
        model = load_pretrained(mode.path, lambda f, m: report(0.4 * f, f"loading model: {m}"))
        if should_cancel is not None and should_cancel():
            raise Cancelled("superseded by a newer request")
        report(0.45, "warming up (first run only)")
        run_pretrained(model, "warm up")
        stage = lambda f, m: report(0.6 + 0.4 * f, m)  # noqa: E731
    else:
        stage = report
    run = pretrained_job(mode.path, text, scaled=scaled, causal=causal, ablate=ablate, progress=stage,
                         should_cancel=should_cancel)
    if should_cancel is not None and should_cancel():
        raise Cancelled("superseded by a newer request")
    return pretrained_shown(run, mode, layer, hide_special)


class PretrainedMode(QObject, ModeBase):
    """Computes with a real model; owns its controls, its grid tab and its File menu action."""

    kind = "pretrained"
    views = PRETRAINED_VIEWS

    def __init__(self, parent: QObject | None = None) -> None:
        QObject.__init__(self, parent)
        self.setObjectName("pretrainedMode")
        self._specs: dict[ModeId, ModelSpec] = {}  # mode -> what config.json says (read once)
        self._folders: list[ModeId] = []  # opened folders, in the order they were opened
        self._ui: Assembly | None = None
        self._run: PretrainedResult | None = None
        self._run_mode: ModeId | None = None
        self._build_widgets()

    # -- the Mode protocol ------------------------------------------------------------------------
    def choices(self) -> list[ModeChoice]:
        packaged = ModeChoice(PACKAGED, f"Pretrained: {PACKAGED_NAME}",
                              "the real all-MiniLM-L6-v2 encoder (6 layers x 12 heads), offline")
        return [packaged] + [ModeChoice(m, f"Pretrained: {Path(m.path).name}", m.path) for m in self._folders]

    def spec_for(self, mode: ModeId):
        """The mode's ModelSpec (config.json, read once); ConfigError says what is wrong."""
        if mode not in self._specs:
            self._specs[mode] = read_spec(packaged_model_dir() if mode.path is None else mode.path)
        return self._specs[mode]

    def request(self, state: AppState) -> Request:
        spec = self.spec_for(state.mode)
        if not state.text.strip():
            raise InputProblem("type some text to attend over: the input is empty")
        causal, scaled = "causal" in state.config.mask, bool(state.config.scaled)
        ablate = tuple((l, h) for l, h in state.pretrained.ablate if l < spec.num_layers and h < spec.num_heads)
        name = PACKAGED_NAME if state.mode.path is None else Path(state.mode.path).name
        what = f"running {name}" if is_loaded(state.mode.path) else f"loading {name} (once per session), then running it"
        if state.cross:
            what += " (cross-attention is toy-model only: the key text is ignored)"
        layer, hide = self.present_key(state)
        job = Job(pretrained_run, (state.mode, state.text, layer, hide),
                  {"scaled": scaled, "causal": causal, "ablate": ablate}, what)
        return Request(key=(state.mode, state.text, scaled, causal, ablate), job=job)

    def present_key(self, state: AppState) -> tuple[int, bool]:
        return int(state.pretrained.layer), bool(state.pretrained.hide_special)

    def present(self, shown: Shown, key: tuple[int, bool]) -> Shown:
        layer, hide = key
        return pretrained_shown(shown.layers, shown.mode, layer, hide)

    def panel(self, state: AppState) -> PanelView:
        try:
            spec = self.spec_for(state.mode)
        except ConfigError:
            return PanelView(causal_only=True, mask_tip=_MASK_TIP)
        fixed = {"embed_dim": spec.hidden_size, "num_heads": spec.num_heads, "hidden_dim": spec.head_dim,
                 "dropout": 0.0, "training": False, "device": "cpu", "dtype": "float32", "pad_to": None,
                 "position": "sinusoidal", "seed": state.config.seed}
        fixed["kv_heads"] = spec.kv_heads if spec.kv_heads != spec.num_heads else None  # None: plain multi-head
        limit = f"max {spec.max_positions} tokens (more are cut)" if spec.max_positions else "no fixed token limit"
        info = f"{spec.family_name}: {spec.num_layers} layers × {spec.num_heads} heads, d_k {spec.head_dim}\n{limit}"
        return PanelView(fixed=fixed, causal_only=True, mask_tip=_MASK_TIP, info=info)

    def install(self, ui: Assembly) -> None:
        self._ui = ui
        ui.add_header_widget(self.header)
        ui.add_tab(GRID_TAB, self.gridTab, GRID_TAB_TITLE, "pretrained mode: every layer x head; click one to open it")
        ui.menus.add("file", self.openFolderAction, "model")
        ui.add_action(self.openFolderAction)
        self._bind(ui)
        self._on_mode(ui.state.mode)

    # -- widgets ----------------------------------------------------------------------------------
    def _build_widgets(self) -> None:
        self.controls = PretrainedControls()
        self.controls.all_layers_check.setToolTip("show every layer x head in the All layers tab; click one to open it")
        self.summary = self.controls.summary
        self.header = QWidget(objectName="pretrainedHeader")
        line = QHBoxLayout(self.header)
        line.setContentsMargins(4, 0, 4, 0)
        line.addWidget(self.controls)
        line.addSpacing(12)
        line.addWidget(self.summary, 1)
        self.grid = LayerHeadGrid()
        self.gridSummary = QLabel("", objectName="pretrainedGridSummary")
        self.gridSummary.setWordWrap(True)
        self.gridScaleCombo = QComboBox(objectName="gridScaleCombo")
        self.gridScaleCombo.addItem("colour per head", "per-head")
        self.gridScaleCombo.addItem("colour shared", "shared")
        self.gridScaleCombo.setToolTip("per head: each thumbnail from 0 to its own maximum (shows every pattern); "
                                       "shared: one scale for all (compares heads)")
        self.gridTab = QWidget(objectName="pretrainedGridTab")
        self._build_grid_tab()
        self.openFolderAction = QAction("Open &model folder…", self, objectName="openModelFolderAction")
        self.openFolderAction.setToolTip("a local BERT-family folder: config.json, model.safetensors, tokenizer.json")

    def _build_grid_tab(self) -> None:
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

    def _bind(self, ui: Assembly) -> None:
        state = ui.state
        self.controls.layerChanged.connect(self._set_layer)
        self.controls.hideSpecialToggled.connect(lambda on: setattr(state.pretrained, "hide_special", bool(on)))
        self.controls.allLayersToggled.connect(self.show_grid)
        self.controls.clearAblationRequested.connect(lambda: self.set_ablation([]))
        self.grid.headActivated.connect(self.open_head)
        self.grid.ablationChanged.connect(self.set_ablation)
        self.gridScaleCombo.currentIndexChanged.connect(
            lambda _i: setattr(state.pretrained, "grid_scale", self.gridScaleCombo.currentData()))
        self.openFolderAction.triggered.connect(self._open_folder_dialog)
        self.exportGridAction.triggered.connect(self._export_grid_dialog)
        self.exportAllAction.triggered.connect(self._export_all_dialog)
        state.events.mode.connect(self._on_mode)
        state.view.events.tab.connect(self._on_tab)
        state.pretrained.events.layer.connect(lambda _layer: self._sync_controls())
        state.pretrained.events.hide_special.connect(self._on_hide_special)
        state.pretrained.events.ablate.connect(self._on_ablate)
        state.pretrained.events.grid_scale.connect(lambda _scale: self._update_grid())
        state.view.events.colormap.connect(lambda _name: self._update_grid())
        ui.compute.published.connect(self._on_published)

    # -- state -> widgets -------------------------------------------------------------------------
    def _on_mode(self, mode: ModeId) -> None:
        on = mode.kind == self.kind
        if on:
            try:
                spec = self.spec_for(mode)
            except ConfigError as exc:  # e.g. the packaged model is not installed: the request says it too
                self._ui.status.fail(str(exc))
                spec = None
            if spec is not None:
                self.controls.set_num_layers(spec.num_layers)
                self.summary.setText("" if is_loaded(mode.path) else f"{spec.name}: loading…")
        if not on or (self._run is not None and self._run_mode != mode):
            self._run = None
            self.grid.clear()
        self.header.setVisible(on)
        self._ui.set_tab_visible(GRID_TAB, on)
        self._sync_controls()

    def _on_tab(self, _tab: str) -> None:
        self._sync_controls()

    def _on_hide_special(self, _on: bool) -> None:
        self._sync_controls()
        self._update_grid()

    def _on_ablate(self, pairs) -> None:
        self._sync_controls()
        self._update_summary()

    def _sync_controls(self) -> None:
        state = self._ui.state
        grid_on = state.view.tab == GRID_TAB
        c = self.controls
        for widget, setter, value in ((c.layer_spin, c.layer_spin.setValue, state.pretrained.layer),
                                      (c.hide_special_check, c.hide_special_check.setChecked, state.pretrained.hide_special),
                                      (c.all_layers_check, c.all_layers_check.setChecked, grid_on)):
            widget.blockSignals(True)
            setter(value)
            widget.blockSignals(False)
        c.layer_spin.setEnabled(not grid_on)
        c.clear_button.setEnabled(bool(state.pretrained.ablate))
        self.grid.set_ablated(state.pretrained.ablate)
        self.gridScaleCombo.blockSignals(True)
        self.gridScaleCombo.setCurrentIndex(self.gridScaleCombo.findData(state.pretrained.grid_scale))
        self.gridScaleCombo.blockSignals(False)

    def _on_published(self, shown: Shown) -> None:
        if shown.layers is None or shown.mode.kind != self.kind:
            return
        if shown.layers is not self._run:
            self._run, self._run_mode = shown.layers, shown.mode
            self.controls.set_result(self._run)
            if self._ui.state.pretrained.layer > self._run.num_layers - 1:
                self._ui.state.pretrained.layer = self._run.num_layers - 1
            self._update_grid()
        self._sync_controls()
        self._update_summary(shown)
        current = self.grid.current()
        if current is not None and current[0] != shown.layer:
            self.grid.set_current(shown.layer, current[1])

    def _update_summary(self, shown: Shown | None = None) -> None:
        run = self._run
        if run is None:
            return
        text = describe_run(run)
        if run.ablate:
            text += " · ablated " + ", ".join(f"L{l}H{h}" for l, h in run.ablate)
        self.gridSummary.setText(text)  # the grid's own caption covers hidden tokens over all layers
        state = self._ui.state
        if tuple(state.pretrained.ablate) != tuple(run.ablate):
            n = len(state.pretrained.ablate)
            text += f" · recomputing with {n} head{'s' if n != 1 else ''} ablated…"
        shown = shown or self._ui.compute.shown()
        if shown is not None and shown.layers is run and shown.map.hidden_mass is not None:
            text += " · " + shown.map.legend  # this layer's hidden share
        self.summary.setText(text)
        style = _NOTICE_STYLE if run.dropped_tokens else ""
        for label in (self.summary, self.gridSummary):
            label.setStyleSheet(style)

    def _update_grid(self) -> None:
        """Rebuild the grid's thumbnails off the GUI thread (layers x heads x L x L to reduce)."""
        if self._run is None:
            return
        state = self._ui.state
        self._ui.compute.side.submit(
            "grid", grid_painting, self._run, hide_special=state.pretrained.hide_special,
            colormap=state.view.colormap, scale=state.pretrained.grid_scale, ablated=state.pretrained.ablate,
            done=self._show_painting, scope="run")

    def _show_painting(self, painting) -> None:
        self.grid.set_painting(painting)
        self.grid.set_ablated(self._ui.state.pretrained.ablate)  # heads toggled while it was built stay marked

    # -- intents ----------------------------------------------------------------------------------
    def run(self) -> PretrainedResult | None:
        """The last pretrained run (all layers), or None."""
        return self._run

    def ablation(self) -> list[tuple[int, int]]:
        return list(self._ui.state.pretrained.ablate)

    def _set_layer(self, layer: int) -> None:
        self._ui.state.pretrained.layer = int(layer)

    def set_ablation(self, pairs) -> None:
        """Heads (layer, head) whose output is zeroed: a new run."""
        self._ui.state.pretrained.ablate = tuple(sorted({(int(l), int(h)) for l, h in pairs}))
        self._update_summary()

    def show_grid(self, on: bool) -> None:
        self._ui.state.view.tab = GRID_TAB if on else HEATMAPS_TAB

    def open_head(self, layer: int, head: int) -> None:
        """Open one layer's head large in the Heatmaps tab."""
        state = self._ui.state
        self.grid.set_current(layer, head)
        state.view.target = int(head)
        state.pretrained.layer = int(layer)
        state.view.tab = HEATMAPS_TAB

    # -- model folders ----------------------------------------------------------------------------
    def add_folder(self, path: str | Path) -> ModeId:
        """Check a model folder (config.json and the files' presence) and list it as a mode; returns
        the mode. Raises ConfigError (nothing changes)."""
        folder = Path(path).expanduser()
        spec = read_spec(folder)
        try:
            if folder.resolve() == packaged_model_dir().resolve():
                return PACKAGED
        except ConfigError:
            pass
        mode = folder_mode(folder)
        self._specs[mode] = spec
        if mode not in self._folders:
            self._folders.append(mode)
            if self._ui is not None:
                self._ui.refresh_choices()
        return mode

    def admit(self, mode: ModeId) -> ModeId:
        """A session's mode: its folder is checked again (and listed), the packaged model must exist."""
        if mode.path is not None:
            return self.add_folder(mode.path)
        self.spec_for(mode)
        return mode

    def open_folder(self, path: str | Path) -> bool:
        """File > Open model folder: on success switch to it; on failure one status line."""
        try:
            mode = self.add_folder(path)
        except ConfigError as exc:
            self._ui.status.fail(f"not a usable model folder: {exc}")
            return False
        self._ui.state.mode = mode
        self._ui.status.say(f"model folder {Path(path).name}: loading in the background…")
        return True

    def _open_folder_dialog(self) -> None:
        path = QFileDialog.getExistingDirectory(self._dialog_parent(), "Open a BERT model folder "
                                                "(config.json, model.safetensors, tokenizer.json)")
        if path:
            self.open_folder(path)

    def _dialog_parent(self) -> QWidget | None:
        return self.header.window()

    # -- export -----------------------------------------------------------------------------------
    def export_grid(self, path: str | Path, size: tuple[int, int] | None = None) -> Path:
        """The layers x heads grid as PNG/SVG/PDF; ExportError says why not."""
        painting = self.grid.painting()
        if painting is None:
            raise ExportError("nothing to export yet: wait for a pretrained result")
        return export_painting(painting, path, size=size)

    def export_all(self, path: str | Path) -> Path:
        """Every layer's weights as .npy ([layers, heads, L, L]) or .csv; ExportError says why not."""
        if self._run is None:
            raise ExportError("nothing to export yet: wait for a pretrained result")
        return export_all_weights(self._run, path, hide_special=self._ui.state.pretrained.hide_special)

    def default_name(self, ext: str) -> str:
        tag = self._run.file_tag(None) if self._run is not None else "pretrained"
        hidden = "_nospecial" if self._ui.state.pretrained.hide_special else ""
        return f"attn_{tag}{hidden}.{ext}"

    def _export_dialog(self, title: str, ext: str, filters: str, write) -> None:
        path, _ = QFileDialog.getSaveFileName(self._dialog_parent(), title, self.default_name(ext), filters)
        if not path:
            return
        try:
            written = write(path)
        except ExportError as exc:
            self._ui.status.fail(f"export failed: {exc}")
        else:
            self._ui.status.say(f"exported {written}")

    def _export_grid_dialog(self) -> None:
        self._export_dialog("Export the layers × heads grid", "png", "PNG (*.png);;SVG (*.svg);;PDF (*.pdf)",
                            self.export_grid)

    def _export_all_dialog(self) -> None:
        self._export_dialog("Export every layer's weights", "npy", "NumPy (*.npy);;CSV (*.csv)", self.export_all)


README_SENTENCE = "The animal didn't cross the street because it was too tired."


def write_grid_png(path: str | Path = "resources/pretrained_grid.png", text: str = README_SENTENCE,
                   size: tuple[int, int] = (1240, 640)) -> Path:
    """The README's layers x heads picture (needs a QGuiApplication; offscreen is fine):
    ``QT_QPA_PLATFORM=offscreen python -c "from PySide6.QtWidgets import QApplication as A; a = A([]);
    from attndesk.app.modes.pretrained import write_grid_png; write_grid_png()"``."""
    run = run_pretrained(load_pretrained(), text)
    weights, _mask, _hide, hidden = grid_weights(run, True)
    caption = (f'{run.model_name}, {run.num_layers} layers x {run.num_heads} heads, "{text}" · '
               + grid_caption("per-head", True, hidden))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return export_painting(LayerGridPainting(weights, caption=caption), path, size=size)


__all__ = ["GRID_TAB", "PretrainedMode", "folder_mode", "pretrained_run", "pretrained_shown", "write_grid_png"]
