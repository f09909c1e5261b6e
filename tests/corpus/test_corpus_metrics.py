"""The corpus metrics against attndesk's per-head statistics and TransformerLens' head detector, on
the attention attndesk computes for each text alone (no padding): the batched, padded pass must
give the same numbers text by text."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attndesk.corpus import analyze_corpus
from attndesk.corpus.batch import PassSettings, run_shard
from attndesk.corpus.metrics import ROLE_RULES, SHARE_BASELINE, batch_metrics, role
from attndesk.models import load_pretrained, run_pretrained
from attndesk.teaching.statistics import head_statistics
from tests.corpus.conftest import TEXTS

# TransformerLens' head detector (its patterns and score), imported by the test that uses it: the
# package takes about 3 s to import, and every test worker collects this module
PATTERNS = {
    "previous_token_score": "get_previous_token_head_detection_pattern",
    "duplicate_token_score": "get_duplicate_token_head_detection_pattern",
    "induction_score": "get_induction_head_detection_pattern",
}


def _alone(model, text: str, max_tokens: int):
    """attndesk's attention of one text alone, cut as the corpus pass cuts it: (ids, weights [N, H, L, L])."""
    ids = model.tokenizer(text, truncation=True, max_length=max_tokens)["input_ids"]
    cut = model.tokenizer.decode(ids, skip_special_tokens=True)
    run = run_pretrained(model, cut)
    assert run.weights.shape[-1] == len(ids)  # the decoded cut re-tokenizes to the same tokens
    return ids, run.weights


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_per_text_metrics_match_reference(models, name):
    from transformer_lens import head_detector

    model = load_pretrained(models[name])
    result = run_shard(model, 0, 0, TEXTS, PassSettings(max_tokens=16, atlas_points=0, batch_size=3))
    table = result.per_text.to_pandas()
    assert len(table) == len(TEXTS) * model.num_layers * model.num_heads
    for text_id, text in enumerate(TEXTS):
        ids, weights = _alone(model, text, 16)
        n = len(ids)
        for layer in range(model.num_layers):
            stats = head_statistics(weights[layer])
            rows = table[(table.text_id == text_id) & (table.layer == layer)].sort_values("head")
            assert (rows["rows"] == n).all() and (rows["previous_rows"] == n - 1).all()
            for got, s in zip(rows.itertuples(), stats):
                assert got.entropy == pytest.approx(s.entropy, abs=2e-4)
                assert got.distance == pytest.approx(s.mean_distance, abs=2e-4)
                assert got.self == pytest.approx(s.self_share, abs=2e-5)
                assert got.first == pytest.approx(s.first_share, abs=2e-5)
                assert got.previous == pytest.approx(s.previous_share * n / (n - 1), abs=2e-5)
                # a uniform row over the keys row i reaches: i + 1 of them (causal) or all n
                reached = np.arange(1, n + 1) if name == "gpt2" else np.full(n, n)
                distance = [
                    np.abs(i - np.arange(k)).mean() if name == "gpt2" else np.abs(i - np.arange(n)).mean()
                    for i, k in enumerate(reached)
                ]
                assert got.uniform_share == pytest.approx((1 / reached).mean(), rel=1e-6)
                assert got.uniform_previous == pytest.approx((1 / reached[1:]).mean(), rel=1e-6)
                assert got.uniform_entropy == pytest.approx(np.log(reached).mean(), rel=1e-6)
                assert got.uniform_distance == pytest.approx(np.mean(distance), rel=1e-6)
                for metric, pattern_name in PATTERNS.items():
                    pattern = getattr(head_detector, pattern_name)
                    a = torch.tensor(weights[layer, got.head], dtype=torch.float64)
                    ref = head_detector.compute_head_attention_similarity_score(
                        a,
                        pattern(torch.tensor([ids])).double(),
                        exclude_bos=False,
                        exclude_current_token=False,
                        error_measure="mul",
                    )
                    assert getattr(got, metric) == pytest.approx(ref, abs=2e-5), (metric, text_id, layer, got.head)


def test_corpus_heads_are_row_weighted_means(bert_store):
    per_text, heads = bert_store.sql("SELECT * FROM per_text"), bert_store.heads
    for row in heads.itertuples():
        mine = per_text[(per_text.layer == row.layer) & (per_text["head"] == row.head)]
        assert row.entropy == pytest.approx((mine.entropy * mine.rows).sum() / mine.rows.sum(), rel=1e-5)
        assert row.previous == pytest.approx(
            (mine.previous * mine.previous_rows).sum() / mine.previous_rows.sum(), rel=1e-5
        )
        assert row.induction_score == pytest.approx(mine.induction_score.mean(), rel=1e-5)
        assert row.role == role({k: getattr(row, k) for k in heads.columns if k not in ("part", "role")})


