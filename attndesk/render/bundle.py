"""File > Save bundle, and ``attndesk bundle``: a run and the state that made it as one reproducible
``.zip`` (``attndesk.session.bundle``): the session, the input texts, the model's identity, the
versions, the exact weights and the figures (a PNG of every map's heads, the interactive page).

The window calls ``save_bundle(self.state, shown.toy.result if shown.toy else shown.layers, path)``
for the result on screen; ``attndesk reproduce`` computes it again from the session. Trained toy
weights (a preset, or the Train tab's model) exist only in this process: the bundle carries the
model's files and the probe input's token ids, and its text is the probe input that ran.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attndesk.interp.image_maps import default_query
from attndesk.models import packaged_model_dir
from attndesk.models.images import image_choice
from attndesk.models.vision import read_image
from attndesk.render import ensure_gui_app
from attndesk.render.export import default_filename, figure_bytes, render_bytes
from attndesk.render.figure import figure_from_map
from attndesk.render.overlays import overlay_painter, run_figures
from attndesk.render.page import (
    PageTooLarge,
    image_entry,
    page_data,
    page_html,
    pretrained_page_maps,
    vision_page_data,
)
from attndesk.render.page_circuit import circuit_section
from attndesk.session.bundle import BundleError, model_identity, run_weights, write_bundle
from attndesk.session.file import session_json
from attndesk.session.state import AppState, ModeId
from attndesk.train.presets import weights_sha256
from attndesk.train.run import TrainRun
from attndesk.train.stages import trained_result
from attndesk.train.store import run_files

FIGURE_SIZE = (1200, 1000)


def model_settings(run: Any, folder: str | os.PathLike, target: str | None) -> dict[str, Any]:
    """A real model run's identity and switches, as a page's settings table shows them."""
    settings = {
        "model": run.model_name,
        "folder": str(Path(folder).expanduser().resolve()),
        "model_type": run.model_type,
        "family": run.family,
        "layers": run.num_layers,
        "heads": run.num_heads,
        "scaled": run.scaled,
        "forced causal mask": run.causal,
    }
    if run.kv_heads:
        settings["K/V heads"] = run.kv_heads
    if target is not None:
        settings["target"] = target
    return settings


def run_settings(mode: ModeId, target_text: str, result: Any) -> dict[str, Any]:
    """What a page's "Model and settings" table holds for ``result`` (computed in ``mode``, with
    ``target_text`` in the target box), as the CLI's page does: a toy run's config, or a real
    model's identity and switches."""
    if not hasattr(result, "parts"):
        return result.config.to_dict()
    folder = Path(packaged_model_dir() if mode.path is None else mode.path)
    target = target_text if target_text.strip() and result.decoder_weights is not None else None
    return model_settings(result, folder, target)


def bundle_figures(page: dict[str, Any], colormap: str = "viridis") -> dict[str, bytes]:
    """A PNG of every map's heads, and the interactive page when the run fits one (``page``:
    ``maps``, ``summary``, ``settings``, ``name``, optional ``title``, optional ``circuit``: a
    page's circuit entry, drawn below the maps)."""
    ensure_gui_app(headless=True)
    figures = {}
    for amap in (getattr(m, "map", m) for m in page["maps"]):
        figure = figure_from_map(amap, "all", colormap=colormap)
        figures[default_filename(amap, "all", "png")] = figure_bytes(figure, "png", FIGURE_SIZE)
    try:
        doc = page_data(
            page["maps"], page["summary"], settings=page["settings"], colormap=colormap, title=page.get("title", "")
        )
    except PageTooLarge:
        return figures  # the weights are in the bundle anyway; a page would be over its limit
    if page.get("circuit") is not None:
        doc["circuit"] = page["circuit"]
    figures[page["name"]] = page_html(doc).encode("utf-8")
    return figures


def _page(state: AppState, result: Any, layer: int | None, folder: Path | None) -> dict[str, Any]:
    if folder is None:
        amap = result.attention_map()
        return {
            "maps": [amap],
            "summary": amap.summary,
            "settings": run_settings(state.mode, state.target_text, result),
            "name": default_filename(amap, "all", "html"),
        }
    return {
        "maps": pretrained_page_maps(result, layer),
        "summary": result.summary(),
        "settings": run_settings(state.mode, state.target_text, result),
        "name": f"attn_{result.file_tag(layer)}.html",
        "title": result.model_name,
    }


def _first_circuit(circuits: Mapping[str, bytes]) -> dict[str, Any] | None:
    """The page's circuit entry of the first bundled circuit that records its scores and curve."""

    for name in sorted(circuits):
        try:
            section = circuit_section(json.loads(circuits[name]))
        except (ValueError, TypeError):
            continue
        if section is not None:
            return section
    return None


def vision_bundle_parts(state: AppState, run: Any, layer: int | None, colormap: str) -> dict[str, Any]:
    """A vision run's part of a bundle: the input image as decoded (``inputs/image.png``, from the
    state's image choice), the overlay figures (each layer's heads and every head, from the class
    token or the mean patch) and the page with the image above the maps when it fits."""

    ensure_gui_app(headless=True)
    name, image = image_choice(state.pretrained.image)
    picture = io.BytesIO()
    read_image(image).save(picture, format="PNG")
    layers = None if layer is None else [layer]
    figures = run_figures(run, default_query(run), layers=layers, colormap=colormap)
    pngs = figure_pngs(figures)
    files = {f"{stem}.png": png for (stem, _figure), (_title, png) in zip(figures, pngs)}
    files.update(vision_page(run, pngs, layer, colormap, {"image": name}))
    return {"figures": files, "inputs": {"image.png": picture.getvalue()}}


