"""``load_pretrained`` (cached per folder) and ``run_pretrained`` (text in, every layer's attention out)."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import torch

from ..devices import resolve_device
from ..errors import Cancelled, ConfigError
from ..masks import causal_mask
from ..timing import StageTimer
from .checkpoint import BertSpec, packaged_model_dir, read_spec, read_tensors, read_tokenizer
from .encoder import BertEncoder, build_encoder
from .result import PretrainedResult, cosine

Progress = Callable[[float, str], None]
PACKAGED_NAME = "all-MiniLM-L6-v2"


@dataclass(eq=False)
class PretrainedModel:
    """A loaded checkpoint: its spec, the encoder (frozen, eval) and its tokenizer."""

    name: str
    path: Path
    spec: BertSpec
    encoder: BertEncoder
    tokenizer: object  # tokenizers.Tokenizer
    device: torch.device
    load_seconds: float
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def num_layers(self) -> int:
        return self.spec.num_layers

    @property
    def num_heads(self) -> int:
        return self.spec.num_heads

    @property
    def max_tokens(self) -> int:
        return self.spec.max_positions


_models: dict[tuple[str, str], PretrainedModel] = {}
_models_lock = threading.Lock()  # held while loading: a second caller waits and gets the cached model


def _cache_key(path: str | Path | None, device: str) -> tuple[Path, torch.device, tuple[str, str]]:
    folder = packaged_model_dir() if path is None else Path(path).expanduser()
    torch_device = resolve_device(device)
    return folder, torch_device, (str(folder.resolve()) if folder.exists() else str(folder), str(torch_device))


def is_loaded(path: str | Path | None = None, *, device: str = "cpu") -> bool:
    """Whether ``load_pretrained(path)`` would answer from the cache (no progress to show)."""
    try:
        key = _cache_key(path, device)[2]
    except ConfigError:
        return False
    with _models_lock:
        return key in _models


def load_pretrained(path: str | Path | None = None, progress: Progress | None = None, *, device: str = "cpu") -> PretrainedModel:
    """The model in folder ``path`` (None = the packaged all-MiniLM-L6-v2), loaded once per session.

    Raises ``ConfigError`` saying what is wrong with the folder (missing file, unsupported
    architecture, a tensor missing or of the wrong shape) or how to install the packaged model.
    """
    folder, torch_device, key = _cache_key(path, device)
    report = progress or (lambda fraction, message: None)
    with _models_lock:
        cached = _models.get(key)
        if cached is not None:
            report(1.0, f"{cached.name} (cached)")
            return cached
        start = time.perf_counter()
        report(0.0, "reading config.json")
        spec = read_spec(folder)
        report(0.1, f"reading {spec.num_layers}-layer weights")
        tensors = read_tensors(folder, spec)
        report(0.7, "building the encoder")
        encoder = build_encoder(spec, tensors, torch_device)
        report(0.9, "reading the tokenizer")
        tokenizer = read_tokenizer(folder)
        name = PACKAGED_NAME if path is None or _is_packaged(folder) else folder.name
        model = PretrainedModel(name, folder, spec, encoder, tokenizer, torch_device, time.perf_counter() - start)
        _models[key] = model
        report(1.0, f"loaded {name}")
        return model


def _is_packaged(folder: Path) -> bool:
    try:
        return folder.resolve() == packaged_model_dir().resolve()
    except ConfigError:
        return False


def clear_cache(path: str | Path | None = None, *, everything: bool = True) -> None:
    """Forget loaded models: all of them, or (``everything=False``) all but the packaged one, or
    just the one in folder ``path``. A "reload" action and the tests use it."""
    with _models_lock:
        if path is not None:
            folder = str(Path(path).expanduser().resolve())
            for key in [k for k in _models if k[0] == folder]:
                del _models[key]
        elif everything:
            _models.clear()
        else:
            for key in [k for k, m in _models.items() if m.name != PACKAGED_NAME]:
                del _models[key]


@dataclass
class Encoded:
    ids: list[int]
    tokens: list[str]
    special: list[bool]
    type_ids: list[int]
    total: int  # tokens before truncation

    @property
    def dropped(self) -> int:
        return self.total - len(self.ids)


def encode(model: PretrainedModel, text: str) -> Encoded:
    """WordPiece tokens with [CLS]/[SEP], cut to the model's limit (the final [SEP] is kept)."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError("type some text to attend over: the input is empty")
    enc = model.tokenizer.encode(text)
    ids, tokens = list(enc.ids), list(enc.tokens)
    special, types = [bool(s) for s in enc.special_tokens_mask], list(enc.type_ids)
    if not ids:
        raise ConfigError("type some text to attend over: no tokens found")
    total, limit = len(ids), model.max_tokens
    if total > limit:
        tail = 1 if special[-1] else 0  # keep the closing [SEP]
        cut = slice(0, limit - tail)
        ids, tokens, special, types = (seq[cut] + (seq[-1:] if tail else []) for seq in (ids, tokens, special, types))
    bad = [i for i in ids if not 0 <= i < model.spec.vocab_size]
    if bad:
        raise ConfigError(
            f"the tokenizer produced id {bad[0]}, outside the model's vocabulary of {model.spec.vocab_size}: "
            "tokenizer.json does not belong to this model"
        )
    return Encoded(ids, tokens, special, types, total)


