"""``run_pretrained``: text in, every layer's attention out (computed by attndesk's ``attend``)."""

from __future__ import annotations

import inspect
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from torch import nn

from attndesk.errors import ConfigError, NoLMHead
from attndesk.jobs import JobContext, ProgressFn, job_context
from attndesk.runs.config import default_memory_budget
from attndesk.system.free_memory import format_bytes

from .backend import Capture, ForwardClock, capturing, stage_intermediates
from .loader import LoadedModel, is_loaded, load_pretrained, token_embeddings
from .result import NextToken, PretrainedResult, cosine, kl_divergence, peak_estimate
from .token_text import id_texts, token_texts
from .vision import ImageInput, is_image_input, run_image, vision_only

TOP_K = 5


@dataclass
class Encoded:
    ids: list[int]
    tokens: list[str]
    special: list[bool]
    type_ids: list[int] | None
    total: int  # tokens before truncation
    raw: list[str] | None = None  # the tokenizer's own tokens (``tokens`` is what a person reads)

    @property
    def dropped(self) -> int:
        return self.total - len(self.ids)


def vocabulary_size(model: LoadedModel) -> int:
    return int(token_embeddings(model.model).num_embeddings)


def encode(model: LoadedModel, text: str, *, target: bool = False) -> Encoded:
    """The tokenizer's ids and tokens of ``text`` (special tokens included), cut to the model's
    positions (a closing special token is kept). ``target``: tokenized as a decoder target."""
    what = "target" if target else "input"
    if model.is_vision:
        raise vision_only(model)
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"type some text to attend over: the {what} is empty")
    tok = model.tokenizer
    enc = tok(text_target=text) if target else tok(text)
    ids = [int(i) for i in enc["input_ids"]]
    if not ids:
        raise ConfigError(f"type some text to attend over: the {what} has no tokens")
    types = enc.get("token_type_ids")
    types = None if types is None else [int(t) for t in types]
    special_ids = set(tok.all_special_ids)
    special = [i in special_ids for i in ids]
    total, limit = len(ids), model.max_tokens
    if limit is not None and total > limit:
        tail = 1 if special[-1] else 0  # keep the closing [SEP] / </s>
        ids, special = ids[: limit - tail] + ids[total - tail :], special[: limit - tail] + special[total - tail :]
        types = None if types is None else types[: limit - tail] + types[total - tail :]
    vocab = vocabulary_size(model)
    bad = [i for i in ids if not 0 <= i < vocab]
    if bad:
        raise ConfigError(
            f"the tokenizer produced id {bad[0]}, outside the model's vocabulary of {vocab}: "
            "the tokenizer files do not belong to this model"
        )
    raw = list(tok.convert_ids_to_tokens(ids))
    return Encoded(ids, token_texts(tok, raw), special, types, total, raw)


def _start_target(model: LoadedModel) -> Encoded:
    """The decoder's start token alone: what an encoder-decoder decodes from without a target."""
    start = getattr(model.model.config, "decoder_start_token_id", None)
    start = 0 if start is None else int(start)
    return Encoded([start], id_texts(model.tokenizer, [start]), [True], None, 1)


def _target(model: LoadedModel, target: str | None) -> Encoded | None:
    if model.family != "encoder-decoder":
        if target is not None:
            article = "an" if model.family[0] in "aeiou" else "a"
            raise ConfigError(
                f"{model.name} is {article} {model.family} model: a target text needs an encoder-decoder "
                "(T5, BART, Marian); leave the target empty"
            )
        return None
    return _start_target(model) if target is None else encode(model, target, target=True)


def ablation_items(model: LoadedModel, ablate: Iterable) -> tuple[tuple, ...]:
    """(layer, head) pairs of the self part, or (part, layer, head) triples, checked and sorted."""
    items = []
    for item in ablate or ():
        try:
            part, layer, head = ("self", *item) if len(item) == 2 else item
            layer, head = int(layer), int(head)
        except (TypeError, ValueError):
            raise ConfigError(f"ablate takes (layer, head) pairs or (part, layer, head), got {item!r}") from None
        count = model.layers.get(part)
        if count is None:
            raise ConfigError(f"cannot ablate a {part!r} head: {model.name} has parts {', '.join(model.layers)}")
        if not 0 <= layer < count or not 0 <= head < model.num_heads:
            raise ConfigError(
                f"cannot ablate layer {layer} head {head}: the model has layers 0..{count - 1} "
                f"and heads 0..{model.num_heads - 1}"
            )
        items.append((layer, head) if part == "self" else (part, layer, head))
    return tuple(sorted(set(items), key=lambda t: (len(t), tuple(map(str, t)))))


