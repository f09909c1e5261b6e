"""Attention flow (Abnar & Zuidema, 2020, "Quantifying Attention Flow in Transformers"), beside
the rollout of ``attndesk.teaching.rollout``.

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

from attndesk.errors import ConfigError
from attndesk.jobs import Cancel, JobContext, ProgressFn, job_context
from attndesk.models.run import run_pretrained
from attndesk.teaching.rollout import attention_rollout, layer_transition


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


# Copies of the graph per ``maximum_flow`` call: one call solves many (source, sink) pairs at once
# (see ``_flows_into``), and holds the GIL throughout: a batch small enough to keep that short.
BATCH = 32
BATCH_EDGES = 1 << 20  # edges per scipy call: K copies of a large graph would take gigabytes
INT32_MAX = 2**31 - 1


def _graph(transitions: list[np.ndarray], scale: int):
    """The layered graph as a CSR matrix of int32 capacities, (layers + 1) * L nodes."""
    from scipy.sparse import csr_array

    length = transitions[0].shape[0]
    rows, cols, caps = [], [], []
    for layer, a in enumerate(transitions):
        i, j = np.nonzero(a > 0)
        rows.append(layer * length + j)  # from token j below ...
        cols.append((layer + 1) * length + i)  # ... to token i above
        caps.append(np.rint(a[i, j] * scale).astype(np.int32))
    size = (len(transitions) + 1) * length
    return csr_array((np.concatenate(caps), (np.concatenate(rows), np.concatenate(cols))), shape=(size, size))


def _reaching(transitions: list[np.ndarray], sink: int) -> np.ndarray:
    """[(layers + 1) * L] bool: the nodes with a path to token ``sink`` after the last layer."""
    levels = [np.zeros(transitions[0].shape[0], dtype=bool) for _ in range(len(transitions) + 1)]
    levels[-1][sink] = True
    for layer in reversed(range(len(transitions))):
        levels[layer] = np.asarray((transitions[layer][levels[layer + 1]] > 0).any(axis=0))
    return np.concatenate(levels)


def _flows_into(graph, sources: np.ndarray, sink: int, ctx: JobContext) -> np.ndarray:
    """The maximum flow from each of ``sources`` to ``sink`` (int capacities), ``BATCH`` pairs per
    scipy call: K disjoint copies of the graph, copy k fed from a super-source at its source k and
    drained at its sink into a super-sink. A maximum flow of the union is one of every copy (the
    copies share no edge), so the flow on copy k's edge into the super-sink is its own maximum."""
    from scipy.sparse import csr_array
    from scipy.sparse.csgraph import maximum_flow

    coo = graph.tocoo()
    size = graph.shape[0]
    cap = max(1, int(coo.data[coo.col == sink].sum()))  # the sink's capacity in bounds each copy's flow
    # the total flow of a call must fit int32, and its copies a bounded number of edges (a 512-token
    # encoder's graph alone has 1.6 million: one copy per call, as without batching)
    per_call = max(1, min(BATCH, INT32_MAX // cap, BATCH_EDGES // max(1, coo.nnz)))
    values = np.zeros(len(sources))
    for start in range(0, len(sources), per_call):
        ctx.check()  # between calls: one row of a 512-token encoder is hundreds of calls
        chunk = sources[start : start + per_call]
        k = len(chunk)
        offsets = np.arange(k) * size
        top, bottom = k * size, k * size + 1  # the super-source and the super-sink
        rows = np.concatenate([(coo.row[None, :] + offsets[:, None]).ravel(), np.full(k, top), offsets + sink])
        cols = np.concatenate([(coo.col[None, :] + offsets[:, None]).ravel(), offsets + chunk, np.full(k, bottom)])
        caps = np.concatenate([np.tile(coo.data, k), np.full(2 * k, cap, dtype=np.int32)])
        union = csr_array((caps, (rows, cols)), shape=(k * size + 2, k * size + 2))
        flow = maximum_flow(union, top, bottom).flow.tocsr()
        values[start : start + k] = np.asarray(flow[offsets + sink, np.full(k, bottom)]).ravel()
    return values


def attention_flow(
    weights_per_layer,
    *,
    rows: list[int] | None = None,
    tokens: list[str] | None = None,
    progress: ProgressFn | None = None,
    cancel: Cancel | None = None,
    ctx: JobContext | None = None,
) -> AttentionFlow:
    """[layers, H, L, L] self-attention weights -> the maximum flow from every input token to each
    output token in ``rows`` (default all); cost: len(rows) * L maximum-flow problems, less the
    pairs with no path (a causal model's later tokens), solved ``BATCH`` at a time."""
    ctx = job_context(ctx, progress=progress, cancel=cancel)
    w = np.asarray(weights_per_layer, dtype=np.float64)
    if w.ndim != 4 or w.shape[-1] != w.shape[-2] or w.shape[0] < 1:
        raise ConfigError(f"attention flow needs self-attention weights [layers, H, L, L], got shape {w.shape}")
    length = w.shape[-1]
    rows = list(range(length)) if rows is None else [int(r) for r in rows]
    if any(not 0 <= r < length for r in rows):
        raise ConfigError(f"output rows must lie in 0..{length - 1}, got {rows}")
    transitions = [layer_transition(w[n]) for n in range(w.shape[0])]
    scale = max(1, min(2**24, INT32_MAX // (length + 1)))
    graph = _graph(transitions, scale)
    top = w.shape[0] * length
    flow = np.zeros((len(rows), length))
    for r, i in enumerate(rows):
        ctx.check()
        keep = np.flatnonzero(_reaching(transitions, i))  # only what leads to output token i
        index = np.full(graph.shape[0], -1)
        index[keep] = np.arange(len(keep))
        sources = np.flatnonzero(index[:length] >= 0)  # input tokens with a path to i; the rest give 0
        sub = graph[keep][:, keep]
        flow[r, sources] = _flows_into(sub, index[sources], int(index[top + i]), ctx) / scale
        ctx.progress((r + 1) / len(rows), f"attention flow: output token {r + 1} of {len(rows)}")
    labels = list(tokens) if tokens is not None else [str(t) for t in range(length)]
    return AttentionFlow(flow, attention_rollout(w), rows, labels, w.shape[0], scale)


def model_attention_flow(
    model,
    text: str,
    *,
    rows: list[int] | None = None,
    memory_budget: int | None = None,
    progress: ProgressFn | None = None,
    cancel: Cancel | None = None,
    ctx: JobContext | None = None,
) -> AttentionFlow:
    """Attention flow of a loaded model's self-attention (an encoder-decoder's encoder) on ``text``:
    the weights come from ``run_pretrained`` (attndesk's ``attend``)."""

    ctx = job_context(ctx, progress=progress, cancel=cancel)
    run = run_pretrained(model, text, memory_budget=memory_budget)
    return attention_flow(run.weights, rows=rows, tokens=list(run.tokens), ctx=ctx)


__all__ = ["AttentionFlow", "attention_flow", "model_attention_flow"]
