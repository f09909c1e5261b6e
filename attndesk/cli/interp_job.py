"""What ``attndesk patch`` and ``attndesk attribute`` do once their flags are parsed (their modules
import this one in their ``run``), and the helpers they share with ``circuit_job``: the model or a
one-line usage error, a diverging heatmap figure, and the files written all or nothing (NPY, CSV
with labels, PNG, JSON)."""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from attndesk.attention.types import head_name
from attndesk.cli.arguments import optional_token, token_arg
from attndesk.cli.base import EXIT_USAGE, CliError
from attndesk.cli.progress import ProgressLine
from attndesk.files.atomic import atomic_write
from attndesk.interp import (
    activation_patching,
    attention_x_gradient,
    attribution_patching,
    gradient_x_input_report,
    integrated_gradients_report,
)
from attndesk.models import load_pretrained, read_spec
from attndesk.render import HeatmapFigure, ensure_gui_app, export_figure, export_weights
from attndesk.render.export import ExportError, OutputSet

STRIP = (1100, 360)  # one row of tokens: a strip, not the square a heatmap figure suggests


def load(args: argparse.Namespace):
    """The model, or a one-line usage error."""
    try:
        read_spec(args.model)
        return load_pretrained(args.model)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def heatmap(matrix: np.ndarray, rows: list[str], cols: list[str], title: str, y: str, x: str, value: str):
    """One diverging heatmap whose title is the figure's (drawn once, above it)."""
    return HeatmapFigure(
        matrices=matrix[None],
        titles=[""],
        query_labels=rows,
        key_labels=cols,
        diverging=True,
        value_label=value,
        x_title=x,
        y_title=y,
        suptitle=title,
    )


def write_all(out_dir: str, files: list[tuple[str, object]]) -> list[Path]:
    """(name, figure | (figure, (width, height)) | (matrix, rows, cols) | dict) -> PNG / CSV+NPY / JSON,
    all or nothing."""
    folder = Path(out_dir).expanduser()
    ensure_gui_app(headless=True)
    try:
        with OutputSet(folder) as out:
            for name, item in files:
                if isinstance(item, dict):
                    atomic_write(out.path(name), (json.dumps(item, indent=2) + "\n").encode("utf-8"))
                elif isinstance(item, tuple) and len(item) == 3:
                    matrix, rows, cols = item
                    export_weights(matrix, rows, cols, out.path(name + ".csv"))
                    export_weights(matrix, rows, cols, out.path(name + ".npy"))
                else:
                    figure, size = item if isinstance(item, tuple) else (item, None)
                    export_figure(figure, out.path(name + ".png"), size=size)
    except ExportError as exc:
        raise CliError(str(exc)) from None
    return out.committed


def labels(report, site: str, num_heads: int) -> tuple[list[str], list[str], str, str]:
    """(row labels, column labels, y title, x title) of a site's 2-D table (head_position: one row per layer and head)."""
    layers = report.results[site].effects.shape[0]
    if site == "head":
        return [f"L{n}" for n in range(layers)], [head_name(None, h) for h in range(num_heads)], "layer", "head"
    positions = [f"{i}:{t}" for i, t in enumerate(report.positions)]
    if site == "head_position":
        return [head_name(n, h) for n in range(layers) for h in range(num_heads)], positions, "layer, head", "position"
    return [f"L{n}" for n in range(layers)], positions, "layer", "position"


def _files(args, model, report, approx) -> list[tuple[str, object]]:
    files: list[tuple[str, object]] = []
    for site, result in report.results.items():
        rows, cols, y, x = labels(report, site, model.num_heads)
        effects = result.effects.reshape(len(rows), len(cols))
        files.append((f"patch_{site}", (effects, rows, cols)))
        files.append((f"patch_{site}_raw", (result.raw_effects.reshape(len(rows), len(cols)), rows, cols)))
        files.append(
            (
                f"patch_{site}",
                heatmap(
                    effects, rows, cols, f"activation patching: {site} ({report.metric})", y, x, "normalised effect"
                ),
            )
        )
        if approx is not None:
            estimate = approx.estimates[site].reshape(len(rows), len(cols))
            files.append((f"attribution_{site}", (estimate, rows, cols)))
            files.append(
                (
                    f"attribution_{site}",
                    heatmap(estimate, rows, cols, f"attribution patching: {site}", y, x, "first-order estimate"),
                )
            )
    return files


