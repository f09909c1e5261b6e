"""Per-text, per-head attention metrics of a padded batch, computed in torch from the weights a
layer hands attndesk's capture, and the corpus summary and roles built from them.

Row metrics (the same definitions as ``attndesk.teaching.statistics.head_statistics``, which the tests
use as the reference on single texts) are means over the text's query rows; rows of padding and
rows with no weight (every key masked) are left out, and padding keys carry no weight:

- ``entropy``: -sum_j w_ij ln w_ij, nats;
- ``distance``: sum_j w_ij |i - j|, tokens;
- ``self``, ``first``: w_ii and w_i0;
- ``previous``: w_i,i-1 over rows i >= 1 only (``head_statistics``' previous_share counts row 0 as 0).

Beside them, the same figures of a uniform row over the keys each row reached (its weights above
zero: i + 1 keys for a causal row, the text's n otherwise), the baselines the roles compare with,
since a share alone grows as texts get shorter (a uniform row over 5 keys puts 0.2 on each):

- ``uniform_entropy``: ln(keys reached);
- ``uniform_share``: 1 / keys reached, a uniform row's weight on any key it reached (key 0, key i);
- ``uniform_previous``: the same over rows i >= 1;
- ``uniform_distance``: the mean |i - j| over the keys reached.

Detection scores are TransformerLens ``head_detector``'s ``mul`` measure with no exclusions, on the
text's own (unpadded) attention A and detection pattern P: sum(A * P) / sum(A), where P is the
previous-token, duplicate-token or induction pattern of the text's token ids. They need a square
pattern, so cross-attention has none (NaN). Corpus figures: row metrics are means over all rows
of all texts (each text weighted by its rows), detection scores are means over texts.

torch is imported by the functions that compute: the names and roles alone (what a store's
reader, the Corpus tab and the store's page need) load without it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

ROW_METRICS = ("entropy", "distance", "self", "previous", "first")
SCORES = ("previous_token_score", "duplicate_token_score", "induction_score")
METRICS = ROW_METRICS + SCORES
# a uniform row's figures over the keys each row reached: the baselines of the roles
BASELINES = ("uniform_entropy", "uniform_share", "uniform_previous", "uniform_distance")
# per text and head: the metrics and their baselines (means over the text's rows, like the metrics)
PER_TEXT_VALUES = METRICS + BASELINES
# the uniform baseline of each share of a row's weight; roles and rankings use the share less it
SHARE_BASELINE = {"first": "uniform_share", "self": "uniform_share", "previous": "uniform_previous"}
# row means over rows i >= 1 only (``previous_rows``); the others over all rows (``rows``)
FROM_SECOND_ROW = ("previous", "uniform_previous")

# Roles, first match wins (documented in docs/corpus.md). Detection scores: at least the threshold
# (a share of the text's attention). Shares of a row's weight: at least the threshold more than a
# uniform row's share (``excess``). Distance: at most the threshold in tokens and at most
# LOCAL_SHARE of a uniform row's distance.
ROLE_RULES: tuple[tuple[str, str, float], ...] = (
    ("induction", "induction_score", 0.3),
    ("duplicate-token", "duplicate_token_score", 0.3),
    ("previous-token", "previous", 0.5),
    ("first-token/sink", "first", 0.5),
    ("self", "self", 0.5),
    ("local", "distance", 1.5),
)
LOCAL_SHARE = 0.5
BROAD_SHARE = 0.8  # entropy at least this share of a uniform row's (ln of the keys each row reached)


def excess(values: dict, metric: str, baselines: dict | None = None) -> float:
    """A share metric less its uniform baseline (the metric itself for one without a baseline);
    ``baselines``: metric -> its baseline's column (default the text pass's ``SHARE_BASELINE``)."""
    baselines = SHARE_BASELINE if baselines is None else baselines
    value = values.get(metric)
    value = math.nan if value is None else float(value)
    if metric not in baselines:
        return value
    baseline = values.get(baselines[metric])
    return value - (math.nan if baseline is None else float(baseline))


def role(
    values: dict,
    rules: tuple = ROLE_RULES,
    *,
    baselines: dict | None = None,
    distance: str = "distance",
    local_share: float = LOCAL_SHARE,
    broad_share: float = BROAD_SHARE,
) -> str:
    """The first role whose rule the head's corpus metrics meet; "broad" or "mixed" otherwise.
    The defaults are the text pass's; the image pass gives its rules, baselines and distance column."""
    for name, metric, threshold in rules:
        value = excess(values, metric, baselines)
        if not math.isfinite(value):
            continue
        if metric == distance:
            uniform = values.get("uniform_distance")
            if value <= threshold and uniform is not None and value <= local_share * uniform:
                return name
        elif value >= threshold:
            return name
    entropy, uniform = values.get("entropy"), values.get("uniform_entropy")
    if entropy is not None and uniform and math.isfinite(entropy) and entropy >= broad_share * uniform:
        return "broad"
    return "mixed"


_DISTANCES: dict[tuple[int, int, str], torch.Tensor] = {}


def _distance_matrix(lq: int, lk: int, device: torch.device) -> torch.Tensor:
    import torch

    key = (lq, lk, str(device))
    if key not in _DISTANCES:
        if len(_DISTANCES) > 64:
            _DISTANCES.clear()
        i = torch.arange(lq, device=device, dtype=torch.float32)[:, None]
        _DISTANCES[key] = (i - torch.arange(lk, device=device, dtype=torch.float32)[None, :]).abs()
    return _DISTANCES[key]


