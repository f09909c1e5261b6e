"""The sweep over a corpus: each store row against ``sweep`` on that text alone, the summary against
pandas over the rows, a cancelled pass resumed to the uninterrupted store, the pretrained path,
the refusals, and ``attndesk kvcache --corpus``."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from attndesk.cli import main
from attndesk.corpus.shards import finished_shards
from attndesk.errors import ConfigError
from attndesk.jobs import Cancelled, JobContext
from attndesk.kvcache.corpus_sweep import sweep_corpus
from attndesk.kvcache.sweep import sweep
from attndesk.kvcache.sweep_store import open_kv_sweep
from attndesk.train.presets import load_preset

POLICIES = ["streaming", "h2o", "oracle"]
BUDGETS = [6, 12, 0.5]
DECODE = 8


@pytest.fixture(scope="module")
def needle():
    return load_preset("needle")


@pytest.fixture(scope="module")
def texts(needle) -> list[str]:
    """Five needle sequences (the task's layout: answers scored), one cut short (no answer), one of
    a single token (no decode row)."""
    batch = needle.task.sample(5, torch.Generator().manual_seed(3))
    rows = [" ".join(map(str, r.tolist())) for r in batch.ids]
    return rows[:3] + [" ".join(rows[3].split()[:20]), "7", rows[4]]


@pytest.fixture(scope="module")
def store(texts, tmp_path_factory):
    out = tmp_path_factory.mktemp("kvsweep") / "store"
    store = sweep_corpus(texts, out, trained="needle", policies=POLICIES, budgets=BUDGETS, decode=DECODE, shard_size=2)
    yield store
    store.close()


def _same(a, b) -> None:
    """Two stores hold the same texts, rows (but each run's CPU seconds) and summary."""
    for table in ("texts", "rows", "summary"):
        left = a.sql(f"SELECT * EXCLUDE (seconds) FROM {table}" if table == "rows" else f"SELECT * FROM {table}")
        right = b.sql(f"SELECT * EXCLUDE (seconds) FROM {table}" if table == "rows" else f"SELECT * FROM {table}")
        pd.testing.assert_frame_equal(left, right, obj=table)


def test_each_row_is_the_sweep_of_its_text(store, texts, needle):
    frame = store.rows
    assert len(frame) == 5 * len(POLICIES) * len(BUDGETS)  # the one-token text has no row
    assert frame.note.isna().all()
    described = store.texts.set_index("text_id")
    assert described.loc[4, "decode"] == 0 and described.loc[3, "answers"] == 0 and described.loc[0, "answers"] == 2
    for text_id in (0, 3):
        ids = [int(t) for t in texts[text_id].split()]
        decode = min(DECODE, len(ids) - 1)
        rows = needle.task.answer_rows(ids) or []
        answers = {r: ids[r + 1] for r in rows if r >= len(ids) - decode}
        expected = sweep(needle, ids, POLICIES, BUDGETS, decode=decode, answers=answers or None)
        given = {id(row): budget for row, budget in zip(expected, BUDGETS * len(POLICIES))}
        expected.sort(key=lambda row: (POLICIES.index(row["policy"]), given[id(row)]))  # the store's order
        got = frame[frame.text_id == text_id]
        assert list(got.policy) == [r["policy"] for r in expected]
        assert list(got["keys"]) == [r["budget"] for r in expected]
        for metric in ("kl_mean", "kl_max", "agree", "correct", "accuracy", "kept", "error"):
            np.testing.assert_allclose(got[metric], [r[metric] for r in expected], rtol=1e-9, atol=1e-12)
    assert frame[frame.text_id == 3].accuracy.isna().all() and frame[frame.text_id == 0].accuracy.notna().all()
    assert sorted(frame.budget.unique()) == [0.5, 6.0, 12.0]  # as given; keys per text in "keys"


def test_the_summary_is_the_rows_mean_and_spread(store):
    rows = store.rows
    summary = store.summary
    assert list(summary.policy.unique()) == POLICIES and len(summary) == len(POLICIES) * len(BUDGETS)
    grouped = rows.groupby(["policy", "budget"])
    for row in summary.itertuples():
        group = grouped.get_group((row.policy, row.budget))
        for metric in ("kl_mean", "agree", "error"):
            values = group[metric].dropna()
            assert getattr(row, metric) == pytest.approx(values.mean(), rel=1e-12)
            assert getattr(row, f"{metric}_std") == pytest.approx(values.std(ddof=1), rel=1e-9)
            assert getattr(row, f"{metric}_q1") == pytest.approx(values.quantile(0.25), rel=1e-12)
        assert row.accuracy_texts == 4 and row.texts == 5
    curves = store.curves("kl_mean", "quartiles")
    assert list(curves) == POLICIES
    oracle, stream = curves["oracle"], curves["streaming"]
    assert list(oracle.budgets) == [0.5, 6.0, 12.0]
    assert (oracle.low <= oracle.mean + 1e-12).all() and (oracle.mean <= stream.mean).all()  # the upper bound
    again = open_kv_sweep(store.path)
    assert again.sql("SELECT count(*) AS n FROM rows").n[0] == len(store.rows)
    again.close()


def test_a_cancelled_sweep_resumes_to_the_same_store(store, texts, tmp_path):
    out = tmp_path / "stopped"

    def stop_after_first_shard(item) -> None:
        if item.done >= 2:
            ctx.cancel()

    ctx = JobContext(report=stop_after_first_shard)
    with pytest.raises(Cancelled):
        sweep_corpus(
            texts, out, trained="needle", policies=POLICIES, budgets=BUDGETS, decode=DECODE, shard_size=2, ctx=ctx
        )
    assert finished_shards(out) == {0}
    with pytest.raises(ConfigError, match="did not finish"):
        open_kv_sweep(out)
    (out / "rows.parquet").write_bytes(b"half")  # a kill during compaction: compacted again
    seen = []
    resumed = sweep_corpus(
        texts,
        out,
        trained="needle",
        policies=POLICIES,
        budgets=BUDGETS,
        decode=DECODE,
        shard_size=2,
        ctx=JobContext(report=seen.append),
    )
    # the count starts at the finished shard's 2 texts: 6 at the end means 4 texts ran again, not 6
    assert seen[-1].done == len(texts) and seen[-1].stage == "done" and not (out / "shards").exists()
    _same(resumed, store)
    resumed.close()
    with pytest.raises(ConfigError, match="other arguments"):  # the same store with another grid
        sweep_corpus(texts, out, trained="needle", policies=POLICIES, budgets=[6], decode=DECODE, shard_size=2)


def test_a_pretrained_decoder_agrees_without_answers(kv_folders, tmp_path):
    texts = ["the cat sat on the mat and the cat slept again", "one two three four five one two three four five"]
    store = sweep_corpus(
        texts, tmp_path / "s", model=kv_folders["llama"], policies=["streaming", "h2o"], budgets=[5], decode=4
    )
    rows = store.rows
    assert len(rows) == 4 and rows.accuracy.isna().all() and rows.agree.between(0, 1).all()
    assert (rows.kl_mean >= 0).all() and (rows.kl_mean > 0).any() and (rows["keys"] == 5).all()
    manifest = json.loads((tmp_path / "s" / "manifest.json").read_text())
    assert manifest["model"]["kind"] == "pretrained" and manifest["complete"]
    store.close()


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"budgets": [0]}, "keeps no key"),
        ({"budgets": [1.5]}, "ratio is in (0, 1]"),
        ({"options": {"h2o": {"sinks": 2}}}, "sinks"),
        ({"budgets": [4]}, "must exceed the sinks"),
        ({"engine": "spark"}, "choose one of local, ray"),
        ({"decode": 0}, "decode must be"),
        ({"texts": ["1 2 3 4 5 6 7 8 9 10 11 12", "1 2 x"], "budgets": [6]}, "text 1: a trained toy model reads"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(texts, tmp_path, changes, words):
    arguments = {"texts": texts, "trained": "needle", "policies": POLICIES, "budgets": BUDGETS} | changes
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")) as info:
        sweep_corpus(arguments.pop("texts"), tmp_path / "s", **arguments)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "s").exists() or "text 1" in str(info.value)  # a bad text mid-pass: its shard is not written
    assert not (tmp_path / "s" / "shards").exists()


