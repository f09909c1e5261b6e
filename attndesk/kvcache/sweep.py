"""The lab's sweep: every policy at every budget on one input, as a table and curves.

The input's last ``decode`` tokens are read as decode steps (teacher forcing: ``simulate``'s
``prefill`` is the rest), so every policy compresses something: the prefill kind scores the
prompt's keys once, the stream kind evicts from the first row, the adaptive kind from the first
decode row, and the oracle keeps what the full run's own queries weigh most (the upper bound).

Each (policy, budget) gives one row, measured over the decode rows (rows P .. N-1):

- ``kl_mean``, ``kl_max``: KL(full || compressed) of the next-token distribution, nats (float64);
- ``agree``: the share of rows whose most probable next token is the full run's;
- ``correct``: the share of rows (with a next input token) whose most probable next token is it;
- ``accuracy``: with ``answers`` ({row: token}, e.g. the needle task's answer steps), the share of
  those rows answered right (NaN without);
- ``kept``: keys visible to a decode row, averaged over layers, K/V heads and rows;
- ``error``: the attention-output error (``KVRun.error``: each head's ||compressed - full|| / ||full||
  of its context row), averaged over layers, heads and rows (float64);
- ``seconds``: the run's CPU time in this process (``time.process_time``, so other processes on a
  shared machine do not count).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from attndesk.errors import ConfigError
from attndesk.files.atomic import atomic_write
from attndesk.jobs import JobContext, job_context

from .model import CausalMemo, kv_model
from .simulate import KVRun, _input_ids, get_policy, simulate

DECODE_ROWS = 32  # the input's last tokens read as decode steps
BUDGETS = 10  # budgets in a default sweep
COLUMNS = ("policy", "budget", "kl_mean", "kl_max", "agree", "correct", "accuracy", "kept", "error", "seconds")


def default_budgets(prompt: int, count: int = BUDGETS, smallest: int = 8) -> list[int]:
    """``count`` budgets spread evenly in log scale from ``smallest`` to the prompt's length (whole
    tokens, distinct, rising; fewer when the prompt is too short to hold that many)."""
    if prompt <= smallest:
        return list(range(1, prompt + 1))
    values = np.geomspace(smallest, prompt, count)
    return sorted({int(v) for v in np.rint(values)})


def measure(run: KVRun, answers: Mapping[int, int] | None = None) -> dict[str, float]:
    """A run's row of the table (without policy, budget and seconds)."""
    rows = np.arange(run.prompt, run.rows)
    if rows.size == 0:
        raise ConfigError("the run has no decode row to measure: read some of the input as decode steps")
    correct = run.correct[rows]
    accuracy = float("nan")
    if answers:
        said = run.logits.argmax(-1)
        accuracy = float(np.mean([said[row] == token for row, token in answers.items()]))
    return {
        "kl_mean": float(run.kl[rows].mean()),
        "kl_max": float(run.kl[rows].max()),
        "agree": float(run.agree[rows].mean()),
        "correct": float(np.nanmean(correct)) if np.isfinite(correct).any() else float("nan"),
        "accuracy": accuracy,
        "kept": float(run.kept[:, :, rows].mean()),
        "error": float(run.error[:, :, rows].mean()),
    }


def sweep(
    model,
    text_or_ids,
    policies: Sequence[str],
    budgets: Sequence[int | float] | None = None,
    *,
    decode: int = DECODE_ROWS,
    answers: Mapping[int, int] | None = None,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    ctx: JobContext | None = None,
) -> list[dict[str, Any]]:
    """One row per (policy, budget) in that order (see the module docstring). ``budgets``: token
    counts or ratios (default ``default_budgets`` of the prompt); ``options``: a policy's options
    by its name; ``answers``: {row: the token that row must predict}. ``ctx``: progress over the
    runs, cancellation between rows of a run."""
    ctx = job_context(ctx)
    kvm = model if isinstance(model, CausalMemo) else CausalMemo(kv_model(model))
    ids = _input_ids(kvm, text_or_ids)
    if not 1 <= decode < len(ids):
        raise ConfigError(f"decode reads the input's last tokens as decode steps: 1 to {len(ids) - 1}, got {decode}")
    prompt = len(ids) - decode
    for name in policies:
        get_policy(name)  # an unknown policy is refused before anything runs
    chosen = list(budgets) if budgets is not None else default_budgets(prompt)
    if not chosen:
        raise ConfigError("give at least one budget")
    bad = [row for row in (answers or {}) if not prompt <= row < len(ids)]
    if bad:
        raise ConfigError(f"answer row {bad[0]} is not a decode row ({prompt} to {len(ids) - 1})")
    table = []
    total = len(policies) * len(chosen)
    for i, name in enumerate(policies):
        for j, budget in enumerate(chosen):
            ctx.check()
            part = ctx.scaled((i * len(chosen) + j) / total, (i * len(chosen) + j + 1) / total, f"{name} {budget}: ")
            start = time.process_time()
            run = simulate(kvm, ids, name, budget, prefill=prompt, ctx=part, **dict((options or {}).get(name, {})))
            seconds = time.process_time() - start
            table.append({"policy": name, "budget": run.budget} | measure(run, answers) | {"seconds": seconds})
    return table


def curves(table: Sequence[Mapping[str, Any]], metric: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{policy: (budgets, the metric)} in budget order, for a plot of the metric against the budget."""
    if metric not in COLUMNS[2:]:
        raise ConfigError(f"no sweep metric {metric!r}; metrics: {', '.join(COLUMNS[2:])}")
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name in dict.fromkeys(row["policy"] for row in table):
        rows = sorted((r for r in table if r["policy"] == name), key=lambda r: r["budget"])
        out[name] = (np.array([r["budget"] for r in rows]), np.array([r[metric] for r in rows], np.float64))
    return out


def write_table(table: Sequence[Mapping[str, Any]], csv_path, parquet_path=None) -> None:
    """The table as CSV (and Parquet), each file written whole (``files.atomic``)."""
    arrow = pa.Table.from_pylist([{c: row[c] for c in COLUMNS} for row in table])
    atomic_write(csv_path, lambda fh: pacsv.write_csv(arrow, fh))
    if parquet_path is not None:
        atomic_write(parquet_path, lambda fh: pq.write_table(arrow, fh))


__all__ = ["BUDGETS", "COLUMNS", "DECODE_ROWS", "curves", "default_budgets", "measure", "sweep", "write_table"]