def test_encoder_decoder_parts_and_cross_has_no_detection_scores(models, tmp_path):
    store = analyze_corpus(TEXTS[:4], tmp_path / "t5", model=models["t5"], max_tokens=12, atlas_points=6)
    heads = store.heads
    assert list(dict.fromkeys(heads.part)) == ["self", "decoder", "cross"]
    cross = heads[heads.part == "cross"]
    assert cross[["previous_token_score", "duplicate_token_score", "induction_score"]].isna().all().all()
    assert heads[heads.part != "cross"]["induction_score"].notna().all()
    assert np.isfinite(cross[["entropy", "distance", "self", "previous", "first"]].to_numpy()).all()
    assert set(store.atlas(0, 0, "cross").kind) == {"query", "key"}
    store.close()


def test_roles_follow_the_documented_rules():
    base = {
        "entropy": 0.5,
        "uniform_entropy": 2.0,
        "uniform_share": 0.2,
        "uniform_previous": 0.15,
        "uniform_distance": 4.0,
        "distance": 3.0,
        "self": 0.1,
        "previous": 0.1,
        "first": 0.1,
        "previous_token_score": 0.1,
        "duplicate_token_score": 0.0,
        "induction_score": 0.0,
    }
    assert role(base) == "mixed"
    assert role(base | {"entropy": 1.9}) == "broad"
    for name, metric, threshold in ROLE_RULES:
        value = threshold - 0.1 if metric == "distance" else threshold + 0.01
        if metric in SHARE_BASELINE:  # a share must pass its uniform baseline by the threshold
            assert role(base | {metric: value}) == "mixed"
            value += base[SHARE_BASELINE[metric]]
        assert role(base | {metric: value}) == name
    assert role(base | {"distance": 1.4, "uniform_distance": 2.0}) == "mixed"  # no nearer than a uniform row
    assert role(base | {"induction_score": math.nan, "previous": 0.9}) == "previous-token"


@pytest.mark.parametrize("causal", [False, True])
def test_uniform_rows_are_broad_at_every_length(causal):
    """A head that spreads every row evenly is no sink, self, previous-token or local head, however
    short the text: each share is compared with a uniform row's."""
    for n in range(2, 65):
        keys = torch.ones(n, n).tril() if causal else torch.ones(n, n)
        w = (keys / keys.sum(-1, keepdim=True))[None, None]
        mask = torch.ones(1, n, dtype=torch.bool)
        values = batch_metrics(w, mask, mask, torch.arange(n)[None])
        head = {name: float(v[0, 0]) for name, v in values.items()}
        for share, base in SHARE_BASELINE.items():
            assert head[share] == pytest.approx(head[base], abs=1e-6)
        assert head["distance"] == pytest.approx(head["uniform_distance"], rel=1e-5)
        assert role(head) == "broad", (n, causal, head)


def test_top_texts_rank_shares_by_their_excess_over_uniform(bert_store):
    per_text = bert_store.per_text(1, 0)
    for metric, base in SHARE_BASELINE.items():
        expected = (per_text[metric] - per_text[base]).sort_values(ascending=False, kind="stable")
        top = bert_store.top_texts(1, 0, metric, k=len(per_text))
        assert list(top.text_id) == list(per_text.text_id[expected.index])
        np.testing.assert_allclose(top.excess, top[metric] - top[base], rtol=1e-6)


def test_minilm_roles_barely_move_between_short_and_long_texts(tmp_path):
    """The packaged all-MiniLM-L6-v2 over the bundled sample cut at 7 tokens and over its texts of more
    than 14 tokens: judged by the share alone (first >= 0.5) 51 and 24 of its 72 heads are sinks;
    against a uniform row's share 27 and 19 (docs/corpus.md)."""
    import duckdb

    from attndesk.corpus.store import heads_summary
    from attndesk.resources import CORPUS_SAMPLE

    texts = [t for t in CORPUS_SAMPLE.read_text(encoding="utf-8").splitlines() if t.strip()]
    sinks = {}
    for name, max_tokens, shortest in (("short", 7, 0), ("long", 128, 15)):
        store = analyze_corpus(texts, tmp_path / name, model=None, max_tokens=max_tokens, atlas_points=0)
        store.close()
        files = {t: "'" + str(tmp_path / name / f"{t}.parquet") + "'" for t in ("per_text", "texts")}
        with duckdb.connect() as con:
            heads = heads_summary(
                con,
                f"(SELECT p.* FROM read_parquet({files['per_text']}) p JOIN read_parquet({files['texts']}) t "
                f"USING (text_id) WHERE t.tokens >= {shortest})",
            )
        assert len(heads) == 72
        sinks[name] = (int((heads.role == "first-token/sink").sum()), int((heads["first"] >= 0.5).sum()))
    (new_short, old_short), (new_long, old_long) = sinks["short"], sinks["long"]
    assert old_short - old_long > 20, sinks  # the share alone: the shorter the texts, the more sinks
    assert abs(new_short - new_long) <= 10, sinks
