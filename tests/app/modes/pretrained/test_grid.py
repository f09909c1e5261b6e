"""Pretrained-mode widgets: thumbnails show the real weights, clicks and Ctrl+clicks signal the right
(layer, head), exports are real files."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPoint, QRectF, Qt
from PySide6.QtGui import QColor, QImage

from attndesk.app.modes.pretrained.controls import PretrainedControls, describe_run
from attndesk.app.modes.pretrained.grid import LayerHeadGrid
from attndesk.app.modes.pretrained.painting import LayerGridPainting, export_painting
from attndesk.models import PretrainedResult, load_pretrained, run_pretrained
from attndesk.render.colormaps import lookup_table, mask_rgb
from attndesk.render.export import ExportError


def _synthetic(layers=3, heads=4, length=6, seed=0, causal=False, ablate=()):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(layers, heads, length, length)) * 2
    if causal:
        logits = np.where(np.tril(np.ones((length, length), bool)), logits, -np.inf)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    w = (w / w.sum(-1, keepdims=True)).astype(np.float32)
    tokens = ["[CLS]", *(f"t{i}" for i in range(1, length - 1)), "[SEP]"]
    special = np.array([True] + [False] * (length - 2) + [True])
    return PretrainedResult(
        model_name="synthetic",
        tokens=tokens,
        token_ids=np.arange(length),
        special=special,
        weights=w,
        hidden_states=np.zeros((layers + 1, length, 8), np.float32),
        embedding=np.zeros(8, np.float32),
        timings={"total": 0.001},
        device="cpu",
        causal=causal,
        ablate=tuple(ablate),
        mask=np.tril(np.ones((length, length), bool)) if causal else None,
    )


def _rgb(image: QImage, x: int, y: int) -> tuple[int, int, int]:
    c = QColor(image.pixel(x, y))
    return c.red(), c.green(), c.blue()


@pytest.fixture
def grid(qtbot):
    widget = LayerHeadGrid()
    qtbot.addWidget(widget)
    widget.resize(600, 400)
    return widget


def test_thumbnails_are_the_weights(grid):
    result = _synthetic()
    grid.set_result(result)
    painting = grid.painting()
    assert (painting.num_layers, painting.num_heads) == (3, 4)
    lut = lookup_table("viridis")
    for layer, head in [(0, 0), (2, 3)]:
        image = painting.images[layer][head]
        assert (image.width(), image.height()) == (6, 6)
        w = result.weights[layer, head]
        expected = lut[np.rint(w / w.max() * 255).astype(int)]  # per-head scale: 0..its max
        got = np.array([[_rgb(image, k, q) for k in range(6)] for q in range(6)])
        np.testing.assert_array_equal(got, expected)


def test_widget_pixels_show_each_cell(grid):
    result = _synthetic()
    grid.set_result(result)
    shot = grid.grab().toImage()
    rect = grid.cell_rect(1, 2)
    cell = rect.width() / 6
    w = result.weights[1, 2]
    lut = lookup_table("viridis")
    for q, k in [(0, 0), (3, 5), (5, 1)]:
        x, y = int(rect.left() + (k + 0.5) * cell), int(rect.top() + (q + 0.5) * cell)
        assert _rgb(shot, x, y) == tuple(lut[int(np.rint(w[q, k] / w.max() * 255))])


def test_click_activates_and_ctrl_click_ablates(grid, qtbot):
    grid.set_result(_synthetic())
    centre = grid.cell_rect(2, 1).center().toPoint()
    with qtbot.waitSignal(grid.headActivated, timeout=1000) as blocker:
        qtbot.mouseClick(grid, Qt.MouseButton.LeftButton, pos=centre)
    assert blocker.args == [2, 1] and grid.current() == (2, 1)
    target = grid.cell_rect(0, 3).center().toPoint()
    before = grid.grab().toImage()
    with qtbot.waitSignal(grid.ablationChanged, timeout=1000) as blocker:
        qtbot.mouseClick(grid, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.ControlModifier, pos=target)
    assert blocker.args == [[(0, 3)]] and grid.ablated() == [(0, 3)]
    after = grid.grab().toImage()
    corner = grid.cell_rect(0, 3).topLeft().toPoint() + QPoint(2, 2)  # on the red cross
    assert _rgb(after, corner.x(), corner.y()) != _rgb(before, corner.x(), corner.y())
    with qtbot.waitSignal(grid.ablationChanged, timeout=1000) as blocker:
        qtbot.mouseClick(grid, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.ControlModifier, pos=target)
    assert blocker.args == [[]]


def test_gap_and_margin_hit_nothing(grid, qtbot):
    grid.set_result(_synthetic())
    painting = grid.painting()
    rect = QRectF(grid.rect())
    assert painting.hit(rect, grid.cell_rect(0, 0).center()) == (0, 0)
    r = grid.cell_rect(0, 0)
    assert painting.hit(rect, r.topRight() + type(r.topRight())(1.5, 5)) is None  # the gap
    assert painting.hit(rect, type(r.topLeft())(3, 3)) is None  # the label margin
    with qtbot.assertNotEmitted(grid.headActivated):
        qtbot.mouseClick(grid, Qt.MouseButton.LeftButton, pos=QPoint(3, 3))


def test_result_ablations_are_marked(grid):
    grid.set_result(_synthetic(ablate=[(1, 1)]))
    assert grid.ablated() == [(1, 1)] and grid.painting().ablated == {(1, 1)}


def test_hide_special_drops_rows_without_renormalising(grid):
    result = _synthetic()
    grid.set_result(result, hide_special=True)
    painting = grid.painting()
    np.testing.assert_array_equal(painting.weights, result.weights[:, :, 1:5, 1:5])
    assert painting.weights.sum(-1).max() < 1.0
    assert "not re-normalised" in painting.caption


def test_causal_cells_use_the_mask_colour(grid):
    result = _synthetic(causal=True)
    grid.set_result(result)
    image = grid.painting().images[0][0]
    assert _rgb(image, 5, 0) == mask_rgb("viridis")  # above the diagonal: masked
    assert _rgb(image, 0, 5) != mask_rgb("viridis")


def test_long_inputs_are_max_tiled():
    w = np.zeros((1, 1, 200, 200), np.float32)
    w[0, 0, 101, 7] = 1.0  # one sharp weight must survive downsampling
    painting = LayerGridPainting(w)
    image = painting.images[0][0]
    assert painting.factor == 4 and (image.width(), image.height()) == (50, 50)
    top = tuple(lookup_table("viridis")[255])
    assert _rgb(image, 1, 25) == top and _rgb(image, 2, 25) != top


def test_scale_and_colormap_switches(grid):
    result = _synthetic()
    grid.set_result(result)
    grid.set_scale("shared")
    w = result.weights[0, 0]
    top = float(result.weights.max())
    expected = tuple(lookup_table("viridis")[int(np.rint(w[0, 0] / top * 255))])
    assert _rgb(grid.painting().images[0][0], 0, 0) == expected
    grid.set_colormap("magma")
    assert _rgb(grid.painting().images[0][0], 0, 0) == tuple(lookup_table("magma")[int(np.rint(w[0, 0] / top * 255))])
    with pytest.raises(ValueError):
        grid.set_colormap("no-such-map")
    with pytest.raises(ValueError):
        grid.set_weights(np.zeros((2, 3, 4)))


def test_controls_signals_and_summary(qtbot):
    controls = PretrainedControls()
    qtbot.addWidget(controls)
    result = _synthetic(ablate=[(0, 1)])
    result.cosine_to_normal = 0.9321
    controls.set_result(result)
    assert controls.layer_spin.maximum() == 2 and controls.clear_button.isEnabled()
    assert "cosine to the normal embedding 0.9321" in controls.summary.text()
    with qtbot.waitSignal(controls.layerChanged, timeout=1000) as blocker:
        controls.layer_spin.setValue(2)
    assert blocker.args == [2]
    with qtbot.waitSignal(controls.allLayersToggled, timeout=1000) as blocker:
        controls.all_layers_check.setChecked(True)
    assert blocker.args == [True] and not controls.layer_spin.isEnabled()
    with qtbot.waitSignal(controls.hideSpecialToggled, timeout=1000):
        controls.hide_special_check.setChecked(True)
    with qtbot.waitSignal(controls.clearAblationRequested, timeout=1000):
        controls.clear_button.click()


def test_real_model_grid_and_export(grid, tmp_path):
    result = run_pretrained(load_pretrained(), "The cat sat on the mat.")
    grid.set_result(result)
    painting = grid.painting()
    assert (painting.num_layers, painting.num_heads) == (6, 12)
    png = export_painting(painting, tmp_path / "grid.png", size=(800, 420))
    image = QImage(str(png))
    assert (image.width(), image.height()) == (800, 420)
    svg = export_painting(painting, tmp_path / "grid.svg").read_text()
    assert ">L5<" in svg and ">H11<" in svg
    assert "colour: each head" in svg and "Ctrl+click" not in svg  # the on-screen hint is not exported
    pdf = export_painting(painting, tmp_path / "grid.pdf").read_bytes()
    assert pdf.startswith(b"%PDF")
    with pytest.raises(ExportError):
        export_painting(painting, tmp_path / "grid.bmp")
    with pytest.raises(ExportError):
        export_painting(painting, tmp_path / "missing" / "grid.png")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grid.pdf", "grid.png", "grid.svg"]
    assert "6 layers x 12 heads" in describe_run(result)


def test_export_all_weights_npy_and_csv(tmp_path):
    import csv

    from attndesk.app.modes.pretrained.painting import export_all_weights

    result = _synthetic()
    npy = export_all_weights(result, tmp_path / "all.npy")
    np.testing.assert_array_equal(np.load(npy), result.weights)
    hidden = export_all_weights(result, tmp_path / "visible.npy", hide_special=True)
    np.testing.assert_array_equal(np.load(hidden), result.weights[:, :, 1:5, 1:5])
    rows = list(csv.DictReader(export_all_weights(result, tmp_path / "all.csv").open()))
    assert len(rows) == 3 * 4 * 6 * 6
    row = next(r for r in rows if (r["layer"], r["head"], r["query"], r["key"]) == ("2", "1", "3", "5"))
    assert row["query_token"] == "t3" and row["key_token"] == "[SEP]"
    assert float(row["weight"]) == pytest.approx(float(result.weights[2, 1, 3, 5]), rel=1e-6)
    with pytest.raises(ExportError):
        export_all_weights(result, tmp_path / "all.txt")
    assert not (tmp_path / "all.txt").exists()
    big = _synthetic(layers=6, heads=12, length=200)
    with pytest.raises(ExportError, match=r"export .npy instead"):
        export_all_weights(big, tmp_path / "big.csv")
    assert not (tmp_path / "big.csv").exists()


def test_keyboard_moves_opens_and_ablates(grid, qtbot):
    grid.set_result(_synthetic())
    qtbot.keyClick(grid, Qt.Key.Key_Right)  # nothing highlighted yet: starts at (0, 0)
    assert grid.current() == (0, 0)
    for key in (Qt.Key.Key_Right, Qt.Key.Key_Right, Qt.Key.Key_Down, Qt.Key.Key_Down, Qt.Key.Key_Down):
        qtbot.keyClick(grid, key)
    assert grid.current() == (2, 2)  # the last Down stops at the bottom row
    with qtbot.waitSignal(grid.headActivated, timeout=1000) as blocker:
        qtbot.keyClick(grid, Qt.Key.Key_Return)
    assert blocker.args == [2, 2]
    with qtbot.waitSignal(grid.ablationChanged, timeout=1000) as blocker:
        qtbot.keyClick(grid, Qt.Key.Key_Space)
    assert blocker.args == [[(2, 2)]]
