"""``attndesk render --model PATH --image FILE``: a vision model's attention over an image, drawn
over the image: each head from the query token per layer (``<model>_<image>_heads_layer<L>``),
every head of every layer in one grid (``_all_heads``) and the image maps (``_maps``: class-token
attention averaged over the last layer's heads, rollout, attention flow, gradient rollout,
attention x gradient, integrated gradients), as PNG, SVG or PDF. Everything that can be refused
is refused before the first file is written; the files are written together or not at all."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from attndesk.cli import render_model
from attndesk.cli.base import EXIT_USAGE, CliError
from attndesk.cli.render_flags import CHAINED, MAP_NAMES, MAP_TITLES
from attndesk.errors import ConfigError
from attndesk.interp import image_maps
from attndesk.interp.image_maps import default_query
from attndesk.models import load_pretrained, read_spec
from attndesk.models.vision import run_image
from attndesk.render import ensure_gui_app
from attndesk.render.export import ExportError, OutputSet, atomic_write, check_image_memory, render_bytes, write
from attndesk.render.overlays import map_overlays, overlay_painter, run_figures
from attndesk.render.page import PageTooLarge, vision_page_data, write_document


def _check_flags(args: argparse.Namespace, defaults: argparse.Namespace) -> None:
    if args.model is None:
        raise CliError(
            "--image goes with --model: a vision model's folder (ViT, DeiT, DINOv2, CLIP, SigLIP, Swin)", EXIT_USAGE
        )
    for dest, flag in (
        ("text", "--text"),
        ("text_file", "--text-file"),
        ("target", "--target"),
        ("region", "--region"),
        ("which", "--which"),
        ("size", "--size"),
        ("page_overview", "--page-overview"),
    ):
        if getattr(args, dest, None) != getattr(defaults, dest, None):
            raise CliError(
                f"{flag} does not go with --image: the image's figures are laid out by the model", EXIT_USAGE
            )
    if args.weights == "csv":
        raise CliError("--image writes its weights as npy ([layers, heads, N, N]); csv holds one matrix", EXIT_USAGE)
    if not 0.0 <= args.opacity <= 1.0:
        raise CliError(f"--opacity must lie between 0 and 1, got {args.opacity:g}", EXIT_USAGE)
    try:
        render_model.check_model_flags(args, defaults)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def parse_query(query: str | None, tokens: list[str], default: int | None) -> int | None:
    """A token index from --query: a number or a token's name ("[CLS]", "(2,3)", "(2, 3)")."""
    if query is None:
        return default
    text = query.strip().replace(" ", "")
    if text.lstrip("-").isdigit():
        index = int(text)
        if not 0 <= index < len(tokens):
            raise ConfigError(f"--query {query}: the image has tokens 0..{len(tokens) - 1}")
        return index
    if text.upper() in tokens:
        return tokens.index(text.upper())
    if text in tokens:
        return tokens.index(text)
    specials = [t for t in tokens if t.startswith("[")]
    raise ConfigError(
        f"--query {query} is no token of this image: give a number, "
        + (", ".join(specials) + " or " if specials else "")
        + f"a patch (0,0)..{tokens[-1]}"
    )


def _maps(args, model, result, query: int | None) -> dict[str, Any]:
    wanted = list(MAP_NAMES) if "all" in args.maps else [m for m in MAP_NAMES if m in args.maps]
    if "none" in args.maps:
        wanted = []
    has_probe = any(type(m).__name__.endswith("AttentionPoolingHead") for m in model.model.modules())
    if "probe" in wanted and not has_probe:
        if "all" not in args.maps:
            raise CliError("--maps probe is SigLIP's attention-pooling head: this model has none", EXIT_USAGE)
        wanted.remove("probe")
    if result.window_weights is not None:
        skipped = [m for m in wanted if m in CHAINED]
        if skipped and "all" not in args.maps:
            raise CliError(
                f"--maps {','.join(skipped)}: Swin's token grid changes between stages, so maps that chain the "
                "layers do not apply; choose class or ig",
                EXIT_USAGE,
            )
        wanted = [m for m in wanted if m not in CHAINED]
    maps: dict[str, Any] = {}
    gradients = None
    if any(m in wanted for m in ("grad-rollout", "chefer")):
        gradients = image_maps.attention_gradients(model, args.image)
    for name in wanted:
        if name == "class":
            maps[name] = image_maps.head_maps(result, result.num_layers - 1, query).mean(axis=0)
        elif name == "probe":
            maps[name] = image_maps.probe_maps(model, result).mean(axis=0)
        elif name == "rollout":
            maps[name] = image_maps.rollout_map(result, query=query)
        elif name == "flow":
            maps[name] = image_maps.flow_map(result, query=query)
        elif name == "grad-rollout" and gradients is not None:
            maps[name] = image_maps.grad_rollout_map(result, gradients, query=query)
        elif name == "chefer" and gradients is not None:
            maps[name] = image_maps.chefer_map(result, gradients, query=query)
        elif name == "ig":
            maps[name] = image_maps.integrated_gradients_map(model, args.image, steps=args.ig_steps).map
    return {MAP_TITLES[k]: v for k, v in maps.items()}


