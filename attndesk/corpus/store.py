"""The corpus store: a folder of Parquet files and a DuckDB database of views over them.

Layout of ``out/``::

    manifest.json          what was run (model path and weight hash, attndesk version, every argument),
                           the text count, and whether the run is complete
    shards/00000/          one finished shard (texts, per_text, atlas .parquet), moved into place whole,
                           so a folder here is a finished shard; removed once compacted
    texts.parquet          text_id, text, tokens, cut (the text had more than max_tokens tokens)
    per_text.parquet       one row per text, part, layer and head: the metrics of that text
    heads.parquet          one row per part, layer and head: the corpus metrics and the role
    heads.csv              the same, as CSV
    atlas.parquet          the projected sample: part, layer, head, method, kind, text_id, position, token, x, y
    atlas_quality.parquet  per head and method, the correlation of -distance in the projection with q.k
    corpus.duckdb          views texts, per_text, heads, atlas, atlas_quality over the Parquet files

An image pass (manifest ``kind`` "images") writes the same files: ``texts`` names each image
(``tokens``: special tokens and patches; ``source``: its path or "sample:NAME"), ``per_text`` holds the per-image metrics of
``image_metrics`` (with ``distance_rows`` and ``sink_token``), ``heads`` their summary, and the
atlas tables are empty.

Every file is written atomically (``attndesk.files.atomic``); ``open_corpus`` reopens the store with
a read-only DuckDB connection (no data is read until asked).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from attndesk.errors import ConfigError
from attndesk.files.atomic import atomic_write

from .image_metrics import IMAGE_METRICS, IMAGE_SHARE_BASELINE
from .metrics import BASELINES, FROM_SECOND_ROW, METRICS, ROW_METRICS, SHARE_BASELINE, role

FORMAT = "attndesk-corpus"
# 2: per text and head, the uniform baselines the roles compare with (uniform_share, ...)
FORMAT_VERSION = 2
MANIFEST = "manifest.json"
TABLES = ("texts", "per_text", "heads", "atlas", "atlas_quality")
HEAD_COLUMNS = ("part", "layer", "head") + METRICS + ("role",)
PARTS_ORDER = {"self": 0, "decoder": 1, "cross": 2}


def read_manifest(out: Path, format: str = FORMAT) -> dict | None:
    """The manifest of store ``out`` (a store of ``format``); None when there is none; ConfigError
    for a foreign file or a store of another kind."""
    path = Path(out) / MANIFEST
    if not path.exists():
        return None
    what = "corpus" if format == FORMAT else format.removeprefix("attndesk-")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise ConfigError(f"{path} is not an attndesk {what} manifest; choose another --out folder") from None
    if not isinstance(manifest, dict) or manifest.get("format") != format:
        raise ConfigError(f"{path} is not an attndesk {what} manifest; choose another --out folder")
    return manifest


def finished_manifest(
    out: Path, format: str, version: int, database: str, *, kind: str, rerun: str, unfinished: str
) -> dict:
    """The manifest of the finished store of ``format`` at ``out``; ConfigError, in one line naming
    ``kind`` ("corpus store", ...), for a folder that is no such store, a store of another format
    version (``rerun`` says what to run again) or a run that did not finish (``unfinished`` names it)."""
    try:
        manifest = read_manifest(out, format) if out.is_dir() else None
    except ConfigError:
        if format == FORMAT:
            raise
        raise ConfigError(f"{out} is not an attndesk {kind} (its {MANIFEST} is another kind's)") from None
    if manifest is None:
        raise ConfigError(f"{out} is not an attndesk {kind} (no {MANIFEST})")
    if manifest.get("format_version") != version:
        raise ConfigError(
            f"{out} is a {kind} of format version {manifest.get('format_version')!r}; this attndesk reads "
            f"version {version}{rerun}"
        )
    if not manifest.get("complete") or not (out / database).exists():
        raise ConfigError(f"{unfinished} in {out} did not finish; run it again with the same arguments to resume")
    return manifest


def write_manifest(out: Path, manifest: dict) -> None:
    atomic_write(Path(out) / MANIFEST, (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())


def sql_path(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def heads_summary(con, per_text: str) -> pd.DataFrame:
    """Corpus metrics per head from per-text rows (``per_text``: a SQL table expression): row metrics
    weighted by each text's rows (``previous`` by its rows i >= 1), scores averaged over texts."""

    def weight(m: str) -> str:
        return "previous_rows" if m in FROM_SECOND_ROW else "rows"

    row = ", ".join(
        f'sum({m} * {weight(m)}) / nullif(sum(CASE WHEN isnan({m}) THEN 0 ELSE {weight(m)} END), 0) AS "{m}"'
        for m in ROW_METRICS + BASELINES
    )
    scores = ", ".join(
        f"avg(CASE WHEN isnan({m}) THEN NULL ELSE {m} END) AS {m}" for m in METRICS if m not in ROW_METRICS
    )
    query = (
        f"SELECT part, layer, head, {row}, {scores}, count(*) AS texts FROM {per_text} "
        f"WHERE rows > 0 GROUP BY part, layer, head"
    )
    frame = con.execute(query).df()
    frame["order"] = frame["part"].map(PARTS_ORDER)
    frame = frame.sort_values(["order", "layer", "head"]).drop(columns="order").reset_index(drop=True)
    numbers = METRICS + BASELINES
    frame["role"] = [
        role({k: (math.nan if pd.isna(r[k]) else float(r[k])) for k in numbers}) for r in frame.to_dict("records")
    ]
    return frame[list(HEAD_COLUMNS) + list(BASELINES) + ["texts"]]


