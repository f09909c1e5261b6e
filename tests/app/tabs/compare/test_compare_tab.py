"""Compare's one-click modern-variant pairs and its K/V-cache table, in the real main window: each
button runs A and B in a side job with only that difference, B equals the core's run of the changed
config (GQA: torch's SDPA over A's pooled K/V heads), the plots draw B and B − A, and the table holds
``teaching.kv_cost``'s numbers for the current shape."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from app_helpers import dispose, fresh_settings, shown_window  # noqa: F401  (fresh_settings: autouse fixture)
from PySide6.QtCore import Qt

from attndesk.core import run_attention
from attndesk.system.free_memory import format_bytes
from attndesk.teaching.kv_cost import CACHE_LENGTHS, kv_cache_table, window_cache_row
from tests.conftest import TIMEOUT_MS


@pytest.fixture
def compare_window(qtbot):
    w = shown_window(qtbot, (1300, 850), TIMEOUT_MS)
    with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS):
        w.state.set_config(num_heads=4, embed_dim=32, mask="causal")
    w.state.view.tab = "compare"
    qtbot.wait(50)
    yield w
    dispose(w)


def click_pair(qtbot, w, kind):
    view = w.tab_widget("compare")
    with qtbot.waitSignal(w.tab_presenter("compare").teachingShown, timeout=TIMEOUT_MS) as blocker:
        qtbot.mouseClick(view.teachButtons[kind], Qt.MouseButton.LeftButton)
    return blocker.args[0]


def check_drawn(view, t):
    """The plots show A and B (mean over heads) and B − A exactly."""
    a_plot, b_plot, diff_plot = view.displayed()
    np.testing.assert_array_equal(a_plot, t.a.weights.mean(axis=0))
    np.testing.assert_array_equal(b_plot, t.b.weights.mean(axis=0))
    want = (t.b.weights.astype(np.float64) - t.a.weights.astype(np.float64)).mean(axis=0)
    np.testing.assert_allclose(diff_plot, want, atol=1e-12)
    assert view.explanationText.isVisible() and t.title in view.explanationText.toPlainText()


@pytest.mark.parametrize("kind,changed", [("rope", {"position": "rope"}), ("window", {"window": 2}), ("softcap", None)])
def test_variant_pair_b_is_the_changed_config(qtbot, compare_window, kind, changed):
    w = compare_window
    view = w.tab_widget("compare")
    config, text = w.state.config, w.state.text
    n = len(w.displayed_result().toy.result.tokens)
    assert view.teachButtons["window"].text() == f"full vs window {max(2, n // 4)}" and n // 4 == 2
    t = click_pair(qtbot, w, kind)
    if changed is None:  # the cap is chosen from A's scores: B is the run with that cap
        assert t.a.config.softcap is None and t.b.config.softcap > 0
        changed = {"softcap": t.b.config.softcap}
    want_b = run_attention(config.replace(**changed), text)
    np.testing.assert_array_equal(t.b.weights, want_b.weights)
    np.testing.assert_array_equal(t.b.output, want_b.output)
    off = {"rope": {"position": "sinusoidal"}, "window": {"window": None}, "softcap": {"softcap": None}}[kind]
    # (the soft-cap pair's A keeps its stages to pick the cap: the reference path, not the fast one)
    a = run_attention(config.replace(**off), text, keep_intermediates=kind == "softcap")
    np.testing.assert_array_equal(t.a.weights, a.weights)
    assert t.b.config == config.replace(**changed)
    check_drawn(view, t)


def test_mha_vs_gqa_b_is_sdpa_over_pooled_kv_heads(qtbot, compare_window):
    w = compare_window
    view = w.tab_widget("compare")
    t = click_pair(qtbot, w, "gqa")
    config = w.state.config
    assert t.b.config == config.replace(kv_heads=2) and t.a.config.num_kv_heads == 4
    a = run_attention(config, w.state.text, keep_intermediates=True)
    inter = a.intermediates
    q, k, v = (torch.from_numpy(x) for x in (inter.q, inter.k, inter.v))  # [4, L, 8]
    pooled_k, pooled_v = (x.reshape(2, 2, *x.shape[1:]).mean(dim=1) for x in (k, v))  # groups (0, 1), (2, 3)
    mask = torch.from_numpy(np.ascontiguousarray(a.mask))
    out = F.scaled_dot_product_attention(
        q[None], pooled_k.repeat_interleave(2, 0)[None], pooled_v.repeat_interleave(2, 0)[None], attn_mask=mask
    )[0]
    scores = (q @ pooled_k.repeat_interleave(2, 0).transpose(1, 2)) * 8**-0.5
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1)
    np.testing.assert_allclose(t.b.weights, weights.numpy(), atol=1e-6)
    context = np.einsum("hqk,hkd->hqd", t.b.weights, pooled_v.repeat_interleave(2, 0).numpy())
    np.testing.assert_allclose(context, out.numpy(), atol=1e-5)
    np.testing.assert_array_equal(t.a.weights, a.weights)
    check_drawn(view, t)
    assert [r.kv_heads for r in t.kv_cache] == [4, 2, 1]


def test_kv_cache_table_holds_kvcache_numbers(qtbot, compare_window):
    w = compare_window
    table = w.tab_widget("compare").kvCache
    config = w.state.config
    n = len(w.displayed_result().toy.result.tokens)
    want = [*kv_cache_table(config), window_cache_row(config, max(2, n // 4))]
    assert [(r.label, r.bytes) for r in table.rows()] == [(r.label, r.bytes) for r in want]
    assert table.table.rowCount() == len(want) == 4 and table.isVisible()
    for r, row in enumerate(want):
        assert table.cell_text(r, 0) == row.label and table.cell_text(r, 1) == format_bytes(row.bytes_per_token)
        for c, tokens in enumerate(CACHE_LENGTHS, start=2):
            assert table.cell_text(r, c) == format_bytes(row.bytes[tokens])
        assert table.table.item(r, 0).font().bold() == row.current
    assert want[0].bytes[131072] == 2 * 4 * 8 * 131072 * 4  # MHA: K and V, 4 heads x 8 dims, float32
    assert want[3].bytes[131072] == want[3].bytes_per_token * 2  # the window keeps 2 tokens
    assert "Why GQA exists" in table.whyLabel.text()
    # a new shape: new numbers; one head: nothing to share, the GQA pair is off and says why
    with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS):
        w.state.set_config(num_heads=1, embed_dim=32, hidden_dim=16, kv_heads=None)
    config = w.state.config
    assert [r.bytes for r in table.rows()][:1] == [kv_cache_table(config)[0].bytes]
    gqa = w.tab_widget("compare").teachButtons["gqa"]
    assert not gqa.isEnabled() and "one head has nothing to share" in gqa.toolTip()
