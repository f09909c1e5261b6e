"""Where a corpus comes from: a ``.txt`` (one text a line), ``.jsonl`` (a ``text`` field), ``.csv``
or ``.parquet`` (a ``text`` column), a folder of ``.txt`` files (one text each), or a sequence
of strings. Read as a stream (never the whole file at once); a text over ``MAX_TEXT_CHARS``
characters, a binary or undecodable file, a missing ``text`` column, or a corpus without a single
non-empty text is refused with one line (``ConfigError``) by ``open_source`` before anything runs.
Empty lines are skipped; texts are numbered 0.. in reading order.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from attndesk.errors import ConfigError

MAX_TEXT_CHARS = 2**20  # a text (a line, a field, a file) longer than this is refused
SUFFIXES = (".txt", ".jsonl", ".csv", ".parquet")
_CHUNK = 2**20


@dataclass(frozen=True)
class Source:
    """A checked corpus: ``count`` texts, ``fingerprint`` (sha256 of its content), ``texts()``
    yields them again (each time from the start), ``describe`` names it for the plan, ``skipped``
    says what was left out (an image folder's files that are not images)."""

    describe: str
    count: int
    fingerprint: str
    texts: Callable[[], Iterator[str]]
    skipped: tuple[str, ...] = ()  # one line a kind of input left out (an image folder's unreadable files)


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line) of a UTF-8 file, each line read with a limit (a 1 GB line is refused
    after MAX_TEXT_CHARS characters, never read whole); NUL bytes mean a binary file."""
    with open(path, "rb") as raw:
        head = raw.read(8192)
        if b"\0" in head:
            raise ConfigError(f"{path.name} is a binary file (NUL bytes); give UTF-8 text")
        raw.seek(0)
        text = io.TextIOWrapper(raw, encoding="utf-8-sig", errors="strict", newline=None)
        number = 0
        try:
            while True:
                line = text.readline(MAX_TEXT_CHARS + 1)
                if not line:
                    return
                number += 1
                if len(line) > MAX_TEXT_CHARS and not line.endswith("\n"):
                    raise ConfigError(
                        f"{path.name}: line {number} is over {MAX_TEXT_CHARS:,} characters; "
                        "split it into texts of at most that length"
                    )
                if "\0" in line:
                    raise ConfigError(f"{path.name} is a binary file (NUL bytes); give UTF-8 text")
                yield number, line.rstrip("\r\n")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path.name} is not UTF-8 text (byte {exc.start} of line {number + 1})") from None


def _txt(path: Path) -> Iterator[str]:
    for _, line in _lines(path):
        if line.strip():
            yield line


def _jsonl(path: Path) -> Iterator[str]:
    for number, line in _lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path.name}: line {number} is not JSON ({exc.msg})") from None
        if not isinstance(record, dict) or "text" not in record:
            raise ConfigError(f'{path.name}: line {number} has no "text" field')
        if not isinstance(record["text"], str):
            raise ConfigError(f'{path.name}: line {number}: "text" is not a string')
        if record["text"].strip():
            yield record["text"]


def _csv(path: Path) -> Iterator[str]:
    csv.field_size_limit(MAX_TEXT_CHARS)
    reader = csv.reader(line + "\n" for _, line in _lines(path))
    try:
        header = next(reader, None)
        if header is None or "text" not in header:
            raise ConfigError(f'{path.name} has no "text" column (columns: {", ".join(header or []) or "none"})')
        column = header.index("text")
        for row in reader:
            if len(row) > column and row[column].strip():
                yield row[column]
    except csv.Error as exc:
        raise ConfigError(f"{path.name} is not CSV a reader accepts: {exc}") from None


def _parquet(path: Path) -> Iterator[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        file = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise ConfigError(f"{path.name} is not a Parquet file: {str(exc).splitlines()[0]}") from None
    if "text" not in file.schema_arrow.names:
        raise ConfigError(f'{path.name} has no "text" column (columns: {", ".join(file.schema_arrow.names)})')
    if not pa.types.is_string(file.schema_arrow.field("text").type) and not pa.types.is_large_string(
        file.schema_arrow.field("text").type
    ):
        raise ConfigError(f'{path.name}: column "text" is not text')
    for batch in file.iter_batches(columns=["text"], batch_size=1024):
        for value in batch.column(0).to_pylist():
            if value is None or not value.strip():
                continue
            if len(value) > MAX_TEXT_CHARS:
                raise ConfigError(f"{path.name}: a text is over {MAX_TEXT_CHARS:,} characters")
            yield value


def _folder(path: Path) -> Iterator[str]:
    for file in sorted(path.glob("*.txt")):
        if file.stat().st_size > 4 * MAX_TEXT_CHARS:
            raise ConfigError(f"{file.name} is over {MAX_TEXT_CHARS:,} characters; split it")
        text = "\n".join(line for _, line in _lines(file))
        if len(text) > MAX_TEXT_CHARS:
            raise ConfigError(f"{file.name} is over {MAX_TEXT_CHARS:,} characters; split it")
        if text.strip():
            yield text


_READERS = {".txt": _txt, ".jsonl": _jsonl, ".csv": _csv, ".parquet": _parquet}


def _file_digest(paths: Iterable[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode() + b"\0")
        with open(path, "rb") as fh:
            while chunk := fh.read(_CHUNK):
                digest.update(chunk)
    return digest.hexdigest()


def _path_source(path: Path) -> Source:
    if not path.exists():
        raise ConfigError(f"{path}: no such file or folder")
    if path.is_dir():
        files = sorted(path.glob("*.txt"))
        if not files:
            raise ConfigError(f"{path} holds no .txt files; give a folder of .txt files or a corpus file")
        texts, describe = (lambda: _folder(path)), f"{path} ({len(files)} .txt files)"
    else:
        reader = _READERS.get(path.suffix.lower())
        if reader is None:
            raise ConfigError(f"{path.name}: a corpus is a {', '.join(SUFFIXES)} file or a folder of .txt files")
        if path.stat().st_size == 0:
            raise ConfigError(f"{path.name} is empty: no texts to analyze")
        texts, describe, files = (lambda: reader(path)), str(path), [path]
    count = sum(1 for _ in texts())  # checks every text before anything is written
    if count == 0:
        raise ConfigError(f"{path.name} holds no non-empty text")
    return Source(describe, count, _file_digest(files), texts)


def _sequence_source(texts: Sequence[str]) -> Source:
    digest = hashlib.sha256()
    kept = 0
    for number, text in enumerate(texts):
        if not isinstance(text, str):
            raise ConfigError(f"text {number} is a {type(text).__name__}, not a string")
        if len(text) > MAX_TEXT_CHARS:
            raise ConfigError(f"text {number} is over {MAX_TEXT_CHARS:,} characters; split it")
        if text.strip():
            digest.update(text.encode("utf-8", "surrogatepass") + b"\0")
            kept += 1
    if kept == 0:
        raise ConfigError("the corpus holds no non-empty text")
    return Source(f"{kept} texts", kept, digest.hexdigest(), lambda: (t for t in texts if t.strip()))


def open_source(data) -> Source:
    """A checked ``Source`` from a path (str / PathLike) or a sequence of strings; an iterator
    that is not a sequence is taken into a list (it can be read only once)."""
    if isinstance(data, (str, os.PathLike)):
        return _path_source(Path(data).expanduser())
    if isinstance(data, Sequence):
        return _sequence_source(data)
    if isinstance(data, Iterable):
        return _sequence_source(list(data))
    raise ConfigError(f"a corpus is a file, a folder or a sequence of strings, not {type(data).__name__}")


__all__ = ["MAX_TEXT_CHARS", "SUFFIXES", "Source", "open_source"]
