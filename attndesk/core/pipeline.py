"""``run_attention``: text in, every number a view needs out, one toy-model run."""

from __future__ import annotations

import math
import threading
import time
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
from .blocked import ExactAttention, FullSink, MaskSpec, TeeSink, blocked_attention
from .memory import estimate_run
from .checks import text_argument
from .plan import FULL, PYRAMID, RunPlan, check_memory, plan_run
from .pyramid import PyramidBuilder
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


def _tokenize(config: AttentionConfig, text: str, key_text: str | None):
    """Validate the config and texts; return (queries, keys, cross) as the tokenizer sees them."""
    config.validate()
    if not text_argument("text", text).strip():
        raise ConfigError("type some text to attend over: the input is empty")
    cross = key_text is not None
    if cross and not text_argument("key_text", key_text).strip():
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
    return queries, keys, cross


def plan_text(config: AttentionConfig, text: str, key_text: str | None = None, *,
              half_storage: str | None = None, keep_intermediates: bool = False) -> RunPlan:
    """What ``run_attention(config, text, key_text=...)`` will do, worked out before it starts
    (tokenizing only): ``plan_text(...).describe()`` is the line the app shows first. Raises
    ConfigError when even the memory-bounded run cannot fit in free memory."""
    queries, keys, _ = _tokenize(config, text, key_text)
    plan = plan_run(config, len(queries.ids), len(keys.ids), half_storage=half_storage,
                    keep_intermediates=keep_intermediates)
    check_memory(plan, config)
    return plan


def run_attention(
    config: AttentionConfig,
    text: str,
    keep_intermediates: bool = False,
    *,
    key_text: str | None = None,
    progress: Callable[[float, str], None] | None = None,
    should_cancel: Callable[[], bool] | None = None,
    plan: RunPlan | None = None,
    half_storage: str | None = None,
) -> AttentionResult:
    """Tokenize ``text``, embed it (+ sinusoidal positions), run the attention layer, time each stage.

    ``key_text`` makes it cross-attention: queries from ``text``, keys and values from ``key_text``.
    ``progress(fraction, stage)`` is called after each stage (on the blocked paths after each head
    of each query block); ``should_cancel()`` is polled between stages (between blocks) and raises
    ``Cancelled``. Raises ``ConfigError`` for bad settings or empty text.

    What the run keeps follows ``plan`` (default: ``plan_run`` from ``config.budget_bytes``, see
    ``plan_text``): a run whose full weights fit takes the unblocked path and returns every
    weight; a larger one goes through query blocks and returns a display pyramid with exact
    values on demand (or, with ``half_storage="float16"``, every weight in float16 when that fits).
    """
    queries, keys, cross = _tokenize(config, text, key_text)
    lq, lk = len(queries.ids), len(keys.ids)

    estimate = estimate_run(config, lq, lk, keep_intermediates=keep_intermediates)
    # a plan made for other lengths, or for a full run without the intermediates' copies, is redone
    stale = plan is None or (plan.lq, plan.lk, plan.num_heads) != (lq, lk, config.num_heads)
    if stale or (keep_intermediates and plan.kind == FULL and not plan.intermediates):
        plan = plan_run(config, lq, lk, half_storage=half_storage, keep_intermediates=keep_intermediates)
    check_memory(plan, config)

    device = resolve_device(config.device)
    model = build_model(config, device)
    if plan.blocked:
        return _run_blocked(config, plan, queries, keys, cross, model, device, keep_intermediates,
                            progress=progress, should_cancel=should_cancel)
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
        plan=plan,
    )


