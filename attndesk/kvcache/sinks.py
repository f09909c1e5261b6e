"""Attention sinks and massive activations, per layer and head, from a run's weights and residual stream.

- **First-token weight**: each head's mean weight on key 0 over the query rows after the first
  (row 0 of a causal head sees only key 0). A head is a *sink head* when it is at least
  ``SINK_THRESHOLD`` (0.3, the threshold of Gu et al. 2024, "When attention sink emerges in
  language models"); the share of sink heads is given per layer.
- **Secondary sinks**: the keys after the first that a head's later queries weigh most: for key
  j, the mean of w[i, j] over the rows i > j (the diagonal left out, so a local head does not make
  every recent key a sink), among the keys that at least a quarter of the rows see after them
  (a late key seen by one or two rows is no sink).
- **Softmax sink share**: for a model with learned sink logits or an off-by-one softmax, a row's
  weights sum to less than 1; the rest went to the sink, reported per head.
- **Massive activations** (Sun et al. 2024, "Massive activations in large language models"): the
  residual-stream entries whose magnitude is at least ``MASSIVE_MIN`` and ``MASSIVE_RATIO`` times
  the median magnitude of their layer, with their layer, token and dimension; ``peak_ratio`` is
  each layer's largest magnitude over its median, which shows how close a small model comes.

The arrays come from any run: a pretrained decoder's ``PretrainedResult`` (``weights``,
``hidden_states``) or the trainer's toy model (``toy_activations``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from attndesk.errors import ConfigError

SINK_THRESHOLD = 0.3  # mean first-token weight from which a head counts as a sink head
SECONDARY_SINKS = 3  # keys listed per head
MASSIVE_MIN = 100.0  # an entry is massive from this magnitude ...
MASSIVE_RATIO = 1000.0  # ... and this many times its layer's median magnitude
ROW_SUM_TOL = 1e-6  # rows summing to less than 1 - this gave weight to a softmax sink


@dataclass(frozen=True)
class MassiveActivation:
    layer: int  # 0 = the embeddings, l = the output of block l
    token: int
    dim: int
    value: float
    ratio: float  # |value| over the layer's median magnitude


@dataclass(eq=False)
class SinkReport:
    """Per layer (N) and head (H): see the module's docstring."""

    first_token: np.ndarray  # [N, H] float64
    secondary_keys: np.ndarray  # [N, H, k] int64: key positions, heaviest first
    secondary_weights: np.ndarray  # [N, H, k] float64: their mean weight over later rows
    softmax_sink: np.ndarray | None  # [N, H] float64: mean weight given to a softmax sink; None without one
    threshold: float
    massive: list[MassiveActivation] = field(default_factory=list)
    peak_ratio: np.ndarray | None = None  # [N + 1]: each residual layer's max |h| / median |h|

    @property
    def is_sink(self) -> np.ndarray:
        """[N, H] bool: heads whose first-token weight reaches the threshold."""
        return self.first_token >= self.threshold

    @property
    def sink_share_by_layer(self) -> np.ndarray:
        """[N]: the share of each layer's heads that are sink heads."""
        return self.is_sink.mean(axis=1)

    @property
    def massive_dims(self) -> list[int]:
        """The residual dimensions that hold a massive activation anywhere, in order."""
        return sorted({m.dim for m in self.massive})


def _as_batch(array: np.ndarray | torch.Tensor, dims: int, what: str) -> np.ndarray:
    """``array`` with ``dims`` trailing axes as float64 [B, ...] (one sequence gets B = 1)."""
    a = array.detach().cpu().numpy() if isinstance(array, torch.Tensor) else np.asarray(array)
    if a.ndim == dims:
        a = a[None]
    if a.ndim != dims + 1:
        raise ConfigError(f"{what} must have {dims} axes (or a batch axis more), got shape {list(a.shape)}")
    return a.astype(np.float64, copy=False)


