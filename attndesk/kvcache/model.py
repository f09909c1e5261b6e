"""The two kinds of model a compressed run reads, behind one forward with per-head key masks.

``forward(ids, keep)`` runs the whole sequence once with ``keep`` [layers, kv_heads, N, N] (True =
the key is visible to that query row) AND-ed into every attention layer's mask (a K/V head's mask
serves each query head of its group) and returns the logits and, per layer, what the policies and
the error measures read: Q [H, N, d] and K [KV, N, d] as the scores use them (after any rotary
embedding), V [KV, N, d_v], the weights [H, N, N] and the context [H, N, d_v].

A pretrained decoder goes through attndesk's transformers backend (``models/backend``):
its ``Capture.adjust`` is where the masks enter, so every family attndesk runs is covered. A trained
toy model (``attndesk.train``) runs its own blocks with the masks. Qt-free.

``extend(ids, keep, resume)`` computes only the rows after a ``Resume`` (the keys and values of the
rows before it, from a causal pass: ``cache_after``): a compressed run's rows up to its first pruned
row are the full run's, and a decode step reads the cache instead of running its prefix again. A
model whose cache cannot be cut at a row (a sliding-window or ALiBi toy, a hybrid cache) gives no
``Resume`` and every row goes through ``forward``.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from einops import rearrange

from attndesk.attention.kernel import attend
from attndesk.attention.rope import apply_rope, rope_cos_sin
from attndesk.attention.scoring import Scoring
from attndesk.errors import ConfigError
from attndesk.models.backend import Capture, capturing
from attndesk.models.loader import LoadedModel
from attndesk.models.run import encode, vocabulary_size
from attndesk.models.token_text import id_texts
from attndesk.train.run import TrainRun


@dataclass
class Pass:
    """One forward pass: logits [N, V] float32 and per-layer arrays (float32 numpy)."""

    logits: np.ndarray
    q: list[np.ndarray] = field(default_factory=list)  # [H, N, d]
    k: list[np.ndarray] = field(default_factory=list)  # [KV, N, d]
    v: list[np.ndarray] = field(default_factory=list)  # [KV, N, d_v]
    weights: list[np.ndarray] = field(default_factory=list)  # [H, N, N]
    context: list[np.ndarray] = field(default_factory=list)  # [H, N, d_v]
    state: Any = None  # a causal pass's own KV cache, where the model keeps one (``cache_after`` reads it)


@dataclass
class Resume:
    """The keys and values of rows 0..rows-1 (the model's own cache form): where ``extend`` goes on."""

    past: Any
    rows: int


class KVModel:
    """What a compressed run needs of a model (see the module docstring)."""

    layers: int
    heads: int
    kv_heads: int
    vocab: int
    max_tokens: int | None
    name: str
    head_dim: int

    @property
    def groups(self) -> int:
        return self.heads // self.kv_heads

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def token_texts(self, ids: list[int]) -> list[str]:
        raise NotImplementedError

    def forward(self, ids: list[int], keep: np.ndarray) -> Pass:
        raise NotImplementedError

    def causal_pass(self, ids: list[int]) -> Pass:
        """The full run over ``ids`` (every key visible to every later row), with its cache."""
        return self.forward(ids, causal_keep(self.layers, self.kv_heads, len(ids)))

    def cache_after(self, base: Pass | None, rows: int) -> Resume | None:
        """A ``Resume`` holding the keys and values of ``base``'s rows 0..rows-1 (``base`` a causal
        pass; None with rows 0: an empty cache), or None where this model cannot go on from one."""
        return None

    def extend(self, ids: list[int], keep: np.ndarray, resume: Resume, *, weights: bool = True) -> tuple[Pass, Resume]:
        """Rows ``resume.rows``..N-1 of the run over ``ids`` with ``keep`` [layers, KV, N, N] (its rows
        before ``resume.rows`` must be causal): a Pass over those rows only (logits [m, V], weights
        [H, m, N] unless ``weights`` is False, context [H, m, d_v]) and the ``Resume`` after them."""
        raise NotImplementedError

    def rotary(self, start: int, length: int) -> tuple[np.ndarray, np.ndarray] | None:
        """cos and sin float64 [length, d] of positions start.. in the rotate-half layout, or None for a
        model without a rotary embedding (its Q and K are what it scores)."""
        return None

    def stepper(self, base: Pass | None = None, start: int = 0) -> Stepper:
        """Row by row through one compressed run whose rows before ``start`` are ``base``'s (causal);
        where the cache cannot be cut there, from an empty cache (a pretrained model's sliding-window
        layers keep their own window), else each row runs its whole prefix."""
        resume = self.cache_after(base, start)
        return Stepper(self, self.cache_after(None, 0) if resume is None else resume)

    def head_masks(self, keep: np.ndarray) -> torch.Tensor:
        """[layers, KV, Lq, Lk] -> [layers, 1, H, Lq, Lk] bool: each query head reads its K/V head's mask."""
        return torch.from_numpy(np.ascontiguousarray(keep)).repeat_interleave(self.groups, dim=1).unsqueeze(1)


class Stepper:
    """Row i of a compressed run whose keep rows up to i are decided: ``row(ids, i, keep)`` ->
    (logits [V], weights [layers, H, i + 1]). With a ``Resume`` the rows not yet fed go through
    ``extend`` over the cache (rows in order); without one the whole prefix runs again."""

    def __init__(self, model: KVModel, resume: Resume | None = None):
        self.model = model
        self.resume = resume

    def row(self, ids: list[int], i: int, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.resume is None:
            step = self.model.forward(ids[: i + 1], keep[:, :, : i + 1, : i + 1])
            return step.logits[i], np.stack([w[:, i, : i + 1] for w in step.weights])
        assert i >= self.resume.rows, "rows are fed in order"
        step, self.resume = self.model.extend(ids[: i + 1], keep[:, :, : i + 1, : i + 1], self.resume)
        weights = np.zeros((self.model.layers, self.model.heads, i + 1), np.float32)
        for layer, w in enumerate(step.weights):
            last = w[:, -1]  # a sliding-window layer's covers its last keys only
            weights[layer, :, i + 1 - last.shape[-1] :] = last
        return step.logits[-1], weights


def causal_keep(layers: int, kv_heads: int, n: int) -> np.ndarray:
    """bool [layers, KV, n, n]: every key j <= i visible to row i."""
    return np.broadcast_to(np.tril(np.ones((n, n), bool)), (layers, kv_heads, n, n)).copy()


class CausalMemo(KVModel):
    """A model whose causal passes are computed once per token sequence (the last ``size``): every
    run of a sweep reads the same prefill and the same full run, so only the compressed rows are new."""

    def __init__(self, inner: KVModel, size: int = 4):
        self.inner, self.size = inner, size
        self.name, self.layers, self.heads = inner.name, inner.layers, inner.heads
        self.kv_heads, self.vocab, self.max_tokens = inner.kv_heads, inner.vocab, inner.max_tokens
        self.head_dim = inner.head_dim
        self.passes: OrderedDict[tuple[int, ...], Pass] = OrderedDict()

    def encode(self, text: str) -> list[int]:
        return self.inner.encode(text)

    def token_texts(self, ids: list[int]) -> list[str]:
        return self.inner.token_texts(ids)

    def rotary(self, start: int, length: int) -> tuple[np.ndarray, np.ndarray] | None:
        return self.inner.rotary(start, length)

    def forward(self, ids: list[int], keep: np.ndarray) -> Pass:
        return self.inner.forward(ids, keep)

    def causal_pass(self, ids: list[int]) -> Pass:
        key = tuple(ids)
        if key not in self.passes:
            self.passes[key] = self.inner.causal_pass(ids)
            while len(self.passes) > self.size:
                self.passes.popitem(last=False)
        self.passes.move_to_end(key)
        return self.passes[key]

    def cache_after(self, base: Pass | None, rows: int) -> Resume | None:
        return self.inner.cache_after(base, rows)

    def extend(self, ids: list[int], keep: np.ndarray, resume: Resume, *, weights: bool = True) -> tuple[Pass, Resume]:
        return self.inner.extend(ids, keep, resume, weights=weights)


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float32).numpy().copy()


class PretrainedKV(KVModel):
    """A decoder loaded by ``load_pretrained``."""

    def __init__(self, loaded):
        if loaded.family != "decoder":
            what = "an encoder" if loaded.family == "encoder" else "an encoder-decoder"
            raise ConfigError(
                f"{loaded.name} is {what}: it reads the whole text at once and keeps no KV cache to compress; "
                "choose a decoder (GPT-2, LLaMA, Qwen, ...)"
            )
        if loaded.headless:
            raise ConfigError(f"{loaded.name} has no LM head: a compressed run compares next-token logits")

        self.loaded = loaded
        self.name = loaded.name
        self.layers, self.heads, self.kv_heads = loaded.num_layers, loaded.num_heads, loaded.kv_heads
        self.vocab = vocabulary_size(loaded)
        self.max_tokens = loaded.max_tokens
        config = loaded.model.config
        self.head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)

    def encode(self, text: str) -> list[int]:
        return encode(self.loaded, text).ids

    def token_texts(self, ids: list[int]) -> list[str]:
        return list(id_texts(self.loaded.tokenizer, ids))

    def rotary(self, start: int, length: int) -> tuple[np.ndarray, np.ndarray] | None:
        inner = getattr(self.loaded.model, "model", None)
        embedding = getattr(inner, "rotary_emb", None)
        if embedding is None:
            return None
        positions = torch.arange(start, start + length, device=self.loaded.device)[None]
        probe = torch.zeros(1, length, 1, device=self.loaded.device)
        with torch.inference_mode():
            cos, sin = embedding(probe, positions)
        return cos[0].double().cpu().numpy(), sin[0].double().cpu().numpy()

    def forward(self, ids: list[int], keep: np.ndarray) -> Pass:
        return self._run(ids, keep, None, cache=False)

    def causal_pass(self, ids: list[int]) -> Pass:
        return self._run(ids, causal_keep(self.layers, self.kv_heads, len(ids)), None, cache=True)

    def _run(self, ids: list[int], keep: np.ndarray, resume: Resume | None, *, cache: bool, weights: bool = True):
        """Rows ``resume.rows``.. (all without a resume) through the model with their keep rows."""

        model = self.loaded
        start = 0 if resume is None else resume.rows
        capture = _MaskCapture(model.sites, model.layers, self.head_masks(keep[:, :, start:, :]), weights=weights)
        past = None if resume is None else resume.past
        with model._lock, torch.inference_mode(), capturing(capture):
            out = model.model(
                input_ids=torch.tensor([ids[start:]], device=model.device), past_key_values=past, use_cache=cache
            )
        result = Pass(logits=_np(out.logits[0]), state=out.past_key_values if cache else None)
        for name in ("q", "k", "v", "weights", "context"):
            if name != "weights" or weights:
                getattr(result, name).extend(capture.arrays[name][layer] for layer in range(self.layers))
        return result

    def cache_after(self, base: Pass | None, rows: int) -> Resume | None:
        from transformers.cache_utils import DynamicLayer

        if rows == 0:
            return Resume(None, 0)
        past = None if base is None else base.state
        layers = getattr(past, "layers", None)
        if past is None or not layers or any(type(layer) is not DynamicLayer for layer in layers):
            return None  # a sliding-window or hybrid cache does not hold every key to cut at a row
        cut = copy.copy(past)
        cut.layers = [copy.copy(layer) for layer in layers]  # crop re-slices, never writes in place
        cut.crop(rows - past.get_seq_length())
        return Resume(cut, rows)

    def extend(self, ids: list[int], keep: np.ndarray, resume: Resume, *, weights: bool = True) -> tuple[Pass, Resume]:
        step = self._run(ids, keep, resume, cache=True, weights=weights)
        return step, Resume(step.state, len(ids))


