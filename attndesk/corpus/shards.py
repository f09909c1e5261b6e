"""The shard files of a run in progress: which shards are finished, the texts of the others, and
writing one shard whole (a staged folder renamed into place: a kill leaves no half shard).

A shard is any result with an ``index`` and its ``tables()`` (name -> Arrow table, one Parquet file
each): the corpus pass's ``ShardResult`` or a ``ShardTables`` (the KV-cache sweep's, and what the Ray
engine rebuilds from an actor's answer)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from attndesk.files.atomic import StagedFolder

from .sources import Source


class Shard(Protocol):
    """What ``write_shard`` writes: the shard's number and its tables by name."""

    index: int

    def tables(self) -> Mapping[str, pa.Table]: ...


@dataclass
class ShardTables:
    """A shard as its tables by name."""

    index: int
    named: dict[str, pa.Table]

    def tables(self) -> Mapping[str, pa.Table]:
        return self.named


def shards(source: Source, size: int, skip: set[int]) -> Iterator[tuple[int, int, list[str]]]:
    """(index, first text id, texts) of every shard not in ``skip``, read as a stream."""
    stream = source.texts()
    for index in itertools.count():
        texts = list(itertools.islice(stream, size))
        if not texts:
            return
        if index not in skip:
            yield index, index * size, texts


def finished_shards(out: Path) -> set[int]:
    folder = out / "shards"
    return {int(p.name) for p in folder.iterdir() if p.is_dir() and p.name.isdigit()} if folder.is_dir() else set()


def write_shard(out: Path, result: Shard) -> None:
    """The shard's files (one Parquet file a table), all or none (a kill leaves no half shard)."""
    (out / "shards").mkdir(exist_ok=True)
    with StagedFolder(out / "shards" / f"{result.index:05d}") as stage:
        for name, table in result.tables().items():
            pq.write_table(table, stage.path(f"{name}.parquet"), compression="zstd")


__all__ = ["Shard", "ShardTables", "finished_shards", "shards", "write_shard"]
