"""The page of a corpus store (``attndesk render --store``): its heads grid and texts table are the
store's own numbers (read back with DuckDB), and the chosen texts' attention is the attention the
corpus pass measured (its per-text entropy and first-token share, recomputed from the page)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attndesk.cli import main
from attndesk.corpus.metrics import METRICS
from attndesk.render.page import PageTooLarge, decode_array, read_page_data
from attndesk.render.page_corpus import corpus_page_data


def _same(page_value, store_value) -> bool:
    if store_value is None or (isinstance(store_value, float) and math.isnan(store_value)):
        return page_value is None
    return page_value == float(store_value)


def test_the_page_holds_the_stores_numbers_and_the_texts_attention(bert_store, tmp_path, capsys):
    code = main(
        ["render", "--store", str(bert_store.path), "--format", "html", "--texts", "0,7", "--out", str(tmp_path)]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = read_page_data(out.strip())
    grid = doc["corpus"]
    heads = bert_store.sql("SELECT * FROM heads")  # DuckDB's view over heads.parquet
    assert len(heads) == len(grid["rows"]) * grid["heads"] == 2 * 4
    for row in heads.to_dict("records"):
        r = [(g["part"], g["layer"]) for g in grid["rows"]].index((row["part"], row["layer"]))
        assert grid["roles"][r][row["head"]] == row["role"]
        for m in METRICS:
            assert _same(grid["values"][m][r][row["head"]], row[m]), (m, row)
    table = grid["texts"]
    texts = bert_store.sql("SELECT text_id, tokens, cut, text FROM texts ORDER BY text_id")
    assert table["total"] == len(texts) == len(table["rows"])
    col = table["columns"].index
    entropy = bert_store.sql("SELECT text_id, avg(entropy) AS e FROM per_text GROUP BY text_id ORDER BY text_id")
    for page_row, store_row, e in zip(table["rows"], texts.to_dict("records"), entropy["e"]):
        assert page_row[col("text_id")] == store_row["text_id"] and page_row[col("tokens")] == store_row["tokens"]
        assert page_row[col("cut")] == store_row["cut"] and page_row[col("text")] == store_row["text"]
        assert page_row[col("entropy")] == pytest.approx(float(e), rel=1e-12)
    # the texts' attention: the corpus pass's per-text metrics, recomputed from the page's weights
    assert [(e["text_id"], e["layer"]) for e in doc["layers"]] == [(0, 0), (0, 1), (7, 0), (7, 1)]
    per_text = bert_store.sql("SELECT text_id, layer, head, entropy, first FROM per_text ORDER BY text_id, layer, head")
    for entry in doc["layers"]:
        w = decode_array(entry["weights"]).astype(np.float64)  # float32: the exact weights
        assert entry["weights"]["dtype"] == "float32"
        want = per_text[(per_text.text_id == entry["text_id"]) & (per_text.layer == entry["layer"])]
        ent = -(w * np.log(np.where(w > 0, w, 1))).sum(-1).mean(-1)
        np.testing.assert_allclose(ent, want["entropy"], rtol=1e-4)
        np.testing.assert_allclose(w[:, :, 0].mean(-1), want["first"], rtol=1e-4, atol=1e-6)
    assert len(doc["layers"][2]["queries"]) == 16  # text 7 was cut at max_tokens, as the pass cut it


def test_no_texts_a_bad_text_and_a_page_too_small_are_refused_cleanly(bert_store, tmp_path, capsys):
    doc = corpus_page_data(bert_store, [])
    assert doc["layers"] == [] and doc["corpus"]["metric"] == "entropy"
    code = main(
        ["render", "--store", str(bert_store.path), "--format", "html", "--texts", "99", "--out", str(tmp_path)]
    )
    assert code == 2 and "no text 99" in capsys.readouterr().err
    code = main(["render", "--store", str(bert_store.path), "--format", "png", "--out", str(tmp_path)])
    assert code == 2 and "--format html" in capsys.readouterr().err
    code = main(["render", "--store", str(tmp_path), "--format", "html", "--out", str(tmp_path / "x")])
    assert code == 2 and "not an attndesk corpus store" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(PageTooLarge, match="fewer or shorter texts"):
        corpus_page_data(bert_store, [0, 7], limit=80_000)
