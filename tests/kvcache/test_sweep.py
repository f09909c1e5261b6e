"""The sweep's table: each row against the compressed run it summarises (recomputed with torch in
float64), the full budget as the full run, the default budgets, the curves, the files, the refusals."""

from __future__ import annotations

import numpy as np
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
import torch

from attndesk.errors import ConfigError
from attndesk.jobs import Cancelled, JobContext
from attndesk.kvcache.simulate import simulate
from attndesk.kvcache.sweep import COLUMNS, curves, default_budgets, sweep, write_table
from attndesk.train import TrainConfig
from attndesk.train.model import build_model
from attndesk.train.run import TrainRun
from attndesk.train.tasks import make_task


@pytest.fixture(scope="module")
def toy() -> TrainRun:
    cfg = TrainConfig(task="needle", layers=2, heads=2, kv_heads=1, embed_dim=16, seq_len=40, seed=2).validate()
    return TrainRun(cfg, make_task(cfg), build_model(cfg))


@pytest.fixture(scope="module")
def needle(toy):
    batch = toy.task.sample(1, torch.Generator().manual_seed(9))
    ids = batch.ids[0].tolist()
    rows = batch.mask[0].nonzero().flatten().tolist()
    return ids, {row: ids[row + 1] for row in rows}


def test_rows_summarise_their_runs(toy, needle):
    ids, answers = needle
    table = sweep(
        toy, ids, ["streaming", "snapkv"], [6, 12], decode=8, answers=answers, options={"snapkv": {"window": 4}}
    )
    assert [(r["policy"], r["budget"]) for r in table] == [
        ("streaming", 6),
        ("streaming", 12),
        ("snapkv", 6),
        ("snapkv", 12),
    ]
    for row in table:
        opts = {"window": 4} if row["policy"] == "snapkv" else {}
        run = simulate(toy, ids, row["policy"], row["budget"], prefill=len(ids) - 8, **opts)
        rows = slice(len(ids) - 8, len(ids))
        p = torch.log_softmax(torch.tensor(run.full_logits[rows], dtype=torch.float64), -1)
        q = torch.log_softmax(torch.tensor(run.logits[rows], dtype=torch.float64), -1)
        kl = (p.exp() * (p - q)).sum(-1).clamp(min=0)
        assert row["kl_mean"] == pytest.approx(float(kl.mean()), abs=1e-12)
        assert row["kl_max"] == pytest.approx(float(kl.max()), abs=1e-12)
        said, full = run.logits[rows].argmax(-1), run.full_logits[rows].argmax(-1)
        assert row["agree"] == pytest.approx(float(np.mean(said == full)))
        nxt = np.array(ids[len(ids) - 7 :])
        assert row["correct"] == pytest.approx(float(np.mean(said[:-1] == nxt)))
        assert row["accuracy"] == pytest.approx(
            float(np.mean([run.logits[r].argmax() == t for r, t in answers.items()]))
        )
        assert row["kept"] <= row["budget"] and np.isfinite(row["seconds"]) and row["seconds"] >= 0
        assert row["error"] == pytest.approx(float(run.error[:, :, rows].mean()), rel=1e-12)


def test_everything_kept_is_the_full_run(toy, needle):
    ids, _ = needle
    (row,) = sweep(toy, ids, ["h2o"], [len(ids)], decode=4)
    assert row["kl_max"] == 0.0 and row["agree"] == 1.0 and np.isnan(row["accuracy"]) and row["error"] == 0.0


def test_default_budgets_curves_and_files(toy, needle, tmp_path):
    budgets = default_budgets(4096)
    assert len(budgets) == 10 and budgets[0] == 8 and budgets[-1] == 4096 and budgets == sorted(set(budgets))
    assert default_budgets(7) == [1, 2, 3, 4, 5, 6, 7]
    ids, _ = needle
    seen = []
    ctx = JobContext(lambda f, m: seen.append(f))
    table = sweep(toy, ids, ["recency", "oracle"], [4, 8, 16], decode=4, ctx=ctx)
    assert seen[-1] == pytest.approx(1.0) and seen == sorted(seen)
    got = curves(table, "kl_mean")
    assert list(got) == ["recency", "oracle"] and got["oracle"][0].tolist() == [4, 8, 16]
    np.testing.assert_array_equal(got["recency"][1], [r["kl_mean"] for r in table[:3]])
    write_table(table, tmp_path / "sweep.csv", tmp_path / "sweep.parquet")
    assert pq.read_table(tmp_path / "sweep.parquet").column_names == list(COLUMNS)
    assert pacsv.read_csv(tmp_path / "sweep.csv").num_rows == 6


def test_refusals(toy, needle):
    ids, _ = needle
    with pytest.raises(ConfigError, match="1 to 39"):
        sweep(toy, ids, ["streaming"], [4], decode=40)
    with pytest.raises(ConfigError, match="no KV-cache policy"):
        sweep(toy, ids, ["nope"], [4])
    with pytest.raises(ConfigError, match="not a decode row"):
        sweep(toy, ids, ["streaming"], [4], decode=4, answers={3: 5})
    with pytest.raises(ConfigError, match="no sweep metric"):
        curves([], "loss")
    ctx = JobContext()
    ctx.cancel()
    with pytest.raises(Cancelled):
        sweep(toy, ids, ["streaming"], [4], decode=4, ctx=ctx)


def test_a_rope_policy_inside_a_sweep():
    """ExpectedAttention reads the model's rotary embedding and head size through the sweep's memo."""
    from attndesk.train.presets import load_preset

    run = load_preset("needle")
    ids = run.task.probe().ids[0].tolist()
    (row,) = sweep(run, ids, ["expected_attention"], [8], decode=4)
    alone = simulate(run, ids, "expected_attention", 8, prefill=len(ids) - 4)
    assert row["kl_mean"] == pytest.approx(float(alone.kl[len(ids) - 4 :].mean()), abs=1e-12)