class ParquetStore:
    """A finished store: its manifest and a read-only DuckDB connection to its ``database`` of views
    over the store's Parquet files (no data is read until asked)."""

    def __init__(self, out: Path, manifest: dict, database: str):
        import duckdb

        self.path, self.manifest = Path(out), manifest
        self._con = duckdb.connect(str(self.path / database), read_only=True)
        self._con.execute(f"SET file_search_path = {sql_path(self.path)}")

    def close(self) -> None:
        self._con.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def sql(self, query: str, params: list | None = None) -> pd.DataFrame:
        """Any SQL over the store's views."""
        return self._con.execute(query, params or []).df()


class CorpusStore(ParquetStore):
    """A finished corpus analysis: tables as pandas DataFrames (``.heads``, ``.texts``, ...) and SQL
    (``sql``: over the views texts, per_text, heads, atlas, atlas_quality)."""

    def __init__(self, out: Path, manifest: dict):
        super().__init__(out, manifest, "corpus.duckdb")
        self.images = manifest.get("kind") == "images"  # an image pass: per-image metrics (image_metrics)
        self._heads: pd.DataFrame | None = None

    def __enter__(self) -> CorpusStore:
        return self

    @property
    def heads(self) -> pd.DataFrame:
        if self._heads is None:
            self._heads = self.sql(
                "SELECT * FROM heads ORDER BY CASE part WHEN 'self' THEN 0 WHEN 'decoder' THEN 1 "
                "ELSE 2 END, layer, head"
            )
        return self._heads

    @property
    def metrics(self) -> tuple[str, ...]:
        """The store's per-head metrics: the text pass's or the image pass's."""
        return IMAGE_METRICS if self.images else METRICS

    @property
    def share_baselines(self) -> dict[str, str]:
        """Each share metric's uniform baseline column (what ``top_texts`` ranks its excess over)."""
        return IMAGE_SHARE_BASELINE if self.images else SHARE_BASELINE

    @property
    def texts(self) -> pd.DataFrame:
        return self.sql("SELECT * FROM texts ORDER BY text_id")

    def _head(self, layer: int, head: int, part: str | None) -> tuple[str, int, int]:
        part = part or ("self" if "self" in set(self.heads["part"]) else str(self.heads["part"].iloc[0]))
        match = self.heads[(self.heads["part"] == part) & (self.heads["layer"] == layer) & (self.heads["head"] == head)]
        if match.empty:
            raise ConfigError(f"no head {part} layer {layer} head {head} in {self.path}")
        return part, int(layer), int(head)

    def per_text(self, layer: int, head: int, part: str | None = None) -> pd.DataFrame:
        """The metrics of every text for one head (text_id order)."""
        key = self._head(layer, head, part)
        return self.sql("SELECT * FROM per_text WHERE part = ? AND layer = ? AND head = ? ORDER BY text_id", list(key))

    def top_texts(
        self, layer: int, head: int, metric: str, k: int = 10, *, part: str | None = None, lowest: bool = False
    ) -> pd.DataFrame:
        """The ``k`` texts (an image pass: images, ``text`` their names) where the head's ``metric``
        is highest (``lowest``: lowest), with their text.

        A share of a row's weight (``first``, ``self``, ``previous``) is ranked by its excess over a
        uniform row's share (column ``excess``; the baseline is in its own column): the raw share
        would rank the shortest texts first, since a uniform row over few keys gives each a lot."""
        if metric not in self.metrics:
            raise ConfigError(f"unknown metric {metric!r}; choose one of {', '.join(self.metrics)}")
        key = self._head(layer, head, part)
        order = "ASC" if lowest else "DESC"
        base = self.share_baselines.get(metric)
        rank = f"p.{metric} - p.{base}" if base else f"p.{metric}"
        extra = f", p.{base}, {rank} AS excess" if base else ""
        return self.sql(
            f"SELECT p.text_id, p.{metric}{extra}, t.text, t.tokens FROM per_text p JOIN texts t USING (text_id) "
            f"WHERE p.part = ? AND p.layer = ? AND p.head = ? AND NOT isnan(p.{metric}) "
            f"ORDER BY {rank} {order}, p.text_id LIMIT ?",
            [*key, int(k)],
        )

    def atlas(self, layer: int, head: int, part: str | None = None, method: str = "pca") -> pd.DataFrame:
        """The projected query/key sample of one head: x, y, kind, text_id, position, token."""
        key = self._head(layer, head, part)
        return self.sql(
            "SELECT x, y, kind, text_id, position, token FROM atlas WHERE part = ? AND layer = ? AND "
            "head = ? AND method = ? ORDER BY kind DESC, text_id, position",
            [*key, method],
        )

    @property
    def atlas_quality(self) -> pd.DataFrame:
        return self.sql("SELECT * FROM atlas_quality ORDER BY method, part, layer, head")


def open_corpus(out) -> CorpusStore:
    """Reopen a finished store (ConfigError if ``out`` is not one, or its run did not finish)."""
    out = Path(out).expanduser()
    manifest = finished_manifest(
        out,
        FORMAT,
        FORMAT_VERSION,
        "corpus.duckdb",
        kind="corpus store",
        rerun=" (roles against a uniform baseline): run the corpus pass again",
        unfinished="the corpus run",
    )
    return CorpusStore(out, manifest)


__all__ = [
    "FORMAT",
    "HEAD_COLUMNS",
    "MANIFEST",
    "CorpusStore",
    "ParquetStore",
    "finished_manifest",
    "heads_summary",
    "open_corpus",
    "read_manifest",
    "sql_path",
    "write_manifest",
]
