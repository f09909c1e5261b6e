"""The online softmax behind FlashAttention, step by step, for one head.

FlashAttention never holds a row of weights: it walks the keys block by block, keeping for every
query only a running maximum m, a running sum l of exp(s - m) and a partial output O. When a new
block raises the maximum, what was summed so far was measured against the old one, so l and O
are rescaled by exp(m_old - m_new) before the block is added. After the last block O / l is the
attention output, equal to softmax(S) V: the weights existed only one block at a time, inside
the kernel, which is why fast kernels cannot return them (and attndesk computes them on purpose).
A softmax sink (a logit s in the denominator, no value) is one more key folded in first: m starts
at s, l at exp(s - s) = 1 and O at 0.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from attndesk.attention.kernel import attend
from attndesk.attention.types import Intermediates
from attndesk.errors import ConfigError
from attndesk.runs.config import AttentionConfig
from attndesk.system.free_memory import format_bytes

EXPLANATION = """\
Why the weights are never stored. A weight w_ij = exp(s_ij - m_i) / l_i needs the row's maximum
m_i and sum l_i, which are known only after the last key. FlashAttention does not wait: it keeps
m, l and the partial output O per query, folds in one block of keys at a time (rescaling what it
has by exp(m_old - m_new) whenever the maximum grows) and divides by l at the end. Memory is
O(L d) instead of O(L^2); the [L, L] weights never exist outside one block in fast memory, so a
fast kernel has none to return. To show weights, attndesk computes them on purpose.
"""


@dataclass(frozen=True)
class OnlineStep:
    """One block of keys folded in (arrays over the queries, float64).

    ``scores`` [Lq, b] the block's softmax input (-inf where masked); ``block_max`` [Lq];
    ``max_before``/``max_after`` the running maximum m; ``rescale`` = exp(m_before - m_after)
    (1 where the maximum did not move); ``probs`` = exp(scores - m_after) (unnormalised, this
    block only); ``sum_before``/``sum_after`` the running l; ``output`` [Lq, dv] = O after the
    block, still unnormalised.
    """

    block: int
    keys: tuple[int, int]  # (k0, k1): keys k0..k1-1
    scores: np.ndarray
    block_max: np.ndarray
    max_before: np.ndarray
    max_after: np.ndarray
    rescale: np.ndarray
    probs: np.ndarray
    sum_before: np.ndarray
    sum_after: np.ndarray
    output: np.ndarray


@dataclass(frozen=True)
class OnlineSoftmaxWalk:
    """The whole walk: ``steps``, the final ``output`` = O / l, the full softmax's
    ``reference`` = softmax(S) V and its ``weights`` (computed here only to compare), the
    largest difference and the bytes each way keeps per head."""

    steps: list[OnlineStep]
    output: np.ndarray  # [Lq, dv]
    reference: np.ndarray  # [Lq, dv]
    weights: np.ndarray  # [Lq, Lk]: the full softmax, which the walk never formed
    max_abs_diff: float
    kept_bytes: int  # m, l and O per query (float32): what the kernel holds
    weights_bytes: int  # the [Lq, Lk] float32 weights it does not

    def agrees_when_printed(self, digits: int = 6) -> bool:
        """Whether every output prints the same with ``digits`` significant digits."""
        fmt = np.vectorize(lambda x: f"{x:.{digits}g}")
        return bool((fmt(self.output) == fmt(self.reference)).all()) if self.output.size else True


def _full_softmax(scores: np.ndarray, sink: float | None = None) -> np.ndarray:
    """Row softmax of scores with -inf masked (and a ``sink`` logit in the denominator); an
    all-masked row is zeros."""
    top = scores.max(axis=-1, keepdims=True)
    if sink is not None:
        top = np.maximum(top, sink)
    safe = np.where(np.isneginf(top), 0.0, top)
    e = np.exp(scores - safe)
    total = e.sum(axis=-1, keepdims=True) + (0.0 if sink is None else np.exp(sink - safe))
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def walk_bytes(lq: int, lk: int, dv: int, block: int) -> int:
    """What a walk keeps (float64): per step the block's probabilities [Lq, b], four per-query
    vectors and O [Lq, dv] (its scores are views of S); then S and the full weights [Lq, Lk], the
    reference and the output [Lq, dv]."""
    steps = -(-lk // block)  # the probabilities of all steps together are [Lq, Lk]
    return 8 * lq * (steps * (4 + dv) + 3 * lk + 2 * dv)


def fitting_block(lq: int, lk: int, dv: int, budget: int, at_least: int = 1) -> int | None:
    """The smallest block (``at_least`` doubled, at most the whole row) whose walk fits ``budget``."""
    block = max(1, at_least)
    while walk_bytes(lq, lk, dv, block) > budget:
        if block >= lk:
            return None
        block = min(2 * block, lk)
    return block


def check_walk(lq: int, lk: int, dv: int, block: int, budget: int) -> None:
    """ConfigError naming what fits when a walk in blocks of ``block`` keys would exceed ``budget``:
    each step keeps O [Lq, dv], so blocks of one key over 1,900 keys kept 1.9 GB (measured in the soak)."""
    need = walk_bytes(lq, lk, dv, block)
    if need <= budget:
        return
    fits = fitting_block(lq, lk, dv, budget, block)
    advice = f"blocks of {fits} keys fit" if fits else "no block size fits: shorten the text or raise the budget"
    raise ConfigError(
        f"the walk in blocks of {block} key(s) keeps {format_bytes(need)} ({-(-lk // block):,} steps "
        f"x {lq:,} queries), over the memory budget of {format_bytes(budget)}; {advice}"
    )


def online_softmax(
    scores, values, block: int, *, budget: int | None = None, sink: float | None = None
) -> OnlineSoftmaxWalk:
    """Walk ``scores`` [Lq, Lk] (the softmax input: scaled, capped, biased, -inf where masked)
    against ``values`` [Lk, dv] ``block`` keys at a time, as FlashAttention's inner loop does.
    A ``sink`` logit starts the running maximum and sum (m = sink, l = 1): it takes its share of
    the denominator and adds nothing to O. With ``budget`` (bytes) a walk that would keep more
    is refused before it starts (``check_walk``)."""
    s = np.asarray(scores, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    if s.ndim != 2 or v.ndim != 2 or s.shape[1] != v.shape[0]:
        raise ValueError(f"need scores [Lq, Lk] and values [Lk, dv], got {s.shape} and {v.shape}")
    if block < 1:
        raise ValueError(f"block must be at least 1 key, got {block}")
    lq, lk = s.shape
    if budget is not None:
        check_walk(lq, lk, v.shape[1], block, budget)
    m = np.full(lq, -np.inf if sink is None else float(sink))
    total = np.zeros(lq) if sink is None else np.ones(lq)
    out = np.zeros((lq, v.shape[1]))
    steps = []
    for i, k0 in enumerate(range(0, lk, block)):
        k1 = min(k0 + block, lk)
        part = s[:, k0:k1]
        block_max = part.max(axis=1)
        m_new = np.maximum(m, block_max)
        seen = ~np.isneginf(m_new)  # rows that have met a key they may attend to
        rescale = np.where(seen & ~np.isneginf(m), np.exp(m - np.where(seen, m_new, 0.0)), 1.0)
        probs = np.where(seen[:, None], np.exp(part - np.where(seen, m_new, 0.0)[:, None]), 0.0)
        total_new = rescale * total + probs.sum(axis=1)
        out_new = rescale[:, None] * out + probs @ v[k0:k1]
        steps.append(OnlineStep(i, (k0, k1), part, block_max, m, m_new, rescale, probs, total, total_new, out_new))
        m, total, out = m_new, total_new, out_new
    final = np.divide(out, total[:, None], out=np.zeros_like(out), where=total[:, None] > 0)
    weights = _full_softmax(s, sink)
    reference = weights @ v
    diff = float(np.abs(final - reference).max()) if final.size else 0.0
    return OnlineSoftmaxWalk(
        steps, final, reference, weights, diff, kept_bytes=4 * lq * (v.shape[1] + 2), weights_bytes=4 * lq * lk
    )


def walk_head(intermediates, head: int, block: int) -> OnlineSoftmaxWalk:
    """The walk for one head of a run kept with intermediates: its softmax input (``masked``)
    against the values of the K/V head it reads."""
    if intermediates is None or intermediates.masked is None or intermediates.v is None:
        raise ValueError("the online-softmax walk needs a run that kept its intermediates (scores and V)")
    heads, kv_heads = intermediates.masked.shape[0], intermediates.v.shape[0]
    if not 0 <= head < heads:
        raise IndexError(f"head {head} out of range 0..{heads - 1}")
    return online_softmax(intermediates.masked[head], intermediates.v[head // (heads // kv_heads)], block)


@dataclass(frozen=True, eq=False)
class HeadAttention:
    """One query head of a run through ``attend``: ``scores`` [Lq, Lk] its softmax input (scaled,
    capped, biased, -inf where masked), ``values`` [Lk, dv] of the K/V head it reads and
    ``context`` [Lq, dv] = softmax(scores) V as the run computes it (in the run's dtype);
    ``sink`` the head's sink logit (None without one)."""

    head: int
    kv_head: int
    scores: np.ndarray
    values: np.ndarray
    context: np.ndarray
    sink: float | None = None


def head_attention(config: AttentionConfig, inter: Intermediates, mask: np.ndarray | None, head: int) -> HeadAttention:
    """Query head ``head`` of a run's Q, K and V (``inter.q`` unscaled [H, Lq, d], ``k``/``v`` [KV, Lk, d]):
    the same ``attend`` call as the run, for one head, so only one [Lq, Lk] matrix is formed."""
    if inter is None or inter.q is None or inter.k is None or inter.v is None:
        raise ValueError("the online-softmax walk needs the run's Q, K and V")
    heads, kv_heads = inter.q.shape[0], inter.k.shape[0]
    if not 0 <= head < heads:
        raise IndexError(f"head {head} out of range 0..{heads - 1}")
    kv = head // (heads // kv_heads)
    dtype = config.torch_dtype
    q, k, v = (
        torch.as_tensor(x).to(dtype)[None, None] for x in (inter.q[head], inter.k[kv], inter.v[kv])
    )  # [1, 1, L, d]
    # the run's scoring, cut to this head (the mask already holds the window)
    whole = config.scoring(config.head_dim**-0.5 if config.scaled else 1.0)
    # a run's own sink logits when it kept them (a trained model's), else the config's
    sink = whole.sink_of(head) if inter.sink_logit is None else float(inter.sink_logit[head].item())
    scoring = dataclasses.replace(
        whole,
        slopes=None if whole.slopes is None else (whole.slopes[head],),
        window=None,
        sinks=None if sink is None else (sink,),
    )
    keep: dict = {}
    with torch.inference_mode():
        context, _ = attend(
            q,
            k,
            v,
            mask=None if mask is None else torch.as_tensor(np.ascontiguousarray(mask)),
            scoring=scoring,
            keep=keep,
        )
    scores = keep["masked"][0, 0].float().numpy()
    return HeadAttention(head, kv, scores, inter.v[kv], context[0, 0].float().numpy(), sink)


__all__ = [
    "EXPLANATION",
    "HeadAttention",
    "OnlineSoftmaxWalk",
    "OnlineStep",
    "check_walk",
    "fitting_block",
    "head_attention",
    "online_softmax",
    "walk_bytes",
    "walk_head",
]