def _patch_summary(model, report, approx, exact_s: float) -> dict:
    """summary.json of a patching run: the metrics, tokens, passes, memory and the rank correlations."""
    return {
        "model": model.name,
        "metric": report.metric,
        "answer": report.answer,
        "wrong": report.wrong,
        "clean_metric": report.clean_metric,
        "corrupt_metric": report.corrupt_metric,
        "metric_scale": report.metric_scale,
        "warning": report.warning,
        "clean_tokens": report.clean_tokens,
        "corrupt_tokens": report.corrupt_tokens,
        "part": report.part,
        "forward_passes": report.forward_passes,
        "batch_rows": report.batch_rows,
        "pass_bytes_estimate": report.pass_bytes,
        "memory_budget": report.budget,
        "seconds": round(exact_s, 3),
        "rank_correlation": None if approx is None else approx.agreement,
    }


def patch_command(args: argparse.Namespace, sites: tuple[str, ...]) -> int:
    """Exact patching and its first-order estimates, written all or nothing."""
    model = load(args)
    start = time.perf_counter()
    options = {
        "sites": sites,
        "metric": args.metric,
        "part": args.part,
        "target": args.target,
        "memory_budget": args.memory_budget,
    }
    try:
        with ProgressLine() as progress:
            report = activation_patching(
                model,
                args.clean,
                args.corrupt,
                token_arg(args.answer),
                optional_token(args.wrong),
                progress=progress.update,
                **options,
            )
        exact_s = time.perf_counter() - start
        approx = (
            None
            if args.no_attribution
            else attribution_patching(
                model,
                args.clean,
                args.corrupt,
                token_arg(args.answer),
                optional_token(args.wrong),
                exact=report,
                **options,
            )
        )
    except ValueError as exc:  # ConfigError included
        raise CliError(str(exc), EXIT_USAGE) from None
    summary = _patch_summary(model, report, approx, exact_s)
    for path in write_all(args.out, [*_files(args, model, report, approx), ("summary.json", summary)]):
        print(path, flush=True)
    if report.warning is not None:
        print(f"attndesk: warning: {report.warning} (patch_<site>_raw.csv)", file=sys.stderr)
    if approx is not None:
        agreement = ", ".join(f"{site} {rho:.3f}" for site, rho in approx.agreement.items())
        print(f"attndesk: attribution patching vs exact, Spearman: {agreement}", file=sys.stderr)
    return 0


def _attribute(args, model):
    if args.method == "gxi":
        return gradient_x_input_report(model, args.text, token_arg(args.target))
    if args.method == "attn":
        return attention_x_gradient(model, args.text, token_arg(args.target))
    with ProgressLine() as progress, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the notice is printed below, once
        return integrated_gradients_report(
            model,
            args.text,
            token_arg(args.target),
            args.steps,
            baseline=args.baseline,
            memory_budget=args.memory_budget,
            progress=progress.update,
        )


def attribute_command(args: argparse.Namespace, method: str) -> int:
    """The attribution's files (CSV/NPY, the strip, per head for attn, summary.json), all or nothing."""
    model = load(args)
    try:
        result = _attribute(args, model)
    except ValueError as exc:  # ConfigError included
        raise CliError(str(exc), EXIT_USAGE) from None
    cols = [f"{i}:{t}" for i, t in enumerate(result.tokens)]
    name = f"attribution_{args.method}"
    files: list[tuple[str, object]] = [
        (name, (result.scores[None], [result.target], cols)),
        (
            name,
            (
                heatmap(
                    result.scores[None],
                    [result.target],
                    cols,
                    f"{method}: {result.target!r}",
                    "target",
                    "input token",
                    "attribution",
                ),
                STRIP,
            ),
        ),
    ]
    if result.per_head is not None:
        layers, heads = result.per_head.shape[:2]
        rows = [head_name(n, h) for n in range(layers) for h in range(heads)]
        per_head = result.per_head.reshape(layers * heads, -1)
        files.append((f"{name}_per_head", (per_head, rows, cols)))
        files.append(
            (
                f"{name}_per_head",
                heatmap(
                    per_head, rows, cols, "attention x gradient per head", "layer, head", "input token", "attribution"
                ),
            )
        )
    summary = {
        "model": model.name,
        "method": result.method,
        "target": result.target,
        "tokens": result.tokens,
        "scores": result.scores.tolist(),
        "target_logit": result.target_logit,
        "baseline": result.baseline,
        "baseline_logit": result.baseline_logit,
        "completeness_error": result.completeness_error,
        "steps": result.steps,
        "notices": result.notices,
    }
    for path in write_all(args.out, [*files, ("summary.json", summary)]):
        print(path, flush=True)
    for notice in result.notices:
        print(f"attndesk: note: {notice}", file=sys.stderr)
    if result.completeness_error is not None:
        print(f"attndesk: completeness error {result.completeness_error:.2%} at {result.steps} steps", file=sys.stderr)
    return 0
