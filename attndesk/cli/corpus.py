"""``attndesk corpus``: every text of a corpus through a model, reduced to per-head metrics, roles,
per-text metrics and a query/key atlas in a Parquet + DuckDB store (``attndesk.corpus``).

Prints the plan, progress on stderr and the store's path; writes heads.csv and heads.png (a
panel per metric, a cell per head) beside the store's tables. Without ``--data`` it reads the
bundled sample corpus (``attndesk/resources/corpus_sample.txt``). Bad input: one line, exit 2,
nothing written.
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

from attndesk.cli.arguments import non_negative_int, positive_int
from attndesk.cli.base import EXIT_USAGE, CliError
from attndesk.resources import CORPUS_SAMPLE as SAMPLE

NAME = "corpus"
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


def _methods(value: str) -> tuple[str, ...]:
    from attndesk.corpus.atlas import METHODS

    names = tuple(v.strip() for v in value.split(",") if v.strip())
    if names == ("none",):
        return ()
    bad = [n for n in names if n not in METHODS]
    if bad or not names:
        raise CliError(f"--atlas {value!r}: give pca, umap, pca,umap or none", EXIT_USAGE)
    return names


def register(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        NAME,
        help="analyze every head's attention over a corpus of texts",
        description="Run a corpus through a model with attndesk's attention and store per-head and "
        "per-text metrics, roles and a query/key atlas (Parquet + DuckDB).",
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
    p.add_argument("--out", metavar="DIR", default="corpus-out", help="the store's folder (default %(default)s)")
    p.add_argument(
        "--max-tokens",
        type=positive_int,
        default=128,
        metavar="N",
        help="tokens a text keeps, special tokens included (default %(default)s)",
    )
    _engine_arguments(p)
    p.add_argument("--restart", action="store_true", help="start over instead of resuming the run in --out")
    return p


def _engine_arguments(p: argparse.ArgumentParser) -> None:
    """How the pass runs: the engine and its workers, the atlas, the shards, the device."""
    p.add_argument(
        "--engine",
        choices=("local", "ray"),
        default="local",
        help="local (this process) or ray (Ray Data actors; RAY_ADDRESS or --ray-address joins a cluster)",
    )
    p.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        metavar="N",
        help="local: torch threads (default: torch's own); ray: actors, one model and one CPU each (default 2)",
    )
    p.add_argument("--ray-address", default=None, metavar="ADDR", help="a Ray cluster to join (else RAY_ADDRESS)")
    p.add_argument(
        "--atlas",
        type=_methods,
        default=("pca",),
        metavar="METHODS",
        help="projections of the query/key atlas: pca, umap, pca,umap or none (default pca)",
    )
    p.add_argument(
        "--atlas-points",
        type=non_negative_int,
        default=1000,
        metavar="N",
        help="queries and keys kept per head for the atlas (default %(default)s)",
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


def _plan(args, source, model) -> str:
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
    import numpy as np

    from attndesk.render import ensure_gui_app, write
    from attndesk.render.heads_grid import HeadsGrid, heads_grid_painter

    heads = store.heads
    keys = list(dict.fromkeys(zip(heads.part, heads.layer)))
    n_heads = int(heads["head"].max()) + 1
    index = {key: i for i, key in enumerate(keys)}
    values = {m: np.full((len(keys), n_heads), np.nan) for m in GRID_METRICS}
    roles = np.full((len(keys), n_heads), "", dtype=object)
    for row in heads.itertuples():
        r = index[(row.part, row.layer)]
        for m in GRID_METRICS:
            values[m][r, row.head] = getattr(row, m)
        roles[r, row.head] = row.role
    grid = HeadsGrid(GRID_METRICS, [f"{p} {layer}" for p, layer in keys], n_heads, values, roles)
    ensure_gui_app(headless=True)
    return write(heads_grid_painter(grid), path, size=grid.size())


def run(args: argparse.Namespace) -> int:
    from attndesk.cli.progress import ProgressLine
    from attndesk.core.errors import ConfigError
    from attndesk.corpus import analyze_corpus
    from attndesk.corpus.engine import _load
    from attndesk.corpus.sources import open_source

    data = args.data if args.data is not None else SAMPLE
    try:
        source = open_source(data)
        model = _load(args.model, args.device)
        print(_plan(args, source, model))
        with ProgressLine(prefix="corpus") as line:

            def progress(p) -> None:
                # the time left from this run's rate: a resumed run's fraction includes texts it did not run
                line.update(p.done / max(1, p.total), p.line(eta=False), eta_s=p.eta_s)

            store = analyze_corpus(
                data,
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


__all__ = ["NAME", "SAMPLE", "register", "run", "write_heads_png"]
