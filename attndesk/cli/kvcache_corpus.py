"""``attndesk kvcache --corpus``: the sweep over a corpus (``attndesk.kvcache.corpus_sweep``) from the
shell, imported by ``kvcache.run`` only. Prints the plan, one progress line on stderr, a line per
policy (its mean KL at each budget) and the store's path; draws each metric's curves over the
corpus (the mean over the texts, and the band from their first to their third quartile) into the
store."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from attndesk.cli.base import EXIT_USAGE, CliError
from attndesk.cli.progress import ProgressLine
from attndesk.errors import ConfigError
from attndesk.jobs import plain_context
from attndesk.kvcache.corpus_sweep import MAX_TOKENS, SHARD_SIZE, sweep_corpus
from attndesk.kvcache.sweep import DECODE_ROWS
from attndesk.kvcache.sweep_store import FIGURES, KVSweepStore
from attndesk.render import ensure_gui_app
from attndesk.render.export import ExportError
from attndesk.render.kvcache import write_curves

LABELS = {
    "kl_mean": ("mean KL(full || compressed), nats", True),
    "accuracy": ("task answer accuracy", False),
    "agree": ("top-1 agreement with the full run", False),
    "error": ("attention-output error ||c - f|| / ||f||", True),
}


def _refuse_single_input_flags(args: argparse.Namespace) -> None:
    for flag, given in (
        ("--generate", args.generate != 0),
        ("--prefill", args.prefill is not None),
        ("--retrieval", args.retrieval is not None),
    ):
        if given:
            raise CliError(
                f"{flag} does not apply to a sweep over a corpus: each text's last --decode tokens are its decode "
                "steps",
                EXIT_USAGE,
            )


def run_corpus(
    args: argparse.Namespace, names: list[str], budgets: list[int | float], options: dict[str, dict[str, Any]]
) -> int:
    """The sweep into the store ``args.out``, its figures, and what it printed; exit status 0."""
    _refuse_single_input_flags(args)
    decode = args.decode or DECODE_ROWS
    print(
        f"kvcache: {len(names)} policies x {len(budgets)} budgets over {args.corpus} "
        f"({decode} decode rows a text), engine {args.engine or 'local'}, out {args.out}",
        flush=True,
    )
    with ProgressLine(prefix="kvcache") as line:
        try:
            store = sweep_corpus(
                args.corpus,
                args.out,
                model=args.model,
                trained=args.trained,
                policies=names,
                budgets=budgets,
                decode=decode,
                max_tokens=args.max_tokens or MAX_TOKENS,
                options=options,
                engine=args.engine or "local",
                workers=args.workers,
                resume=not args.restart,
                shard_size=args.shard_size or SHARD_SIZE,
                ray_address=args.ray_address,
                ctx=plain_context(line.update),
            )
        except ConfigError as exc:
            raise CliError(str(exc), EXIT_USAGE) from None
    with store:
        figures = write_figures(store, store.path)
        for name, curve in store.curves("kl_mean").items():
            points = ", ".join(f"{b:g}: {m:.4g}" for b, m in zip(curve.budgets, curve.mean))
            print(f"{name}: mean KL {points}")
        names_written = ", ".join(p.name for p in figures)
        print(f"store: {store.path.resolve()} (kvsweep.duckdb, summary.csv, {names_written})", flush=True)
    return 0


def write_figures(store: KVSweepStore, folder: Path) -> list[Path]:
    """Each metric of ``FIGURES`` against the budget, one line per policy (the mean over the texts)
    and its band (the texts' first to third quartile: on a log axis a band of ± one standard
    deviation would fall below zero); accuracy only where some text has a task answer."""
    ensure_gui_app(headless=True)
    texts = int(store.manifest["data"]["texts"])
    budgets = store.manifest["arguments"]["budgets"]
    ratios = all(isinstance(b, float) and b <= 1 for b in budgets)
    x_label = "budget (share of the prompt)" if ratios else "budget (keys per K/V head)"
    written = []
    for metric in FIGURES:
        curves = store.curves(metric, "quartiles")
        if not any(c.texts.any() for c in curves.values()):
            continue  # no text has a task answer: no accuracy to draw
        label, log_y = LABELS[metric]
        lines: dict[str, Any] = {name: (c.budgets, c.mean) for name, c in curves.items()}
        bands: dict[str, Any] = {name: (c.budgets, c.low, c.high) for name, c in curves.items()}
        try:
            written.append(
                write_curves(
                    lines,
                    folder / f"{metric}_vs_budget.png",
                    title=f"{store.manifest['model']['name']}, {texts} texts: {label} (line: mean; band: quartiles)",
                    x_label=x_label,
                    y_label=label,
                    log_y=log_y,
                    bands=bands,
                )
            )
        except ExportError as exc:
            raise CliError(str(exc)) from None
    return written


__all__ = ["run_corpus", "write_figures"]
