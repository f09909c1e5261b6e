"""Per-head summary numbers of an attention pattern: how spread, how far, and where the weight goes.

Every statistic is a mean over query rows. Each row is first divided by its own sum, so the
numbers are shares of the weight a query actually spends on keys (rows already sum to 1 except
under dropout, a softmax sink, which takes its share and gives no value, or when a view hid some
keys). A row with no weight at all (a query whose keys are all
masked) has no distribution: it is left out of every mean instead of counting as zero.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields

import numpy as np

SPECIAL_TOKENS = frozenset({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"})


@dataclass(frozen=True)
class HeadStats:
    head: int
    entropy: float  # mean row entropy in nats (0 = one key takes everything, ln(Lk) = uniform)
    max_weight: float  # largest single weight of the head
    mean_distance: float  # mean over rows of sum_j w_ij |i - j|, in tokens
    self_share: float  # weight on the query's own position (j == i)
    previous_share: float  # on j == i - 1 (row 0 has no previous token: it contributes 0)
    next_share: float  # on j == i + 1 (the last row contributes 0)
    first_share: float  # on key 0 ([CLS] in BERT-style models)
    special_share: float  # on the keys flagged special (0 when none are)
    rows: int  # query rows that carried weight (the rows averaged)
    layer: int | None = None

    def as_row(self) -> dict:
        return asdict(self)


STAT_FIELDS = tuple(f.name for f in fields(HeadStats))


def _special_keys(special, num_keys: int) -> np.ndarray:
    """bool [Lk] from None, a bool mask, indices, or token strings (flagged if in SPECIAL_TOKENS)."""
    flags = np.zeros(num_keys, dtype=bool)
    if special is None:
        return flags
    special = list(special) if not isinstance(special, np.ndarray) else special
    if len(special) and isinstance(special[0], str):
        if len(special) != num_keys:
            raise ValueError(f"{len(special)} token labels for {num_keys} keys")
        return np.array([t in SPECIAL_TOKENS for t in special], dtype=bool)
    arr = np.asarray(special)
    if arr.dtype == np.bool_:
        if arr.shape != (num_keys,):
            raise ValueError(f"special mask has shape {arr.shape}, expected ({num_keys},)")
        return arr.copy()
    flags[arr.astype(np.intp)] = True
    return flags


def _mean_over(values: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Mean over the valid rows of each head: values/valid [H, L] -> [H] (NaN where none is valid)."""
    count = valid.sum(axis=-1)
    total = np.where(valid, values, 0.0).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


ROW_BLOCK_CELLS = 2**20  # cells per block of rows: ~8 MiB per float64 temporary, whatever the matrix


def _row_statistics(w: np.ndarray, first_row: int, flags: np.ndarray) -> dict[str, np.ndarray]:
    """Per-row statistics of rows ``first_row``.. of one head, w [R, Lk] -> {name: [R]} plus
    "valid" (the row holds weight) and "max" (the block's largest finite weight, shape [])."""
    w = np.asarray(w, dtype=np.float64)
    w = np.where(np.isfinite(w), w, 0.0)
    rows, lk = w.shape
    row_sum = w.sum(axis=-1)  # [R]
    valid = row_sum > 0
    p = w / np.where(valid, row_sum, 1.0)[:, None]  # each row a distribution (or all zero)
    with np.errstate(divide="ignore", invalid="ignore"):
        entropy = -np.where(p > 0, p * np.log(p), 0.0).sum(axis=-1)
    query = np.arange(first_row, first_row + rows)
    distance = np.abs(query[:, None] - np.arange(lk)[None, :])  # [R, Lk]: |i - j|
    out = {"entropy": entropy, "mean_distance": (p * distance).sum(axis=-1), "valid": valid, "max": w.max()}
    for name, offset in (("self_share", 0), ("previous_share", -1), ("next_share", 1)):
        cols = query + offset
        ok = (cols >= 0) & (cols < lk)
        share = np.zeros(rows)
        share[ok] = p[np.nonzero(ok)[0], cols[ok]]
        out[name] = share
    out["first_share"] = p[:, 0]
    out["special_share"] = p[:, flags].sum(axis=-1)
    return out


def head_statistics(weights, *, special=None, layer: int | None = None) -> list[HeadStats]:
    """One HeadStats per head of ``weights`` [H, L, Lk] (a single [L, Lk] matrix counts as one head).

    ``special`` flags keys for ``special_share``: a bool mask [Lk], key indices, or the key token
    labels (those in SPECIAL_TOKENS count). Distances are |i - j| between query i and key j.
    Computed one head and one block of rows at a time, so the float64 temporaries stay a few
    MiB however large the matrix (a whole-matrix pass took ~10x the weights' size).
    """
    w = np.asarray(weights)
    if w.ndim == 2:
        w = w[None]
    if w.ndim != 3:
        raise ValueError(f"weights must be [H, L, Lk], got shape {w.shape}")
    h, lq, lk = w.shape
    flags = _special_keys(special, lk)
    names = ("entropy", "mean_distance", "self_share", "previous_share", "next_share", "first_share", "special_share")
    per_row = {name: np.zeros((h, lq)) for name in names}  # [H, L]
    valid = np.zeros((h, lq), dtype=bool)
    max_weight = np.zeros(h)
    step = max(1, ROW_BLOCK_CELLS // max(1, lk))
    for head in range(h):
        for start in range(0, lq if lk else 0, step):
            block = _row_statistics(w[head, start : start + step], start, flags)
            rows = slice(start, start + len(block["valid"]))
            for name in names:
                per_row[name][head, rows] = block[name]
            valid[head, rows] = block["valid"]
            max_weight[head] = block["max"] if start == 0 else max(max_weight[head], block["max"])
    means = {name: _mean_over(per_row[name], valid) for name in names}
    return [
        HeadStats(
            head=i,
            max_weight=float(max_weight[i]),
            rows=int(valid[i].sum()),
            layer=layer,
            **{name: float(values[i]) for name, values in means.items()},
        )
        for i in range(h)
    ]


def layer_statistics(weights_per_layer, *, special=None) -> list[HeadStats]:
    """head_statistics for every layer of ``[layers, H, L, Lk]``, flattened, each tagged with its layer."""
    w = np.asarray(weights_per_layer)
    if w.ndim != 4:
        raise ValueError(f"weights_per_layer must be [layers, H, L, Lk], got shape {w.shape}")
    return [s for layer in range(w.shape[0]) for s in head_statistics(w[layer], special=special, layer=layer)]


def statistics_csv(stats: Iterable[HeadStats], columns: Sequence[str] = STAT_FIELDS) -> str:
    """The table as CSV text (header + one line per head), full float precision."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for s in stats:
        row = s.as_row()
        writer.writerow(
            ["" if row[c] is None else (repr(row[c]) if isinstance(row[c], float) else row[c]) for c in columns]
        )
    return buf.getvalue()


__all__ = ["SPECIAL_TOKENS", "STAT_FIELDS", "HeadStats", "head_statistics", "layer_statistics", "statistics_csv"]
