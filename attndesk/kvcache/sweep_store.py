"""The store of a sweep over a corpus (``corpus_sweep.sweep_corpus``): a folder of Parquet files
and a DuckDB database of views over them, like the corpus pass's store.

Layout of ``out/``::

    manifest.json     what was run (the model's path and file hash, the texts' hash, every argument)
                      and whether the run is complete
    shards/00000/     one finished shard (texts, rows .parquet), moved into place whole; removed
                      once compacted
    texts.parquet     text_id, text, tokens (after the cut), cut, prompt, decode, answers
    rows.parquet      one row per text, policy and budget: budget (as given), keys (per K/V head for
                      that text), kl_mean, kl_max, agree, correct, accuracy, kept, error, seconds, note
    summary.parquet   one row per policy and budget over the texts: texts, refused, and per metric its
                      mean, ``_std`` (sample standard deviation), ``_q1``, ``_q3`` and ``_texts`` (the
                      texts with a value: accuracy counts only texts with a task answer)
    summary.csv       the same, as CSV
    kvsweep.duckdb    views texts, rows, summary over the Parquet files
    *_vs_budget.png   the command line's curves of ``FIGURES`` (mean and ± one standard deviation)
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from attndesk.corpus.store import ParquetStore, finished_manifest
from attndesk.errors import ConfigError

from .sweep import COLUMNS

FORMAT = "attndesk-kvsweep"
FORMAT_VERSION = 1
DATABASE = "kvsweep.duckdb"
METRICS = tuple(c for c in COLUMNS if c not in ("policy", "budget", "seconds"))
SPREADS = ("std", "quartiles")
FIGURES = ("kl_mean", "accuracy", "agree", "error")  # the metrics ``attndesk kvcache --corpus`` draws


class Curve(NamedTuple):
    """A policy's metric against the budget over the corpus: the mean and a band (``low``, ``high``)."""

    budgets: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    texts: np.ndarray  # texts with a value at each budget


class KVSweepStore(ParquetStore):
    """A finished sweep over a corpus: ``texts``, ``rows``, ``summary`` as DataFrames, ``sql`` over
    the views texts, rows and summary, and ``curves`` for a plot."""

    def __init__(self, out: Path, manifest: dict):
        super().__init__(out, manifest, DATABASE)

    def __enter__(self) -> KVSweepStore:
        return self

    @property
    def texts(self) -> pd.DataFrame:
        return self.sql("SELECT * FROM texts ORDER BY text_id")

    @property
    def rows(self) -> pd.DataFrame:
        return self.sql("SELECT * FROM rows")

    @property
    def summary(self) -> pd.DataFrame:
        return self.sql("SELECT * FROM summary")

    @property
    def policies(self) -> list[str]:
        return list(self.manifest["arguments"]["policies"])

    def curves(self, metric: str = "kl_mean", spread: str = "std") -> dict[str, Curve]:
        """{policy: Curve} in the sweep's policy order and budget order; the band is the mean ± the
        standard deviation over the texts (``spread="std"``) or their quartiles ("quartiles")."""
        if metric not in METRICS:
            raise ConfigError(f"no sweep metric {metric!r}; metrics: {', '.join(METRICS)}")
        if spread not in SPREADS:
            raise ConfigError(f"spread {spread!r}: choose {' or '.join(SPREADS)}")
        frame = self.summary
        out: dict[str, Curve] = {}
        for name in self.policies:
            rows = frame[frame.policy == name].sort_values("budget")
            mean = rows[metric].to_numpy(np.float64)
            if spread == "std":
                std = np.nan_to_num(rows[f"{metric}_std"].to_numpy(np.float64))  # one text: no spread
                low, high = mean - std, mean + std
            else:
                low, high = rows[f"{metric}_q1"].to_numpy(np.float64), rows[f"{metric}_q3"].to_numpy(np.float64)
            budgets = rows.budget.to_numpy(np.float64)
            out[name] = Curve(budgets, mean, low, high, rows[f"{metric}_texts"].to_numpy(np.int64))
        return out


def open_kv_sweep(out) -> KVSweepStore:
    """Reopen a finished sweep store (ConfigError if ``out`` is not one, or its run did not finish)."""
    out = Path(out).expanduser()
    manifest = finished_manifest(
        out,
        FORMAT,
        FORMAT_VERSION,
        DATABASE,
        kind="KV-cache sweep store",
        rerun=": run the sweep again",
        unfinished="the sweep",
    )
    return KVSweepStore(out, manifest)


__all__ = [
    "DATABASE",
    "FIGURES",
    "FORMAT",
    "FORMAT_VERSION",
    "METRICS",
    "SPREADS",
    "Curve",
    "KVSweepStore",
    "open_kv_sweep",
]
