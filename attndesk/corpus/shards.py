"""The shard files of a run in progress: which shards are finished, the texts of the others, and
writing one shard whole (a staged folder renamed into place: a kill leaves no half shard)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq

from ..core.atomic import StagedFolder
from .batch import ShardResult
from .sources import Source


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


def write_shard(out: Path, result: ShardResult) -> None:
    """The shard's three files, all or none (a kill leaves no half shard)."""
    (out / "shards").mkdir(exist_ok=True)
    with StagedFolder(out / "shards" / f"{result.index:05d}") as stage:
        for name in ("texts", "per_text", "atlas"):
            pq.write_table(getattr(result, name), stage.path(f"{name}.parquet"), compression="zstd")


__all__ = ["finished_shards", "shards", "write_shard"]