class _MaskCapture(Capture):
    """A capture that ANDs each layer's per-head keep mask into the layer's mask and keeps its arrays."""

    def __init__(self, sites, layers, masks: torch.Tensor, *, weights: bool = True):
        super().__init__(sites=sites, layers=layers, keep_weights=False)
        self.head_keep = masks  # [layers, 1, H, N, N]
        self.record_weights = weights
        n = layers["self"]
        self.arrays: dict[str, list] = {name: [None] * n for name in ("q", "k", "v", "weights", "context")}

    def adjust(self, site, mask, lq, lk, scaling):
        mask, scale = super().adjust(site, mask, lq, lk, scaling)
        if site.part == "self":  # the keep rows of exactly the query rows fed, over every key so far
            keep = self.head_keep[site.layer][..., -lk:]  # a sliding-window layer's cache holds its last lk keys
            keep = keep.to(mask.device if mask is not None else "cpu")
            mask = keep if mask is None else mask & keep
        return mask, scale

    def observe(self, site, query, key):
        self.arrays["q"][site.layer] = _np(query[0])
        self.arrays["k"][site.layer] = _np(key[0])

    def record(self, site, weights, mask, window, d):
        if self.record_weights:
            self.arrays["weights"][site.layer] = _np(weights[0])

    def attended(self, site, value, context):
        self.arrays["v"][site.layer] = _np(value[0])
        self.arrays["context"][site.layer] = _np(context[0])


