"""``analyze_corpus``: the corpus pass, shard by shard, into a store that a rerun resumes.

Texts are cut into shards of ``shard_size`` in reading order; a shard's files appear whole (a
staged folder renamed into place) once all its texts are done, so a run killed at any point
resumes from the last finished shard when run again with the same arguments, and gives the same
store (the atlas sample is chosen by fixed priorities, not by arrival order).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from attndesk.errors import ConfigError
from attndesk.jobs import Cancel, JobContext, job_context
from attndesk.models import load_pretrained
from attndesk.models.checkpoint import read_spec, weights_hash
from attndesk.models.loader import token_embeddings
from attndesk.system.threads import AdaptiveThreads, torch_threads

from .. import __version__
from .atlas import METHODS
from .batch import PassSettings, ShardResult, run_shard
from .compact import compact, remove_shards
from .images import open_images, run_image_shard
from .ray_engine import run_ray
from .shards import Shard, finished_shards, shards, write_shard
from .sources import Source, open_source
from .store import (
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    CorpusStore,
    open_corpus,
    read_manifest,
    write_manifest,
)

ENGINES = ("local", "ray")
SHARD_SIZE = 256
ATLAS_POINTS = 1000
_OWN = frozenset(
    {
        MANIFEST,
        "shards",
        "texts.parquet",
        "per_text.parquet",
        "heads.parquet",
        "heads.csv",
        "heads.png",
        "atlas.parquet",
        "atlas_quality.parquet",
        "corpus.duckdb",
    }
)


@dataclass(frozen=True)
class CorpusProgress:
    """What a progress callback gets: texts done of ``total``, the rate of this run and the time left."""

    done: int
    total: int
    texts_per_s: float
    eta_s: float | None
    stage: str  # "analyzing", "compacting" or "done"
    unit: str = "texts"  # what is counted: "texts", or "images" for an image pass

    @property
    def fraction(self) -> float:
        return 1.0 if self.stage == "done" else self.done / max(self.total, 1)

    def line(self, eta: bool = True) -> str:
        """In words; ``eta=False`` leaves the time left to a line that shows it its own way."""
        left = "" if self.eta_s is None or not eta else f", {self.eta_s:,.0f} s left"
        return f"{self.stage}: {self.done:,}/{self.total:,} {self.unit} ({self.texts_per_s:,.1f} {self.unit}/s{left})"


def _check_arguments(max_tokens, engine, atlas_points, atlas_methods, shard_size, batch_size, workers) -> tuple:
    if engine not in ENGINES:
        raise ConfigError(f"engine {engine!r}: choose one of {', '.join(ENGINES)}")
    for name, value, least in (
        ("max_tokens", max_tokens, 2),
        ("atlas_points", atlas_points, 0),
        ("shard_size", shard_size, 1),
        ("batch_size", batch_size, 1),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ConfigError(f"{name} must be a whole number of at least {least}, not {value!r}")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ConfigError(f"workers must be a whole number of at least 1, not {workers!r}")
    methods = tuple(atlas_methods or ())
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ConfigError(f"atlas method {unknown[0]!r}: choose from {', '.join(METHODS)}")
    return methods


@dataclass(frozen=True)
class StoreKind:
    """What kind of store a pass writes: its manifest's ``format``, its DuckDB file, the files it
    owns (cleared by a restart) and its name in messages."""

    format: str
    database: str
    files: frozenset[str]
    noun: str


CORPUS = StoreKind(FORMAT, "corpus.duckdb", _OWN, "corpus run")


def check_out(out: Path, kind: StoreKind = CORPUS) -> dict | None:
    """The existing manifest (None for a new or empty folder); refuses a file or a foreign folder."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out} is a file; the store is a folder: choose another --out")
    manifest = read_manifest(out, kind.format) if out.is_dir() else None
    if manifest is None and out.is_dir():
        foreign = [p.name for p in out.iterdir() if not p.name.startswith(".")]
        if foreign:
            raise ConfigError(f"{out} holds other files ({foreign[0]}, ...); choose an empty or new --out folder")
    return manifest