def test_an_encoder_and_a_corpus_store_are_refused(store, tmp_path):
    from tests.pretrained_models import build

    bert = build("bert", tmp_path / "bert")
    with pytest.raises(ConfigError, match="keeps no KV cache"):
        sweep_corpus(["a b c d e"], tmp_path / "s", model=bert, policies=["streaming"], budgets=[5])
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "manifest.json").write_text(json.dumps({"format": "attndesk-corpus"}))
    with pytest.raises(ConfigError, match="not an attndesk kvsweep manifest"):
        sweep_corpus(["1 2 3"], tmp_path / "c", trained="needle", policies=["oracle"], budgets=[2])
    with pytest.raises(ConfigError, match="not an attndesk KV-cache sweep store"):
        open_kv_sweep(tmp_path / "c")


def test_the_command_writes_the_store_and_its_curves(texts, store, tmp_path, capsys):
    data = tmp_path / "texts.txt"
    data.write_text("\n".join(texts) + "\n", encoding="utf-8")
    out = tmp_path / "cli"
    args = ["kvcache", "--trained", "needle", "--corpus", str(data), "--policies", ",".join(POLICIES)]
    args += ["--budgets", "6,12,0.5", "--decode", str(DECODE), "--shard-size", "2", "--out", str(out)]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "oracle: mean KL" in printed and f"store: {out.resolve()}" in printed
    written = open_kv_sweep(out)
    _same(written, store)
    written.close()
    names = {p.name for p in out.iterdir()}
    assert {"kl_mean_vs_budget.png", "accuracy_vs_budget.png", "summary.csv", "kvsweep.duckdb"} <= names
    assert main(args) == 0  # a finished store: kept as it is


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--text", "1 2 3", "--engine", "ray"], "--engine applies to a sweep over a corpus"),
        (["--corpus", "DATA", "--generate", "2"], "--generate does not apply"),
        (["--corpus", "DATA", "--budgets", "0"], "keeps no key"),
    ],
)
def test_the_command_refuses_in_one_line(texts, tmp_path, capsys, extra, words):
    data = tmp_path / "texts.txt"
    data.write_text("\n".join(texts) + "\n", encoding="utf-8")
    extra = [str(data) if e == "DATA" else e for e in extra]
    budgets = [] if "--budgets" in extra else ["--budgets", "6"]
    args = ["kvcache", "--trained", "needle", "--policies", "oracle", *budgets, *extra, "--out", str(tmp_path / "o")]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1 and not (tmp_path / "o").exists()


