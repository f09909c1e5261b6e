"""``attndesk corpus``: every text of a corpus through a model, reduced to per-head metrics, roles,
per-text metrics and a query/key atlas in a Parquet + DuckDB store (``attndesk.corpus``); with a
vision model, every image of ``--images FOLDER`` (default: the sample images), per-image metrics.

Prints the plan, progress on stderr and the store's path; writes heads.csv and heads.png (a
panel per metric, a cell per head) beside the store's tables. Without ``--data`` it reads the
bundled sample corpus (``attndesk/resources/corpus_sample.txt``). Bad input: one line, exit 2,
nothing written.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from attndesk.cli.arguments import engine_arguments, non_negative_int, positive_int
from attndesk.cli.base import EXIT_USAGE, CliError
from attndesk.resources import CORPUS_SAMPLE as SAMPLE

NAME = "corpus"
MAX_TOKENS = 128
ATLAS_POINTS = 1000
# what a text pass reads and an image pass refuses (an image has no tokens to cut, its pass no atlas)
TEXT_ONLY = {"data": "--data", "max_tokens": "--max-tokens", "atlas": "--atlas", "atlas_points": "--atlas-points"}


def _methods(methods: tuple[str, ...]) -> Callable[[str], tuple[str, ...]]:
    """--atlas's type: some of ``methods`` (the atlas's projections), comma-separated, or none."""

    def parse(value: str) -> tuple[str, ...]:
        names = tuple(v.strip() for v in value.split(",") if v.strip())
        if names == ("none",):
            return ()
        bad = [n for n in names if n not in methods]
        if bad or not names:
            raise CliError(f"--atlas {value!r}: give pca, umap, pca,umap or none", EXIT_USAGE)
        return names

    return parse


def register(sub) -> argparse.ArgumentParser:
    from attndesk.corpus.atlas import METHODS

    p = sub.add_parser(
        NAME,
        help="analyze every head's attention over a corpus of texts or a folder of images",
        description="Run a corpus through a model with attndesk's attention and store per-head and "
        "per-text metrics, roles and a query/key atlas (Parquet + DuckDB); a vision model runs over "
        "a folder of images (--images).",
    )
    p.add_argument(
        "--model",
        metavar="PATH",
        default=None,
        help="a local transformers folder (default: the packaged all-MiniLM-L6-v2)",
    )
    p.add_argument(
        "--data",
        metavar="FILE",
        default=None,
        help=".txt (a text a line), .jsonl or .csv or .parquet "
        "(a text column/field), or a folder of .txt files (default: the bundled sample corpus)",
    )
    p.add_argument(
        "--images",
        metavar="FOLDER",
        default=None,
        help="with a vision model: a folder of images (png, jpg; default: attndesk's sample images)",
    )
    p.add_argument("--out", metavar="DIR", default="corpus-out", help="the store's folder (default %(default)s)")
    p.add_argument(
        "--max-tokens",
        type=positive_int,
        default=None,
        metavar="N",
        help=f"tokens a text keeps, special tokens included (default {MAX_TOKENS})",
    )
    _engine_arguments(p, METHODS)
    p.add_argument("--restart", action="store_true", help="start over instead of resuming the run in --out")
    return p


def _engine_arguments(p: argparse.ArgumentParser, atlas_methods: tuple[str, ...]) -> None:
    """How the pass runs: the engine and its workers, the atlas, the shards, the device."""
    engine_arguments(p)
    p.add_argument(
        "--atlas",
        type=_methods(atlas_methods),
        default=None,
        metavar="METHODS",
        help="projections of the query/key atlas: pca, umap, pca,umap or none (default pca)",
    )
    p.add_argument(
        "--atlas-points",
        type=non_negative_int,
        default=None,
        metavar="N",
        help=f"queries and keys kept per head for the atlas (default {ATLAS_POINTS})",
    )
    p.add_argument(
        "--shard-size",
        type=positive_int,
        default=256,
        metavar="N",
        help="texts per shard, the unit a rerun resumes from (default %(default)s)",
    )
    p.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda", "mps"),
        default="cpu",
        help="torch device of the pass (default %(default)s; auto picks the best available)",
    )


def _inputs(args: argparse.Namespace, images: bool):
    """What the pass reads: an image folder (None: the samples) for a vision model, else the texts
    (default: the bundled sample corpus); the flags of the other kind refused in one line. Fills in
    the text pass's defaults."""
    if images:
        given = [flag for name, flag in TEXT_ONLY.items() if getattr(args, name) is not None]
        if given:
            raise CliError(
                f"{given[0]} does not apply to an image model: the corpus pass over images reads --images "
                "FOLDER (no tokens to cut, no atlas)",
                EXIT_USAGE,
            )
        args.max_tokens, args.atlas, args.atlas_points = MAX_TOKENS, (), 0
        return args.images
    if args.images is not None:
        raise CliError(
            "--images needs a vision model (--model FOLDER of a ViT, DINOv2, ...); texts go in --data", EXIT_USAGE
        )
    args.max_tokens = MAX_TOKENS if args.max_tokens is None else args.max_tokens
    args.atlas = ("pca",) if args.atlas is None else args.atlas
    args.atlas_points = ATLAS_POINTS if args.atlas_points is None else args.atlas_points
    return args.data if args.data is not None else SAMPLE


def run(args: argparse.Namespace) -> int:
    from attndesk.cli import corpus_job

    return corpus_job.corpus_command(args, _inputs)


__all__ = ["NAME", "SAMPLE", "register", "run"]