def image_figures(args: argparse.Namespace, defaults: argparse.Namespace) -> tuple[list[tuple[str, Any]], Any, str]:
    """[(file stem, OverlayFigure)], the run and the files' common stem, everything computed
    (ConfigError: one line)."""

    _check_flags(args, defaults)
    read_spec(args.model)
    model = load_pretrained(args.model, memory_budget=args.memory_budget)
    run = run_image(model, Path(args.image), memory_budget=args.memory_budget)
    layers = list(range(run.num_layers))
    if args.layer is not None:
        if args.layer >= run.num_layers:
            raise CliError(
                f"--layer {args.layer} is out of range: {run.model_name} has layers 0..{run.num_layers - 1}", EXIT_USAGE
            )
        layers = [args.layer]
    query = parse_query(args.query, run.tokens, default_query(run))
    who = "the mean over the patches" if query is None else run.tokens[query]
    stem = "".join(c if c.isalnum() or c in "-._" else "-" for c in f"{run.model_name}_{Path(args.image).stem}")
    caption = f"{run.model_name} · {run.grid[0]} x {run.grid[1]} patches · query {who}"
    if run.window_weights is not None:
        caption += " · Swin: first stage, weights within each window (white lines)"
    figures = [
        (f"{stem}_{name}", figure)
        for name, figure in run_figures(
            run,
            query,
            layers=layers,
            colormap=args.colormap,
            vmin=args.vmin,
            vmax=args.vmax,
            opacity=args.opacity,
            caption=caption,
        )
    ]
    chosen = _maps(args, model, run, query)
    if chosen:
        figures.append(
            (
                f"{stem}_maps",
                map_overlays(
                    run.image, chosen, title="image maps", caption=caption, colormap=args.colormap, opacity=args.opacity
                ),
            )
        )
    return figures, run, stem


def figure_pngs(args: argparse.Namespace, figures: list[tuple[str, Any]]) -> dict[str, bytes]:
    """Each overlay figure painted once as PNG, by its file stem: the PNG files, the page's pictures
    and a bundle's figures are these bytes."""
    pngs = {}
    for name, figure in figures:
        check_image_memory(*figure.size())
        pngs[name] = render_bytes(overlay_painter(figure), "png", figure.size(), args.dpi, figure.title)
    return pngs


def page_document(args: argparse.Namespace, run, figures: list[tuple[str, Any]], pngs: dict[str, bytes]) -> dict:
    """The html page: every layer's token x token maps (``--layer``: that layer) with the image and
    its overlay figures (``pngs``: ``figure_pngs``) above them; PageTooLarge (bad input) before
    anything is written."""
    pictures = [(figure.title, pngs[name]) for name, figure in figures]
    try:
        return vision_page_data(
            run,
            pictures,
            args.layer,
            settings={"model": str(args.model), "image": str(args.image)},
            title=f"{run.model_name} · {Path(args.image).name}",
            colormap=args.colormap,
            precision=args.page_precision,
            shared_scale=args.shared_scale,
        )
    except PageTooLarge as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def render_image(args: argparse.Namespace, defaults: argparse.Namespace, echo: bool = True) -> list[Path]:
    """Compute every figure, then write them all into --out together; returns the paths written."""
    try:
        figures, run, stem = image_figures(args, defaults)
    except ValueError as exc:  # ConfigError included
        raise CliError(str(exc), EXIT_USAGE) from None
    ensure_gui_app(headless=True)
    pngs = figure_pngs(args, figures) if {"png", "html"} & set(args.format) else {}
    page = page_document(args, run, figures, pngs) if "html" in args.format else None
    for notice in run.notices:
        print(f"attndesk: note: {notice}", file=sys.stderr)
    out_dir = Path(args.out).expanduser()
    if out_dir.exists() and not out_dir.is_dir():
        raise CliError(f"--out {out_dir} is a file, not a folder: give a folder to write the images into", EXIT_USAGE)
    try:
        with OutputSet(out_dir) as out:
            if page is not None:
                write_document(page, out.path(f"{stem}.html"))
            for name, figure in figures:
                if "png" in args.format:
                    atomic_write(out.path(f"{name}.png"), pngs[name])
                for fmt in (f for f in args.format if f not in ("html", "png")):
                    write(
                        overlay_painter(figure),
                        out.path(f"{name}.{fmt}"),
                        size=figure.size(),
                        dpi=args.dpi,
                        title=figure.title,
                    )
            if args.weights == "npy":
                atomic_write(out.path(f"{stem}_weights.npy"), lambda fh: np.save(fh, run.weights))
    except ExportError as exc:
        raise CliError(str(exc)) from None
    if echo:
        for path in out.committed:
            print(path, flush=True)
    return out.committed


__all__ = ["figure_pngs", "image_figures", "page_document", "parse_query", "render_image"]
