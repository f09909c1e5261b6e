"""The interactive page's file: its data equals the weights, it is self-contained, sizes are held."""

from __future__ import annotations

import re

import numpy as np
import pytest

from attndesk.attention.types import AttentionMap
from attndesk.core import AttentionConfig, run_attention
from attndesk.render.export import ExportError
from attndesk.render.page import (
    MAX_PAGE_BYTES,
    PageTooLarge,
    decode_array,
    decode_mask,
    page_layers,
    read_page_data,
    write_page,
)
from tests.render.page_helpers import model_page_maps, softmax_map


@pytest.fixture(scope="module")
def toy():
    result = run_attention(AttentionConfig(num_heads=4, embed_dim=16, mask="causal", seed=5), "the cat sat on the mat")
    return result, result.attention_map()


def test_float32_page_holds_the_exact_weights_and_float16_within_1e3(toy, tmp_path):
    result, amap = toy
    exact = write_page(
        [amap], amap.summary, tmp_path / "exact.html", precision="float32", settings=result.config.to_dict()
    )
    doc = read_page_data(exact)
    assert doc["format"] == "attndesk-page" and "layers" not in doc  # one map: its fields at the top
    assert doc["queries"] == amap.queries and doc["keys"] == amap.keys
    assert doc["heads"] == [f"H{h}" for h in range(4)]
    assert doc["weights"]["dtype"] == "float32" and doc["weights"]["shape"] == [4, 6, 6]
    np.testing.assert_array_equal(decode_array(doc["weights"]), result.weights)
    np.testing.assert_array_equal(decode_mask(doc["mask"]), result.mask)
    assert doc["settings"]["num_heads"] == 4 and doc["view"]["colormap"] == "viridis"
    auto = read_page_data(write_page([amap], amap.summary, tmp_path / "auto.html"))
    assert auto["weights"]["dtype"] == "float32"  # small enough to be exact
    half = read_page_data(write_page([amap], amap.summary, tmp_path / "half.html", precision="float16"))
    assert half["weights"]["dtype"] == "float16"
    difference = np.abs(decode_array(half["weights"]) - result.weights).max()
    assert 0 < difference <= 1e-3


def test_the_page_is_self_contained(toy, tmp_path):
    _, amap = toy
    text = write_page([amap], "", tmp_path / "p.html").read_text(encoding="utf-8")
    assert not re.search(r"\b(src|href)\s*=\s*[\"']?(https?:|//)", text)
    assert not re.search(r"<script[^>]*\bsrc=|<link[^>]*stylesheet|@import|url\(\s*[\"']?http", text)
    assert "https://" not in text and "http://" not in text
    assert text.count("<script") == 2  # the data and the inlined script, nothing fetched
    assert "function paint(" in text and ".tile-title" in text  # the package's script and style, inlined


def test_tokens_that_look_like_markup_stay_data(tmp_path):
    amap = softmax_map(2, 3)
    amap.queries = amap.keys = ["</script><b>x", "\u2028", 'a"b']
    doc = read_page_data(write_page([amap], "<summary>", tmp_path / "p.html"))
    assert doc["queries"] == ["</script><b>x", "\u2028", 'a"b'] and doc["summary"] == "<summary>"


def test_six_layers_of_twelve_heads_over_128_tokens_fit_in_4_mb(tmp_path):
    maps = model_page_maps(6, 12, 128)
    path = write_page(maps, "synthetic", tmp_path / "model.html")
    assert path.stat().st_size <= MAX_PAGE_BYTES
    layers = page_layers(read_page_data(path))
    assert {entry["weights"]["dtype"] for entry in layers} == {"float16"}  # float32 would not fit
    assert [entry["layer"] for entry in layers] == list(range(6))
    for entry, pm in zip(layers, maps):
        assert np.abs(decode_array(entry["weights"]) - pm.map.weights).max() <= 1e-3
    with pytest.raises(PageTooLarge, match="float16"):  # the same run exact: over the limit, says what fits
        write_page(maps, "", tmp_path / "exact.html", precision="float32")
    with pytest.raises(PageTooLarge, match=r"what fits: 4 layer\(s\)"):
        write_page(model_page_maps(6, 12, 160), "", tmp_path / "big.html")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.html"]


def test_refusals_write_nothing(tmp_path):
    amap = softmax_map(2, 4)
    with pytest.raises(ExportError, match="does not exist"):
        write_page([amap], "", tmp_path / "missing" / "p.html")
    with pytest.raises(ExportError, match=r"\.html"):
        write_page([amap], "", tmp_path / "p.htm")
    overview = AttentionMap(
        queries=["a", "b"], keys=["a", "b"], weights=np.zeros((1, 1, 1), np.float32), pyramid=object()
    )
    with pytest.raises(ExportError, match="--region"):
        write_page([overview], "", tmp_path / "o.html")
    assert list(tmp_path.iterdir()) == []