def _row_sums(w: torch.Tensor, rows: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per text and head, sums over the valid rows of each row metric, and the row counts: each
    row's value in float32 (a sum over keys of terms of one sign), the sums over rows in float64,
    so a text's figures do not depend on the padding of the batch it came in."""
    import torch

    lq, lk = w.shape[-2:]
    valid = rows.double()  # [B, H, Lq]
    entropy = -torch.special.xlogy(w, w).sum(-1).double()
    distance = torch.einsum("bhij,ij->bhi", w, _distance_matrix(lq, lk, w.device)).double()
    n = min(lq, lk)
    self_rows = torch.zeros_like(valid)
    self_rows[..., :n] = torch.diagonal(w, dim1=-2, dim2=-1)[..., :n]
    prev_rows = torch.zeros_like(valid)
    m = min(lq - 1, lk)
    if m > 0:
        prev_rows[..., 1 : m + 1] = torch.diagonal(w, offset=-1, dim1=-2, dim2=-1)[..., :m]
    on = (w > 0).float()  # the keys each row reached
    count = on.sum(-1).clamp(min=1).double()
    uniform_distance = torch.einsum("bhij,ij->bhi", on, _distance_matrix(lq, lk, w.device)).double() / count
    prev_valid = valid.clone()
    prev_valid[..., 0] = 0
    sums = {
        "entropy": (entropy * valid).sum(-1),
        "distance": (distance * valid).sum(-1),
        "self": (self_rows * valid).sum(-1),
        "first": (w[..., 0].double() * valid).sum(-1),
        "previous": (prev_rows * prev_valid).sum(-1),
        "uniform_entropy": (count.log() * valid).sum(-1),
        "uniform_share": (valid / count).sum(-1),
        "uniform_previous": (prev_valid / count).sum(-1),
        "uniform_distance": (uniform_distance * valid).sum(-1),
    }
    return sums | {"rows": valid.sum(-1), "previous_rows": prev_valid.sum(-1)}


def _scores(w: torch.Tensor, rows: torch.Tensor, keys: torch.Tensor, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """TransformerLens' mul scores of each text's square attention [B, H, L, L] (padding cut out)."""
    import torch

    valid = rows.to(w.dtype)
    a = w * valid[..., None] * keys[:, None, None, :].to(w.dtype)  # the text's own attention A
    total = a.sum(-1).double().sum(-1)  # sum(A): rows in float32, their sum in float64
    prev = torch.diagonal(a, offset=-1, dim1=-2, dim2=-1).double().sum(-1)
    lower = torch.ones(ids.shape[1], ids.shape[1], dtype=torch.bool, device=ids.device).tril(-1)
    dup = ((ids[:, :, None] == ids[:, None, :]) & lower).to(w.dtype)  # [B, L, L]: tok_i == tok_j, j < i
    duplicate = torch.einsum("bhij,bij->bhi", a, dup).double().sum(-1)
    induction = torch.einsum("bhij,bij->bhi", a[..., 1:], dup[..., :-1]).double().sum(-1)  # P[i, j] = dup[i, j - 1]
    safe = total.clamp(min=1e-300)
    nan = torch.full_like(total, math.nan)
    return {
        name: torch.where(total > 0, value / safe, nan)
        for name, value in (
            ("previous_token_score", prev),
            ("duplicate_token_score", duplicate),
            ("induction_score", induction),
        )
    }


def batch_metrics(
    weights: torch.Tensor, query_mask: torch.Tensor, key_mask: torch.Tensor, ids: torch.Tensor | None
) -> dict[str, np.ndarray]:
    """Per text and head of one layer: {metric: [B, H]} plus "rows" and "previous_rows".

    ``weights`` [B, H, Lq, Lk] as the model attends; ``query_mask`` [B, Lq] and ``key_mask``
    [B, Lk] are True on real tokens; ``ids`` [B, L]: the token ids of a square (self-attention)
    part, None for cross-attention (no detection scores).
    """
    import torch

    w = weights.detach().float() * key_mask[:, None, None, :].to(torch.float32)
    rows = query_mask[:, None, :] & (w.sum(-1) > 0)  # [B, H, Lq]
    sums = _row_sums(w, rows)
    count, prev_count = sums.pop("rows"), sums.pop("previous_rows")
    out = {"rows": count, "previous_rows": prev_count}
    for name, total in sums.items():
        by = prev_count if name in FROM_SECOND_ROW else count
        out[name] = torch.where(by > 0, total / by.clamp(min=1), torch.full_like(total, math.nan))
    if ids is not None:
        out.update(_scores(w, rows, key_mask, ids))
    else:
        out.update({name: torch.full_like(count, math.nan) for name in SCORES})
    return {k: v.cpu().numpy() for k, v in out.items()}


__all__ = [
    "BASELINES",
    "BROAD_SHARE",
    "FROM_SECOND_ROW",
    "LOCAL_SHARE",
    "METRICS",
    "PER_TEXT_VALUES",
    "ROLE_RULES",
    "ROW_METRICS",
    "SCORES",
    "SHARE_BASELINE",
    "batch_metrics",
    "excess",
    "role",
]
