"""Turning finished shards into the store's tables (see ``store`` for the layout): DuckDB merges the
shard files into sorted Parquet files, the heads summary and the atlas sample; the atlas is
projected head by head, so memory stays one head's sample whatever the corpus."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from threadpoolctl import threadpool_limits

from attndesk.files.atomic import atomic_write

from .atlas import project
from .image_metrics import image_heads_summary
from .store import heads_summary, sql_path

ATLAS_SCHEMA = pa.schema(
    [
        ("part", pa.string()),
        ("layer", pa.int16()),
        ("head", pa.int16()),
        ("method", pa.string()),
        ("kind", pa.string()),
        ("text_id", pa.int64()),
        ("position", pa.int32()),
        ("token", pa.string()),
        ("x", pa.float32()),
        ("y", pa.float32()),
    ]
)
QUALITY_SCHEMA = pa.schema(
    [
        ("part", pa.string()),
        ("layer", pa.int16()),
        ("head", pa.int16()),
        ("method", pa.string()),
        ("points", pa.int32()),
        ("correlation", pa.float64()),
    ]
)
_PART_ORDER = "CASE part WHEN 'self' THEN 0 WHEN 'decoder' THEN 1 ELSE 2 END"


def connect(memory_limit: str = "1GB"):
    import duckdb

    con = duckdb.connect()
    con.execute(f"SET memory_limit = '{memory_limit}'")
    con.execute("SET preserve_insertion_order = false")
    return con


def copy_query(con, query: str, target: Path) -> None:
    """The query's rows as Parquet file ``target``, written beside it and renamed into place."""
    tmp = target.with_name(f".{target.name}.part")
    con.execute(f"COPY ({query}) TO {sql_path(tmp)} (FORMAT parquet, COMPRESSION zstd)")
    os.replace(tmp, target)


def shard_files(out: Path, table: str) -> str:
    """read_parquet of the finished shards' files only: a kill can leave a hidden staging folder
    beside them, which a glob would read too."""
    folders = sorted(p for p in (out / "shards").iterdir() if p.is_dir() and p.name.isdigit())
    return "read_parquet([" + ", ".join(sql_path(p / f"{table}.parquet") for p in folders) + "])"


def _atlas(con, out: Path, points: int, methods: tuple[str, ...], seed: int) -> None:
    """Keep each head's ``points`` queries and keys of smallest priority, project them, write the tables."""
    sample = out / ".atlas_sample.parquet"
    copy_query(
        con,
        f"SELECT * FROM {shard_files(out, 'atlas')} QUALIFY row_number() OVER (PARTITION BY part, layer, head, kind "
        f"ORDER BY priority, text_id, position) <= {int(points)} "
        f"ORDER BY {_PART_ORDER}, layer, head, kind, priority",
        sample,
    )
    quality = []
    tmp = out / ".atlas.parquet.part"
    with pq.ParquetWriter(tmp, ATLAS_SCHEMA, compression="zstd") as writer:
        for (part, layer, head), rows in _per_head(sample):
            for method in methods:
                table, r = _projected(rows, part, layer, head, method, seed)
                writer.write_table(table)
                quality.append((part, layer, head, method, table.num_rows, r))
    os.replace(tmp, out / "atlas.parquet")
    names = QUALITY_SCHEMA.names
    pq.write_table(
        pa.table({n: [q[i] for q in quality] for i, n in enumerate(names)}, schema=QUALITY_SCHEMA),
        out / ".atlas_quality.parquet.part",
    )
    os.replace(out / ".atlas_quality.parquet.part", out / "atlas_quality.parquet")
    sample.unlink()


def _per_head(sample: Path) -> Iterator[tuple[tuple, pa.Table]]:
    """((part, layer, head), rows) of a sample file sorted by head: one pass, one head in memory."""
    pending: list[pa.Table] = []
    key = None
    for batch in pq.ParquetFile(sample).iter_batches(batch_size=65536):
        table = pa.Table.from_batches([batch])
        parts, layers, heads = (table.column(c).to_pylist() for c in ("part", "layer", "head"))
        start = 0
        for i in range(1, len(parts) + 1):
            if i == len(parts) or (parts[i], layers[i], heads[i]) != (parts[start], layers[start], heads[start]):
                here = (parts[start], layers[start], heads[start])
                if key is not None and here != key:
                    yield key, pa.concat_tables(pending)
                    pending = []
                key = here
                pending.append(table.slice(start, i - start))
                start = i
    if key is not None:
        yield key, pa.concat_tables(pending)