def ablation_heads(items: tuple[tuple, ...]) -> dict[tuple[str, int], tuple[int, ...]]:
    heads: dict[tuple[str, int], list[int]] = {}
    for item in items:
        part, layer, head = ("self", *item) if len(item) == 2 else item
        heads.setdefault((part, layer), []).append(head)
    return {key: tuple(sorted(v)) for key, v in heads.items()}


def retained_bytes(model: LoadedModel, length: int, target: int = 0) -> int:
    """float32 bytes a run hands back: every layer's weights (all parts) and the hidden states."""
    h, width = model.num_heads, model.spec.hidden_size
    total = model.layers["self"] * h * length * length + (model.spec.num_layers + 1) * length * width
    if target:
        total += model.layers["decoder"] * h * (target * target + target * length)
    return 4 * total


def _check_budget(model: LoadedModel, length: int, target: int, budget: int) -> None:
    need = retained_bytes(model, length, target)
    if need <= budget:
        return
    n, h = model.layers["self"], model.num_heads
    fits = max(1, int(math.sqrt(budget / (4 * n * h))))
    raise ConfigError(
        f"{n} layers x {h} heads x {length:,}\u00b2 tokens of attention weights take {format_bytes(need)}, over the "
        f"memory budget of {format_bytes(budget)}: shorten the text to about {fits:,} tokens or raise the budget"
    )


def _plan(model: LoadedModel) -> tuple[str, ...]:
    if model.family == "encoder-decoder":
        enc = tuple(f"encoder layer {i}" for i in range(model.layers["self"]))
        dec = tuple(f"decoder layer {i}" for i in range(model.layers["decoder"]))
        return ("embed", *enc, "decoder embed", *dec, "next token")
    layers = tuple(f"layer {i}" for i in range(model.num_layers))
    return ("embed", *layers, "pooling" if model.family == "encoder" else "next token")


@lru_cache(maxsize=64)
def forward_parameters(cls: type[nn.Module]) -> frozenset[str]:
    return frozenset(inspect.signature(cls.forward).parameters)


def _forward(model: LoadedModel, source: Encoded, target: Encoded | None):
    """One forward pass of the whole model on one sequence (and its decoder input)."""
    device = model.device
    accepts = forward_parameters(type(model.model))  # type: ignore[arg-type]  # a class is hashable; mypy reads the instances' __hash__
    kwargs: dict = {"input_ids": torch.tensor([source.ids], device=device), "output_hidden_states": True}
    if model.family == "encoder" and source.type_ids is not None and "token_type_ids" in accepts:
        # segment ids are an encoder's input (BERT); a decoder handed a BERT tokenizer would add them to its tokens
        kwargs["token_type_ids"] = torch.tensor([source.type_ids], device=device)
    if "use_cache" in accepts:
        kwargs["use_cache"] = False
    if target is not None:
        kwargs["decoder_input_ids"] = torch.tensor([target.ids], device=device)
    if model.family != "encoder" and "logits_to_keep" in accepts:
        kwargs["logits_to_keep"] = 1  # only the last position's next-token logits
    return model.model(**kwargs)


def next_token(model: LoadedModel, logits: torch.Tensor, k: int = TOP_K) -> NextToken:
    """The distribution after the last position: logits [V] -> top-k and all log-probabilities."""
    logprobs = torch.log_softmax(logits.double(), dim=-1)  # float64: KL to another run subtracts these
    top = torch.topk(logprobs, min(k, logprobs.numel()))
    ids = top.indices.cpu().numpy().astype(np.int64)
    return NextToken(
        ids=ids,
        tokens=id_texts(model.tokenizer, ids.tolist()),
        probs=top.values.exp().cpu().numpy().astype(np.float32),
        logprobs=logprobs.cpu().numpy(),
    )