def figure_pngs(figures: list) -> list[tuple[str, bytes]]:
    """[(title, PNG bytes)] of ``figures`` [(name, OverlayFigure)], each painted once."""

    ensure_gui_app(headless=True)
    return [(f.title, render_bytes(overlay_painter(f), "png", f.size(), 96)) for _n, f in figures]


def figures_entry(run: Any, figures: list) -> dict[str, Any]:
    """A page's ``image`` entry: ``run``'s patch grid and ``figures`` [(name, OverlayFigure)] as PNGs."""

    return image_entry(run.grid, figure_pngs(figures))


def window_page_image(run: Any, layer: int, colormap: str) -> dict[str, Any]:
    """The window's html export of a vision run's layer: the image with that layer's heads (from the
    class token, or the mean patch) and every head of every layer, above the layer's maps."""

    return figures_entry(run, run_figures(run, default_query(run), layers=[layer], colormap=colormap))


def vision_page(
    run: Any, pictures: list[tuple[str, bytes]], layer: int | None, colormap: str, settings: dict[str, Any]
) -> dict[str, bytes]:
    """{name: html} of a vision run's page (its token x token maps, the image and ``pictures``
    [(title, PNG bytes)] above them), or {} when it would be over the page's limit."""

    try:
        doc = vision_page_data(
            run,
            pictures,
            layer,
            settings={"model": run.model_name, **settings},
            title=run.model_name,
            colormap=colormap,
        )
    except PageTooLarge:
        return {}
    return {f"attn_{run.file_tag(layer)}.html": page_html(doc).encode("utf-8")}


def trained_model(result: Any, trained: TrainRun | None) -> tuple[dict[str, Any], dict[str, bytes]]:
    """A trained toy run's model as a bundle records it (what it is, its files), after checking that
    ``trained`` is the model that computed ``result`` on its input; BundleError when it is not."""
    weights = result.config.weights_from
    if trained is None:
        raise BundleError(f"the {weights} weights on screen are no longer open: show them again, then save")
    again = trained_result(trained, weights, torch.as_tensor(result.token_ids, dtype=torch.int64)[None])
    if again.weights.shape != result.weights.shape or not np.allclose(again.weights, result.weights, atol=1e-5):
        raise BundleError("the trained model changed since the result on screen was computed: wait for its result")
    identity = {
        "weights": weights,
        "task": trained.cfg.task,
        "step": trained.step,
        "weights_sha256": weights_sha256(trained.model.state_dict()),
    }
    return identity, run_files(trained)


def _save_vision_bundle(
    state: AppState,
    result: Any,
    path: str | os.PathLike,
    model: dict[str, Any],
    run: dict[str, Any],
    layer: int | None,
    colormap: str,
) -> Path:
    """A vision run's bundle: its weights, the image (an input), the overlays and the page."""
    weights = run_weights(result, layer)
    parts = vision_bundle_parts(state, result, layer, colormap)
    run["image"] = "image.png"
    return write_bundle(
        path,
        session=session_json(state),
        texts={},
        model=model,
        weights=weights,
        figures=parts["figures"],
        run=run,
        inputs=parts["inputs"],
    )


def save_bundle(
    state: AppState,
    result: Any,
    path: str | os.PathLike,
    *,
    colormap: str = "viridis",
    layer: int | None = None,
    memory_budget: int | None = None,
    trained: TrainRun | None = None,
    circuits: Mapping[str, bytes] | None = None,
) -> Path:
    """Write ``result`` (an ``AttentionResult`` of the toy model or a ``PretrainedResult``) and
    ``state`` (the session that made it) as the bundle ``path``; BundleError says why not.
    ``trained``: the trained model that computed a toy result of trained weights; ``circuits``: file
    name -> an edge circuit's JSON of this model (``attndesk circuit``'s circuit.json)."""

    pretrained = hasattr(result, "parts")
    if pretrained != (state.mode.kind == "pretrained"):
        raise BundleError("the result on screen is not the current mode's: wait for the run to finish")
    folder = None
    run: dict[str, Any] = {"kind": state.mode.kind, "layer": layer, "memory_budget": memory_budget}
    model_files: dict[str, bytes] = {}
    if pretrained:
        folder = Path(packaged_model_dir() if state.mode.path is None else state.mode.path)
        model = model_identity(folder, packaged=state.mode.path is None)
        texts = {"text": state.text, **({"target": state.target_text} if state.target_text else {})}
        if getattr(result, "grid", None) is not None:  # a vision run: its image, overlays and page
            return _save_vision_bundle(state, result, path, model, run, layer, colormap)
    elif result.config.weights_from != "random":  # the model read its task's probe input, not the text box
        identity, model_files = trained_model(result, trained)
        model = {"kind": "toy", "config": result.config.to_dict(), "trained": identity}
        texts = {"text": " ".join(result.tokens)}
        run["probe_ids"] = [int(i) for i in result.token_ids]
    else:
        model = {"kind": "toy", "config": result.config.to_dict()}
        texts = {"text": state.text, **({"key_text": state.key_text} if state.cross else {})}
    weights = run_weights(result, layer)
    page = _page(state, result, layer, folder)
    page["circuit"] = _first_circuit(circuits or {})
    figures = bundle_figures(page, colormap)
    return write_bundle(
        path,
        session=session_json(state),
        texts=texts,
        model=model,
        weights=weights,
        figures=figures,
        run=run,
        model_files=model_files,
        circuits=circuits,
    )


__all__ = [
    "FIGURE_SIZE",
    "bundle_figures",
    "figure_pngs",
    "figures_entry",
    "model_settings",
    "run_settings",
    "save_bundle",
    "trained_model",
    "vision_bundle_parts",
    "vision_page",
    "window_page_image",
]
