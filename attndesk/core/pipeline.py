"""``run_attention``: text in, every number a view needs out, one toy-model run."""

from __future__ import annotations

import threading
from collections import OrderedDict
from functools import lru_cache
from typing import Callable

import numpy as np
import torch
from einops import rearrange
from torch import nn

from .attention import MultiHeadAttention, SingleHeadAttention
from .config import AttentionConfig
from .devices import resolve_device
from .errors import ConfigError
from .masks import build_mask
from .memory import estimate_run, format_bytes
from .positional import sinusoidal_encoding
from .result import STAGES, AttentionResult
from .timing import StageTimer
from .tokenizer import PAD_ID, WordTokenizer


class ToyModel(nn.Module):
    """Embedding table plus one attention layer, initialised from the config's seed."""

    def __init__(self, config: AttentionConfig):
        super().__init__()
        self.embedding = nn.Embedding(config.vocab_size, config.embed_dim, padding_idx=PAD_ID)
        if config.num_heads == 1:
            self.attention: nn.Module = SingleHeadAttention(config.embed_dim, config.hidden_dim, bias=config.bias)
        else:
            self.attention = MultiHeadAttention(config.embed_dim, config.num_heads, config.dropout, bias=config.bias)


_MODEL_KEYS = ("embed_dim", "hidden_dim", "num_heads", "bias", "seed", "vocab_size", "dtype", "dropout")
_models: OrderedDict[tuple, ToyModel] = OrderedDict()
_models_lock = threading.Lock()


def build_model(config: AttentionConfig, device: torch.device) -> ToyModel:
    """The seeded toy model for this config, cached (a few) so live tweaks of the mask or text
    do not re-initialise the weights. The same seed always gives the same weights."""
    key = tuple(getattr(config, k) for k in _MODEL_KEYS) + (str(device),)
    with _models_lock:
        if key in _models:
            _models.move_to_end(key)
            return _models[key]
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(config.seed)
        model = ToyModel(config)
    finally:
        torch.random.set_rng_state(generator_state)
    model = model.to(device=device, dtype=config.torch_dtype).eval().requires_grad_(False)
    with _models_lock:
        _models[key] = model
        while len(_models) > 4:
            _models.popitem(last=False)
    return model


@lru_cache(maxsize=4)
def _tokenizer(vocab_size: int) -> WordTokenizer:
    return WordTokenizer(vocab_size)


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    """A float32 (or bool/int) numpy copy on the host; float32 CPU tensors are shared, not copied."""
    if t.is_floating_point() and t.dtype != torch.float32:
        t = t.float()
    return t.detach().cpu().numpy()


def run_attention(
    config: AttentionConfig,
    text: str,
    keep_intermediates: bool = False,
    *,
    key_text: str | None = None,
    progress: Callable[[float, str], None] | None = None,
    should_cancel: Callable[[], bool] | None = None,
) -> AttentionResult:
    """Tokenize ``text``, embed it (+ sinusoidal positions), run the attention layer, time each stage.

    ``key_text`` makes it cross-attention: queries from ``text``, keys and values from ``key_text``.
    ``progress(fraction, stage)`` is called after each stage; ``should_cancel()`` is polled between
    stages and raises ``Cancelled``. Raises ``ConfigError`` for bad settings or empty text, and
    for a sequence whose weights would not fit the memory budget.
    """
    config.validate()
    if not isinstance(text, str) or not text.strip():
        raise ConfigError("type some text to attend over: the input is empty")
    cross = key_text is not None
    if cross and not key_text.strip():
        raise ConfigError("type some text for the keys/values, or switch cross-attention off")
    if cross and "causal" in config.mask:
        raise ConfigError("a causal mask needs self-attention: switch cross-attention off or pick another mask")

    tokenizer = _tokenizer(config.vocab_size)
    queries = tokenizer.encode(text, config.pad_to)
    keys = tokenizer.encode(key_text, config.pad_to) if cross else queries
    if not queries.ids:
        raise ConfigError("type some text to attend over: no tokens found")
    if not keys.ids:
        raise ConfigError("the key/value text has no tokens")
    lq, lk = len(queries.ids), len(keys.ids)

    estimate = estimate_run(config, lq, lk)
    budget = config.budget_bytes
    if estimate.peak_bytes > budget:
        raise ConfigError(
            f"{config.num_heads} heads x {lq} x {lk} tokens would need {format_bytes(estimate.peak_bytes)} "
            f"({estimate.peak_bytes:,} bytes; weights alone {format_bytes(estimate.weights_bytes)}), over the "
            f"memory budget of {format_bytes(budget)}: shorten the text, use fewer heads, or raise the budget"
        )

    device = resolve_device(config.device)
    model = build_model(config, device)
    timer = StageTimer(device, plan=STAGES, progress=progress, should_cancel=should_cancel)
    keep: dict | None = {} if keep_intermediates else None
    scale = None if config.scaled else 1.0
    model.train(config.training)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)

    with torch.inference_mode(), torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(config.seed)  # dropout draws repeat for a given seed
        q_ids = torch.tensor([queries.ids], device=device)  # [1, Lq]
        k_ids = torch.tensor([keys.ids], device=device) if cross else q_ids
        with timer.stage("embed"):
            x = model.embedding(q_ids)  # [1, Lq, E]
            x_kv = model.embedding(k_ids) if cross else x
            if config.positional:
                x = x + sinusoidal_encoding(lq, config.embed_dim, dtype=x.dtype, device=device)
                x_kv = x_kv + sinusoidal_encoding(lk, config.embed_dim, dtype=x.dtype, device=device) if cross else x
        if keep is not None:
            keep["embeddings"] = x
        mask = build_mask(config.mask, q_ids, k_ids if cross else None, pad_id=PAD_ID)
        if config.num_heads == 1:
            output, weights = model.attention(x, mask, scale=scale, timer=timer, keep=keep)
            weights = rearrange(weights, "b q k -> b 1 q k")
        elif cross:
            output, weights = model.attention(x, x_kv, x_kv, mask, scale=scale, timer=timer, keep=keep)
        else:
            output, weights = model.attention(x, mask=mask, scale=scale, timer=timer, keep=keep)
        weights_np = _to_numpy(weights[0])  # [H, Lq, Lk]
        output_np = _to_numpy(output[0])  # [Lq, E]
        mask_np = None
        if mask is not None:
            mask_np = _to_numpy(torch.broadcast_to(mask, (1, 1, lq, lk))[0, 0])  # [Lq, Lk]
        intermediates = None
        if keep is not None:
            keep["output"] = output
            intermediates = {name: _to_numpy(t[0]) for name, t in keep.items()}  # drop the batch axis

    peak = estimate.peak_bytes
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device) - base
    notices = []
    unknown = sum(queries.unknown) + (sum(keys.unknown) if cross else 0)
    if unknown:
        notices.append(f"{unknown} token(s) outside the {config.vocab_size}-word vocabulary map to [UNK]")
    return AttentionResult(
        tokens=queries.tokens,
        token_ids=np.asarray(queries.ids, dtype=np.int64),
        weights=weights_np,
        output=output_np,
        timings=timer.total(),
        flops=estimate.flops,
        peak_bytes=int(peak),
        device=str(device),
        config=config,
        mask=mask_np,
        key_tokens=keys.tokens if cross else None,
        key_token_ids=np.asarray(keys.ids, dtype=np.int64) if cross else None,
        intermediates=intermediates,
        notices=notices,
        extra={"unknown": queries.unknown, "key_unknown": keys.unknown if cross else None},
    )
