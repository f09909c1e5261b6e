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
from collections.abc import Hashable
from pathlib import Path
from typing import cast

import numpy as np
from PySide6.QtCore import QObject
from PySide6.QtWidgets import QWidget

from attndesk.attention.types import AttentionMap
from attndesk.errors import Cancelled, ConfigError
from attndesk.jobs import JobContext, job_context
from attndesk.models import (
    PACKAGED_NAME,
    ModelSpec,
    PretrainedResult,
    is_loaded,
    list_cached_models,
    load_pretrained,
    pretrained_job,
    run_pretrained,
)
from attndesk.models.images import image_choice
from attndesk.session.results import InputProblem, Job, Request, RunFacts, Shown, TokenRows, notices_of
from attndesk.session.state import HEATMAPS_TAB, AppState, ModeId

from ...jobs.channels import GRID, HUB_CACHE
from ...sources.long_source import source_for_map
from ..base import Assembly, ModeBase, ModeChoice, PanelView
from .ablation import ablation_effect
from .exports import PretrainedExports
from .folders import FolderBrowser, ModelFolders, folder_mode
from .local_models import LocalModelsDialog
from .painting import LayerGridPainting, export_painting, grid_caption, grid_painting, grid_weights
from .widgets import PretrainedWidgets

GRID_TAB = "all-layers"
_MASK_TIP = "pretrained model: 'causal' forces a causal mask in every layer (one text has no padding to mask)"
_DECODER_MASK_TIP = "a decoder is causal in every layer (and windowed where its layers are local): its mask is its own"


_WARM_UP_IMAGE = np.full((32, 32, 3), 128, dtype=np.uint8)  # a vision model's throw-away first pass


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


def text_request(state: AppState, spec: ModelSpec, key: tuple[int, bool, str]) -> Request:
    """The run of a text model: the state's text (and an encoder-decoder's target), ablations, scale, mask."""
    if not state.text.strip():
        raise InputProblem("type some text to attend over: the input is empty")
    causal, scaled = "causal" in state.config.mask, bool(state.config.scaled)
    ablate = tuple((l, h) for l, h in state.pretrained.ablate if l < spec.num_layers and h < spec.num_heads)
    name = PACKAGED_NAME if state.mode.path is None else Path(state.mode.path).name
    what = f"running {name}" if is_loaded(state.mode.path) else f"loading {name} (once per session), then running it"
    if state.cross:
        what += " (cross-attention is toy-model only: the key text is ignored)"
    target = state.target_text if spec.family == "encoder-decoder" and state.target_text.strip() else None
    layer, hide, part = key
    job = Job(
        pretrained_run,
        (state.mode, state.text, layer, hide, part),
        {"target": target, "scaled": scaled, "causal": causal, "ablate": ablate},
        what,
    )
    return Request(key=(state.mode, state.text, target, scaled, causal, ablate), job=job)


def image_request(state: AppState, spec: ModelSpec, key: tuple[int, bool, str]) -> Request:
    """A vision model reads the state's image choice (a file or a sample), not the text."""
    try:
        name, image = image_choice(state.pretrained.image)
    except ConfigError as exc:
        raise InputProblem(str(exc)) from None
    scaled = bool(state.config.scaled)
    what = f"running {spec.name} on {name}" if is_loaded(state.mode.path) else f"loading {spec.name}, then running it"
    layer, hide, part = key
    job = Job(pretrained_run, (state.mode, image, layer, hide, part), {"scaled": scaled}, what)
    return Request(key=(state.mode, "image", state.pretrained.image, scaled), job=job)


def panel_view(spec: ModelSpec, seed: int) -> PanelView:
    """The parameters panel for a model: its fixed architecture read-only, a "Model" info row."""
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
        "seed": seed,
        "kv_heads": spec.kv_heads if spec.kv_heads < spec.num_heads else None,
    }  # None: plain multi-head
    if spec.family == "decoder":  # causal in every layer by construction: say so, not the toy's mask
        fixed["mask"] = "causal"
    limit = f"max {spec.max_positions} tokens (more are cut)" if spec.max_positions else "no fixed token limit"
    heads = f"{spec.num_heads} heads" + (f" ({spec.kv_heads} K/V)" if spec.kv_heads < spec.num_heads else "")
    layers = f"{spec.num_layers}+{spec.decoder_layers} layers" if spec.decoder_layers else f"{spec.num_layers} layers"
    info = f"{spec.family_name} {spec.family}\n{layers} × {heads}, d_k {spec.head_dim}\n{limit}"
    tip = _DECODER_MASK_TIP if spec.family == "decoder" else _MASK_TIP
    return PanelView(fixed=fixed, causal_only=True, mask_tip=tip, info=info)


