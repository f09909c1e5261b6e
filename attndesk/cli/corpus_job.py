"""What ``attndesk corpus`` does once its flags are parsed (``cli.corpus`` holds the flags and
imports this module in its ``run``): the model and the inputs checked, the plan printed, the pass
with its progress line, then the store's roles and its heads grid as PNG."""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from attndesk.cli.base import EXIT_USAGE, CliError
from attndesk.cli.progress import ProgressLine
from attndesk.corpus import analyze_corpus
from attndesk.corpus.engine import _load, is_vision
from attndesk.corpus.images import open_images
from attndesk.corpus.sources import open_source
from attndesk.errors import ConfigError
from attndesk.render import ensure_gui_app, write
from attndesk.render.heads_grid import HeadsGrid, heads_grid_painter

GRID_METRICS = (
    "entropy",
    "distance",
    "self",
    "previous",
    "first",
    "previous_token_score",
    "duplicate_token_score",
    "induction_score",
)


def _plan(args, source, model) -> str:
    if model.family == "vision":
        engine = args.engine + (f", {args.workers} workers" if args.workers else "")
        lines = [
            f"corpus: {source.count:,} images from {source.describe}",
            *source.skipped,
            f"model: {model.name} ({model.spec.family_name}, {model.num_layers} layers x {model.num_heads} heads)",
            f"engine {engine}, out {args.out}",
        ]
        return "\n".join(lines)
    limit = model.max_tokens
    tokens = min(args.max_tokens, limit) if limit else args.max_tokens
    engine = args.engine + (f", {args.workers} workers" if args.workers else "")
    atlas = ", ".join(args.atlas) if args.atlas and args.atlas_points else "none"
    return (
        f"corpus: {source.count:,} texts from {source.describe}\n"
        f"model: {model.name} ({model.family}, {sum(model.layers.values())} attention layers x {model.num_heads} heads)\n"
        f"max tokens {tokens}, engine {engine}, atlas {atlas} ({args.atlas_points} points per head), out {args.out}"
    )


def write_heads_png(store, path: Path) -> Path:
    """The heads grid (``attndesk.render.heads_grid``) of a store, as PNG."""
    heads = store.heads
    metrics = store.metrics if store.images else GRID_METRICS
    keys = list(dict.fromkeys(zip(heads.part, heads.layer)))
    n_heads = int(heads["head"].max()) + 1
    index = {key: i for i, key in enumerate(keys)}
    values = {m: np.full((len(keys), n_heads), np.nan) for m in metrics}
    roles = np.full((len(keys), n_heads), "", dtype=object)
    for row in heads.itertuples():
        r = index[(row.part, row.layer)]
        for m in metrics:
            values[m][r, row.head] = getattr(row, m)
        roles[r, row.head] = row.role
    grid = HeadsGrid(tuple(metrics), [f"{p} {layer}" for p, layer in keys], n_heads, values, roles)
    ensure_gui_app(headless=True)
    return write(heads_grid_painter(grid), path, size=grid.size())


def corpus_command(args: argparse.Namespace, inputs: Callable[[argparse.Namespace, bool], Any]) -> int:
    """The pass (``inputs``: what it reads, from the flags and whether the model sees images), its
    plan and progress line, the store, its roles and heads.png."""
    try:
        images = is_vision(args.model)
        data = inputs(args, images)
        source = open_images(data) if images else open_source(data)
        model = _load(args.model, args.device, images=images)
        print(_plan(args, source, model))
        with ProgressLine(prefix="corpus") as line:

            def progress(p) -> None:
                # the time left from this run's rate: a resumed run's fraction includes texts it did not run
                line.update(p.done / max(1, p.total), p.line(eta=False), eta_s=p.eta_s)

            store = analyze_corpus(
                source if images else data,  # an image folder is checked once (each file decoded)
                args.out,
                model=model,
                max_tokens=args.max_tokens,
                engine=args.engine,
                workers=args.workers,
                resume=not args.restart,
                atlas_points=args.atlas_points,
                atlas_methods=args.atlas,
                shard_size=args.shard_size,
                ray_address=args.ray_address,
                device=args.device,
                progress=progress,
                cancel=threading.Event(),
            )
    except ConfigError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    with store:
        png = write_heads_png(store, store.path / "heads.png")
        counts = store.heads.role.value_counts()
        print("roles: " + ", ".join(f"{role} {n}" for role, n in counts.items()))
        print(f"store: {store.path.resolve()} (heads.csv, {png.name}, corpus.duckdb)", file=sys.stdout)
    return 0