def _identity(manifest: dict) -> dict:
    return {k: manifest.get(k) for k in ("format", "format_version", "attndesk", "model", "data", "arguments")}


def _refuse_mismatch(out: Path, old: dict, new: dict, noun: str = CORPUS.noun) -> None:
    for key in ("model", "data", "arguments", "attndesk", "format_version"):
        if old.get(key) != new.get(key):
            if key == "model":
                what = f"another model ({old.get('model', {}).get('name')}, weights {str(old['model'].get('sha256'))[:12]})"
            elif key == "arguments":
                changed = sorted(k for k in set(old[key]) | set(new[key]) if old[key].get(k) != new[key].get(k))
                what = f"other arguments ({', '.join(f'{k}={old[key].get(k)!r}' for k in changed)})"
            else:
                what = f"another {key} ({old.get(key)!r})" if key != "data" else "other texts"
            raise ConfigError(
                f"{out} holds a {noun} with {what}; use another --out folder, the same "
                "arguments, or resume=False (--restart) to start over"
            )


def _clear(out: Path, files: frozenset[str] = _OWN) -> None:
    for name in files:
        path = out / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


class Tracker:
    """Texts done, rate and time left, to the job's context (its progress line, and a
    ``CorpusProgress`` report): after every finished shard, and between them at most ~10 times a second."""

    def __init__(self, total: int, already: int, ctx: JobContext, unit: str = "texts"):
        self.total, self.done, self.start_done, self.unit = total, already, already, unit
        self.ctx, self.start, self.last = ctx, time.perf_counter(), 0.0

    def rate(self) -> float:
        elapsed = time.perf_counter() - self.start
        return (self.done - self.start_done) / elapsed if elapsed > 0 else 0.0

    def add(self, texts: int, stage: str = "analyzing", force: bool = False) -> None:
        self.done += texts
        now = time.perf_counter()
        if force or now - self.last >= 0.1:
            self.last = now
            rate = self.rate()
            eta = (self.total - self.done) / rate if rate > 0 else None
            report = CorpusProgress(self.done, self.total, rate, eta, stage, self.unit)
            self.ctx.progress(report.fraction, report.line())
            self.ctx.report(report)


class Thresholds:
    """The run's current atlas cut-off per side: the ``points``-th smallest priority seen so far."""

    def __init__(self, points: int):
        self.points = points
        self.best: dict[str, np.ndarray] = {}  # side -> the smallest priorities seen, sorted

    def add(self, atlas: pa.Table) -> None:
        if self.points <= 0 or atlas.num_rows == 0:
            return
        first = atlas.filter(pa.compute.and_(pa.compute.equal(atlas["layer"], 0), pa.compute.equal(atlas["head"], 0)))
        for part, kind, side in (("self", "key", "src"), ("cross", "key", "src"), ("decoder", "key", "tgt")):
            rows = first.filter(
                pa.compute.and_(pa.compute.equal(first["part"], part), pa.compute.equal(first["kind"], kind))
            )
            if rows.num_rows:
                merged = np.concatenate([self.best.get(side, np.empty(0, np.uint64)), rows["priority"].to_numpy()])
                self.best[side] = np.unique(merged)[: self.points]

    def current(self) -> dict[str, int]:
        return {side: int(v[-1]) for side, v in self.best.items() if len(v) >= self.points}


class ShardWork(Protocol):
    """What a pass does, the same on every engine: ``run`` a shard on a loaded model (the local
    engine's, or a Ray actor's from ``load``) into the tables named ``tables``, then ``finish`` the
    store from the finished shards (compaction). ``begin`` hears of the shards written before the
    local engine starts (a resumed run's) and ``written`` of each it writes. ``kind``: the store it
    writes; ``unit``: what its progress counts; ``flops(model)``: one op's work, which the local
    engine's thread count is chosen by. A Ray actor gets the work pickled, so it names its model
    (a folder, a preset) rather than holding it."""

    tables: tuple[str, ...]
    kind: StoreKind

    @property
    def unit(self) -> str: ...

    def load(self) -> Any: ...

    def run(
        self,
        model: Any,
        index: int,
        first: int,
        texts: list[str],
        *,
        ctx: JobContext | None = None,
        on_batch: Callable[[int], None] | None = None,
    ) -> Shard: ...

    def begin(self, out: Path, done: set[int]) -> None: ...

    def written(self, result: Shard) -> None: ...

    def flops(self, model: Any) -> float: ...

    def finish(self, out: Path) -> None: ...