class TrainedKV(KVModel):
    """A toy decoder trained by ``attndesk.train`` (a ``TrainRun``)."""

    def __init__(self, run):
        self.run = run
        cfg = run.cfg
        self.name = f"trained {cfg.task}"
        self.layers, self.heads = cfg.layers, cfg.heads
        self.kv_heads = cfg.kv_heads or cfg.heads
        self.vocab = cfg.vocab
        self.max_tokens = cfg.length
        self.head_dim = cfg.embed_dim // cfg.heads

    def encode(self, text: str) -> list[int]:
        try:
            ids = [int(part) for part in text.replace(",", " ").split()]
        except ValueError:
            raise ConfigError(
                "a trained toy model reads token ids: give the text as whole numbers separated by spaces"
            ) from None
        bad = [i for i in ids if not 0 <= i < self.vocab]
        if bad:
            raise ConfigError(f"token id {bad[0]} is outside the toy model's vocabulary 0..{self.vocab - 1}")
        return ids

    def token_texts(self, ids: list[int]) -> list[str]:
        return [str(i) for i in ids]

    def rotary(self, start: int, length: int) -> tuple[np.ndarray, np.ndarray] | None:
        if self.run.cfg.position != "rope":
            return None

        cos, sin = rope_cos_sin(length, self.run.cfg.embed_dim // self.heads, dtype=torch.float64, start=start)
        return cos.numpy(), sin.numpy()

    def forward(self, ids: list[int], keep: np.ndarray) -> Pass:
        decoder = self.run.model
        decoder.eval()
        tensor = torch.tensor([ids], dtype=torch.int64)
        n = len(ids)
        masks = self.head_masks(keep)
        result = Pass(logits=np.empty(0, np.float32))
        with torch.no_grad():
            x = decoder.embed(tensor)
            if decoder.pos is not None:
                x = x + decoder.pos.weight[:n]
            elif decoder.cfg.position == "sinusoidal":
                x = x + decoder.sinusoid[:n]
            for layer, block in enumerate(decoder.blocks):
                stages: dict = {}
                x, weights = block(x, masks[layer], stages)
                result.q.append(_np(stages["q"][0]))
                result.k.append(_np(stages["k"][0]))
                result.v.append(_np(stages["v"][0]))
                result.weights.append(_np(weights[0]))
                result.context.append(_np(stages["context"][0]))
            if decoder.ln_f is not None:
                x = decoder.ln_f(x)
            result.logits = _np(decoder.unembed(x)[0])
        return result

    def cache_after(self, base: Pass | None, rows: int) -> Resume | None:
        cfg = self.run.cfg
        if cfg.position == "alibi" or cfg.window is not None:
            return None  # their scores read query and key positions from 0 in one block
        if base is None or rows == 0:
            empty = torch.zeros(1, self.kv_heads, 0, self.head_dim)
            return Resume([(empty, empty)] * self.layers, 0)
        past = [
            (torch.from_numpy(k[None, :, :rows]), torch.from_numpy(v[None, :, :rows])) for k, v in zip(base.k, base.v)
        ]
        return Resume(past, rows)

    def extend(self, ids: list[int], keep: np.ndarray, resume: Resume, *, weights: bool = True) -> tuple[Pass, Resume]:
        """The blocks of ``forward`` for the new rows only: their Q against the cached keys and
        their own (RoPE by their positions), through the reference ``attend``."""

        decoder = self.run.model
        decoder.eval()
        start, n = resume.rows, len(ids)
        masks = self.head_masks(keep[:, :, start:n, :n])
        result = Pass(logits=np.empty(0, np.float32))
        past = []
        with torch.no_grad():
            x = decoder.embed(torch.tensor([ids[start:]], dtype=torch.int64))
            if decoder.pos is not None:
                x = x + decoder.pos.weight[start:n]
            elif decoder.cfg.position == "sinusoidal":
                x = x + decoder.sinusoid[start:n]
            for layer, block in enumerate(decoder.blocks):
                attn = block.attn
                h = x if block.ln1 is None else block.ln1(x)
                q = rearrange(attn.q_proj(h), "b l (h d) -> b h l d", h=attn.heads)
                k = rearrange(attn.k_proj(h), "b l (h d) -> b h l d", h=attn.kv_heads)
                v = rearrange(attn.v_proj(h), "b l (h d) -> b h l d", h=attn.kv_heads)
                if decoder.cfg.position == "rope":
                    cos, sin = rope_cos_sin(n - start, attn.head_dim, dtype=q.dtype, start=start)
                    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
                k = torch.cat([resume.past[layer][0], k], dim=2)
                v = torch.cat([resume.past[layer][1], v], dim=2)
                past.append((k, v))
                scoring = Scoring.of(attn.head_dim, softcap=decoder.cfg.softcap, sinks=block.sinks)
                context, w = attend(q, k, v, mask=masks[layer], scoring=scoring)
                x = x + attn.finish(context)
                if block.mlp is not None:
                    x = x + block.mlp(x if block.ln2 is None else block.ln2(x))
                result.q.append(_np(q[0]))
                result.k.append(_np(k[0]))
                result.v.append(_np(v[0]))
                if weights:
                    result.weights.append(_np(w[0]))
                result.context.append(_np(context[0]))
            if decoder.ln_f is not None:
                x = decoder.ln_f(x)
            result.logits = _np(decoder.unembed(x)[0])
        return result, Resume(past, n)


def kv_model(model) -> KVModel:
    """The adapter of a ``LoadedModel`` or a ``TrainRun`` (a ``KVModel`` passes through)."""
    if isinstance(model, KVModel):
        return model

    if isinstance(model, LoadedModel):
        return PretrainedKV(model)
    if isinstance(model, TrainRun):
        return TrainedKV(model)
    raise ConfigError(
        f"a compressed run takes a pretrained decoder (load_pretrained) or a trained toy model (load_trained), "
        f"got {type(model).__name__}"
    )


__all__ = ["CausalMemo", "KVModel", "Pass", "PretrainedKV", "Resume", "Stepper", "TrainedKV", "causal_keep", "kv_model"]