def _ablation(model: PretrainedModel, ablate: Iterable) -> tuple[tuple[int, int], ...]:
    pairs = []
    for item in ablate or ():
        try:
            layer, head = (int(v) for v in item)
        except (TypeError, ValueError):
            raise ConfigError(f"ablate takes (layer, head) pairs, got {item!r}") from None
        if not 0 <= layer < model.num_layers or not 0 <= head < model.num_heads:
            raise ConfigError(
                f"cannot ablate layer {layer} head {head}: the model has layers 0..{model.num_layers - 1} "
                f"and heads 0..{model.num_heads - 1}"
            )
        pairs.append((layer, head))
    return tuple(sorted(set(pairs)))


def _head_masks(model: PretrainedModel, pairs: tuple[tuple[int, int], ...]) -> list[torch.Tensor | None] | None:
    if not pairs:
        return None
    masks: list[torch.Tensor | None] = [None] * model.num_layers
    for layer, head in pairs:
        if masks[layer] is None:
            masks[layer] = torch.ones(model.num_heads, device=model.device)
        masks[layer][head] = 0.0
    return masks


def _mean_pool(hidden: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """hidden [B, L, E], real [B, L] bool -> unit-length mean over real tokens [B, E]."""
    weights = real.to(hidden.dtype)[..., None]  # [B, L, 1]
    pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp_min(1e-9)
    return torch.nn.functional.normalize(pooled, dim=-1)


# The unaltered run's embedding per (model, ids): toggling a what-if does not pay for it twice.
_normal: OrderedDict[tuple, np.ndarray] = OrderedDict()
_normal_lock = threading.Lock()


def _normal_embedding(model: PretrainedModel, ids: torch.Tensor) -> np.ndarray:
    key = (id(model), tuple(ids[0].tolist()))
    with _normal_lock:
        if key in _normal:
            _normal.move_to_end(key)
            return _normal[key]
    with torch.inference_mode():
        hidden, _ = model.encoder(ids)
        emb = _mean_pool(hidden[-1], torch.ones_like(ids, dtype=torch.bool))[0].float().cpu().numpy()
    with _normal_lock:
        _normal[key] = emb
        while len(_normal) > 16:
            _normal.popitem(last=False)
    return emb


def run_pretrained(
    model: PretrainedModel,
    text: str,
    *,
    scaled: bool = True,
    causal: bool = False,
    ablate: Iterable = (),
    progress: Progress | None = None,
    should_cancel: Callable[[], bool] | None = None,
) -> PretrainedResult:
    """Run the encoder on ``text`` and collect every layer's attention.

    ``scaled=False`` drops the 1/sqrt(d_k) factor, ``causal=True`` forces a causal mask in every
    layer, ``ablate`` is (layer, head) pairs whose context is zeroed before the output
    projection. Altered runs also report the cosine to the unaltered sentence embedding.
    Raises ``ConfigError`` for empty text or bad ablation pairs, ``Cancelled`` when asked to stop.
    """
    encoded = encode(model, text)
    pairs = _ablation(model, ablate)
    n = model.num_layers
    plan = ("embed", *(f"layer {i}" for i in range(n)), "pooling")
    timer = StageTimer(model.device, plan=plan, progress=progress, should_cancel=should_cancel)
    device = model.device
    length = len(encoded.ids)
    with model._lock, torch.inference_mode():  # one forward at a time per model: the timings stay honest
        ids = torch.tensor([encoded.ids], device=device)  # [1, L]
        mask = causal_mask(length, device=device) if causal else None  # [L, L]; a single text has no padding
        hidden, weights = model.encoder(
            ids, mask, scale=None if scaled else 1.0, head_masks=_head_masks(model, pairs), timer=timer
        )
        with timer.stage("pooling"):
            embedding = _mean_pool(hidden[-1], torch.ones_like(ids, dtype=torch.bool))[0]
        weights_np = torch.stack([w[0] for w in weights]).float().cpu().numpy()  # [N, H, L, L]
        hidden_np = torch.stack([h[0] for h in hidden]).float().cpu().numpy()  # [N + 1, L, E]
        embedding_np = embedding.float().cpu().numpy()
        normal = cos = None
        altered = (not scaled) or causal or bool(pairs)
        if altered:
            timer.check_cancel()
            normal = _normal_embedding(model, ids)
            cos = cosine(embedding_np, normal)
    notices = []
    if encoded.dropped:
        notices.append(
            f"input had {encoded.total} tokens; the model takes {model.max_tokens}, "
            f"so {encoded.dropped} were dropped"
        )
    unknown = sum(1 for t in encoded.tokens if t == "[UNK]")
    if unknown:
        notices.append(f"{unknown} token(s) are not in the model's vocabulary and became [UNK]")
    spec = model.spec
    e, i, h, n_layers = spec.hidden_size, spec.intermediate_size, spec.num_heads, spec.num_layers
    # per layer: Q,K,V,out projections 4*2LE^2, scores and weighted sum 2*2L^2E, feed-forward 2*2LEI
    flops = n_layers * (8 * length * e * e + 4 * length * length * e + 4 * length * e * i)
    peak = 4 * (weights_np.size + hidden_np.size + h * length * length + length * i)
    return PretrainedResult(
        model_name=model.name,
        tokens=encoded.tokens,
        token_ids=np.asarray(encoded.ids, dtype=np.int64),
        special=np.asarray(encoded.special, dtype=np.bool_),
        weights=weights_np,
        hidden_states=hidden_np,
        embedding=embedding_np,
        timings=timer.total(),
        device=str(device),
        scaled=bool(scaled),
        causal=bool(causal),
        ablate=pairs,
        mask=None if mask is None else mask.cpu().numpy(),
        notices=notices,
        dropped_tokens=encoded.dropped,
        normal_embedding=normal,
        cosine_to_normal=cos,
        flops=int(flops),
        peak_bytes=int(peak),
    )


def sentence_embeddings(model: PretrainedModel, texts: list[str]) -> np.ndarray:
    """Unit-length sentence embeddings [N, E] of a padded batch (padding masked on the key axis)."""
    if not texts:
        return np.zeros((0, model.spec.hidden_size), dtype=np.float32)
    encoded = [encode(model, t) for t in texts]
    width = max(len(e.ids) for e in encoded)
    pad = model.spec.pad_token_id
    ids = torch.full((len(texts), width), pad, dtype=torch.long)
    real = torch.zeros((len(texts), width), dtype=torch.bool)
    for row, e in enumerate(encoded):
        ids[row, : len(e.ids)] = torch.tensor(e.ids)
        real[row, : len(e.ids)] = True
    ids, real = ids.to(model.device), real.to(model.device)
    with model._lock, torch.inference_mode():
        # [B, L] -> [B, 1, 1, L]: every query ignores padded keys (the tokenizer's attention mask).
        hidden, _ = model.encoder(ids, real[:, None, None, :])
        return _mean_pool(hidden[-1], real).float().cpu().numpy()


def pretrained_job(
    path: str | Path | None,
    text: str,
    *,
    scaled: bool = True,
    causal: bool = False,
    ablate: Iterable = (),
    progress: Progress | None = None,
    should_cancel: Callable[[], bool] | None = None,
) -> PretrainedResult:
    """What the window's worker runs: load (cached; the first time reports 0..50 %), then run."""
    first = not is_loaded(path)

    def load_progress(fraction: float, message: str) -> None:
        if progress is not None:
            progress(0.5 * fraction, f"loading model: {message}")

    def run_progress(fraction: float, message: str) -> None:
        if progress is not None:
            progress(0.5 + 0.5 * fraction if first else fraction, message)

    model = load_pretrained(path, load_progress if first else None)
    if should_cancel is not None and should_cancel():
        raise Cancelled("cancelled")
    return run_pretrained(
        model, text, scaled=scaled, causal=causal, ablate=ablate, progress=run_progress, should_cancel=should_cancel
    )