@dataclass
class CorpusWork:
    """The corpus pass: ``run_shard`` (texts) or ``run_image_shard`` (images) a shard, ``compact``
    at the end. The local engine keeps the atlas cut-offs so far (``thresholds``, from ``begin``),
    so a shard skips points that cannot make the sample."""

    model_path: str
    device: str
    settings: PassSettings
    images: bool
    atlas_methods: tuple[str, ...]
    thresholds: Thresholds | None = None
    tables: tuple[str, ...] = ("texts", "per_text", "atlas")
    kind: StoreKind = CORPUS

    @property
    def unit(self) -> str:
        return "images" if self.images else "texts"

    def load(self):
        return _load(self.model_path, self.device, images=self.images)

    def run(self, model, index, first, texts, *, ctx=None, on_batch=None) -> ShardResult:
        run = run_image_shard if self.images else run_shard
        current = self.thresholds.current() if self.thresholds is not None else None
        return run(model, index, first, texts, self.settings, thresholds=current, ctx=ctx, on_batch=on_batch)

    def begin(self, out: Path, done: set[int]) -> None:
        self.thresholds = Thresholds(self.settings.atlas_points)
        for index in sorted(done):
            self.thresholds.add(pq.read_table(out / "shards" / f"{index:05d}" / "atlas.parquet"))

    def written(self, result: Shard) -> None:
        if self.thresholds is not None:
            self.thresholds.add(result.tables()["atlas"])

    def flops(self, model) -> float:
        return batch_work(model, self.settings)

    def finish(self, out: Path) -> None:
        points, seed = self.settings.atlas_points, self.settings.seed
        compact(out, atlas_points=points, atlas_methods=self.atlas_methods, seed=seed, images=self.images)


def run_local(
    work: ShardWork,
    model,
    source: Source,
    out: Path,
    done: set[int],
    shard_size: int,
    tracker: Tracker,
    threads: AdaptiveThreads,
) -> None:
    """Every shard not in ``done``, in this process, each written as it finishes."""
    work.begin(out, done)
    for index, first, texts in shards(source, shard_size, done):
        with torch_threads(threads.recheck()):  # chosen again for the load before each shard
            result = work.run(model, index, first, texts, ctx=tracker.ctx, on_batch=tracker.add)
        write_shard(out, result)
        work.written(result)
        tracker.add(0, force=True)  # every finished shard is reported


