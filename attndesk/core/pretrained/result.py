"""The record of one pretrained-encoder run: plain numpy and Python, safe to hand to any thread."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..config import AttentionConfig
from ..result import AttentionResult


@dataclass
class PretrainedLayerView(AttentionResult):
    """One pretrained layer posing as a toy result for the current window (transitional: the
    toy ``AttentionResult`` has no ``extra`` any more; ``layer_map`` will replace this view)."""

    extra: dict[str, Any] = field(default_factory=dict)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two vectors (0.0 if either is all zero)."""
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b / norm) if norm > 0 else 0.0


@dataclass
class PretrainedResult:
    """Everything a view needs to draw one pretrained run (layers N, heads H, L tokens, width E).

    ``weights`` [N, H, L, L] float32: row = query token, column = key token, layer 0 first.
    ``hidden_states`` [N + 1, L, E] float32: the embeddings' output, then each layer's output.
    ``embedding`` [E]: mean over real tokens of the last hidden state, L2-normalised.
    ``special`` [L] bool: True for [CLS] / [SEP] / [PAD] (tokens a view may hide).
    ``mask`` [L, L] bool (True = may attend) when a causal mask was forced, else None.
    ``timings``: "embed", "layer 0" ... "layer N-1", "pooling", then "total" (seconds).
    When the run was altered (unscaled, causal or ablated heads), ``normal_embedding`` is the
    unaltered run's embedding and ``cosine_to_normal`` their cosine; otherwise both are None.
    """

    model_name: str
    tokens: list[str]
    token_ids: np.ndarray  # [L] int64
    special: np.ndarray  # [L] bool
    weights: np.ndarray  # [N, H, L, L] float32
    hidden_states: np.ndarray  # [N + 1, L, E] float32
    embedding: np.ndarray  # [E] float32, unit length
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
    peak_bytes: int = 0  # estimated activation memory held (weights of every layer, hidden states, one layer's temporaries)
    extra: dict[str, Any] = field(default_factory=dict)

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
        """Key-axis labels (self-attention: the tokens), as ``AttentionResult.keys``."""
        return self.tokens

    @property
    def total_seconds(self) -> float:
        return float(self.timings.get("total", sum(self.timings.values())))

    @property
    def altered(self) -> bool:
        return (not self.scaled) or self.causal or bool(self.ablate)

    def is_ablated(self, layer: int, head: int) -> bool:
        return (int(layer), int(head)) in self.ablate

    # -- views of the weights ---------------------------------------------------------------
    def layer_weights(self, layer: int) -> np.ndarray:
        """[H, L, L] for one layer."""
        self._check_layer(layer)
        return self.weights[layer]

    def follow_token(self, query: int, head: int | None = None) -> np.ndarray:
        """Where one query token looks at every layer: [N, L] (head None = mean over heads)."""
        if not 0 <= int(query) < self.length:
            raise IndexError(f"token {query} out of range: the input has {self.length} tokens")
        rows = self.weights[:, :, int(query), :]  # [N, H, L]
        if head is None:
            return rows.mean(axis=1, dtype=np.float64).astype(np.float32)
        return rows[:, int(head), :]

    def visible_indices(self, hide_special: bool) -> np.ndarray:
        """Token positions a view shows: all, or all but [CLS]/[SEP]/[PAD]."""
        return np.flatnonzero(~self.special) if hide_special else np.arange(self.length)

    def without_special(self, layer: int) -> tuple[np.ndarray, list[str], np.ndarray]:
        """One layer's weights with special tokens removed from both axes, NOT re-normalised.

        Returns (weights [H, L', L'], tokens [L'], hidden_mass [H, L']) where hidden_mass is the
        share of each remaining row that went to the hidden keys (so rows sum to 1 - hidden_mass).
        """
        keep = self.visible_indices(True)
        w = self.layer_weights(layer)[:, keep][:, :, keep]  # [H, L', L']
        hidden = self.layer_weights(layer)[:, keep].sum(axis=-1) - w.sum(axis=-1)  # [H, L']
        return w, [self.tokens[i] for i in keep], np.clip(hidden, 0.0, None).astype(np.float32)

    def layer_result(self, layer: int, hide_special: bool = False) -> PretrainedLayerView:
        """One layer as a toy-model style ``AttentionResult`` (for the heatmap panel and export);
        timings, FLOPs and memory are the whole run's (the timing panel shows every layer's time).

        ``hide_special`` drops [CLS]/[SEP]/[PAD] from both axes WITHOUT re-normalising the rows:
        ``extra["hidden_mass"]`` [H, L'] is what each row gave the hidden keys, and ``extra["legend"]``
        (also the last notice) says so in words for the view's legend.
        """
        self._check_layer(layer)
        keep = self.visible_indices(hide_special)
        if hide_special and keep.size == 0:
            raise ValueError("every token is special: nothing is left to show with special tokens hidden")
        weights = self.weights[layer]
        mask = self.mask
        legend = "rows sum to 1 over all tokens"
        hidden_mass = None
        if hide_special:
            weights, _, hidden_mass = self.without_special(layer)
            mask = None if mask is None else mask[np.ix_(keep, keep)]
            legend = (f"[CLS]/[SEP] hidden, rows NOT re-normalised: they miss the hidden tokens' share "
                      f"(mean {float(hidden_mass.mean()):.0%}, up to {float(hidden_mass.max(initial=0.0)):.0%})")
        n_heads, e = self.num_heads, int(self.hidden_states.shape[-1])
        config = AttentionConfig(
            embed_dim=e, hidden_dim=e, num_heads=n_heads, mask="causal" if self.causal else "none",
            scaled=self.scaled, position="sinusoidal", vocab_size=max(3, int(self.token_ids.max(initial=0)) + 1),
        )
        notices = list(self.notices) + ([legend] if hide_special else [])
        ablated = [h for (l, h) in self.ablate if l == layer]
        return PretrainedLayerView(
            tokens=[self.tokens[i] for i in keep], token_ids=self.token_ids[keep], weights=weights,
            output=self.hidden_states[layer + 1][keep], timings=dict(self.timings), flops=self.flops,
            peak_bytes=self.peak_bytes,
            device=self.device, config=config, mask=mask, notices=notices,
            extra={"pretrained": self.model_name, "layer": int(layer), "special": self.special[keep],
                   "hide_special": bool(hide_special), "hidden_mass": hidden_mass, "legend": legend,
                   "ablated_heads": ablated, "summary": self.summary(layer, len(keep)),
                   "file_tag": self.file_tag(layer)},
        )

    def summary(self, layer: int | None = None, tokens: int | None = None) -> str:
        """One caption line: model, layer, what was toggled (the toy summary's "seed"/"sinusoidal"
        do not apply here: positions are learned, weights are the checkpoint's)."""
        parts = [self.model_name]
        if layer is not None:
            parts.append(f"layer {layer} of {self.num_layers}")
        parts += [f"{self.length if tokens is None else tokens} tokens", f"{self.num_heads} heads",
                  f"d_k {int(self.hidden_states.shape[-1]) // self.num_heads}",
                  "causal mask (forced)" if self.causal else "no mask",
                  "scaled by 1/\u221ad_k" if self.scaled else "unscaled", "learned positions"]
        ablated = [f"L{l}H{h}" for (l, h) in self.ablate if layer is None or l == layer]
        if ablated:
            parts.append("ablated " + ",".join(ablated))
        if self.cosine_to_normal is not None:
            parts.append(f"cosine to normal {self.cosine_to_normal:.4f}")
        parts.append(f"{self.device} float32")
        return " \u00b7 ".join(parts)

    def file_tag(self, layer: int | None = None) -> str:
        """A file-name stem, e.g. all-MiniLM-L6-v2_layer2_causal_unscaled_abl3."""
        stem = "".join(c if c.isalnum() or c in "-." else "-" for c in self.model_name)
        parts = [stem, "all-layers" if layer is None else f"layer{layer}"]
        parts += (["causal"] if self.causal else []) + ([] if self.scaled else ["unscaled"])
        if self.ablate:
            parts.append(f"abl{len(self.ablate)}")
        return "_".join(parts)

    def _check_layer(self, layer: int) -> None:
        if not 0 <= int(layer) < self.num_layers:
            raise IndexError(f"layer {layer} out of range: the model has {self.num_layers} layers (0..{self.num_layers - 1})")