def _secondary(w: np.ndarray, top: int) -> tuple[np.ndarray, np.ndarray]:
    """w [B, N, H, L, L] -> the ``top`` keys j >= 1 with the largest mean w[i, j] over rows i > j."""
    length = w.shape[-1]
    later = np.tril(np.ones((length, length)), k=-1)  # [i, j]: i > j
    rows = later.sum(axis=0)  # rows after each key
    mean = (w * later).sum(axis=(0, 3)) / np.maximum(rows, 1) / w.shape[0]  # [N, H, L]
    seen = rows >= max(1, (length - 1) // 4)
    seen[0] = False  # the first token is reported on its own
    mean = np.where(seen, mean, -np.inf)
    k = min(top, int(seen.sum()))
    order = np.argsort(-mean, axis=-1, kind="stable")[..., :k]
    return order.astype(np.int64), np.take_along_axis(mean, order, axis=-1)


def massive_activations(
    hidden_states: np.ndarray | torch.Tensor, *, minimum: float = MASSIVE_MIN, ratio: float = MASSIVE_RATIO
) -> tuple[list[MassiveActivation], np.ndarray]:
    """hidden_states [N + 1, L, E] (or [B, N + 1, L, E], the first sequence read) -> (the massive
    entries, largest magnitude first; each layer's max |h| / median |h|)."""
    h = _as_batch(hidden_states, 3, "hidden_states")[0]
    magnitude = np.abs(h)
    median = np.median(magnitude.reshape(magnitude.shape[0], -1), axis=1)  # [N + 1]
    peak = magnitude.reshape(magnitude.shape[0], -1).max(axis=1) / np.maximum(median, 1e-30)
    bound = np.maximum(minimum, ratio * median)[:, None, None]
    found = [
        MassiveActivation(int(layer), int(token), int(dim), float(h[layer, token, dim]), 0.0)
        for layer, token, dim in zip(*np.nonzero(magnitude >= bound), strict=True)
    ]
    found = [
        MassiveActivation(m.layer, m.token, m.dim, m.value, abs(m.value) / max(float(median[m.layer]), 1e-30))
        for m in found
    ]
    return sorted(found, key=lambda m: -abs(m.value)), peak


def sink_report(
    weights: np.ndarray | torch.Tensor,
    hidden_states: np.ndarray | torch.Tensor | None = None,
    *,
    threshold: float = SINK_THRESHOLD,
    top: int = SECONDARY_SINKS,
) -> SinkReport:
    """weights [N, H, L, L] (or [B, N, H, L, L], averaged over the batch): row = query, column =
    key, L >= 2; hidden_states [N + 1, L, E] for the massive activations (optional)."""
    w = _as_batch(weights, 4, "weights")
    if w.shape[-1] < 2 or w.shape[-1] != w.shape[-2]:
        raise ConfigError(f"the sink scores need square weights over at least 2 tokens, got {list(w.shape[-2:])}")
    first = w[..., 1:, 0].mean(axis=(0, 3))  # [N, H]
    row_sums = w[..., 1:, :].sum(axis=-1)  # [B, N, H, L-1]
    softmax_sink = None
    if (row_sums < 1.0 - ROW_SUM_TOL).any():
        softmax_sink = (1.0 - row_sums).mean(axis=(0, 3))
    keys, kept = _secondary(w, top)
    massive, peak = massive_activations(hidden_states) if hidden_states is not None else ([], None)
    return SinkReport(first, keys, kept, softmax_sink, float(threshold), massive, peak)


def toy_activations(
    model: torch.nn.Module,
    ids: torch.Tensor,
    head_mask: torch.Tensor | None = None,
    query_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The trainer's decoder on ``ids`` [B, L] (no length limit with RoPE, ALiBi or no positions):
    (logits [B, L, V], weights [B, N, H, L, L], residual stream [B, N + 1, L, E]: the embeddings
    with positions, then each block's output), in eval mode without gradients; ``head_mask`` and
    ``query_mask`` as ``Decoder.forward`` takes them."""
    stream: list[torch.Tensor] = []
    blocks = list(model.blocks)  # type: ignore[arg-type]
    hooks = [blocks[0].register_forward_pre_hook(lambda _m, args: stream.append(args[0].detach()))]
    hooks += [b.register_forward_hook(lambda _m, _a, out: stream.append(out[0].detach())) for b in blocks]
    model.eval()
    try:
        with torch.no_grad():
            logits, weights = model(ids, head_mask=head_mask, query_mask=query_mask)
    finally:
        for hook in hooks:
            hook.remove()
    return logits, torch.stack(weights, dim=1), torch.stack(stream, dim=1)


__all__ = [
    "MASSIVE_MIN",
    "MASSIVE_RATIO",
    "SINK_THRESHOLD",
    "MassiveActivation",
    "SinkReport",
    "massive_activations",
    "sink_report",
    "toy_activations",
]
