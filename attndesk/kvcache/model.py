"""The two kinds of model a compressed run reads, behind one forward with per-head key masks.

``forward(ids, keep)`` runs the whole sequence once with ``keep`` [layers, kv_heads, N, N] (True =
the key is visible to that query row) AND-ed into every attention layer's mask (a K/V head's mask
serves each query head of its group) and returns the logits and, per layer, what the policies and
the error measures read: Q [H, N, d] and K [KV, N, d] as the scores use them (after any rotary
embedding), V [KV, N, d_v], the weights [H, N, N] and the context [H, N, d_v].

A pretrained decoder goes through attndesk's transformers backend (``core/pretrained/backend``):
its ``Capture.adjust`` is where the masks enter, so every family attndesk runs is covered. A trained
toy model (``attndesk.train``) runs its own blocks with the masks. Qt-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from attndesk.core.errors import ConfigError
from attndesk.core.pretrained.backend import Capture


@dataclass
class Pass:
    """One forward pass: logits [N, V] float32 and per-layer arrays (float32 numpy)."""

    logits: np.ndarray
    q: list[np.ndarray] = field(default_factory=list)  # [H, N, d]
    k: list[np.ndarray] = field(default_factory=list)  # [KV, N, d]
    v: list[np.ndarray] = field(default_factory=list)  # [KV, N, d_v]
    weights: list[np.ndarray] = field(default_factory=list)  # [H, N, N]
    context: list[np.ndarray] = field(default_factory=list)  # [H, N, d_v]


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

    def rotary(self, start: int, length: int) -> tuple[np.ndarray, np.ndarray] | None:
        """cos and sin float64 [length, d] of positions start.. in the rotate-half layout, or None for a
        model without a rotary embedding (its Q and K are what it scores)."""
        return None

    def stepper(self) -> Stepper:
        """Row by row through one compressed run (each decode step's forward pass)."""
        return Stepper(self)

    def head_masks(self, keep: np.ndarray) -> torch.Tensor:
        """[layers, KV, Lq, Lk] -> [layers, 1, H, Lq, Lk] bool: each query head reads its K/V head's mask."""
        return torch.from_numpy(np.ascontiguousarray(keep)).repeat_interleave(self.groups, dim=1).unsqueeze(1)


class Stepper:
    """Row i of a compressed run whose keep rows up to i are decided: ``row(ids, i, keep)`` ->
    (logits [V], weights [layers, H, i + 1]). This one runs the whole prefix again (the toy models);
    a pretrained decoder's feeds only the new rows through its KV cache."""

    def __init__(self, model: KVModel):
        self.model = model

    def row(self, ids: list[int], i: int, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        step = self.model.forward(ids[: i + 1], keep[:, :, : i + 1, : i + 1])
        return step.logits[i], np.stack([w[:, i, : i + 1] for w in step.weights])


class CacheStepper(Stepper):
    """The rows not yet fed go through the model with its KV cache and their keep rows as masks (the
    cache holds every key: eviction stays a mask)."""

    def __init__(self, model: PretrainedKV):
        super().__init__(model)
        self.cache = None
        self.fed = 0

    def row(self, ids: list[int], i: int, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        from attndesk.core.pretrained.backend import capturing

        model = self.model
        assert isinstance(model, PretrainedKV) and i >= self.fed, "rows are fed in order"
        loaded = model.loaded
        capture = _MaskCapture(loaded.sites, loaded.layers, model.head_masks(keep[:, :, self.fed : i + 1, : i + 1]))
        tensor = torch.tensor([ids[self.fed : i + 1]], device=loaded.device)
        with loaded._lock, torch.inference_mode(), capturing(capture):
            out = loaded.model(input_ids=tensor, past_key_values=self.cache, use_cache=True)
        self.cache, self.fed = out.past_key_values, i + 1
        weights = np.zeros((model.layers, model.heads, i + 1), np.float32)
        for layer in range(model.layers):
            last = capture.arrays["weights"][layer][:, -1]  # a sliding-window layer's covers its last keys only
            weights[layer, :, i + 1 - last.shape[-1] :] = last
        return _np(out.logits[0, -1]), weights


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
        from attndesk.core.pretrained.run import vocabulary_size

        self.loaded = loaded
        self.name = loaded.name
        self.layers, self.heads, self.kv_heads = loaded.num_layers, loaded.num_heads, loaded.kv_heads
        self.vocab = vocabulary_size(loaded)
        self.max_tokens = loaded.max_tokens
        config = loaded.model.config
        self.head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)

    def encode(self, text: str) -> list[int]:
        from attndesk.core.pretrained.run import encode

        return encode(self.loaded, text).ids

    def token_texts(self, ids: list[int]) -> list[str]:
        from attndesk.core.pretrained.token_text import id_texts

        return list(id_texts(self.loaded.tokenizer, ids))

    def stepper(self) -> Stepper:
        return CacheStepper(self)

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
        from attndesk.core.pretrained.backend import capturing

        model = self.loaded
        capture = _MaskCapture(model.sites, model.layers, self.head_masks(keep))
        with model._lock, torch.inference_mode(), capturing(capture):
            out = model.model(input_ids=torch.tensor([ids], device=model.device), use_cache=False)
        result = Pass(logits=_np(out.logits[0]))
        for name in ("q", "k", "v", "weights", "context"):
            getattr(result, name).extend(capture.arrays[name][layer] for layer in range(self.layers))
        return result


class _MaskCapture(Capture):
    """A capture that ANDs each layer's per-head keep mask into the layer's mask and keeps its arrays."""

    def __init__(self, sites, layers, masks: torch.Tensor):
        super().__init__(sites=sites, layers=layers, keep_weights=False)
        self.head_keep = masks  # [layers, 1, H, N, N]
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
        from attndesk.core.rope import rope_cos_sin

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


def kv_model(model) -> KVModel:
    """The adapter of a ``LoadedModel`` or a ``TrainRun`` (a ``KVModel`` passes through)."""
    if isinstance(model, KVModel):
        return model
    from attndesk.core.pretrained.loader import LoadedModel
    from attndesk.train.run import TrainRun

    if isinstance(model, LoadedModel):
        return PretrainedKV(model)
    if isinstance(model, TrainRun):
        return TrainedKV(model)
    raise ConfigError(
        f"a compressed run takes a pretrained decoder (load_pretrained) or a trained toy model (load_trained), "
        f"got {type(model).__name__}"
    )


__all__ = ["KVModel", "Pass", "PretrainedKV", "TrainedKV", "kv_model"]
