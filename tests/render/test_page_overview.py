"""The overview page of a run too large for an exact page: the whole input's tile maxima (the
long-document pyramid's level) plus the exact weights of one region, in one file under 4 MB."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attndesk.app.window.export_dialog import ExportDialog
from attndesk.core import AttentionConfig, run_attention
from attndesk.render.page import (
    MAX_PAGE_BYTES,
    PageTooLarge,
    check_page_size,
    decode_array,
    decode_mask,
    read_page_data,
)
from attndesk.render.page_overview import write_overview_page
from attndesk.runs.pyramid import PyramidBuilder

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]
REGION = ((1000, 1100), (950, 1100))


@pytest.fixture(scope="module")
def runs():
    """A 2,000-token causal toy run, with every weight and memory-bounded (a pyramid)."""
    text = " ".join(WORDS[i % len(WORDS)] for i in range(2000))
    config = AttentionConfig(embed_dim=32, num_heads=4, mask="causal", seed=1)
    full = run_attention(config, text)
    bounded = run_attention(config.replace(memory_budget=8_000_000), text)
    assert full.plan.kind == "full" and bounded.plan.kind == "pyramid" and full.shape == (2000, 2000)
    return full, bounded


def test_a_pyramid_runs_page_holds_its_level_and_the_exact_region(runs, tmp_path):
    full, bounded = runs
    amap = bounded.attention_map()
    path = write_overview_page([amap], amap.summary, tmp_path / "long.html", region=REGION)
    assert path.stat().st_size <= MAX_PAGE_BYTES
    doc = read_page_data(path)
    over = doc["overview"]
    level = bounded.pyramid.levels[over["level"]]
    assert over["factor"] == level.factor and (over["rows"], over["cols"]) == (2000, 2000)
    np.testing.assert_array_equal(decode_array(over["weights"]), level.max)  # every head and the mean, exactly
    np.testing.assert_array_equal(decode_mask(over["mask"]), ~level.all_masked)
    (q0, q1), (k0, k1) = REGION
    region = decode_array(doc["weights"])
    assert doc["weights"]["dtype"] == "float32" and doc["first_query"] == q0 and doc["first_key"] == k0
    np.testing.assert_allclose(region, full.weights[:, q0:q1, k0:k1], atol=2e-6)
    np.testing.assert_array_equal(decode_mask(doc["mask"]), full.mask[q0:q1, k0:k1])
    assert doc["queries"] == full.attention_map().queries[q0:q1]


def test_a_full_runs_overview_is_the_pyramid_the_core_builds(runs, tmp_path):
    full, _ = runs
    amap = full.attention_map()
    with pytest.raises(PageTooLarge, match="--page-overview"):
        check_page_size([amap])
    path = write_overview_page([amap], amap.summary, tmp_path / "long.html")
    assert path.stat().st_size <= MAX_PAGE_BYTES
    doc = read_page_data(path)
    over = doc["overview"]
    builder = PyramidBuilder(4, 2000, 2000, over["factor"])
    for head in range(4):
        builder.add(head, 0, torch.from_numpy(full.weights[head]))
    builder.end_block(0, 2000)
    tiles = decode_array(over["weights"])
    tol = 5e-4 if over["weights"]["dtype"] == "float16" else 0
    np.testing.assert_allclose(tiles, builder.maxes.numpy(), atol=tol, rtol=1e-3 if tol else 0)
    assert max(tiles.shape[1:]) <= 512 and over["level"] == -1
    # without a region: the first 128 x 128 tokens, exactly
    assert doc["first_query"] == 0 and len(doc["keys"]) == 128
    np.testing.assert_array_equal(decode_array(doc["weights"]), full.weights[:, :128, :128])


def test_a_region_too_large_to_leave_room_is_refused(runs, tmp_path):
    _, bounded = runs
    amap = bounded.attention_map()
    with pytest.raises(PageTooLarge, match="smaller region"):
        write_overview_page([amap], "", tmp_path / "x.html", region=((0, 500), (0, 500)), precision="float32")
    assert not (tmp_path / "x.html").exists()


def test_the_export_dialog_offers_the_overview_page(qtbot, runs, tmp_path):
    _, bounded = runs
    amap = bounded.attention_map()
    dialog = ExportDialog(amap, target="all", region=REGION)
    qtbot.addWidget(dialog)
    dialog.set_format("html")  # the exact region alone fits too
    assert dialog.exportButton.isEnabled()
    dialog.set_format("overview")
    assert dialog.pathEdit.text().endswith("_overview_q1000-1099_k950-1099.html") and dialog.exportButton.isEnabled()
    dialog.set_path(tmp_path / "view.html")
    doc = read_page_data(dialog.export())
    assert doc["first_query"] == 1000 and doc["overview"]["rows"] == 2000
