"""The pretrained mode: all-MiniLM-L6-v2 or any opened model folder (encoders, decoders,
encoder-decoders), layer by layer.

- Mode combo entries: the packaged model, and one per folder opened with File > Open model
  folder… or chosen in File > Local models… (the local Hugging Face cache; listed by a side job).
  A folder is checked with ``read_spec`` in the GUI thread (config.json and weight headers only,
  milliseconds): a bad, unsupported or remote-code folder is one status line and changes nothing.
- Decoders: the map carries the causal mask (drawn hatched), the K/V groups (heads laid out
  "kv 0: q 0–3"), the layer's kind and window (badge, band outline, "local" in the layer spin and
  the grid); the header's "log colours" and "hide first token (renormalised)" bind
  ``view.log_scale`` / ``view.hide_first_key`` (the heatmap panel derives the picture).
- Encoder-decoders: ``state.target_text`` is the decoder's input (a new run), ``state.pretrained.part``
  picks the encoder's, the decoder's or the cross-attention (another presentation, no run).
- While it is on, the parameters panel shows the model's fixed architecture read-only (a "Model"
  row adds layers and the token limit); scale and the causal mask still act.
- The heatmap header gets the layer (named local/global where layers differ), "all layers",
  "hide special tokens", the sink-aware switches, an encoder-decoder's part and target line, and a
  summary line; an "All layers" tab holds the ``LayerHeadGrid`` of the shown part (click: open that layer
  and head large; Ctrl+click: ablate it, self-attention heads only).
- Its tabs (All layers, Generate) are entries of ``app/tabs/registry.py`` that serve only the
  pretrained mode: the window shows them while a pretrained model is on; the mode fills the All
  layers page at install.
- The job loads the model (cached for the session, progress in the status line), runs it and
  presents the chosen layer; another layer or hiding the special tokens is another presentation
  of the same run (no job). Ablations, scale and mask are inputs of the run.

Every choice lives in the state (``state.pretrained``, ``state.view``); the widgets here write
into it and redraw from it and from the published results.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import cast

import numpy as np
from PySide6.QtCore import QObject
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QComboBox, QFileDialog, QHBoxLayout, QLabel, QMenu, QPushButton, QVBoxLayout, QWidget

from attndesk.core.errors import Cancelled, ConfigError
from attndesk.core.images import image_choice
from attndesk.core.pretrained import (
    PACKAGED_NAME,
    ModelSpec,
    PretrainedResult,
    is_loaded,
    list_cached_models,
    load_pretrained,
    packaged_model_dir,
    pretrained_job,
    read_spec,
    run_pretrained,
)
from attndesk.core.types import AttentionMap, head_name
from attndesk.jobs import JobContext, job_context
from attndesk.render.export import ExportError
from attndesk.session.ledger import Holding, arrays_of

from ..jobs.background import Background
from ..jobs.channels import FILES, GRID, HUB_CACHE
from ..modes.base import Assembly, ModeBase, ModeChoice, PanelView
from ..results import InputProblem, Job, Request, RunFacts, Shown, TokenRows, notices_of
from ..sources.long_source import source_for_map
from ..state import HEATMAPS_TAB, PACKAGED, AppState, ModeId
from ..styles import restyle
from .ablation import ablation_effect
from .controls import PretrainedControls, describe_run
from .grid import LayerHeadGrid
from .local_models import LocalModelsDialog
from .painting import LayerGridPainting, export_all_weights, export_painting, grid_caption, grid_painting, grid_weights

GRID_TAB = "all-layers"
_NOTICE_STYLE = "color: #9a4b00;"
_MASK_TIP = "pretrained model: 'causal' forces a causal mask in every layer (one text has no padding to mask)"
_DECODER_MASK_TIP = "a decoder is causal in every layer (and windowed where its layers are local): its mask is its own"


_WARM_UP_IMAGE = np.full((32, 32, 3), 128, dtype=np.uint8)  # a vision model's throw-away first pass


def folder_mode(path: str | Path) -> ModeId:
    return ModeId(kind="pretrained", path=str(Path(path).expanduser().resolve()))


def layer_map(
    run: PretrainedResult, layer: int, hide_special: bool, part: str = "self"
) -> tuple[AttentionMap, bool, list[str]]:
    """(the layer's map of ``part``, whether special tokens are hidden, notices): with every token
    special, hiding them would leave nothing, so they are shown, with a notice."""
    if hide_special:
        try:
            return run.layer_map(layer, part=part, hide_special=True), True, []
        except ValueError:
            pass
    notices = ["every token is a special token: showing them"] if hide_special else []
    return run.layer_map(layer, part=part), False, notices


def shown_part(run: PretrainedResult, part: str) -> str:
    """The part a run can show: an encoder or decoder has its own self-attention only."""
    return part if part in run.parts() else "self"


def _part_rows(run: PretrainedResult, part: str, hidden: bool) -> tuple[TokenRows, TokenRows | None, np.ndarray]:
    """(query rows, key rows or None for self-attention, kept query indices) of one part's map."""
    ids = {"self": run.token_ids, "decoder": run.target_ids, "cross": run.target_ids}[part]
    tokens = run.tokens if part == "self" else (run.target_tokens or [])
    flags = run.special if part == "self" else run.target_special
    keep = np.flatnonzero(~np.asarray(flags, bool)) if hidden and flags is not None else np.arange(len(tokens))
    raw = run.raw_tokens if part == "self" else None
    labels = run.token_labels() if part == "self" else None
    queries = TokenRows(
        [tokens[i] for i in keep],
        np.asarray(ids)[keep],
        None,
        raw and [raw[i] for i in keep],
        labels and [labels[i] for i in keep],
    )
    if part != "cross":
        return queries, None, keep
    k_keep = run.visible_indices(hidden)
    k_raw = run.raw_tokens and [run.raw_tokens[i] for i in k_keep]
    return queries, TokenRows([run.tokens[i] for i in k_keep], run.token_ids[k_keep], None, k_raw), keep


def pretrained_shown(run: PretrainedResult, mode: ModeId, layer: int, hide_special: bool, part: str = "self") -> Shown:
    """One layer of one part of ``run`` as the window presents it: its map and heatmap source (call
    it in a worker: the source's mean and tiles are O(H L^2))."""
    part = shown_part(run, part)
    count = len(run.part_weights(part))
    layer = max(0, min(int(layer), count - 1))
    amap, hidden, notices = layer_map(run, layer, hide_special, part)
    if "local" not in (run.layer_kinds or []) or part != "self":
        amap = dataclasses.replace(amap, layer_kind=None)  # "global layer" says something only next to local ones
    queries, keys, keep = _part_rows(run, part, hidden)
    where = {"self": "", "decoder": " (decoder self-attention)", "cross": " (cross-attention: target × source)"}[part]
    if part == "self" and run.family == "encoder-decoder":
        where = " (encoder self-attention)"
    lines: list[str | None] = [f"{run.model_name} layer {layer} of {count}{where}", *run.notices, *notices]
    lines.append(ablation_effect(run))  # family-aware: embedding cosine, or next-token KL and top 5
    facts = RunFacts(dict(run.timings), int(run.flops), int(run.peak_bytes), run.device, "float32")
    output = None  # [Lq', E]: the encoder's (or model's) layer output; a decoder part's is not kept
    if part == "self" and run.hidden_states is not None:
        output = run.hidden_states[layer + 1][keep]
    return Shown(
        mode=mode,
        map=amap,
        source=source_for_map(amap),
        facts=facts,
        queries=queries,
        keys=keys,
        notices=notices_of(lines),
        layers=run,
        layer=layer,
        output=output,
        present_key=(layer, bool(hide_special), part),
    )


def pretrained_run(
    mode: ModeId,
    text: str | np.ndarray,
    layer: int,
    hide_special: bool,
    part: str = "self",
    *,
    target: str | None = None,
    scaled: bool = True,
    causal: bool = False,
    ablate=(),
    ctx: JobContext | None = None,
) -> Shown:
    """The worker's job: load (cached) and run the model, then present the chosen layer. ``text``
    is a vision model's image (a file's path or an HxWx3 uint8 array) for a vision folder.

    The first forward pass after a load pays ~0.8 s of torch's one-off set-up (kernels, thread
    pool), mostly in layer 0; a throw-away pass on two words takes it, so the timings shown are
    the model's own."""
    ctx = job_context(ctx)
    stage = ctx
    if not is_loaded(mode.path):
        model = load_pretrained(mode.path, ctx=ctx.scaled(0.0, 0.4, "loading model: "))
        if ctx.cancelled:
            raise Cancelled("superseded by a newer request")
        ctx.progress(0.45, "warming up (first run only)")
        run_pretrained(model, _WARM_UP_IMAGE if model.is_vision else "warm up")
        stage = ctx.scaled(0.6, 1.0)
    run = pretrained_job(
        mode.path,
        text,
        target=target,
        scaled=scaled,
        causal=causal,
        ablate=ablate,
        ctx=stage,
    )
    if ctx.cancelled:
        raise Cancelled("superseded by a newer request")
    return pretrained_shown(run, mode, layer, hide_special, part)


class PretrainedMode(QObject, ModeBase):
    """Computes with a real model; owns its controls, its grid tab and its File menu action."""

    kind = "pretrained"

    def __init__(self, parent: QObject | None = None) -> None:
        QObject.__init__(self, parent)
        self.setObjectName("pretrainedMode")
        self._specs: dict[ModeId, ModelSpec] = {}  # mode -> what config.json says (read once)
        self._folders: list[ModeId] = []  # opened folders, in the order they were opened
        self._assembly: Assembly | None = None
        self._run: PretrainedResult | None = None
        self._run_mode: ModeId | None = None
        self._local: LocalModelsDialog | None = None
        self._exports = Background(self, FILES)  # File menu exports, written off the GUI thread
        self._build_widgets()

    # -- the Mode protocol ------------------------------------------------------------------------
    def choices(self) -> list[ModeChoice]:
        packaged = ModeChoice(
            PACKAGED, f"Pretrained: {PACKAGED_NAME}", "the real all-MiniLM-L6-v2 encoder (6 layers x 12 heads), offline"
        )
        return [packaged] + [ModeChoice(m, f"Pretrained: {self._label(m)}", self._tip(m)) for m in self._folders]

    def _label(self, mode: ModeId) -> str:
        """ "org/name" of a hub snapshot (not its hash), the folder's name otherwise."""
        spec = self._specs.get(mode)
        assert mode.path is not None, "a folder's mode"
        return Path(mode.path).name if spec is None else spec.name

    def _tip(self, mode: ModeId) -> str:
        spec = self._specs.get(mode)
        assert mode.path is not None, "a folder's mode"
        return mode.path if spec is None else f"{spec.family_name} {spec.family} · {mode.path}"

    def spec_for(self, mode: ModeId):
        """The mode's ModelSpec (config.json, read once); ConfigError says what is wrong."""
        if mode not in self._specs:
            self._specs[mode] = read_spec(packaged_model_dir() if mode.path is None else mode.path)
        return self._specs[mode]

    def request(self, state: AppState) -> Request:
        spec = self.spec_for(state.mode)
        if spec.family == "vision":
            return self._image_request(state, spec)
        if not state.text.strip():
            raise InputProblem("type some text to attend over: the input is empty")
        causal, scaled = "causal" in state.config.mask, bool(state.config.scaled)
        ablate = tuple((l, h) for l, h in state.pretrained.ablate if l < spec.num_layers and h < spec.num_heads)
        name = PACKAGED_NAME if state.mode.path is None else Path(state.mode.path).name
        what = (
            f"running {name}" if is_loaded(state.mode.path) else f"loading {name} (once per session), then running it"
        )
        if state.cross:
            what += " (cross-attention is toy-model only: the key text is ignored)"
        target = state.target_text if spec.family == "encoder-decoder" and state.target_text.strip() else None
        layer, hide, part = self.present_key(state)
        job = Job(
            pretrained_run,
            (state.mode, state.text, layer, hide, part),
            {"target": target, "scaled": scaled, "causal": causal, "ablate": ablate},
            what,
        )
        return Request(key=(state.mode, state.text, target, scaled, causal, ablate), job=job)

    def _image_request(self, state: AppState, spec: ModelSpec) -> Request:
        """A vision model reads the state's image choice (a file or a sample), not the text."""
        try:
            name, image = image_choice(state.pretrained.image)
        except ConfigError as exc:
            raise InputProblem(str(exc)) from None
        scaled = bool(state.config.scaled)
        what = (
            f"running {spec.name} on {name}" if is_loaded(state.mode.path) else f"loading {spec.name}, then running it"
        )
        layer, hide, part = self.present_key(state)
        job = Job(pretrained_run, (state.mode, image, layer, hide, part), {"scaled": scaled}, what)
        return Request(key=(state.mode, "image", state.pretrained.image, scaled), job=job)

    def present_key(self, state: AppState) -> tuple[int, bool, str]:
        return int(state.pretrained.layer), bool(state.pretrained.hide_special), state.pretrained.part

    def present(self, shown: Shown, key: Hashable) -> Shown:
        layer, hide, part = cast(tuple[int, bool, str], key)  # what present_key returned
        assert isinstance(shown.layers, PretrainedResult), "a pretrained run"
        return pretrained_shown(shown.layers, shown.mode, layer, hide, part)

    def panel(self, state: AppState) -> PanelView:
        try:
            spec = self.spec_for(state.mode)
        except ConfigError:
            return PanelView(causal_only=True, mask_tip=_MASK_TIP)
        fixed = {
            "embed_dim": spec.hidden_size,
            "num_heads": spec.num_heads,
            "hidden_dim": spec.head_dim,
            "dropout": 0.0,
            "training": False,
            "device": "cpu",
            "dtype": "float32",
            "pad_to": None,
            "position": spec.positions,
            "seed": state.config.seed,
            "kv_heads": spec.kv_heads if spec.kv_heads < spec.num_heads else None,
        }  # None: plain multi-head
        if spec.family == "decoder":  # causal in every layer by construction: say so, not the toy's mask
            fixed["mask"] = "causal"
        limit = f"max {spec.max_positions} tokens (more are cut)" if spec.max_positions else "no fixed token limit"
        heads = f"{spec.num_heads} heads" + (f" ({spec.kv_heads} K/V)" if spec.kv_heads < spec.num_heads else "")
        layers = (
            f"{spec.num_layers}+{spec.decoder_layers} layers" if spec.decoder_layers else f"{spec.num_layers} layers"
        )
        info = f"{spec.family_name} {spec.family}\n{layers} × {heads}, d_k {spec.head_dim}\n{limit}"
        tip = _DECODER_MASK_TIP if spec.family == "decoder" else _MASK_TIP
        return PanelView(fixed=fixed, causal_only=True, mask_tip=tip, info=info)

    def install(self, ui: Assembly) -> None:
        self._assembly = ui
        ui.add_header_widget(self.header)
        self.gridTab = ui.tab_widget(GRID_TAB)  # the registry's All layers page (app/tabs/registry.py)
        self._build_grid_tab()
        for action in (self.openFolderAction, self.localModelsAction):
            ui.menus.add("file", action, "model")
            ui.add_action(action)
        self._bind(ui)
        self._on_mode(ui.state.mode)

    # -- widgets ----------------------------------------------------------------------------------
    def _build_widgets(self) -> None:
        self.controls = PretrainedControls()
        self.controls.all_layers_check.setToolTip("show every layer x head in the All layers tab; click one to open it")
        self.summary = self.controls.summary
        self.header = QWidget(objectName="pretrainedHeader")
        rows = QVBoxLayout(self.header)
        rows.setContentsMargins(4, 0, 4, 0)
        rows.setSpacing(2)
        line = QHBoxLayout()
        line.addWidget(self.controls)
        line.addSpacing(12)
        line.addWidget(self.summary, 1)
        rows.addLayout(line)
        rows.addWidget(self.controls.target_row)
        self.grid = LayerHeadGrid()
        self._painting_held: Holding | None = None  # the grid's thumbnails in the window's memory ledger
        self.gridSummary = QLabel("", objectName="pretrainedGridSummary")
        self.gridSummary.setWordWrap(True)
        self.gridScaleCombo = QComboBox(objectName="gridScaleCombo")
        self.gridScaleCombo.addItem("colour per head", "per-head")
        self.gridScaleCombo.addItem("colour shared", "shared")
        self.gridScaleCombo.setToolTip(
            "per head: each thumbnail from 0 to its own maximum (shows every pattern); "
            "shared: one scale for all (compares heads)"
        )
        self.openFolderAction = QAction("Open &model folder…", self, objectName="openModelFolderAction")
        self.openFolderAction.setToolTip(
            "a local model folder: config.json, weights (safetensors or .bin), tokenizer files"
        )
        self.localModelsAction = QAction("&Local models…", self, objectName="localModelsAction")
        self.localModelsAction.setToolTip("the models already in the local Hugging Face cache: open one (offline)")

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
        self.controls.partChanged.connect(lambda part: setattr(state.pretrained, "part", part))
        self.controls.targetEdited.connect(lambda text: setattr(state, "target_text", text))
        self.controls.logScaleToggled.connect(lambda on: setattr(state.view, "log_scale", bool(on)))
        self.controls.hideFirstToggled.connect(lambda on: setattr(state.view, "hide_first_key", bool(on)))
        self.grid.headActivated.connect(self.open_head)
        self.grid.ablationChanged.connect(self.set_ablation)
        self.gridScaleCombo.currentIndexChanged.connect(
            lambda _i: setattr(state.pretrained, "grid_scale", self.gridScaleCombo.currentData())
        )
        self.openFolderAction.triggered.connect(self._open_folder_dialog)
        self.localModelsAction.triggered.connect(self.show_local_models)
        self.exportGridAction.triggered.connect(self._export_grid_dialog)
        self.exportAllAction.triggered.connect(self._export_all_dialog)
        state.events.mode.connect(self._on_mode)
        state.view.events.tab.connect(self._on_tab)
        state.pretrained.events.layer.connect(lambda _layer: self._sync_controls())
        state.pretrained.events.hide_special.connect(self._on_hide_special)
        state.pretrained.events.ablate.connect(self._on_ablate)
        state.pretrained.events.grid_scale.connect(lambda _scale: self._update_grid())
        state.pretrained.events.part.connect(self._on_part)
        state.events.target_text.connect(lambda _text: self._sync_controls())
        state.view.events.colormap.connect(lambda _name: self._update_grid())
        state.view.events.log_scale.connect(self._on_log_scale)
        state.view.events.hide_first_key.connect(lambda _on: self._sync_controls())
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
                self.controls.set_family(spec.family)
                self._set_layer_range(spec)
                self.summary.setText("" if is_loaded(mode.path) else f"{spec.name}: loading…")
        if not on or (self._run is not None and self._run_mode != mode):
            self._run = None
            self.grid.clear()
            self.controls.set_layer_kinds(None, None)
        self.header.setVisible(on)
        self._sync_controls()

    def _part(self) -> str:
        """The part shown: the state's, where the model has it."""
        part = self._ui.state.pretrained.part
        return part if self._run is None else shown_part(self._run, part)

    def _set_layer_range(self, spec=None) -> None:
        """The layer spin's range and kind labels follow the part shown (a decoder may have more layers)."""
        part, run = self._part(), self._run
        if run is not None:
            count = len(run.part_weights(part))
            kinds = [run.layer_kind(layer, part) for layer in range(count)]
            self.controls.set_layer_kinds(kinds, [run.layer_window(layer, part) for layer in range(count)])
        elif spec is not None:
            count = spec.decoder_layers if part != "self" and spec.decoder_layers else spec.num_layers
        else:
            return
        self.controls.set_num_layers(count)
        if self._ui.state.pretrained.layer > count - 1:
            self._ui.state.pretrained.layer = count - 1

    def _on_part(self, _part: str) -> None:
        self._set_layer_range()
        self._sync_controls()
        self._update_grid()

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
        for widget, setter, value in (
            (c.layer_spin, c.layer_spin.setValue, state.pretrained.layer),
            (c.hide_special_check, c.hide_special_check.setChecked, state.pretrained.hide_special),
            (c.all_layers_check, c.all_layers_check.setChecked, grid_on),
            (c.log_check, c.log_check.setChecked, state.view.log_scale),
            (c.hide_first_check, c.hide_first_check.setChecked, state.view.hide_first_key),
            (c.part_combo, c.part_combo.setCurrentIndex, c.part_combo.findData(state.pretrained.part)),
        ):
            widget.blockSignals(True)
            setter(value)
            widget.blockSignals(False)
        c.refresh_layer_label()  # the suffix follows a layer set without the spin's signal
        if c.target_edit.text() != state.target_text:  # never while typing: the cursor would jump
            c.target_edit.setText(state.target_text)
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
            self.controls.set_family(self._run.family)
            self._set_layer_range()
            self._update_grid()
        self._sync_controls()
        self._update_summary(shown)
        current = self.grid.current()
        if current is not None and shown.layer is not None and current[0] != shown.layer:
            self.grid.set_current(shown.layer, current[1])

    def _update_summary(self, shown: Shown | None = None) -> None:
        run = self._run
        if run is None:
            return
        text = describe_run(run)
        if run.ablate:
            text += " · ablated " + ", ".join(head_name(l, h) for l, h in run.ablate)
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
            restyle(label, style)

    def _update_grid(self) -> None:
        """Rebuild the grid's thumbnails off the GUI thread (layers x heads x L x L to reduce)."""
        if self._run is None:
            return
        state = self._ui.state
        self._ui.compute.side.submit(
            GRID,
            grid_painting,
            self._run,
            hide_special=state.pretrained.hide_special,
            colormap=state.view.colormap,
            scale=state.pretrained.grid_scale,
            ablated=state.pretrained.ablate,
            part=self._part(),
            log=state.view.log_scale,
            done=self._show_painting,
            scope="run",
        )

    def _show_painting(self, painting) -> None:
        self.grid.set_painting(painting)
        self.grid.set_ablated(self._ui.state.pretrained.ablate)  # heads toggled while it was built stay marked
        self._hold_painting(painting)

    def _hold_painting(self, painting) -> None:
        """The grid's thumbnails (reduced from every layer's weights) are a copy the window keeps:
        held in the memory ledger, protected while drawn; let go, the grid is cleared until the next run."""
        held, self._painting_held = self._painting_held, None
        if held is not None:
            held.release()
        if painting is None:
            return
        cell: list = []

        def release(why: str) -> None:
            if cell and cell[0] is self._painting_held:
                self._painting_held = None
                self.grid.clear()  # the ledger's line on the status line says why

        cell.append(
            self._ui.compute.ledger.hold(
                "pretrained",
                "the layer grid's thumbnails",
                arrays_of(painting, 3),
                release,
                protected=True,
                strict=False,
            )
        )
        self._painting_held = cell[0]

    # -- intents ----------------------------------------------------------------------------------
    def run(self) -> PretrainedResult | None:
        """The last pretrained run (all layers), or None."""
        return self._run

    def ablation(self) -> list[tuple[int, int]]:
        return list(self._ui.state.pretrained.ablate)

    def _set_layer(self, layer: int) -> None:
        self._ui.state.pretrained.layer = int(layer)

    def set_ablation(self, pairs) -> None:
        """Heads (layer, head) whose output is zeroed: a new run. The window ablates self-attention
        heads (an encoder-decoder's encoder): a Ctrl+click in the decoder or cross grid is refused."""
        if pairs and self._part() != "self":
            self._ui.status.fail(
                "ablation acts on the encoder's self-attention heads: choose “encoder self-attention” to ablate a head"
            )
            self.grid.set_ablated(self._ui.state.pretrained.ablate)
            return
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
            if self._assembly is not None:
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
        path = QFileDialog.getExistingDirectory(
            self._dialog_parent(),
            "Open a model folder (config.json, model.safetensors or pytorch_model.bin, tokenizer)",
        )
        if path:
            self.open_folder(path)

    def show_local_models(self) -> LocalModelsDialog:
        """File > Local models…: the hub cache, listed by a side job (config and weight headers of
        every cached model); choosing a supported one opens it like a folder."""
        if self._local is None:
            self._local = LocalModelsDialog(self._dialog_parent())
            self._local.modelChosen.connect(self._open_local)
        self._local.set_busy()
        self._local.show()
        self._local.raise_()
        self._ui.compute.side.submit(
            HUB_CACHE, list_cached_models, done=self._local.set_models, failed=self._local.show_error, scope=None
        )
        return self._local

    def _on_log_scale(self, _on: bool) -> None:
        self._sync_controls()
        self._update_grid()

    def _open_local(self, path: str) -> None:
        local = self._local
        assert local is not None, "the dialog asked"
        if self.open_folder(path):
            local.accept()
        else:
            local.show_error(self._ui.status.message)

    def _dialog_parent(self) -> QWidget | None:
        return self.header.window()

    # -- export -----------------------------------------------------------------------------------
    def export_grid(self, path: str | Path, size: tuple[int, int] | None = None) -> Path:
        """The layers x heads grid as PNG/SVG/PDF; ExportError says why not."""
        return self._grid_writer(path, size)()

    def export_all(self, path: str | Path) -> Path:
        """Every layer's weights as .npy ([layers, heads, L, L]) or .csv; ExportError says why not."""
        return self._weights_writer(path)()

    # A writer captures what to write in the GUI thread (ExportError: nothing to export) and writes
    # it when called, in a pool thread from the menus: 72 heads of 512 tokens are 0.4-0.7 s of work.
    def _grid_writer(self, path: str | Path, size: tuple[int, int] | None = None) -> Callable[[], Path]:
        painting = self.grid.painting()
        if painting is None:
            raise ExportError("nothing to export yet: wait for a pretrained result")
        return lambda: export_painting(painting, path, size=size)

    def _weights_writer(self, path: str | Path) -> Callable[[], Path]:
        run = self._run
        if run is None:
            raise ExportError("nothing to export yet: wait for a pretrained result")
        hide, part = self._ui.state.pretrained.hide_special, self._part()
        return lambda: export_all_weights(run, path, hide_special=hide, part=part)

    def default_name(self, ext: str) -> str:
        tag = self._run.file_tag(None, part=self._part()) if self._run is not None else "pretrained"
        hidden = "_nospecial" if self._ui.state.pretrained.hide_special else ""
        return f"attn_{tag}{hidden}.{ext}"

    def _export_dialog(self, title: str, ext: str, filters: str, writer: Callable[[str], Callable[[], Path]]) -> None:
        path, _ = QFileDialog.getSaveFileName(self._dialog_parent(), title, self.default_name(ext), filters)
        if not path:
            return
        fail = lambda exc: self._ui.status.fail(f"export failed: {exc}")  # noqa: E731
        try:
            write = writer(path)
        except ExportError as exc:
            fail(exc)
            return
        self._ui.status.say(f"exporting {Path(path).name}…")
        self._exports.start(
            write, done=lambda written: self._ui.status.say(f"exported {written}"), failed=fail, expected=(ExportError,)
        )

    def _export_grid_dialog(self) -> None:
        self._export_dialog(
            "Export the layers × heads grid", "png", "PNG (*.png);;SVG (*.svg);;PDF (*.pdf)", self._grid_writer
        )

    def _export_all_dialog(self) -> None:
        self._export_dialog("Export every layer's weights", "npy", "NumPy (*.npy);;CSV (*.csv)", self._weights_writer)

    def exporting(self) -> bool:
        """Whether an export from the File menu is being written."""
        return self._exports.is_busy()


README_SENTENCE = "The animal didn't cross the street because it was too tired."


def write_grid_png(
    path: str | Path = "resources/pretrained_grid.png", text: str = README_SENTENCE, size: tuple[int, int] = (1240, 640)
) -> Path:
    """The README's layers x heads picture (needs a QGuiApplication; offscreen is fine):
    ``QT_QPA_PLATFORM=offscreen python -c "from PySide6.QtWidgets import QApplication as A; a = A([]);
    from attndesk.app.pretrained.mode import write_grid_png; write_grid_png()"``."""
    run = run_pretrained(load_pretrained(), text)
    weights, _mask, _hide, hidden = grid_weights(run, True)
    caption = f'{run.model_name}, {run.num_layers} layers x {run.num_heads} heads, "{text}" · ' + grid_caption(
        "per-head", True, hidden
    )
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return export_painting(LayerGridPainting(weights, caption=caption), path, size=size)


__all__ = ["GRID_TAB", "PretrainedMode", "folder_mode", "pretrained_run", "pretrained_shown", "write_grid_png"]
