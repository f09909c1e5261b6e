"""One shard of the corpus pass: tokenize its texts, run them through the model in padded batches
with attndesk's attention, and turn every layer's weights into per-text, per-head metrics and a
sample of query/key vectors. The same function runs in the local engine and in Ray's actors.

The attention weights never leave the layer call: ``CorpusCapture.record`` reduces each layer's
[B, H, L, L] weights to [B, H] numbers at once, so memory is one batch's forward pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import torch

from attndesk.jobs import JobContext
from attndesk.models.backend import Capture, Site, capturing
from attndesk.models.loader import LoadedModel
from attndesk.models.run import forward_parameters
from attndesk.models.token_text import id_texts

from .metrics import PER_TEXT_VALUES, batch_metrics

BATCH_SIZE = 32
SIDES = {"self": ("src", "src"), "decoder": ("tgt", "tgt"), "cross": ("tgt", "src")}  # (query side, key side)


@dataclass(frozen=True)
class PassSettings:
    """What a shard needs besides its texts (every field is recorded in the store's manifest)."""

    max_tokens: int
    atlas_points: int  # query and key vectors kept per head, each (0 = no atlas)
    batch_size: int = BATCH_SIZE
    seed: int = 0


def priorities(text_ids: np.ndarray, positions: np.ndarray, side: str, seed: int) -> np.ndarray:
    """A fixed pseudo-random uint64 per (text, position, side): the atlas keeps the smallest, so its
    sample is the same whatever the shards, engine or resume (splitmix64 of the three)."""
    with np.errstate(over="ignore"):
        x = (text_ids.astype(np.uint64) << np.uint64(24)) ^ positions.astype(np.uint64)
        x ^= np.uint64(0x9E3779B97F4A7C15 if side == "src" else 0xD1B54A32D192ED03) + np.uint64(seed)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


@dataclass
class Tokenized:
    ids: list[list[int]]
    type_ids: list[list[int]] | None
    total: list[int]  # tokens before the cut


def tokenize(model: LoadedModel, texts: Sequence[str], max_tokens: int, *, target: bool = False) -> Tokenized:
    """The tokenizer's ids (special tokens kept) cut at ``max_tokens`` the tokenizer's way."""
    tok = model.tokenizer
    call = (lambda **kw: tok(text_target=list(texts), **kw)) if target else (lambda **kw: tok(list(texts), **kw))
    full = call(truncation=False)["input_ids"]
    cut = call(truncation=True, max_length=max_tokens)
    types = cut.get("token_type_ids") if model.family == "encoder" else None
    return Tokenized([list(map(int, i)) for i in cut["input_ids"]], types, [len(i) for i in full])


def _padded(rows: Sequence[Sequence[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.bool)
    for b, r in enumerate(rows):
        ids[b, : len(r)] = torch.tensor(r, dtype=torch.long)
        mask[b, : len(r)] = True
    return ids, mask


@dataclass
class CorpusCapture(Capture):
    """A capture that reduces each layer's weights to metrics and keeps sampled Q/K vectors."""

    batch: dict = field(default_factory=dict)  # side -> (ids [B, L], mask [B, L], sampled (b, pos) or None)
    metrics: dict = field(default_factory=dict)  # (part, layer) -> list of {name: [B, H]}
    vectors: dict = field(default_factory=dict)  # (part, layer, kind) -> list of [n, H, d]

    def observe(self, site: Site, query: torch.Tensor, key: torch.Tensor) -> None:
        for kind, side, tensor in (("query", SIDES[site.part][0], query), ("key", SIDES[site.part][1], key)):
            chosen = self.batch[side][2]
            if chosen is None or not len(chosen[0]):
                continue
            picked = tensor[chosen[0].to(tensor.device), :, chosen[1].to(tensor.device), :]  # [n, heads, d]
            if kind == "key" and key.shape[1] != query.shape[1]:  # grouped K/V heads serve several query heads
                picked = picked.repeat_interleave(query.shape[1] // key.shape[1], dim=1)
            self.vectors.setdefault((site.part, site.layer, kind), []).append(picked.float().cpu().numpy())

    def record(self, site: Site, weights: torch.Tensor, mask, window, d: int) -> None:
        q_side, k_side = SIDES[site.part]
        ids, q_mask = self.batch[q_side][:2]
        k_mask = self.batch[k_side][1]
        square = ids if q_side == k_side else None
        self.metrics.setdefault((site.part, site.layer), []).append(batch_metrics(weights, q_mask, k_mask, square))


def _forward_kwargs(model: LoadedModel, src: tuple, tgt: tuple | None, types) -> dict:
    accepts = forward_parameters(type(model.model))  # type: ignore[arg-type]  # a class is hashable; mypy reads the instances' __hash__
    kwargs: dict = {"input_ids": src[0], "attention_mask": src[1].long()}
    if types is not None and "token_type_ids" in accepts:
        kwargs["token_type_ids"] = types
    if "use_cache" in accepts:
        kwargs["use_cache"] = False
    if tgt is not None:
        kwargs["decoder_input_ids"], kwargs["decoder_attention_mask"] = tgt[0], tgt[1].long()
    if model.family != "encoder" and "logits_to_keep" in accepts:
        kwargs["logits_to_keep"] = 1
    return kwargs


def decoder_inputs(model: LoadedModel, labels: list[list[int]]) -> list[list[int]]:
    """An encoder-decoder's teacher-forced decoder input: its start token, then the target's tokens
    but the last (what the model's own ``shift right`` makes of labels)."""
    start = getattr(model.model.config, "decoder_start_token_id", None)
    start = 0 if start is None else int(start)
    return [[start] + row[:-1] for row in labels]


@dataclass
class ShardResult:
    """One shard's tables: ``texts`` (one row a text), ``per_text`` (one row a text, part, layer and
    head) and ``atlas`` (the shard's sampled query/key vectors with their priority)."""

    index: int
    texts: pa.Table
    per_text: pa.Table
    atlas: pa.Table

    def tables(self) -> dict[str, pa.Table]:
        return {"texts": self.texts, "per_text": self.per_text, "atlas": self.atlas}


def _sample(
    lengths: Sequence[int], text_ids: np.ndarray, side: str, settings: PassSettings, threshold: int | None
) -> dict[int, np.ndarray]:
    """Per text index, the positions whose priority is among the shard's ``atlas_points`` smallest
    (and under ``threshold``, the run's current cut-off: a pure speed-up, the sample is the same)."""
    if settings.atlas_points <= 0:
        return {}
    owners = np.repeat(np.arange(len(lengths)), lengths)
    positions = np.concatenate([np.arange(n) for n in lengths])
    prio = priorities(text_ids[owners], positions, side, settings.seed)
    keep = np.argsort(prio, kind="stable")[: settings.atlas_points]
    if threshold is not None:
        keep = keep[prio[keep] <= np.uint64(threshold)]
    chosen: dict[int, list[int]] = {}
    for i in keep:
        chosen.setdefault(int(owners[i]), []).append(int(positions[i]))
    return {k: np.array(sorted(v)) for k, v in chosen.items()}


@dataclass
class _Side:
    ids: list[list[int]]
    sample: dict[int, np.ndarray]
    picked: list = field(default_factory=list)  # per batch: (text index array, position array)

    def batch(self, rows: list[int], pad: int) -> tuple:
        ids, mask = _padded([self.ids[r] for r in rows], pad)
        b = [i for i, r in enumerate(rows) for _ in self.sample.get(r, ())]
        pos = [p for r in rows for p in self.sample.get(r, ())]
        self.picked.append((np.array([rows[i] for i in b], dtype=np.int64), np.array(pos, dtype=np.int64)))
        return ids, mask, (torch.tensor(b, dtype=torch.long), torch.tensor(pos, dtype=torch.long))


def run_shard(
    model: LoadedModel,
    index: int,
    first_id: int,
    texts: Sequence[str],
    settings: PassSettings,
    *,
    thresholds: dict[str, int] | None = None,
    ctx: JobContext | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> ShardResult:
    """Metrics and atlas sample of texts ``first_id``.. (shard ``index``); ``on_batch(texts)`` after each
    batch; ``ctx`` is checked before each batch (raises ``Cancelled``)."""
    text_ids = np.arange(first_id, first_id + len(texts), dtype=np.int64)
    src = tokenize(model, texts, settings.max_tokens)
    sides = {
        "src": _Side(
            src.ids, _sample([len(i) for i in src.ids], text_ids, "src", settings, (thresholds or {}).get("src"))
        )
    }
    if model.family == "encoder-decoder":
        tgt = decoder_inputs(model, tokenize(model, texts, settings.max_tokens, target=True).ids)
        sides["tgt"] = _Side(
            tgt, _sample([len(i) for i in tgt], text_ids, "tgt", settings, (thresholds or {}).get("tgt"))
        )
    pad = model.tokenizer.pad_token_id if model.tokenizer.pad_token_id is not None else 0
    capture = CorpusCapture(sites=model.sites, layers=model.layers, keep_weights=False)
    order = sorted(range(len(texts)), key=lambda i: (len(src.ids[i]), i))  # similar lengths pad little
    done: list[list[int]] = []
    for start in range(0, len(order), settings.batch_size):
        if ctx is not None:
            ctx.check()
        rows = order[start : start + settings.batch_size]
        capture.batch = {name: side.batch(rows, pad) for name, side in sides.items()}
        types = None if src.type_ids is None else _padded([src.type_ids[r] for r in rows], 0)[0]
        tgt_batch = capture.batch.get("tgt")
        kwargs = _forward_kwargs(model, capture.batch["src"][:2], tgt_batch[:2] if tgt_batch else None, types)
        kwargs = {k: v.to(model.device) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        capture.batch = {
            k: tuple(t.to(model.device) if isinstance(t, torch.Tensor) else t for t in v[:2]) + (v[2],)
            for k, v in capture.batch.items()
        }
        with model._lock, torch.inference_mode(), capturing(capture):
            model.model(**kwargs)
        done.append(rows)
        if on_batch is not None:
            on_batch(len(rows))
    return ShardResult(
        index,
        _texts_table(text_ids, texts, src, settings),
        _per_text_table(capture, done, text_ids, model.num_heads),
        _atlas_table(model, capture, sides, text_ids, settings.seed),
    )


def _texts_table(text_ids: np.ndarray, texts: Sequence[str], src: Tokenized, settings: PassSettings) -> pa.Table:
    return pa.table(
        {
            "text_id": pa.array(text_ids, pa.int64()),
            "text": pa.array(list(texts), pa.string()),
            "tokens": pa.array([len(i) for i in src.ids], pa.int32()),
            "cut": pa.array([total > len(i) for total, i in zip(src.total, src.ids)], pa.bool_()),
        }
    )


PER_TEXT_SCHEMA = pa.schema(
    [
        ("text_id", pa.int64()),
        ("part", pa.string()),
        ("layer", pa.int16()),
        ("head", pa.int16()),
        ("rows", pa.int32()),
        ("previous_rows", pa.int32()),
    ]
    + [(name, pa.float32()) for name in PER_TEXT_VALUES]
)


def _per_text_table(capture: CorpusCapture, batches: list[list[int]], text_ids: np.ndarray, heads: int) -> pa.Table:
    order = np.concatenate([np.asarray(rows, dtype=np.int64) for rows in batches])
    tables = []
    for (part, layer), chunks in sorted(capture.metrics.items()):
        values = {name: np.empty((len(text_ids), heads)) for name in chunks[0]}
        for name in values:
            values[name][order] = np.concatenate([chunk[name] for chunk in chunks])
        columns = {
            "text_id": np.repeat(text_ids, heads),
            "part": [part] * (len(text_ids) * heads),
            "layer": np.full(len(text_ids) * heads, layer, dtype=np.int16),
            "head": np.tile(np.arange(heads, dtype=np.int16), len(text_ids)),
            "rows": values["rows"].reshape(-1).astype(np.int32),
            "previous_rows": values["previous_rows"].reshape(-1).astype(np.int32),
        }
        columns.update({name: values[name].reshape(-1).astype(np.float32) for name in PER_TEXT_VALUES})
        tables.append(pa.table(columns, schema=PER_TEXT_SCHEMA))
    return pa.concat_tables(tables) if tables else PER_TEXT_SCHEMA.empty_table()


def atlas_schema(width: int) -> pa.Schema:
    return pa.schema(
        [
            ("part", pa.string()),
            ("layer", pa.int16()),
            ("head", pa.int16()),
            ("kind", pa.string()),
            ("text_id", pa.int64()),
            ("position", pa.int32()),
            ("token", pa.string()),
            ("priority", pa.uint64()),
            ("vector", pa.list_(pa.float32(), width)),
        ]
    )


def _atlas_table(
    model: LoadedModel, capture: CorpusCapture, sides: dict[str, _Side], text_ids: np.ndarray, seed: int
) -> pa.Table:
    tables = []
    for (part, layer, kind), chunks in sorted(capture.vectors.items()):
        side = sides[SIDES[part][0 if kind == "query" else 1]]
        rows = np.concatenate([p[0] for p in side.picked])
        positions = np.concatenate([p[1] for p in side.picked])
        vectors = np.concatenate(chunks)  # [n, H, d]
        n, heads, width = vectors.shape
        ids = text_ids[rows]
        tokens = id_texts(model.tokenizer, [side.ids[r][p] for r, p in zip(rows, positions)])
        prio = priorities(ids, positions, SIDES[part][0 if kind == "query" else 1], seed)
        flat = pa.array(vectors.transpose(1, 0, 2).reshape(-1), pa.float32())
        tables.append(
            pa.table(
                {
                    "part": [part] * (n * heads),
                    "layer": np.full(n * heads, layer, dtype=np.int16),
                    "head": np.repeat(np.arange(heads, dtype=np.int16), n),
                    "kind": [kind] * (n * heads),
                    "text_id": np.tile(ids, heads),
                    "position": np.tile(positions.astype(np.int32), heads),
                    "token": tokens * heads,
                    "priority": np.tile(prio, heads),
                    "vector": pa.FixedSizeListArray.from_arrays(flat, width),
                },
                schema=atlas_schema(width),
            )
        )
    if not tables:
        return atlas_schema(1).empty_table()
    return pa.concat_tables(tables)


__all__ = [
    "BATCH_SIZE",
    "CorpusCapture",
    "PassSettings",
    "ShardResult",
    "atlas_schema",
    "priorities",
    "run_shard",
    "tokenize",
]