def _outcome(model: LoadedModel, out) -> tuple[np.ndarray | None, NextToken | None]:
    """(sentence embedding, next-token distribution) of a forward's output, as the family has them."""
    if model.family == "encoder":
        hidden = out.last_hidden_state[0]  # [L, E]
        return torch.nn.functional.normalize(hidden.mean(dim=0), dim=-1).float().cpu().numpy(), None
    if model.headless:
        return None, None
    return None, next_token(model, out.logits[0, -1])


# The unaltered run's outcome per (model, ids, target ids): toggling a what-if does not pay twice.
# A model is keyed by its serial: an id() is handed to a new object once the old one is freed.
_normal: OrderedDict[tuple, tuple] = OrderedDict()
_normal_lock = threading.Lock()


def _normal_outcome(model: LoadedModel, source: Encoded, target: Encoded | None):
    key = (model.serial, tuple(source.ids), None if target is None else tuple(target.ids))
    with _normal_lock:
        if key in _normal:
            _normal.move_to_end(key)
            return _normal[key]
    with torch.inference_mode():
        found = _outcome(model, _forward(model, source, target))
    with _normal_lock:
        _normal[key] = found
        while len(_normal) > 16:
            _normal.popitem(last=False)
    return found


def _text_request(
    model: LoadedModel, text: str, target: str | None, layer: int | None, ablate: Iterable, scaled: bool, causal: bool
) -> _Request:
    """The run asked for: the encoded text and target, the ablations, the switches and the kept
    layer; ConfigError for a layer the model does not have (and whatever encoding refuses)."""
    request = _Request(
        source=encode(model, text),
        target=_target(model, target),
        target_given=target is not None,
        items=ablation_items(model, ablate),
        scaled=bool(scaled),
        causal=bool(causal),
        forced=bool(causal) and model.family != "decoder",
        layer=layer,
    )
    if layer is not None and not 0 <= int(layer) < model.num_layers:
        raise ConfigError(f"layer {layer} out of range: the model has layers 0..{model.num_layers - 1}")
    return request


def run_pretrained(
    model: LoadedModel,
    text: str | ImageInput,
    *,
    target: str | None = None,
    layer: int | None = None,
    ablate: Iterable = (),
    scaled: bool = True,
    causal: bool = False,
    memory_budget: int | None = None,
    progress: ProgressFn | None = None,
    should_cancel: Callable[[], bool] | None = None,
    ctx: JobContext | None = None,
) -> PretrainedResult:
    """Run the model on ``text`` (and an encoder-decoder's decoder on ``target``), every layer's
    attention computed by attndesk.

    ``layer``: also keep that layer's ``Intermediates`` (every part). ``ablate``: (layer, head)
    pairs of the self part, or (part, layer, head), whose context is zeroed. ``scaled=False``
    scores with scale 1; ``causal=True`` forces a causal mask on an encoder's self-attention.
    Altered runs compare with the unaltered one: the embedding's cosine (encoders), or the
    next-token distribution's KL divergence (decoders, encoder-decoders). Raises ConfigError
    for empty text, a target for a decoder-only model, bad ablation pairs or layer, weights over
    ``memory_budget`` bytes; ``Cancelled`` when ``ctx`` (or the older ``should_cancel``) says so.

    A vision model takes an image instead of ``text`` (a path, a PIL image or an HxWx3 uint8
    array) and returns a ``VisionResult`` (``vision.run_image``); the text-only options are refused.
    """
    ctx = job_context(ctx, progress=progress, should_cancel=should_cancel)
    if model.is_vision or not isinstance(text, str):
        return _run_vision(model, text, target, layer, ablate, scaled, causal, memory_budget, ctx)
    request = _text_request(model, text, target, layer, ablate, scaled, causal)
    source, tgt = request.source, request.target
    budget = default_memory_budget() if memory_budget is None else int(memory_budget)
    _check_budget(model, len(source.ids), len(tgt.ids) if tgt else 0, budget)
    with model._lock, torch.inference_mode():  # one forward at a time per model: the timings stay honest
        clock = ForwardClock(_plan(model), ctx)
        capture = Capture(
            sites=model.sites,
            layers=model.layers,
            ablate=ablation_heads(request.items),
            force_causal=request.forced,
            unscaled=not scaled,
            keep_layer=None if layer is None else int(layer),
            clock=clock,
        )
        with capturing(capture):
            out = _forward(model, source, tgt)
        embedding, following = _outcome(model, out)
        clock.mark("pooling" if model.family == "encoder" else "next token")
        hidden = out.encoder_hidden_states if tgt is not None else out.hidden_states
        hidden_np = torch.stack([h[0] for h in hidden]).float().cpu().numpy()  # [N + 1, L, E]
        normal = None
        if request.altered:
            clock.check_cancel()
            normal = _normal_outcome(model, source, tgt)
    result = _result(model, request, capture, clock.total(), hidden_np, embedding, following)
    _compare(result, normal)
    _estimates(result, model, capture)
    return result