def _run_blocked(config: AttentionConfig, plan: RunPlan, queries, keys, cross: bool, model: ToyModel,
                 device: torch.device, keep_intermediates: bool, *, progress, should_cancel) -> AttentionResult:
    """The memory-bounded run: the same model and the same numbers as the full path, but the
    weights stream through query blocks into ``plan``'s sink (a pyramid, or stored float16/32)."""
    if config.training and config.dropout > 0:
        raise ConfigError(
            "dropout in training mode needs the whole weight matrix at once, which does not fit the "
            "memory budget here: switch to eval mode, shorten the text, or raise the budget"
        )
    lq, lk, heads = plan.lq, plan.lk, config.num_heads
    timer = StageTimer(device, plan=STAGES, should_cancel=should_cancel)  # progress is per block below
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    scale = 1.0 / math.sqrt(config.head_dim) if config.scaled else 1.0
    model.train(False)
    notices = [plan.describe(eta=False)]  # after the run: its measured time, not the estimate
    if keep_intermediates:
        notices.append("memory-bounded run: the score and weight matrices are not kept as intermediates")

    def report(fraction: float, message: str) -> None:
        if progress is not None:
            progress(fraction, message)

    def block_done(block: int, blocks: int, head: int, num: int) -> None:
        done = block * num + head + 1
        report(0.05 + 0.9 * done / (blocks * num), f"block {block + 1}/{blocks}, head {head + 1}/{num}")

    with torch.inference_mode(), torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(config.seed)
        q_ids = torch.tensor([queries.ids], device=device)  # [1, Lq]
        k_ids = torch.tensor([keys.ids], device=device) if cross else q_ids
        with timer.stage("embed"):
            x = model.embedding(q_ids)  # [1, Lq, E]
            x_kv = model.embedding(k_ids) if cross else x
            if config.positional:
                x = x + sinusoidal_encoding(lq, config.embed_dim, dtype=x.dtype, device=device)
                x_kv = x_kv + sinusoidal_encoding(lk, config.embed_dim, dtype=x.dtype, device=device) if cross else x
        report(0.02, "embed")
        attention = model.attention
        with timer.stage("projections"):
            # as the full path does: one GEMM with the scale folded into Q, unless the caller wants
            # the intermediates (then Q is kept unscaled, as there)
            fused = getattr(attention, "_fused_qkv", None) if heads > 1 and not cross and not keep_intermediates else None
            if fused is not None:
                q, k, v = fused(x, scale)
                score_scale = 1.0
            else:
                split = "b l (h d) -> b h l d"
                q = rearrange(attention.q_proj(x), split, h=heads)
                k = rearrange(attention.k_proj(x_kv), split, h=heads)
                v = rearrange(attention.v_proj(x_kv), split, h=heads)
                score_scale = scale
            # [1, H, L, d] -> [H, L, d], contiguous per head for the block GEMMs
            q, k, v = (t[0].contiguous() for t in (q, k, v))
        report(0.05, "projections")
        spec = MaskSpec(
            lq, lk,
            key_valid=(k_ids[0] != PAD_ID) if "padding" in config.mask else None,
            causal="causal" in config.mask,
        )
        builder = PyramidBuilder(heads, lq, lk, plan.factor, device=device)
        stored = None if plan.kind == PYRAMID else FullSink(heads, lq, lk, np.float16 if plan.storage == "float16" else np.float32)
        sink = builder if stored is None else TeeSink(stored, builder)
        context = blocked_attention(q, k, v, spec, scale=score_scale, block_rows=plan.block_rows, sink=sink,
                                    timer=timer, progress=block_done, should_cancel=should_cancel)
        with timer.stage("merge+output projection"):
            if heads > 1:
                output = attention.out_proj(rearrange(context, "h l d -> 1 l (h d)"))  # [1, Lq, E]
            else:
                output = context  # single head [1, Lq, hidden]: the context is the output
        exact = ExactAttention(q, k, spec, scale=score_scale)
        overview_seconds = timer.seconds.pop("overview", 0.0)
        start = time.perf_counter()
        pyramid = builder.finish(exact, spec)
        if stored is None:
            weights_np = pyramid.levels[0].max[:heads]  # [H, R, C] tile maxima
            dead = pyramid.levels[0].all_masked
            mask_np = None if dead is None else ~dead  # [R, C], True = some cell may attend
        else:
            weights_np = stored.weights  # [H, Lq, Lk]
            mask_np = spec.to_numpy()
        overview_seconds += time.perf_counter() - start
        output_np = _to_numpy(output[0])  # [Lq, E]
        intermediates = None
        if keep_intermediates:
            intermediates = {"embeddings": _to_numpy(x[0]), "q": _to_numpy(q), "k": _to_numpy(k),
                             "v": _to_numpy(v), "context": _to_numpy(context), "output": output_np}
    report(1.0, "merge+output projection")

    timings = {name: timer.seconds.get(name, 0.0) for name in STAGES}
    timings["total"] = sum(timings.values()) + overview_seconds
    unknown = sum(queries.unknown) + (sum(keys.unknown) if cross else 0)
    if unknown:
        notices.append(f"{unknown} token(s) outside the {config.vocab_size}-word vocabulary map to [UNK]")
    peak = plan.peak_bytes
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device) - base
    return AttentionResult(
        tokens=queries.tokens,
        token_ids=np.asarray(queries.ids, dtype=np.int64),
        weights=weights_np,
        output=output_np,
        timings=timings,
        flops=plan.flops,
        peak_bytes=int(peak),
        device=str(device),
        config=config,
        mask=mask_np,
        key_tokens=keys.tokens if cross else None,
        key_token_ids=np.asarray(keys.ids, dtype=np.int64) if cross else None,
        intermediates=intermediates,
        notices=notices,
        extra={"unknown": queries.unknown, "key_unknown": keys.unknown if cross else None,
               "overview_seconds": overview_seconds},
        plan=plan,
        pyramid=pyramid,
        exact=exact,
    )
