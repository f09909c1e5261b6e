"""``attndesk render --store DIR --format html``: one self-contained page for a corpus store (the
folder ``attndesk corpus --out`` wrote): its per-head statistics and roles, the per-text table,
and the heads grid of a few texts (``--texts``), recomputed with the store's model
(``attndesk.render.page_corpus``). Bad input raises ConfigError (the CLI: one line, exit 2);
nothing is written unless the whole page is."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from attndesk.corpus import open_corpus
from attndesk.errors import ConfigError
from attndesk.render.page import write_document
from attndesk.render.page_corpus import corpus_page_data


def _check(args: argparse.Namespace, defaults: argparse.Namespace) -> None:
    if args.format != ["html"]:
        raise ConfigError("--store writes an interactive page: give --format html")
    for flag, dest in (
        ("--text", "text"),
        ("--text-file", "text_file"),
        ("--trained", "trained"),
        ("--target", "target"),
        ("--region", "region"),
        ("--page-overview", "page_overview"),
    ):
        if getattr(args, dest, None) != getattr(defaults, dest, None):
            raise ConfigError(f"{flag} does not go with --store: a store's page shows its own texts")
    out_dir = Path(args.out).expanduser()
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"--out {out_dir} is a file, not a folder: give a folder to write the page into")


def render_store(args: argparse.Namespace, defaults: argparse.Namespace, echo: bool = True) -> list[Path]:
    """Write the store's page into --out (atomic); returns [its path]. ``defaults``: the render
    parser's defaults, to refuse the flags that do not go with a store. ConfigError for bad input,
    ExportError (PageTooLarge: the texts do not fit) before anything is written."""
    _check(args, defaults)
    with open_corpus(args.store) as store:
        doc = corpus_page_data(
            store,
            args.texts,
            metric=args.metric,
            model=args.model,
            colormap=args.colormap,
            precision=args.page_precision,
        )
        name = f"corpus_{store.path.resolve().name}.html"
    out_dir = Path(args.out).expanduser()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot write into --out {out_dir}: {exc.strerror or exc}") from None
    path = write_document(doc, out_dir / name)
    if echo:
        print(path, file=sys.stdout, flush=True)
    return [path]


__all__ = ["render_store"]
