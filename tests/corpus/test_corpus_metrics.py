"""The corpus metrics against attndesk's per-head statistics and TransformerLens' head detector, on
the attention attndesk computes for each text alone (no padding): the batched, padded pass must
give the same numbers text by text."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from transformer_lens.head_detector import (
    compute_head_attention_similarity_score,
    get_duplicate_token_head_detection_pattern,
    get_induction_head_detection_pattern,
    get_previous_token_head_detection_pattern,
)

from attndesk.core.pretrained import load_pretrained, run_pretrained
from attndesk.core.statistics import head_statistics
from attndesk.corpus import analyze_corpus
from attndesk.corpus.batch import PassSettings, run_shard
from attndesk.corpus.metrics import ROLE_RULES, role
from tests.corpus.conftest import TEXTS

PATTERNS = {
    "previous_token_score": get_previous_token_head_detection_pattern,
    "duplicate_token_score": get_duplicate_token_head_detection_pattern,
    "induction_score": get_induction_head_detection_pattern,
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
                for metric, pattern in PATTERNS.items():
                    a = torch.tensor(weights[layer, got.head], dtype=torch.float64)
                    ref = compute_head_attention_similarity_score(
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
        assert role(base | {metric: value}) == name
    assert role(base | {"induction_score": math.nan, "previous": 0.9}) == "previous-token"