def _projected(rows: pa.Table, part: str, layer: int, head: int, method: str, seed: int) -> tuple[pa.Table, float]:
    kinds = np.asarray(rows.column("kind").to_numpy(zero_copy_only=False))
    vectors = rows.column("vector").combine_chunks()
    flat = np.asarray(vectors.flatten().to_numpy(), dtype=np.float64).reshape(len(vectors), -1)
    q_idx, k_idx = np.nonzero(kinds == "query")[0], np.nonzero(kinds == "key")[0]
    q_xy, k_xy, r = project(flat[q_idx], flat[k_idx], method, seed)
    order = np.concatenate([q_idx, k_idx])
    xy = np.concatenate([q_xy, k_xy])
    n = len(order)
    table = pa.table(
        {
            "part": [part] * n,
            "layer": np.full(n, layer, np.int16),
            "head": np.full(n, head, np.int16),
            "method": [method] * n,
            "kind": kinds[order],
            "text_id": rows.column("text_id").to_numpy()[order],
            "position": rows.column("position").to_numpy()[order],
            "token": np.asarray(rows.column("token").to_numpy(zero_copy_only=False))[order],
            "x": xy[:, 0].astype(np.float32),
            "y": xy[:, 1].astype(np.float32),
        },
        schema=ATLAS_SCHEMA,
    )
    return table, r


def write_database(out: Path, name: str, views: tuple[str, ...], empty: dict[str, str] | None = None) -> None:
    """DuckDB file ``name`` in ``out`` with one view per table of ``views`` over its Parquet file
    (named relative to the store, so the folder may move) and, from ``empty``, views that exist
    with no rows ({view: a query of typed NULLs}), so queries on them answer rather than fail;
    written beside its place and renamed into it."""
    import duckdb

    tmp = out / f".{name}.part"
    tmp.unlink(missing_ok=True)
    con = duckdb.connect(str(tmp))
    try:
        con.execute(f"SET file_search_path = {sql_path(out)}")  # views name their files relative to the store
        for table in views:
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{table}.parquet')")
        for table, query in (empty or {}).items():
            con.execute(f"CREATE VIEW {table} AS {query} WHERE false")
    finally:
        con.close()
    os.replace(tmp, out / name)


_EMPTY_ATLAS = {
    "atlas": "SELECT NULL::VARCHAR AS part, NULL::SMALLINT AS layer, NULL::SMALLINT AS head, NULL::VARCHAR AS "
    "method, NULL::VARCHAR AS kind, NULL::BIGINT AS text_id, NULL::INTEGER AS position, NULL::VARCHAR AS token, "
    "NULL::FLOAT AS x, NULL::FLOAT AS y",
    "atlas_quality": "SELECT NULL::VARCHAR AS part, NULL::SMALLINT AS layer, NULL::SMALLINT AS head, "
    "NULL::VARCHAR AS method, NULL::INTEGER AS points, NULL::DOUBLE AS correlation",
}


def _database(out: Path, with_atlas: bool) -> None:
    tables = ("texts", "per_text", "heads")
    if with_atlas:
        write_database(out, "corpus.duckdb", tables + ("atlas", "atlas_quality"))
    else:
        write_database(out, "corpus.duckdb", tables, _EMPTY_ATLAS)


def compact(out: Path, *, atlas_points: int, atlas_methods: tuple[str, ...], seed: int, images: bool = False) -> None:
    """Merge ``out/shards`` into the store's tables and database (the shards stay until the caller
    marks the run complete; a kill here is resumed by compacting again). ``images``: an image
    pass's per-image rows, summarised by ``image_heads_summary``."""

    con = connect()
    # one BLAS thread: the projections are small d x d problems, and BLAS threads spinning against
    # torch's slow each eigendecomposition down by orders of magnitude (docs/benchmarks.md, Threads)
    limits = threadpool_limits(1)
    try:
        copy_query(con, f"SELECT * FROM {shard_files(out, 'texts')} ORDER BY text_id", out / "texts.parquet")
        copy_query(
            con,
            f"SELECT * FROM {shard_files(out, 'per_text')} ORDER BY {_PART_ORDER}, layer, head, text_id",
            out / "per_text.parquet",
        )
        summary = image_heads_summary if images else heads_summary
        heads = summary(con, f"read_parquet({sql_path(out / 'per_text.parquet')})")
        heads_table = pa.Table.from_pandas(heads, preserve_index=False)
        tmp = out / ".heads.parquet.part"
        pq.write_table(heads_table, tmp)
        os.replace(tmp, out / "heads.parquet")
        atomic_write(out / "heads.csv", heads.to_csv(index=False, float_format="%.6g").encode())
        if atlas_points > 0 and atlas_methods:
            _atlas(con, out, atlas_points, atlas_methods, seed)
    finally:
        con.close()
        limits.restore_original_limits()
    _database(out, atlas_points > 0 and bool(atlas_methods))


def remove_shards(out: Path) -> None:
    shutil.rmtree(out / "shards", ignore_errors=True)


__all__ = [
    "ATLAS_SCHEMA",
    "QUALITY_SCHEMA",
    "compact",
    "connect",
    "copy_query",
    "remove_shards",
    "shard_files",
    "write_database",
]
