"""The store: its tables and queries, reopening, resuming after a stop at any point, and the
arguments it records and holds a resumed run to."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from attndesk.corpus import analyze_corpus, open_corpus
from attndesk.corpus.engine import finished_shards
from attndesk.errors import Cancelled, ConfigError
from tests.corpus.conftest import TEXTS

CONTRACT = [
    "part",
    "layer",
    "head",
    "entropy",
    "distance",
    "self",
    "previous",
    "first",
    "previous_token_score",
    "duplicate_token_score",
    "induction_score",
    "role",
]


def _tables(store) -> dict[str, pd.DataFrame]:
    return {
        name: store.sql(f"SELECT * FROM {name} ORDER BY ALL")
        for name in ("texts", "per_text", "heads", "atlas", "atlas_quality")
    }


def _assert_same(a, b) -> None:
    for name, table in _tables(a).items():
        pd.testing.assert_frame_equal(table, _tables(b)[name], check_exact=False, rtol=1e-6, obj=name)


def test_tables_queries_and_reopening(bert_store):
    heads = bert_store.heads
    assert list(heads.columns[: len(CONTRACT) - 1]) == CONTRACT[:-1] and "role" in heads.columns
    assert len(heads) == 2 * 4 and heads.role.notna().all()
    again = open_corpus(bert_store.path)
    assert again.texts.text.tolist() == TEXTS
    per = again.per_text(1, 3)
    assert per.text_id.tolist() == list(range(len(TEXTS)))
    top = again.top_texts(1, 3, "induction_score", k=2)
    assert len(top) == 2 and top.induction_score.iloc[0] == per.induction_score.max()
    low = again.top_texts(1, 3, "entropy", k=1, lowest=True)
    assert low.entropy.iloc[0] == per.entropy.min()
    assert again.sql("SELECT count(*) AS n FROM per_text").n.iloc[0] == len(TEXTS) * 8
    assert again.texts.cut.tolist()[-1] and again.texts.tokens.max() == 16
    manifest = json.loads((bert_store.path / "manifest.json").read_text())
    assert manifest["model"]["sha256"] and manifest["arguments"]["max_tokens"] == 16 and manifest["complete"]
    assert not (bert_store.path / "shards").exists()
    with pytest.raises(ConfigError, match="unknown metric"):
        again.top_texts(0, 0, "nope")
    again.close()


def test_a_store_of_an_older_format_is_refused_in_one_line(bert_store, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(bert_store.path, old)
    manifest = json.loads((old / "manifest.json").read_text())
    (old / "manifest.json").write_text(json.dumps(manifest | {"format_version": 1}))
    with pytest.raises(ConfigError, match=r"format version 1; .* reads version 2 .* run the corpus pass again") as e:
        open_corpus(old)
    assert "\n" not in str(e.value)


READ_A_STORE = """
import sys
from attndesk.corpus import open_corpus
with open_corpus(sys.argv[1]) as store:
    rows = len(store.heads), len(store.texts), len(store.per_text(1, 3)), len(store.top_texts(1, 3, "entropy", k=2))
    rows += (len(store.atlas(1, 3)), len(store.atlas_quality))
print(rows, sorted(m for m in ("torch", "transformers") if m in sys.modules))
"""


def test_reading_a_store_needs_neither_torch_nor_transformers(bert_store):
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-c", READ_A_STORE, str(bert_store.path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    atlas = len(bert_store.atlas(1, 3))
    expected = (8, len(TEXTS), len(TEXTS), 2, atlas, len(bert_store.atlas_quality))
    assert atlas > 0 and proc.stdout.strip() == f"{expected} []"


@pytest.mark.perf
def test_reopening_a_store_is_quick(bert_store):
    start = time.perf_counter()
    again = open_corpus(bert_store.path)
    assert time.perf_counter() - start < 0.5
    assert len(again.texts) == len(TEXTS)
    again.close()


def test_a_stopped_run_resumes_to_the_same_store(models, bert_store, tmp_path):
    out, cancel, batches = tmp_path / "stopped", threading.Event(), []

    def progress(p):
        batches.append(p.done)
        if p.done >= 3:  # the first shard is written: stop before the second
            cancel.set()

    with pytest.raises(Cancelled):
        analyze_corpus(
            TEXTS,
            out,
            model=models["bert"],
            max_tokens=16,
            shard_size=3,
            atlas_points=12,
            progress=progress,
            cancel=cancel,
        )
    assert finished_shards(out) == {0} and not (out / "corpus.duckdb").exists()
    with pytest.raises(ConfigError, match="did not finish"):
        open_corpus(out)
    # a kill during compaction leaves half files: the rerun compacts again
    (out / "texts.parquet").write_bytes(b"half")
    (out / ".per_text.parquet.part").write_bytes(b"half")
    seen = []
    store = analyze_corpus(
        TEXTS, out, model=models["bert"], max_tokens=16, shard_size=3, atlas_points=12, progress=seen.append
    )
    assert seen[0].done >= 3 and seen[-1].stage == "done" and seen[-1].done == len(TEXTS)
    _assert_same(store, bert_store)
    store.close()


def test_a_finished_store_is_reused_and_other_arguments_are_refused(models, bert_store, tmp_path):
    again = analyze_corpus(TEXTS, bert_store.path, model=models["bert"], max_tokens=16, shard_size=3, atlas_points=12)
    _assert_same(again, bert_store)
    again.close()
    before = sorted(p.name for p in bert_store.path.iterdir())
    with pytest.raises(ConfigError, match="other arguments \\(max_tokens=16\\)"):
        analyze_corpus(TEXTS, bert_store.path, model=models["bert"], max_tokens=12, shard_size=3, atlas_points=12)
    with pytest.raises(ConfigError, match="another model"):
        analyze_corpus(TEXTS, bert_store.path, model=models["gpt2"], max_tokens=16, shard_size=3, atlas_points=12)
    with pytest.raises(ConfigError, match="other texts"):
        analyze_corpus(TEXTS[:-1], bert_store.path, model=models["bert"], max_tokens=16, shard_size=3, atlas_points=12)
    assert sorted(p.name for p in bert_store.path.iterdir()) == before


def test_restart_replaces_an_earlier_run(models, tmp_path):
    out = tmp_path / "restart"
    analyze_corpus(TEXTS[:3], out, model=models["gpt2"], max_tokens=8, atlas_points=0).close()
    store = analyze_corpus(TEXTS[:5], out, model=models["gpt2"], max_tokens=8, atlas_points=0, resume=False)
    assert len(store.texts) == 5 and store.atlas(0, 0).empty
    store.close()


def test_a_half_written_shard_is_ignored_and_redone(models, bert_store, tmp_path):
    out, cancel = tmp_path / "half", threading.Event()
    with pytest.raises(Cancelled):
        analyze_corpus(
            TEXTS,
            out,
            model=models["bert"],
            max_tokens=16,
            shard_size=3,
            atlas_points=12,
            progress=lambda p: cancel.set() if p.done >= 3 else None,
            cancel=cancel,
        )
    # what a kill inside the second shard's write leaves: its files in a hidden staging folder
    stage = out / "shards" / ".attndesk-staging-killed"
    stage.mkdir()
    for name in ("texts", "per_text", "atlas"):
        (stage / f"{name}.parquet").write_bytes((out / "shards" / "00000" / f"{name}.parquet").read_bytes())
    store = analyze_corpus(TEXTS, out, model=models["bert"], max_tokens=16, shard_size=3, atlas_points=12)
    _assert_same(store, bert_store)
    store.close()