def _run_vision(model, image, target, layer, ablate, scaled, causal, memory_budget, ctx) -> PretrainedResult:
    if not model.is_vision:
        raise ConfigError(f"{model.name} is a text model: it reads text, not an image")
    if isinstance(image, str) and not is_image_input(image):
        raise vision_only(model)
    asked = [
        name
        for name, given in (
            ("a target", target is not None),
            ("intermediates", layer is not None),
            ("ablation", bool(tuple(ablate or ()))),
            ("unscaled", not scaled),
            ("causal", causal),
        )
        if given
    ]
    if asked:
        raise ConfigError(f"{model.name} is a vision model: {', '.join(asked)} apply to text models only")
    return run_image(model, image, memory_budget=memory_budget, ctx=ctx)


@dataclass(frozen=True)
class _Request:
    source: Encoded
    target: Encoded | None
    target_given: bool
    items: tuple
    scaled: bool
    causal: bool
    forced: bool
    layer: int | None

    @property
    def altered(self) -> bool:
        return not self.scaled or self.forced or bool(self.items)


def _notices(model: LoadedModel, request: _Request, capture: Capture) -> list[str]:
    notices = list(model.notices)
    for what, enc in (("input", request.source), ("target", request.target)):
        if enc is not None and enc.dropped:
            notices.append(
                f"{what} had {enc.total} tokens; the model takes {model.max_tokens}, so {enc.dropped} were dropped"
            )
    unk = getattr(model.tokenizer, "unk_token", None)
    unknown = sum(1 for t in request.source.tokens if unk is not None and t == unk)
    if unknown:
        notices.append(f"{unknown} token(s) are not in the model's vocabulary and became {unk}")
    if request.target is not None and not request.target_given:
        notices.append(f"no target text: the decoder ran on its start token {request.target.tokens[0]}")
    if not request.scaled and capture.scales and all(s == 1.0 for s in capture.scales):
        notices.append(
            f"{model.name} hands its attention a scale of 1 (the scaling is folded into its weights): "
            "unscaled changes nothing"
        )
    if request.causal and model.family == "decoder":
        notices.append("a decoder is causal already: the causal toggle changes nothing")
    return notices


def _result(
    model: LoadedModel, request: _Request, capture: Capture, timings: dict, hidden_np: np.ndarray, embedding, following
) -> PretrainedResult:
    source, tgt = request.source, request.target
    windows = capture.windows.get("self") or [None] * model.num_layers
    masks = {part: list(m) for part, m in capture.masks.items()}
    first_global = next((i for i, w in enumerate(windows) if not w), 0)
    mask = (
        masks.get("self", [None] * model.num_layers)[first_global]
        if model.family == "decoder" or request.forced
        else None
    )

    def array(values, dtype) -> np.ndarray | None:
        return None if values is None else np.asarray(values, dtype=dtype)

    return PretrainedResult(
        model_name=model.name,
        tokens=source.tokens,
        raw_tokens=source.raw,
        token_ids=np.asarray(source.ids, dtype=np.int64),
        special=np.asarray(source.special, dtype=np.bool_),
        weights=capture.weights["self"],
        hidden_states=hidden_np,
        embedding=embedding,
        timings=timings,
        device=str(model.device),
        scaled=request.scaled,
        causal=request.forced,
        ablate=request.items,
        mask=mask,
        notices=_notices(model, request, capture),
        dropped_tokens=source.dropped,
        family=model.family,
        model_type=model.spec.model_type,
        kv_heads=model.kv_heads,
        layer_kinds=["local" if w else "global" for w in windows],
        window=list(windows),
        masks=masks,
        decoder_weights=capture.weights.get("decoder"),
        cross_weights=capture.weights.get("cross"),
        target_tokens=None if tgt is None else tgt.tokens,
        target_ids=array(tgt and tgt.ids, np.int64),
        target_special=array(tgt and tgt.special, np.bool_),
        next_token=following,
        intermediates={part: stage_intermediates(s) for part, s in capture.intermediates.items()},
        intermediates_layer=request.layer,
        hidden_size=model.spec.hidden_size,
        next_token_off=str(NoLMHead(model.name, "next-token bars and the ablation's KL divergence"))
        if model.headless
        else None,
    )


