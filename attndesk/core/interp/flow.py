"""Attention flow (Abnar & Zuidema, 2020, "Quantifying Attention Flow in Transformers"), beside
the rollout of ``attndesk.core.rollout``.

The layers' attention is a graph: node (l, j) is token j entering layer l + 1 (l = 0: the input),
and an edge from (l, j) to (l + 1, i) has capacity A_{l+1}[i, j], the same residual-augmented,
row-normalised matrix the rollout multiplies (``rollout.layer_transition``). The flow from input
token j to output token i is the maximum flow from node (0, j) to node (L, i) (scipy's
``maximum_flow``, on capacities scaled to integers: resolution ``1 / scale``, about 1e-7). Where
the rollout multiplies paths, the flow is bounded by each path's narrowest edge.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..rollout import attention_rollout, layer_transition
from .inputs import Cancel, Progress, check_cancel


@dataclass
class AttentionFlow:
    """``flow`` [len(rows), L]: row r is output token rows[r]'s flow from each input token;
    ``rollout`` [L, L] over the same layers, for comparison; ``tokens`` labels both."""

    flow: np.ndarray
    rollout: np.ndarray
    rows: list[int]
    tokens: list[str]
    layers: int
    scale: int


def _graph(transitions: list[np.ndarray], scale: int):
    """The layered graph as a CSR matrix of int32 capacities, (layers + 1) * L nodes."""
    from scipy.sparse import csr_matrix

    length = transitions[0].shape[0]
    rows, cols, caps = [], [], []
    for layer, a in enumerate(transitions):
        i, j = np.nonzero(a > 0)
        rows.append(layer * length + j)  # from token j below ...
        cols.append((layer + 1) * length + i)  # ... to token i above
        caps.append(np.rint(a[i, j] * scale).astype(np.int32))
    size = (len(transitions) + 1) * length
    return csr_matrix((np.concatenate(caps), (np.concatenate(rows), np.concatenate(cols))), shape=(size, size))


def attention_flow(
    weights_per_layer,
    *,
    rows: list[int] | None = None,
    tokens: list[str] | None = None,
    progress: Progress | None = None,
    cancel: Cancel | None = None,
) -> AttentionFlow:
    """[layers, H, L, L] self-attention weights -> the maximum flow from every input token to each
    output token in ``rows`` (default all); cost: len(rows) * L maximum-flow problems."""
    from scipy.sparse.csgraph import maximum_flow

    w = np.asarray(weights_per_layer, dtype=np.float64)
    if w.ndim != 4 or w.shape[-1] != w.shape[-2] or w.shape[0] < 1:
        raise ConfigError(f"attention flow needs self-attention weights [layers, H, L, L], got shape {w.shape}")
    length = w.shape[-1]
    rows = list(range(length)) if rows is None else [int(r) for r in rows]
    if any(not 0 <= r < length for r in rows):
        raise ConfigError(f"output rows must lie in 0..{length - 1}, got {rows}")
    transitions = [layer_transition(w[n]) for n in range(w.shape[0])]
    scale = max(1, min(2**24, (2**31 - 1) // (length + 1)))
    graph = _graph(transitions, scale)
    top = w.shape[0] * length
    flow = np.zeros((len(rows), length))
    for r, i in enumerate(rows):
        check_cancel(cancel)
        for j in range(length):
            flow[r, j] = maximum_flow(graph, j, top + i).flow_value / scale
        if progress is not None:
            progress((r + 1) / len(rows), f"attention flow: output token {r + 1} of {len(rows)}")
    labels = list(tokens) if tokens is not None else [str(t) for t in range(length)]
    return AttentionFlow(flow, attention_rollout(w), rows, labels, w.shape[0], scale)


def model_attention_flow(
    model,
    text: str,
    *,
    rows: list[int] | None = None,
    memory_budget: int | None = None,
    progress: Progress | None = None,
    cancel: Cancel | None = None,
) -> AttentionFlow:
    """Attention flow of a loaded model's self-attention (an encoder-decoder's encoder) on ``text``:
    the weights come from ``run_pretrained`` (attndesk's ``attend``)."""
    from ..pretrained.run import run_pretrained

    run = run_pretrained(model, text, memory_budget=memory_budget)
    return attention_flow(run.weights, rows=rows, tokens=list(run.tokens), progress=progress, cancel=cancel)


__all__ = ["AttentionFlow", "attention_flow", "model_attention_flow"]
