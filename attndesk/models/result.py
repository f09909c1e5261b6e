"""The record of one real-model run: plain numpy and Python, safe to hand to any thread."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from attndesk.attention.types import AttentionMap, Intermediates, head_name
from attndesk.system.timing import TimedRun

PART_TITLES = {"self": "", "decoder": "decoder self-attention", "cross": "cross-attention"}


def peak_estimate(kept: Iterable[np.ndarray | None], scores: int, activations: int) -> int:
    """A run's peak memory, estimated: the arrays it hands back (``kept``) plus one layer's float32
    temporaries, three of ``scores`` elements (the scores, their softmax and its weights) and four
    of ``activations`` (the layer's input, queries, keys and values)."""
    return int(sum(a.nbytes for a in kept if a is not None) + 4 * (3 * scores + 4 * activations))


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two vectors (0.0 if either is all zero)."""
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b / norm) if norm > 0 else 0.0


def kl_divergence(p_log: np.ndarray, q_log: np.ndarray) -> float:
    """KL(P || Q) in nats from two log-probability vectors (terms where P is 0 contribute 0)."""
    p_log, q_log = np.asarray(p_log, np.float64), np.asarray(q_log, np.float64)
    p = np.exp(p_log)
    terms = np.where(p > 0, p * (p_log - q_log), 0.0)
    return float(max(0.0, terms.sum()))


@dataclass(frozen=True, eq=False)
class NextToken:
    """A next-token distribution: the ``k`` most probable tokens and the whole log-distribution."""

    ids: np.ndarray  # [k] int64, most probable first
    tokens: list[str]
    probs: np.ndarray  # [k] float32
    logprobs: np.ndarray  # [V] float64: log-probabilities of every vocabulary entry (KL subtracts them)

    def top(self, k: int = 5) -> list[tuple[str, float]]:
        return [(t, float(p)) for t, p in zip(self.tokens[:k], self.probs[:k])]


@dataclass
class PretrainedResult(TimedRun):
    """Everything a view needs to draw one real-model run (N layers, H query heads, L tokens).

    ``weights`` [N, H, L, L] float32: the self-attention of an encoder or decoder, or the
    encoder's of an encoder-decoder; row = query token, column = key token, layer 0 first.
    Encoder-decoders add ``decoder_weights`` [N_dec, H, T, T] and ``cross_weights``
    [N_dec, H, T, L] over ``target_tokens`` (T). ``hidden_states`` [N + 1, L, E] float32: the
    embeddings, then each (encoder) layer's output. ``special`` [L] bool marks special tokens.
    ``mask`` [L, L] bool (True = may attend): the causal mask of a decoder's global layers or a
    forced one, else None; ``masks[part][layer]`` holds every layer's own mask (sliding windows).
    ``layer_kinds`` ("global" / "local") and ``window`` are per (self) layer.
    Encoders: ``embedding`` [E] is the mean over tokens of the last hidden state, unit length;
    when the run was altered (unscaled, causal, ablated) ``cosine_to_normal`` compares it with the
    unaltered run's. Decoders and encoder-decoders: ``next_token`` after the text (or target);
    an altered run adds ``normal_next`` and ``kl_to_normal`` = KL(normal || altered). A checkpoint
    saved without its LM head has neither; ``next_token_off`` says why in one line.
    ``timings``: "embed", "layer 0" ... (or "encoder layer i" / "decoder layer i"), "pooling" or
    "next token", then "total" (seconds).
    """

    model_name: str
    tokens: list[str]
    token_ids: np.ndarray  # [L] int64
    special: np.ndarray  # [L] bool
    weights: np.ndarray  # [N, H, L, L] float32
    hidden_states: np.ndarray | None  # [N + 1, L, E] float32
    embedding: np.ndarray | None  # [E] float32, unit length (encoders)
    timings: dict[str, float]
    device: str
    scaled: bool = True
    causal: bool = False
    ablate: tuple[tuple[int, int], ...] = ()
    mask: np.ndarray | None = None
    notices: list[str] = field(default_factory=list)
    dropped_tokens: int = 0
    normal_embedding: np.ndarray | None = None
    cosine_to_normal: float | None = None
    flops: int = 0  # estimated floating-point operations of the forward pass
    peak_bytes: int = 0  # estimated memory held: every weight and hidden state, one layer's temporaries
    family: str = "encoder"
    model_type: str = "bert"
    kv_heads: int | None = None
    layer_kinds: list[str] | None = None
    window: list[int | None] | None = None
    masks: dict[str, list] = field(default_factory=dict)
    decoder_weights: np.ndarray | None = None  # [N_dec, H, T, T]
    cross_weights: np.ndarray | None = None  # [N_dec, H, T, L]
    target_tokens: list[str] | None = None
    target_ids: np.ndarray | None = None
    target_special: np.ndarray | None = None
    next_token: NextToken | None = None
    normal_next: NextToken | None = None
    kl_to_normal: float | None = None
    next_token_off: str | None = None  # why a decoder's next-token features are off (no LM head), else None
    intermediates: dict[str, Intermediates] = field(default_factory=dict)  # part -> the requested layer's stages
    intermediates_layer: int | None = None
    hidden_size: int | None = None
    raw_tokens: list[str] | None = None  # the tokenizer's own tokens; ``tokens`` is what a person reads

    # -- shape conveniences -----------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        return int(self.weights.shape[0])

    @property
    def num_heads(self) -> int:
        return int(self.weights.shape[1])

    @property
    def length(self) -> int:
        return len(self.tokens)

    @property
    def keys(self) -> list[str]:
        """Key-axis labels of the self-attention (the tokens)."""
        return self.tokens

    @property
    def altered(self) -> bool:
        return (not self.scaled) or self.causal or bool(self.ablate)

    @property
    def width(self) -> int:
        if self.hidden_size:
            return int(self.hidden_size)
        return int(self.hidden_states.shape[-1]) if self.hidden_states is not None else 0

    def is_ablated(self, layer: int, head: int) -> bool:
        return (int(layer), int(head)) in self.ablate

    def token_labels(self) -> list[str] | None:
        """What each token is, where its id does not say it (an image's patches); None: the ids do."""
        return None

    # -- views of the weights ---------------------------------------------------------------
    def part_weights(self, part: str = "self") -> np.ndarray:
        """[N, H, Lq, Lk] of one part: "self", "decoder" or "cross"."""
        got = {"self": self.weights, "decoder": self.decoder_weights, "cross": self.cross_weights}.get(part)
        if got is None:
            raise ValueError(
                f"this run has no {part!r} attention ({self.family} model): parts are {', '.join(self.parts())}"
            )
        return got

    def parts(self) -> tuple[str, ...]:
        return ("self", "decoder", "cross") if self.decoder_weights is not None else ("self",)

    def layer_weights(self, layer: int, part: str = "self") -> np.ndarray:
        """[H, Lq, Lk] for one layer."""
        weights = self.part_weights(part)
        self._check_layer(layer, len(weights))
        return weights[layer]

    def follow_token(self, query: int, head: int | None = None) -> np.ndarray:
        """Where one query token looks at every layer: [N, L] (head None = mean over heads)."""
        if not 0 <= int(query) < self.length:
            raise IndexError(f"token {query} out of range: the input has {self.length} tokens")
        rows = self.weights[:, :, int(query), :]  # [N, H, L]
        if head is None:
            return rows.mean(axis=1, dtype=np.float64).astype(np.float32)
        return rows[:, int(head), :]

    def visible_indices(self, hide_special: bool) -> np.ndarray:
        """Token positions a view shows: all, or all but the special tokens."""
        return np.flatnonzero(~self.special) if hide_special else np.arange(self.length)

    def without_special(self, layer: int) -> tuple[np.ndarray, list[str], np.ndarray]:
        """One layer's weights with special tokens removed from both axes, NOT re-normalised.

        Returns (weights [H, L', L'], tokens [L'], hidden_mass [H, L']) where hidden_mass is the
        share of each remaining row that went to the hidden keys (so rows sum to 1 - hidden_mass).
        """
        keep = self.visible_indices(True)
        full = self.layer_weights(layer)[:, keep]  # [H, L', L]
        w = full[:, :, keep]  # [H, L', L']
        hidden = full.sum(axis=-1) - w.sum(axis=-1)
        return w, [self.tokens[i] for i in keep], np.clip(hidden, 0.0, None).astype(np.float32)

    def layer_mask(self, layer: int, part: str = "self") -> np.ndarray | None:
        """[Lq, Lk] bool the layer attended under (True = may attend), None when unmasked."""
        masks = self.masks.get(part)
        if masks is None:
            return self.mask if part == "self" else None
        return masks[layer]

    def layer_kind(self, layer: int, part: str = "self") -> str:
        return self.layer_kinds[layer] if part == "self" and self.layer_kinds else "global"

    def layer_window(self, layer: int, part: str = "self") -> int | None:
        return self.window[layer] if part == "self" and self.window else None

    def _axes(self, part: str) -> tuple[list[str], list[str], np.ndarray, np.ndarray]:
        """(query labels, key labels, query special mask, key special mask) of a part."""
        if part == "self":
            return self.tokens, self.tokens, self.special, self.special
        target, t_special = self.target_tokens or [], self.target_special
        t_special = np.zeros(len(target), bool) if t_special is None else t_special
        if part == "decoder":
            return target, target, t_special, t_special
        return target, self.tokens, t_special, self.special

    def layer_map(
        self,
        layer: int,
        *,
        part: str = "self",
        hide_special: bool = False,
        hide_first: bool = False,
        renormalise: bool = False,
    ) -> AttentionMap:
        """One layer of one part as an ``AttentionMap`` to draw, export or inspect.

        ``hide_special`` drops special tokens from both axes and ``hide_first`` the first key (a
        decoder's attention sink) — rows are NOT re-normalised unless ``renormalise``; either
        way ``hidden_mass`` [H, Lq'] holds each row's share that went to the hidden keys.
        Raises ValueError when nothing would be left to show.
        """
        weights = self.layer_weights(layer, part)
        queries, keys, q_special, k_special = self._axes(part)
        q_hide = q_special.copy() if hide_special else np.zeros(len(queries), bool)
        k_hide = k_special.copy() if hide_special else np.zeros(len(keys), bool)
        if hide_first and len(keys):
            k_hide[0] = True
            if part != "cross":
                q_hide[0] = True
        q_keep, k_keep = np.flatnonzero(~q_hide), np.flatnonzero(~k_hide)
        if q_keep.size == 0 or k_keep.size == 0:
            raise ValueError("every token is hidden: nothing is left to show")
        mask = self.layer_mask(layer, part)
        hidden_mass, legend = None, "rows sum to 1 over all tokens"
        if k_hide.any() or q_hide.any():
            rows = weights[:, q_keep]  # [H, Lq', Lk]
            weights = rows[:, :, k_keep]
            hidden_mass = np.clip(rows.sum(-1) - weights.sum(-1), 0.0, None).astype(np.float32)
            mask = None if mask is None else mask[np.ix_(q_keep, k_keep)]
            legend = self._legend(keys, k_hide, hidden_mass, renormalise)
            if renormalise:
                sums = weights.sum(-1, keepdims=True)
                weights = np.divide(weights, sums, out=np.zeros_like(weights), where=sums > 0).astype(np.float32)
        notices = list(self.notices) + ([legend] if hidden_mass is not None else [])
        return AttentionMap(
            queries=[queries[i] for i in q_keep],
            keys=[keys[i] for i in k_keep],
            weights=weights,
            mask=mask,
            title=" · ".join(p for p in (self.model_name, f"layer {layer}", PART_TITLES[part]) if p),
            summary=self.summary(layer, len(q_keep), part=part),
            file_tag=self.file_tag(layer, part=part),
            kv_heads=self.kv_heads if part != "cross" else None,
            window=self.layer_window(layer, part),
            layer_kind=self.layer_kind(layer, part),
            hidden_mass=hidden_mass,
            legend=legend,
            notices=notices,
            head_labels=[head_name(layer, h) for h in range(weights.shape[0])],
        )

    @staticmethod
    def _legend(keys: list[str], hidden: np.ndarray, mass: np.ndarray, renormalise: bool) -> str:
        names = "/".join(dict.fromkeys(keys[i] for i in np.flatnonzero(hidden)))
        share = f"(mean {float(mass.mean()):.0%}, up to {float(mass.max(initial=0.0)):.0%})"
        if renormalise:
            return f"{names} hidden, rows renormalised over the shown tokens: the hidden tokens held {share}"
        return f"{names} hidden, rows NOT re-normalised: they miss the hidden tokens' share {share}"

    def summary(self, layer: int | None = None, tokens: int | None = None, *, part: str = "self") -> str:
        """One caption line: model, layer, shape, mask, what was toggled."""
        parts = [self.model_name]
        if layer is not None:
            parts.append(
                f"layer {layer} of {len(self.part_weights(part))}"
                + (f" ({PART_TITLES[part]})" if PART_TITLES[part] else "")
            )
        parts.append(f"{self.length if tokens is None else tokens} tokens")
        heads = f"{self.num_heads} heads"
        if self.kv_heads and self.kv_heads < self.num_heads:
            heads += f" sharing {self.kv_heads} K/V heads"
        parts.append(heads)
        if self.width:
            parts.append(f"width {self.width}")
        parts.append(self._mask_words(layer, part))
        parts.append("scaled" if self.scaled else "unscaled")
        ablated = [head_name(l, h) for (l, h) in self.ablate if layer is None or l == layer]
        if ablated:
            parts.append("ablated " + ",".join(ablated))
        if self.cosine_to_normal is not None:
            parts.append(f"cosine to normal {self.cosine_to_normal:.4f}")
        if self.kl_to_normal is not None:
            parts.append(f"KL to normal {self.kl_to_normal:.4f}")
        parts.append(f"{self.device} float32")
        return " \u00b7 ".join(parts)

    def _mask_words(self, layer: int | None, part: str) -> str:
        if part == "cross":
            return "no mask"
        window = self.layer_window(layer, part) if layer is not None else None
        causal = self.family not in ("encoder", "vision") or part == "decoder"
        words = "causal mask (forced)" if self.causal and not causal else "causal mask" if causal else "no mask"
        return f"{words}, window {window}" if window else words

    def file_tag(self, layer: int | None = None, *, part: str = "self") -> str:
        """A file-name stem, e.g. all-MiniLM-L6-v2_layer2_causal_unscaled_abl3."""
        stem = "".join(c if c.isalnum() or c in "-." else "-" for c in self.model_name)
        parts = [stem, "all-layers" if layer is None else f"layer{layer}"]
        parts += [] if part == "self" else [part]
        parts += (["causal"] if self.causal else []) + ([] if self.scaled else ["unscaled"])
        if self.ablate:
            parts.append(f"abl{len(self.ablate)}")
        return "_".join(parts)

    @staticmethod
    def _check_layer(layer: int, count: int) -> None:
        if not 0 <= int(layer) < count:
            raise IndexError(f"layer {layer} out of range: the model has {count} layers (0..{count - 1})")


__all__ = ["NextToken", "PretrainedResult", "cosine", "kl_divergence"]