def run_pass(
    work: ShardWork,
    model,
    source: Source,
    out: Path,
    manifest: dict,
    *,
    resume: bool,
    engine: str,
    shard_size: int,
    workers: int | None,
    ray_address: str | None,
    ctx: JobContext,
) -> None:
    """A pass into store ``out``: check it against ``manifest`` (a finished run of the same is
    kept as it is), run the shards not yet finished on ``engine``, then the work's ``finish``,
    mark the store complete and remove the shards."""
    if _prepare(out, manifest, resume, work.kind):
        return
    done = finished_shards(out)
    tracker = Tracker(source.count, min(source.count, len(done) * shard_size), ctx, work.unit)
    if engine == "ray":
        run_ray(work, source, out, done, shard_size, tracker, workers, ray_address)
    else:
        threads = AdaptiveThreads(work.flops(model), fixed=workers)
        run_local(work, model, source, out, done, shard_size, tracker, threads)
    ctx.check()
    tracker.add(0, "compacting", force=True)
    work.finish(out)
    write_manifest(out, manifest | {"complete": True, "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    remove_shards(out)
    tracker.add(0, "done", force=True)


def batch_work(model, settings: PassSettings) -> float:
    """FLOPs of one of a batch's typical ops: a [hidden x hidden] projection of every token (what
    the local engine's thread count is chosen by)."""

    if model.family == "vision":  # one image of the configured size at a time
        config = model.model.config
        size, patch = getattr(config, "image_size", 224), getattr(config, "patch_size", 16)
        side = (size if isinstance(size, int) else size[0]) // (patch if isinstance(patch, int) else patch[0])
        hidden = model.spec.hidden_size
        return 2.0 * (side * side + 1) * hidden * hidden
    hidden = token_embeddings(model.model).embedding_dim
    return 2.0 * settings.batch_size * settings.max_tokens * hidden * hidden


def _load(model, device: str, *, images: bool = False):
    """The loaded model (a folder is checked before any weight is read); a vision model for an
    image pass (``images``), a text model otherwise."""

    if model is not None and not hasattr(model, "tokenizer"):
        spec = read_spec(model)  # a folder that is not a model says so before any weight is read
        _check_kind(spec.family, Path(model).name, spec.family_name, images)
        model = load_pretrained(model, device=device)
    elif model is None:
        if images:
            raise ConfigError("the corpus pass over images needs a vision model: give --model a vision folder")
        model = load_pretrained(None, device=device)
    _check_kind(model.family, model.name, model.spec.family_name, images)
    if images and model.vision is not None and model.vision.windows:
        raise ConfigError(
            f"{model.name} is a {model.spec.family_name} model: it attends inside windows, so distances, class and "
            "sink shares over the whole image do not apply; the image pass needs a ViT, DeiT, DINOv2, CLIP or SigLIP"
        )
    return model


def _check_kind(family: str, name: str, family_name: str, images: bool) -> None:
    if family == "vision" and not images:
        raise ConfigError(
            f"{name} is an image model ({family_name}): the corpus pass gives it a folder of images "
            "(--images), not texts"
        )
    if family != "vision" and images:
        raise ConfigError(f"{name} is a text model ({family_name}): the corpus pass over images needs a vision model")


def open_image_source(data, model) -> Source:
    """An image pass's source: a folder of images, the sample images for None, or a ``Source``
    already opened (the CLI's, which printed its plan: each image is decoded once); texts refused."""
    if isinstance(data, Source):
        return data
    if data is not None and not isinstance(data, (str, os.PathLike)):
        name = getattr(model, "name", None) or Path(model).name
        raise ConfigError(f"{name} is an image model: the corpus pass gives it a folder of images, not texts")
    return open_images(data)


def is_vision(model) -> bool:
    """Whether ``model`` (a folder, a loaded model or None) is a vision model; a folder that is
    not a model answers False (the load that follows says what is wrong with it)."""
    if model is None:
        return False
    if hasattr(model, "family"):
        return model.family == "vision"
    try:
        return read_spec(model).family == "vision"
    except ConfigError:
        return False


def _settings(model, max_tokens: int, atlas_points: int, batch_size: int, seed: int) -> PassSettings:
    """What a shard needs: ``max_tokens`` capped at the model's positions; for a vision model no
    tokens to cut (0) and no atlas (an image pass keeps none)."""
    if model.family == "vision":
        return PassSettings(0, 0, batch_size, seed)
    limit = model.max_tokens
    return PassSettings(min(max_tokens, limit) if limit else max_tokens, atlas_points, batch_size, seed)


def _manifest(
    model, source: Source, settings: PassSettings, shard_size: int, methods: tuple[str, ...], run: dict
) -> dict:
    """What the store records. ``arguments`` must match for a resume; ``run`` (engine, workers) is
    recorded only: the engines give the same store, so a run may resume on another engine."""
    arguments = asdict(settings) | {
        "shard_size": shard_size,
        "atlas_methods": list(methods),
        "device": str(model.device),
    }
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "kind": "images" if model.family == "vision" else "texts",
        "attndesk": __version__,
        "run": run,
        "model": {
            "name": model.name,
            "path": str(Path(model.path).resolve()),
            "family": model.family,
            "sha256": weights_hash(Path(model.path)),
            "layers": dict(model.layers),
            "heads": model.num_heads,
        },
        "data": {"describe": source.describe, "texts": source.count, "sha256": source.fingerprint},
        "arguments": arguments,
        "complete": False,
    }


def _prepare(out: Path, manifest: dict, resume: bool, kind: StoreKind = CORPUS) -> bool:
    """Check ``out`` against the new run; True when it already holds this finished run."""
    old = check_out(out, kind)
    if old is not None and not resume:
        _clear(out, kind.files)
        old = None
    if old is not None:
        _refuse_mismatch(out, _identity(old), _identity(manifest), kind.noun)
        if old.get("complete") and (out / kind.database).exists():
            return True
    if not out.parent.is_dir():  # its folder is made, never the folders above it (a mistyped path)
        raise ConfigError(f"cannot write the store folder {out}: the folder {out.parent} does not exist")
    try:
        out.mkdir(exist_ok=True)
        write_manifest(out, manifest)
    except OSError as exc:
        raise ConfigError(f"cannot write the store folder {out}: {exc.strerror or exc}") from None
    return False


def analyze_corpus(
    texts,
    out,
    *,
    model=None,
    max_tokens: int = 128,
    engine: str = "local",
    workers: int | None = None,
    resume: bool = True,
    atlas_points: int = ATLAS_POINTS,
    atlas_methods=("pca",),
    shard_size: int = SHARD_SIZE,
    batch_size: int = 32,
    seed: int = 0,
    device: str = "cpu",
    ray_address: str | None = None,
    progress: Callable[[CorpusProgress], None] | None = None,
    cancel: Cancel | None = None,
    ctx: JobContext | None = None,
) -> CorpusStore:
    """Analyze every text's attention with ``model`` (a folder, a ``LoadedModel`` or None for the
    packaged all-MiniLM-L6-v2) and return the store written to ``out`` (see ``store``).

    ``texts``: a .txt/.jsonl/.csv/.parquet file, a folder of .txt files or a sequence of strings.
    ``max_tokens``: tokens a text keeps (the tokenizer's, special tokens kept; at most the model's).
    ``atlas_points``: queries and keys kept per head for the atlas (0: none), projected by
    ``atlas_methods`` ("pca", "umap"). ``engine="ray"`` runs the shards on Ray (``ray_address`` or
    RAY_ADDRESS, else a local Ray with ``workers`` CPUs). ``ctx`` (a ``JobContext``) gets the
    progress as (fraction, line) and each ``CorpusProgress`` as a report; cancelling it stops at the
    next batch (``Cancelled``), keeping finished shards. The older ``progress`` (a callback taking
    each ``CorpusProgress``) and ``cancel`` (an Event) keywords still work.
    ``resume=False`` starts over in a store of an earlier run. Bad input: ``ConfigError``, nothing written.
    A vision model reads a folder of images as ``texts`` (None: the sample images; see ``images``).
    """
    ctx = job_context(ctx, cancel=cancel, report=progress)
    methods = _check_arguments(max_tokens, engine, atlas_points, atlas_methods, shard_size, batch_size, workers)
    out = Path(out).expanduser()
    check_out(out)
    images = is_vision(model)
    source = open_image_source(texts, model) if images else open_source(texts)
    loaded = _load(model, device, images=images)
    settings, methods = _settings(loaded, max_tokens, atlas_points, batch_size, seed), () if images else methods
    manifest = _manifest(loaded, source, settings, shard_size, methods, {"engine": engine, "workers": workers})
    work = CorpusWork(str(loaded.path), str(loaded.device), settings, images, methods)
    run_pass(
        work,
        loaded,
        source,
        out,
        manifest,
        resume=resume,
        engine=engine,
        shard_size=shard_size,
        workers=workers,
        ray_address=ray_address,
        ctx=ctx,
    )
    return open_corpus(out)


__all__ = [
    "ATLAS_POINTS",
    "CORPUS",
    "ENGINES",
    "SHARD_SIZE",
    "CorpusProgress",
    "CorpusWork",
    "ShardWork",
    "StoreKind",
    "analyze_corpus",
    "check_out",
    "finished_shards",
    "run_local",
    "run_pass",
    "run_shard",
    "shards",
    "weights_hash",
    "write_shard",
]
