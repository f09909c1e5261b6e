"""The step-through strip shows the core's intermediates, stage by stage, and explains a weight."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from app_helpers import fresh_settings  # noqa: F401  (fresh_settings: autouse fixture)
from einops import rearrange
from PySide6.QtCore import QTimer
from views_helpers import cell_pixel, close_rgb

from attndesk.app.tabs.stepthrough import view as stepthrough
from attndesk.app.tabs.stepthrough.view import STAGES, StepThroughView, stage_images
from attndesk.attention.positional import sinusoidal_encoding
from attndesk.core import AttentionConfig, run_attention
from attndesk.render import colormaps
from attndesk.runs.pipeline import build_model

TEXT = "the cat sat on the mat"
CFG = AttentionConfig(num_heads=2, embed_dim=8, mask="padding+causal", pad_to=8)


@pytest.fixture
def view(qtbot):
    v = StepThroughView()
    qtbot.addWidget(v)
    v.resize(1400, 700)
    v.show()
    return v


def softmax_rows(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    finite = np.isfinite(x)
    m = np.where(finite, x, -np.inf).max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.where(finite, np.exp(x - m), 0.0)
    s = e.sum(axis=-1, keepdims=True)
    return np.divide(e, s, out=np.zeros_like(e), where=s > 0)


def test_every_stage_shows_the_core_intermediate(view):
    result = run_attention(CFG, TEXT, keep_intermediates=True)
    view.set_result(result)
    inter = result.intermediates
    for h in range(2):
        view.set_head(h)
        assert view.head() == h and view.headSpin.value() == h
        for name in STAGES:
            stage = getattr(inter, name)
            expected = stage if name in ("embeddings", "output") else stage[h]
            assert np.array_equal(view.stage_matrix(name), expected)
            assert view.plots[name].matrix is view.stage_matrix(name) or np.array_equal(
                view.plots[name].matrix, expected
            )
            shape = " × ".join(map(str, expected.shape))
            assert f"[{shape}]" in view.plots[name].title.text()


def test_stages_follow_from_each_other(view):
    result = run_attention(CFG, TEXT, keep_intermediates=True)
    view.set_result(result)
    d_k = CFG.head_dim
    model = build_model(CFG, torch.device("cpu"))
    contexts = []
    for h in range(2):
        view.set_head(h)
        s = {name: view.stage_matrix(name).astype(np.float64) for name in STAGES}
        np.testing.assert_allclose(s["scores"], s["q"] @ s["k"].T, atol=1e-5)
        np.testing.assert_allclose(s["scaled"], s["scores"] / math.sqrt(d_k), atol=1e-6)
        finite = np.isfinite(s["masked"])
        assert np.array_equal(finite, result.mask)  # -inf exactly where the mask blocks
        np.testing.assert_array_equal(s["masked"][finite], s["scaled"][finite])
        np.testing.assert_allclose(softmax_rows(s["masked"]), s["weights"], atol=1e-6)  # softmax(masked) = weights
        np.testing.assert_allclose(s["weights"] @ s["v"], s["context"], atol=1e-6)
        contexts.append(s["context"])
    merged = torch.as_tensor(rearrange(np.stack(contexts), "h l d -> l (h d)"), dtype=torch.float32)
    with torch.inference_mode():
        output = model.attention.out_proj(merged).numpy()
    np.testing.assert_allclose(view.stage_matrix("output"), output, atol=1e-5)
    ids = torch.as_tensor(result.token_ids)
    with torch.inference_mode():
        embedded = model.embedding(ids).numpy() + sinusoidal_encoding(len(ids), CFG.embed_dim).numpy()
    np.testing.assert_allclose(view.stage_matrix("embeddings"), embedded, atol=1e-6)


def test_masked_cells_are_hatched_not_coloured(view):
    result = run_attention(CFG, TEXT, keep_intermediates=True)
    view.set_result(result)
    for name in ("masked", "weights"):
        plot = view.plots[name]
        assert np.array_equal(plot.masked, ~result.mask)
        assert plot.overlay.isVisible()
        overlay = plot.overlay.image  # RGBA, k x k pixels per cell
        k = overlay.shape[0] // result.mask.shape[0]
        alpha = overlay[..., 3].reshape(result.mask.shape[0], k, result.mask.shape[1], k).max(axis=(1, 3))
        assert np.array_equal(alpha > 0, ~result.mask)
    assert "−∞" in view.plots["masked"].title.text()
    # on screen: a masked cell shows the grey hatching, an attendable one the weight's colour
    plot = view.plots["weights"]
    rgb = cell_pixel(plot, 0, 5)
    assert rgb[0] == rgb[1] == rgb[2]  # hatching is grey, viridis never is
    w = plot.matrix[1, 0]
    expected = colormaps.map_values(np.array([w]), "viridis", *plot.levels)[0]
    assert close_rgb(cell_pixel(plot, 1, 0), expected)


def test_hover_explains_the_arithmetic_and_highlights_rows(view):
    result = run_attention(CFG, TEXT, keep_intermediates=True)
    view.set_result(result)
    view.set_head(1)
    a = view.hover_weight(4, 2)
    assert a.weight == pytest.approx(float(result.weights[1, 4, 2]), rel=1e-5)
    assert a.stored == float(result.weights[1, 4, 2])
    q = result.intermediates.q[1, 4].astype(np.float64)
    k = result.intermediates.k[1, 2].astype(np.float64)
    assert a.dot == pytest.approx(float(q @ k))
    assert a.scaled == pytest.approx(a.dot / math.sqrt(CFG.head_dim))
    assert view.plots["q"].highlighted()["row"] == (4,)
    assert view.plots["k"].highlighted()["row"] == (2,)
    assert view.plots["weights"].highlighted()["cell"] == (4, 2)
    text = view.arithmeticLabel.text()
    assert f"{a.dot:.6g}" in text and "÷ √d_k" in text and "row sum" in text and f"{a.weight:.6g}" in text
    masked = view.hover_weight(1, 5)  # above the diagonal: causal
    assert masked.masked and masked.weight == 0.0 and "−∞" in view.arithmeticLabel.text()
    view.clear_hover()
    assert view.plots["q"].highlighted()["row"] is None


def test_hover_signal_from_the_weights_plot(view, qtbot):
    result = run_attention(CFG.replace(mask="none"), TEXT, keep_intermediates=True)
    view.set_result(result)
    view.plots["weights"].cellHovered.emit(3, 1)
    assert view.plots["k"].highlighted()["row"] == (1,)
    assert 'query "on" (3)' in view.arithmeticLabel.text()


def test_unscaled_single_head_and_missing_intermediates(view):
    cfg = AttentionConfig(num_heads=1, embed_dim=8, hidden_dim=4, scaled=False, mask="none")
    result = run_attention(cfg, TEXT, keep_intermediates=True)
    view.set_result(result)
    assert view.stage_matrix("q").shape == (6, 4)
    np.testing.assert_array_equal(view.stage_matrix("scaled"), view.stage_matrix("scores"))
    a = view.hover_weight(2, 3)
    assert a.scale == 1.0 and a.weight == pytest.approx(float(result.weights[0, 2, 3]), rel=1e-5)
    view.set_result(run_attention(cfg, TEXT))
    assert "keep_intermediates" in view.infoLabel.text()
    assert view.plots["weights"].matrix is None


def test_long_input_is_downsampled_but_exact_on_hover(view):
    cfg = AttentionConfig(num_heads=2, embed_dim=8, mask="padding", pad_to=600)
    result = run_attention(cfg, TEXT, keep_intermediates=True)
    view.set_result(result)
    plot = view.plots["weights"]
    assert plot.factor > 1 and max(plot.image_data.shape) <= 256
    assert plot.matrix.shape == (600, 600)
    a = view.hover_weight(3, 1)
    assert a.weight == pytest.approx(float(result.weights[0, 3, 1]), rel=1e-5)


def test_cross_attention_labels_keys_on_k_and_v(view):
    result = run_attention(
        AttentionConfig(num_heads=2, embed_dim=8, mask="none"),
        "the cat sat",
        keep_intermediates=True,
        key_text="a dog ran far away",
    )
    view.set_result(result)
    assert view.stage_matrix("k").shape == (5, 4) and view.stage_matrix("weights").shape == (3, 5)
    assert view.plots["k"].row_labels == result.key_tokens
    assert view.plots["q"].row_labels == result.tokens
    assert view.plots["weights"].col_labels == result.key_tokens
    a = view.hover_weight(2, 4)
    assert a.weight == pytest.approx(float(result.weights[0, 2, 4]), rel=1e-5)
    assert view.plots["k"].highlighted()["row"] == (4,)


def test_hovering_any_stage_reads_out_its_exact_value(view):
    assert view.hover_stage("q", 0, 0) is None  # nothing shown yet
    view.set_result(run_attention(CFG, TEXT, keep_intermediates=True))
    text = view.hover_stage("q", 2, 3)
    assert f"{float(view.stage_matrix('q')[2, 3]):.6g}" in text and "dim 3" in text
    assert view.arithmeticLabel.text() == text
    text = view.hover_stage("scaled", 1, 3)
    assert f"{float(view.stage_matrix('scaled')[1, 3]):.6g}" in text and "(3)" in text


def test_step_through_hides_its_strip_without_intermediates(qtbot):
    # e.g. pretrained mode: empty axes titled with the toy run's shapes and d_k were confusing
    from attndesk.app.tabs.stepthrough.view import StepThroughView
    from attndesk.core import AttentionConfig, run_attention

    view = StepThroughView()
    qtbot.addWidget(view)
    view.show()
    config = AttentionConfig(embed_dim=16, num_heads=2)
    view.set_result(run_attention(config, "the cat sat", keep_intermediates=True))
    assert view.stripScroll.isVisible() and view.headSpin.isEnabled()
    view.set_result(run_attention(config, "the cat sat"))  # no intermediates
    assert not view.stripScroll.isVisible() and not view.arithmeticLabel.isVisible()
    assert not view.headSpin.isEnabled()
    assert "intermediates" in view.infoLabel.text()
    view.set_result(run_attention(config, "the cat sat", keep_intermediates=True))
    assert view.stripScroll.isVisible() and view.arithmeticLabel.isVisible()


def test_step_through_stages_are_drawn_one_per_event_loop_turn(qtbot):
    """Soak: Step-through's first draw of a 1,500-token result held the loop 100-120 ms: its
    stage slices were chained with zero timers, which Qt runs back to back in one pass (4 stages
    and 25 paints without the heartbeat ticking). Each stage must now let timers run after it."""
    view = StepThroughView()
    qtbot.addWidget(view)
    view.resize(1400, 700)
    view.show()
    result = run_attention(
        AttentionConfig(num_heads=2, embed_dim=16), "the cat sat on the mat " * 8, keep_intermediates=True
    )
    view.set_preparer(lambda r, head: view.show_stages(r, head, stage_images(r, head)))
    order: list[str] = []
    draw = stepthrough.StepThroughView._draw_stage

    def traced(self, name, *args):
        order.append(name)
        return draw(self, name, *args)

    heartbeat = QTimer(interval=0)  # due on every pass of the event loop
    heartbeat.timeout.connect(lambda: order.append("tick") if not order or order[-1] != "tick" else None)
    try:
        stepthrough.StepThroughView._draw_stage = traced
        heartbeat.start()
        with qtbot.waitSignal(view.drawn, timeout=30_000):
            view.set_result(result)
    finally:
        heartbeat.stop()
        stepthrough.StepThroughView._draw_stage = draw
    stages = [name for name in order if name != "tick"]
    assert stages == list(STAGES)
    first = order.index(STAGES[0])
    back_to_back = [(a, b) for a, b in zip(order[first:], order[first + 1 :]) if a != "tick" and b != "tick"]
    assert not back_to_back, f"stages drawn in one loop turn: {back_to_back} ({order})"