@pytest.mark.slow  # ~20 s on 2 shared cores: Ray and an actor that imports torch start
def test_the_ray_engine_writes_the_local_store(ray_turn, store, texts, tmp_path):
    """One actor: the corpus pass's Ray test runs two (the same engine, another shard's work)."""
    ray = pytest.importorskip("ray")
    with ray_turn:
        on_ray = sweep_corpus(
            texts,
            tmp_path / "ray",
            trained="needle",
            policies=POLICIES,
            budgets=BUDGETS,
            decode=DECODE,
            shard_size=2,
            engine="ray",
            workers=1,
        )
    assert not ray.is_initialized()  # the local Ray it started is shut down again
    assert json.loads((tmp_path / "ray" / "manifest.json").read_text())["run"]["engine"] == "ray"
    _same(on_ray, store)
    on_ray.close()


def test_the_commands_help_names_the_sweeps_defaults():
    from attndesk.cli import kvcache
    from attndesk.cli.base import command_parser
    from attndesk.kvcache.corpus_sweep import MAX_TOKENS, SHARD_SIZE
    from attndesk.kvcache.sweep import DECODE_ROWS

    helps = {a.dest: a.help for a in command_parser(kvcache.register)._actions}
    assert f"default {DECODE_ROWS}" in helps["decode"] and f"default {MAX_TOKENS}" in helps["max_tokens"]
    assert f"default {SHARD_SIZE}" in helps["shard_size"]