class PretrainedMode(QObject, ModeBase):
    """Computes with a real model; owns its controls, its grid tab and its File menu action."""

    kind = "pretrained"

    def __init__(self, parent: QObject | None = None) -> None:
        QObject.__init__(self, parent)
        self.setObjectName("pretrainedMode")
        self._assembly: Assembly | None = None
        self._run: PretrainedResult | None = None
        self._run_mode: ModeId | None = None
        self._local: LocalModelsDialog | None = None
        self.folders = ModelFolders(self._choices_changed)
        self.browser = FolderBrowser(self.folders, lambda: self._ui, self._dialog_parent)
        self._build_widgets()
        self.exports = PretrainedExports(
            self,
            self.grid,
            self.run,
            lambda: (self._ui.state.pretrained.hide_special, self._part()),
            lambda: self._ui.status,
            self._dialog_parent,
        )

    # -- the Mode protocol ------------------------------------------------------------------------
    def choices(self) -> list[ModeChoice]:
        return self.folders.choices()

    def _choices_changed(self) -> None:
        if self._assembly is not None:
            self._ui.refresh_choices()

    def spec_for(self, mode: ModeId) -> ModelSpec:
        """The mode's ModelSpec (config.json, read once); ConfigError says what is wrong."""
        return self.folders.spec_for(mode)

    def request(self, state: AppState) -> Request:
        spec = self.spec_for(state.mode)
        key = self.present_key(state)
        return image_request(state, spec, key) if spec.family == "vision" else text_request(state, spec, key)

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
        return panel_view(spec, state.config.seed)

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
        w = self.widgets = PretrainedWidgets(self)
        self.controls, self.summary, self.header, self.grid = w.controls, w.summary, w.header, w.grid
        self.gridSummary, self.gridScaleCombo = w.gridSummary, w.gridScaleCombo
        self.openFolderAction, self.localModelsAction = w.openFolderAction, w.localModelsAction

    def _build_grid_tab(self) -> None:
        self.widgets.build_grid_page(self.gridTab)
        self.gridExportButton = self.widgets.gridExportButton
        self.exportGridAction, self.exportAllAction = self.widgets.exportGridAction, self.widgets.exportAllAction

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
        self.openFolderAction.triggered.connect(self.browser.open_folder_dialog)
        self.localModelsAction.triggered.connect(self.show_local_models)
        self.exportGridAction.triggered.connect(self.exports.export_grid_dialog)
        self.exportAllAction.triggered.connect(self.exports.export_all_dialog)
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
        self.widgets.sync(state, state.view.tab == GRID_TAB)

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
        if self._run is not None:
            shown = shown or self._ui.compute.shown()
            self.widgets.show_summary(self._run, self._ui.state.pretrained.ablate, shown)

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

    def _show_painting(self, painting: LayerGridPainting | None) -> None:
        self.widgets.show_painting(painting, self._ui.state.pretrained.ablate, self._ui.compute.ledger)

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
        """Check a model folder and list it as a mode; returns the mode. Raises ConfigError (nothing changes)."""
        return self.folders.add_folder(path)

    def admit(self, mode: ModeId) -> ModeId:
        """A session's mode: its folder is checked again (and listed), the packaged model must exist."""
        return self.folders.admit(mode)

    def open_folder(self, path: str | Path) -> bool:
        """File > Open model folder: on success switch to it; on failure one status line."""
        return self.browser.open_folder(path)

    def show_local_models(self) -> LocalModelsDialog:
        """File > Local models…: the hub cache, listed by a side job (config and weight headers of
        every cached model); choosing a supported one opens it like a folder."""
        self._local = self.browser.local_models_dialog()
        self._ui.compute.side.submit(
            HUB_CACHE, list_cached_models, done=self._local.set_models, failed=self._local.show_error, scope=None
        )
        return self._local

    def _on_log_scale(self, _on: bool) -> None:
        self._sync_controls()
        self._update_grid()

    def _dialog_parent(self) -> QWidget | None:
        return self.header.window()

    # -- export (``exports``) ---------------------------------------------------------------------
    def export_grid(self, path: str | Path, size: tuple[int, int] | None = None) -> Path:
        """The layers x heads grid as PNG/SVG/PDF; ExportError says why not."""
        return self.exports.export_grid(path, size)

    def export_all(self, path: str | Path) -> Path:
        """Every layer's weights as .npy ([layers, heads, L, L]) or .csv; ExportError says why not."""
        return self.exports.export_all(path)

    def default_name(self, ext: str) -> str:
        return self.exports.default_name(ext)

    def exporting(self) -> bool:
        """Whether an export from the File menu is being written."""
        return self.exports.exporting()


README_SENTENCE = "The animal didn't cross the street because it was too tired."


def write_grid_png(
    path: str | Path = "resources/pretrained_grid.png", text: str = README_SENTENCE, size: tuple[int, int] = (1240, 640)
) -> Path:
    """The README's layers x heads picture (needs a QGuiApplication; offscreen is fine):
    ``QT_QPA_PLATFORM=offscreen python -c "from PySide6.QtWidgets import QApplication as A; a = A([]);
    from attndesk.app.modes.pretrained.mode import write_grid_png; write_grid_png()"``."""
    run = run_pretrained(load_pretrained(), text)
    weights, _mask, _hide, hidden = grid_weights(run, True)
    caption = f'{run.model_name}, {run.num_layers} layers x {run.num_heads} heads, "{text}" · ' + grid_caption(
        "per-head", True, hidden
    )
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return export_painting(LayerGridPainting(weights, caption=caption), path, size=size)


__all__ = ["GRID_TAB", "PretrainedMode", "folder_mode", "pretrained_run", "pretrained_shown", "write_grid_png"]
