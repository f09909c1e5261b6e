"""The real window at a few sizes and head counts: no heatmap title, map, label band, group header
or footer line overlaps another (their rectangles are known), and the grid uses its space.

The same functions (scripts/screenshot.py) make the README pictures.
"""

from __future__ import annotations

import numpy as np
import pytest
from app_helpers import dispose, fresh_settings  # noqa: F401  (fresh_settings: autouse fixture)
from PySide6.QtCore import QRectF

from attndesk.app.sources.long_source import source_for_map
from attndesk.attention.types import AttentionMap
from scripts.screenshot import layout_problems, open_window, png_bytes, settle, show_values

SIZES = [(1400, 900), (1000, 700)]
HEADS = [(4, 64), (8, 64), (12, 96), (16, 64)]


@pytest.fixture(params=SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def sized_window(request, qapp):
    w = open_window(request.param)
    yield w
    dispose(w)


def used_share(panel) -> float:
    """The share of the canvas (less the colour bar's strip) the maps cover."""
    layout = panel.grid_layout()
    maps = sum(layout.map_rect(i).w * layout.map_rect(i).h for i in range(layout.spec.n))
    return maps / ((panel.canvas.width() - 80) * panel.canvas.height())


def test_no_heatmap_item_overlaps_another_at_any_head_count(sized_window):
    panel = sized_window.heatmapPanel
    for heads, embed in HEADS:
        show_values(sized_window, {"num_heads": heads, "embed_dim": embed, "mask": "padding+causal", "pad_to": 14})
        assert panel.displayed_heads() == list(range(heads))
        assert layout_problems(panel) == [], f"{heads} heads at {sized_window.width()}x{sized_window.height()}"
        assert used_share(panel) > 0.3, f"{heads} heads leave most of the panel empty"
        assert png_bytes(sized_window).startswith(b"\x89PNG")


def test_the_check_finds_an_overlap_when_there_is_one(sized_window):
    panel = sized_window.heatmapPanel
    show_values(sized_window, {"num_heads": 8})
    cells = panel.canvas.active()
    cells[1].vb.setGeometry(QRectF(cells[0].vb.geometry().translated(20, 10)))  # a map pushed onto its neighbour
    problems = layout_problems(panel)
    assert any("map 0" in p and "map 1" in p for p in problems)
    panel.note.setText("a very long note " * 40)  # elided to its own width: still no footer problem
    settle(50)
    assert not any("footer" in p for p in layout_problems(panel))


def decoder_map(heads: int = 8, kv: int = 2, length: int = 12, window: int = 4) -> AttentionMap:
    """A hand-built grouped-query, windowed, ALiBi decoder layer with an attention sink."""
    rng = np.random.default_rng(7)
    i, j = np.indices((length, length))
    mask = (j <= i) & (i - j < window)
    w = rng.random((heads, length, length)) * mask
    w[:, :, 0] += 3.0 * (np.arange(length) < window)  # the first token takes most weight where it is in reach
    w = np.where(mask, w, 0.0)
    w /= w.sum(-1, keepdims=True)
    tokens = [f"t{k}" for k in range(length)]
    return AttentionMap(
        queries=tokens,
        keys=tokens,
        weights=w.astype(np.float32),
        mask=mask,
        title="decoder layer 3",
        kv_heads=kv,
        window=window,
        layer_kind="local",
        alibi_slopes=2.0 ** -np.arange(1, heads + 1),
        file_tag="dec_layer3",
    )


def test_decoder_features_are_drawn_and_do_not_overlap(qtbot, sized_window):
    panel = sized_window.heatmapPanel
    m = decoder_map()

    def drawn() -> None:
        qtbot.waitUntil(lambda: not panel.is_building(), timeout=10000)

    panel.set_source(source_for_map(m))
    drawn()
    kinds = [kind for kind, _i, _r in panel.geometry()]
    assert kinds.count("group") >= 2 and layout_problems(panel) == []
    assert panel.canvas.group_headers() == ["kv 0: q 0\u20133", "kv 1: q 4\u20137"]
    assert panel.layerBadge.text() == "local layer \u00b7 window 4" and panel.alibiAction.isVisible()
    cell = panel.canvas.active()[0]
    assert cell.band.isVisible() and not cell.band.path().isEmpty()  # the window's edge
    assert cell.title_text == "H0 \u00b7 m=1/2"
    # sink-aware colours: log10 of the weights, from the floor up
    panel.set_log_scale(True)
    lo, hi = panel.image_levels()[0]
    assert lo == pytest.approx(-3.0) and hi == pytest.approx(np.log10(m.weights.max()), abs=1e-6)
    np.testing.assert_allclose(panel.displayed_arrays()[0], np.log10(np.maximum(m.weights[0], 1e-3)), rtol=1e-6)
    # the first token hidden, rows renormalised, and the footer says so
    panel.set_hide_first_key(True)
    drawn()
    assert panel.source().shape == (12, 11) and "renormalised" in panel.note.text()
    assert panel.layerBadge.text().endswith("'t0' hidden, renormalised \u00b7 log colours")
    rows = panel.source().weights.sum(-1)
    np.testing.assert_allclose(rows[rows > 0], 1.0, rtol=1e-5)
    assert 'key "t3" (3)' in panel.hover_cell(5, 2)  # key positions stay the tokens' own
    assert layout_problems(panel) == []
    # ALiBi's bias instead of the weights
    panel.set_show_alibi_bias(True)
    drawn()
    np.testing.assert_allclose(panel.displayed_arrays()[1], -0.25 * np.abs(np.subtract.outer(range(12), range(12))))
    assert "bias" in panel.hover_cell(5, 2)
    for setter in (panel.set_show_alibi_bias, panel.set_hide_first_key, panel.set_log_scale):
        setter(False)
    assert panel.source().map is m
    panel.set_view_target(5)  # enlarged: both axes labelled (an axis hidden in the grid must come back)
    assert panel.displayed_heads() == [5] and layout_problems(panel) == []
    panel.set_view_target("all")
    drawn()
    assert layout_problems(panel) == []
