"""``attndesk patch``: activation patching of a clean and a corrupted prompt, and beside it the
first-order attribution patching with their rank correlation, written to a folder as NPY, CSV
(labelled) and PNG heatmaps (the project's headless rendering), plus summary.json. Bad input (a
model that cannot be read, prompts of unequal token length, a multi-token answer, an encoder...)
is one line on stderr, exit 2, and nothing written. Shared helpers for ``cli.attribute``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from attndesk.cli.base import EXIT_USAGE, CliError, empty_out
from attndesk.cli.progress import ProgressLine
from attndesk.core.types import head_name

NAME = "patch"
SITE_CHOICES = ("head", "head_position", "resid", "attn", "mlp")


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", metavar="PATH", required=True, help="a local transformers checkpoint folder")
    parser.add_argument("--out", metavar="DIR", required=True, help="the folder to write into (created if missing)")
    parser.add_argument(
        "--memory-budget",
        type=int,
        default=None,
        metavar="BYTES",
        help="bytes one batched pass may take (default: the app's memory budget)",
    )


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        NAME,
        help="activation patching between a clean and a corrupted prompt",
        description="Patch every head (and other sites) of the clean run into the corrupted one, "
        "batched; the normalised effect (m_patched - m_corrupt) / (m_clean - m_corrupt) "
        "(patch_<site>), the raw effect m_patched - m_corrupt (patch_<site>_raw) and the "
        "first-order attribution-patching estimate beside them. A warning on stderr says when "
        "the clean-corrupt gap is under 1%% of the metric's scale.",
        epilog="example:\n  attndesk patch --model ~/models/gpt2 --clean 'When Mary and John went to "
        "the store, John gave a drink to' --corrupt 'When Mary and John went to the store, Mary "
        "gave a drink to' --answer ' Mary' --wrong ' John' --out ioi",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_arguments(p)
    p.add_argument("--clean", required=True, metavar="TEXT", help="the prompt whose behaviour is restored")
    p.add_argument("--corrupt", required=True, metavar="TEXT", help="the prompt patched into (same token length)")
    p.add_argument(
        "--answer",
        required=True,
        metavar="TOK",
        help="the token the clean prompt predicts (one token; id:N for a token id)",
    )
    p.add_argument("--wrong", metavar="TOK", default=None, help="the competing token (needed by logit_diff)")
    p.add_argument("--metric", choices=("logit_diff", "prob", "kl"), default="logit_diff")
    p.add_argument(
        "--sites",
        default="head,resid,attn,mlp",
        help=f"comma-separated, of {', '.join(SITE_CHOICES)} (default: head,resid,attn,mlp)",
    )
    p.add_argument(
        "--target", default=None, metavar="TEXT", help="an encoder-decoder's decoder text (default: its start token)"
    )
    p.add_argument(
        "--part",
        choices=("self", "decoder", "cross"),
        default=None,
        help="which attention (default: self; an encoder-decoder's encoder)",
    )
    p.add_argument("--no-attribution", action="store_true", help="skip the first-order estimates")
    return p


def load(args: argparse.Namespace):
    """The model, or a one-line usage error."""
    from attndesk.core.pretrained import load_pretrained, read_spec

    try:
        read_spec(args.model)
        return load_pretrained(args.model)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def token_arg(text: str) -> str | int:
    """A token flag's value: a text, or "id:N" for the token id N."""
    if text.startswith("id:") and text[3:].isdigit():
        return int(text[3:])
    return text


def _optional(text: str | None) -> str | int | None:
    return None if text is None else token_arg(text)


def _sites(text: str) -> tuple[str, ...]:
    sites = tuple(s.strip() for s in text.split(",") if s.strip())
    bad = [s for s in sites if s not in SITE_CHOICES]
    if bad or not sites:
        raise CliError(
            f"--sites: unknown site {bad[0] if bad else '(none)'!r}; choose from {', '.join(SITE_CHOICES)}", EXIT_USAGE
        )
    return sites


def labels(report, site: str, num_heads: int) -> tuple[list[str], list[str], str, str]:
    """(row labels, column labels, y title, x title) of a site's 2-D table (head_position: one row per layer and head)."""
    layers = report.results[site].effects.shape[0]
    if site == "head":
        return [f"L{n}" for n in range(layers)], [head_name(None, h) for h in range(num_heads)], "layer", "head"
    positions = [f"{i}:{t}" for i, t in enumerate(report.positions)]
    if site == "head_position":
        return [head_name(n, h) for n in range(layers) for h in range(num_heads)], positions, "layer, head", "position"
    return [f"L{n}" for n in range(layers)], positions, "layer", "position"


def heatmap(matrix: np.ndarray, rows: list[str], cols: list[str], title: str, y: str, x: str, value: str):
    """One diverging heatmap whose title is the figure's (drawn once, above it)."""
    from attndesk.render import HeatmapFigure

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
    from attndesk.core.atomic import atomic_write
    from attndesk.render import ensure_gui_app, export_figure, export_weights
    from attndesk.render.export import ExportError, OutputSet

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


def run(args: argparse.Namespace) -> int:
    from attndesk.core.interp import activation_patching, attribution_patching

    empty_out(args.out)
    sites = _sites(args.sites)
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
                _optional(args.wrong),
                progress=progress.update,
                **options,
            )
        exact_s = time.perf_counter() - start
        approx = (
            None
            if args.no_attribution
            else attribution_patching(
                model, args.clean, args.corrupt, token_arg(args.answer), _optional(args.wrong), exact=report, **options
            )
        )
    except ValueError as exc:  # ConfigError included
        raise CliError(str(exc), EXIT_USAGE) from None
    summary = {
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
    for path in write_all(args.out, [*_files(args, model, report, approx), ("summary.json", summary)]):
        print(path, flush=True)
    if report.warning is not None:
        print(f"attndesk: warning: {report.warning} (patch_<site>_raw.csv)", file=sys.stderr)
    if approx is not None:
        agreement = ", ".join(f"{site} {rho:.3f}" for site, rho in approx.agreement.items())
        print(f"attndesk: attribution patching vs exact, Spearman: {agreement}", file=sys.stderr)
    return 0
