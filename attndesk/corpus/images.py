"""The corpus pass over images: where they come from and one shard of them through a vision model.

An image corpus is a folder of images (``IMAGE_SUFFIXES``, not its subfolders) or, with no folder,
attndesk's sample images (``attndesk.models.images.sample_images``). Every file is decoded once
before anything runs: a file that does not decode or is not an image is skipped and named in
``Source.skipped`` (one line), a folder without a single readable image is refused. A source's
items are strings, a file's path or ``"sample:NAME"``, so the shards, the resume and the Ray
engine carry them as they carry texts.

A shard runs each image through ``run_image`` (attndesk's attention, the model's own image
processor) and reduces every layer to per-head numbers at once (``image_metrics``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from attndesk.errors import ConfigError
from attndesk.jobs import JobContext
from attndesk.models.images import SAMPLE, image_choice, sample_images
from attndesk.models.vision import IMAGE_SUFFIXES, read_image, run_image

from .batch import PassSettings, ShardResult, atlas_schema
from .image_metrics import PER_IMAGE_VALUES, layer_metrics
from .sources import Source

PER_IMAGE_SCHEMA = pa.schema(
    [
        ("text_id", pa.int64()),
        ("part", pa.string()),
        ("layer", pa.int16()),
        ("head", pa.int16()),
        ("rows", pa.int32()),
        ("distance_rows", pa.int32()),
        ("sink_token", pa.int32()),
    ]
    + [(name, pa.float32()) for name in PER_IMAGE_VALUES]
)


def _skipped_line(skipped: list[tuple[str, str]]) -> tuple[str, ...]:
    if not skipped:
        return ()
    shown = "; ".join(f"{name} ({why})" for name, why in skipped[:3])
    more = f"; and {len(skipped) - 3} more" if len(skipped) > 3 else ""
    return (f"skipped {len(skipped)} file{'s' * (len(skipped) != 1)}: {shown}{more}",)


def _folder_source(folder: Path) -> Source:
    if not folder.exists():
        raise ConfigError(f"{folder}: no such folder")
    if not folder.is_dir():
        raise ConfigError(f"{folder} is a file; give a folder of images (png, jpg)")
    kept: list[Path] = []
    skipped: list[tuple[str, str]] = []
    for path in sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")):
        if path.suffix.lower() not in IMAGE_SUFFIXES:
            skipped.append((path.name, "not an image"))
            continue
        try:
            read_image(path)
        except ConfigError as exc:
            why = str(exc).removeprefix(f"{path.name} ").replace("cannot be read as an image: ", "does not decode: ")
            skipped.append((path.name, why))
            continue
        kept.append(path)
    if not kept:
        why = f" ({_skipped_line(skipped)[0]})" if skipped else ""
        raise ConfigError(f"{folder} holds no readable image (png, jpg){why}")
    digest = hashlib.sha256()
    for path in kept:
        digest.update(path.name.encode() + b"\0")
        with open(path, "rb") as fh:
            while chunk := fh.read(2**20):
                digest.update(chunk)
    items = [str(path) for path in kept]
    return Source(
        f"{folder} ({len(kept)} images)", len(kept), digest.hexdigest(), lambda: iter(items), _skipped_line(skipped)
    )


def _sample_source() -> Source:
    samples = sample_images()
    digest = hashlib.sha256()
    for sample in samples:
        digest.update(sample.name.encode() + b"\0" + np.ascontiguousarray(sample.pixels).tobytes())
    items = [SAMPLE + sample.name for sample in samples]
    return Source(f"the sample images ({len(items)})", len(items), digest.hexdigest(), lambda: iter(items))


def open_images(folder) -> Source:
    """A checked image source: a folder's readable images (name order), or the sample images
    when ``folder`` is None or "" (see the module docstring)."""
    if folder is None or folder == "":
        return _sample_source()
    return _folder_source(Path(folder).expanduser())


def run_image_shard(
    model,
    index: int,
    first_id: int,
    items: Sequence[str],
    settings: PassSettings,
    *,
    thresholds: dict[str, int] | None = None,
    ctx: JobContext | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> ShardResult:
    """The per-image metrics of images ``first_id``.. (shard ``index``), one image at a time;
    ``ctx`` is checked before each image, ``on_batch(1)`` after it. ``thresholds`` (the text
    pass's atlas cut-off) is not used: an image pass keeps no atlas."""
    names, tokens, tables = [], [], []
    for offset, item in enumerate(items):
        if ctx is not None:
            ctx.check()
        name, image = image_choice(item)
        result = run_image(model, image)
        names.append(name)
        tokens.append(result.length)
        tables.append(_per_image_table(first_id + offset, result))
        if on_batch is not None:
            on_batch(1)
    ids = np.arange(first_id, first_id + len(items), dtype=np.int64)
    texts = pa.table(
        {
            "text_id": pa.array(ids, pa.int64()),
            "text": pa.array(names, pa.string()),
            "tokens": pa.array(tokens, pa.int32()),
            "cut": pa.array([False] * len(items), pa.bool_()),
            "source": pa.array([str(item) for item in items], pa.string()),  # a path or "sample:NAME"
        }
    )
    per_image = pa.concat_tables(tables) if tables else PER_IMAGE_SCHEMA.empty_table()
    return ShardResult(index, texts, per_image, atlas_schema(1).empty_table())


def _per_image_table(image_id: int, result) -> pa.Table:
    columns: dict[str, list] = {name: [] for name in PER_IMAGE_SCHEMA.names}
    for layer in range(result.num_layers):
        values = layer_metrics(result.weights[layer], result.tokens, result.grid)
        heads = len(values["rows"])
        columns["text_id"] += [image_id] * heads
        columns["part"] += ["self"] * heads
        columns["layer"] += [layer] * heads
        columns["head"] += list(range(heads))
        for name in ("rows", "distance_rows", "sink_token", *PER_IMAGE_VALUES):
            columns[name] += np.asarray(values[name]).tolist()
    return pa.table(columns, schema=PER_IMAGE_SCHEMA)


__all__ = ["PER_IMAGE_SCHEMA", "open_images", "run_image_shard"]