def _compare(result: PretrainedResult, normal) -> None:
    """An altered run against the unaltered one: the embedding's cosine, or the next-token KL."""
    if normal is None:
        return
    embedding, following = normal
    if result.embedding is not None and embedding is not None:
        result.normal_embedding, result.cosine_to_normal = embedding, cosine(result.embedding, embedding)
    if result.next_token is not None and following is not None:
        result.normal_next = following
        result.kl_to_normal = kl_divergence(following.logprobs, result.next_token.logprobs)


def _estimates(result: PretrainedResult, model: LoadedModel, capture: Capture) -> None:
    """FLOPs: 2 per weight of every matrix product per token, Q K^T and weights @ V as run, the LM
    head on the last position. Peak: what the run hands back plus one layer's temporaries."""
    length = result.length
    target = len(result.target_tokens or ())
    tokens = {"": length, "encoder": length, "decoder": target}
    linear = sum(2 * tokens.get(stack, length) * count for stack, count in model.linear_params.items())
    result.flops = int(linear + capture.flops + 2 * model.head_params)
    kept = (result.weights, result.decoder_weights, result.cross_weights, result.hidden_states)
    widest = max(length, target)
    result.peak_bytes = peak_estimate(kept, result.num_heads * widest * widest, widest * model.spec.hidden_size)


def sentence_embeddings(model: LoadedModel, texts: list[str]) -> np.ndarray:
    """Unit-length mean-pooled embeddings [N, E] of a padded batch (encoders; padding masked)."""
    if model.family != "encoder":
        raise ConfigError(f"sentence embeddings come from encoders; {model.name} is a {model.family} model")
    if not texts:
        return np.zeros((0, model.spec.hidden_size), dtype=np.float32)
    encoded = [encode(model, t) for t in texts]
    width = max(len(e.ids) for e in encoded)
    pad = model.tokenizer.pad_token_id or 0
    ids = torch.full((len(texts), width), pad, dtype=torch.long)
    real = torch.zeros((len(texts), width), dtype=torch.long)
    for row, e in enumerate(encoded):
        ids[row, : len(e.ids)] = torch.tensor(e.ids)
        real[row, : len(e.ids)] = 1
    ids, real = ids.to(model.device), real.to(model.device)
    with model._lock, torch.inference_mode():
        hidden = model.model(input_ids=ids, attention_mask=real).last_hidden_state  # [B, L, E]
        weights = real.to(hidden.dtype)[..., None]  # [B, L, 1]: padding does not count in the mean
        pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp_min(1e-9)
        return torch.nn.functional.normalize(pooled, dim=-1).float().cpu().numpy()


def pretrained_job(
    path: str | Path | None,
    text: str | ImageInput,
    *,
    target: str | None = None,
    layer: int | None = None,
    scaled: bool = True,
    causal: bool = False,
    ablate: Iterable = (),
    progress: ProgressFn | None = None,
    should_cancel: Callable[[], bool] | None = None,
    ctx: JobContext | None = None,
) -> PretrainedResult:
    """What the window's worker runs: load (cached; the first time reports 0..50 %), then run
    (``text``: a vision model's image, as ``run_pretrained`` takes it)."""
    ctx = job_context(ctx, progress=progress, should_cancel=should_cancel)
    first = not is_loaded(path)
    model = load_pretrained(path, ctx=ctx.scaled(0.0, 0.5, "loading model: ") if first else ctx.quiet())
    ctx.check()
    return run_pretrained(
        model,
        text,
        target=target,
        layer=layer,
        scaled=scaled,
        causal=causal,
        ablate=ablate,
        ctx=ctx.scaled(0.5, 1.0) if first else ctx,
    )


__all__ = [
    "Encoded",
    "ablation_heads",
    "ablation_items",
    "encode",
    "forward_parameters",
    "next_token",
    "pretrained_job",
    "retained_bytes",
    "run_pretrained",
    "sentence_embeddings",
    "vocabulary_size",
]
