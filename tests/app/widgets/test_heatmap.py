"""MatrixPlot: exact matrix kept, downsampled drawing, hatching for non-finite cells, exports."""

from __future__ import annotations

import time

import numpy as np
import pytest
from app_helpers import fresh_settings  # noqa: F401  (fresh_settings: autouse fixture)
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QFileDialog

from attndesk.app.widgets.heatmap import MatrixPlot, display_reduce
from attndesk.render import ExportError


@pytest.fixture
def plot(qtbot):
    p = MatrixPlot("<b>scores</b> [3 × 4]")
    qtbot.addWidget(p)
    p.resize(400, 400)
    p.show()
    return p


def test_display_reduce_max_for_weights_mean_for_signed():
    w = np.zeros((600, 600))
    w[5, 7] = 0.9
    image, hidden, factor = display_reduce(w, np.zeros_like(w, dtype=bool))
    assert factor == 3 and image.shape == (200, 200) and image[1, 2] == 0.9  # a sharp weight survives
    signed = np.tile([[1.0, -1.0]], (300, 300))  # [300, 600]
    masked = np.zeros(signed.shape, dtype=bool)
    masked[:, 1::2] = True  # only the +1 columns count
    image, hidden, factor = display_reduce(signed, masked)
    assert factor == 3 and np.allclose(image, 1.0) and not hidden.any()
    masked[:] = True
    assert display_reduce(signed, masked)[1].all()


def test_non_finite_cells_are_hatched_and_diverging_levels_symmetric(plot):
    m = np.array([[1.0, -np.inf, -2.0, 0.5], [0.0, 3.0, -np.inf, 1.0], [-1.0, 0.0, 0.0, 0.0]])
    plot.set_matrix(m, diverging=True)
    assert plot.levels == (-3.0, 3.0)
    assert np.array_equal(plot.masked, ~np.isfinite(m))
    assert plot.overlay.isVisible()
    plot.set_matrix(np.abs(np.nan_to_num(m, neginf=0)))
    assert plot.levels == (0.0, 3.0) and not plot.overlay.isVisible()


def test_exports_numbers_and_figures(plot, tmp_path):
    m = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    plot.set_matrix(m, row_labels=["a", "b", "c"], col_labels=["w", "x", "y", "z"])
    plot.export(str(tmp_path / "m.npy"))
    assert np.array_equal(np.load(tmp_path / "m.npy"), m)
    plot.export(str(tmp_path / "m.csv"))
    lines = (tmp_path / "m.csv").read_text().splitlines()
    assert lines[0].split(",")[1:] == ["w", "x", "y", "z"] and lines[2].startswith("b,")
    plot.export(str(tmp_path / "m.png"))
    image = QImage(str(tmp_path / "m.png"))
    assert not image.isNull() and image.width() > 50
    plot.export(str(tmp_path / "m.svg"))
    assert "scores" in (tmp_path / "m.svg").read_text()
    with pytest.raises(ExportError):
        plot.export(str(tmp_path / "nope" / "m.png"))
    assert not (tmp_path / "nope").exists()


def test_empty_plot_refuses_export(qtbot, tmp_path):
    p = MatrixPlot("x")
    qtbot.addWidget(p)
    with pytest.raises(ExportError, match="nothing"):
        p.export(str(tmp_path / "a.png"))


def test_zooming_a_matrix_plot_remakes_no_rich_text(qtbot, plot):
    """pyqtgraph re-sets each axis label's HTML on every range change when the axis may take an
    SI prefix: 4 axes per plot, ten plots per page, ~700 text-document events in one soak stall.
    Token axes take no prefix, so a zoom must not touch any text document."""
    from app_helpers import EventCounter
    from PySide6.QtCore import QEvent
    from PySide6.QtGui import QTextDocument
    from PySide6.QtWidgets import QApplication

    plot.set_matrix(np.random.default_rng(0).random((30, 40)), row_labels=[f"q{i}" for i in range(30)])
    qtbot.wait(50)

    counter = EventCounter(QEvent.Type.ChildAdded, QTextDocument)
    QApplication.instance().installEventFilter(counter)
    try:
        for i in range(1, 11):
            plot.plot.vb.setRange(xRange=(0, 40 - i), yRange=(0, 30 - i), padding=0)
            QApplication.processEvents()
    finally:
        QApplication.instance().removeEventFilter(counter)
    assert counter.count == 0


def _cpu_of(fn) -> float:
    start = time.thread_time()
    fn()
    return time.thread_time() - start


@pytest.mark.perf
def test_a_teaching_matrix_exports_in_the_background(qtbot, tmp_path, monkeypatch):
    """Soak: a teaching view's ⤓ (Positions' similarity, a step-through stage) wrote its figure on
    the GUI thread: 1 s for 1,691 tokens."""
    plot = MatrixPlot("similarity: cosine")
    qtbot.addWidget(plot)
    matrix = np.random.default_rng(3).standard_normal((600, 600))
    labels = [f"p{i}" for i in range(600)]
    plot.set_matrix(matrix, row_labels=labels, col_labels=labels, colormap="CET-D1")
    plot.show()
    target = tmp_path / "similarity.png"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", staticmethod(lambda *a, **k: (str(target), "")))
    cpu = _cpu_of(lambda: QTest.mouseClick(plot.exportButton, Qt.MouseButton.LeftButton))
    assert not plot.exportButton.isEnabled()
    qtbot.waitUntil(lambda: plot.exportButton.isEnabled(), timeout=60_000)
    assert cpu < 0.1, f"the click held the GUI thread {cpu * 1e3:.0f} ms"
    assert QImage(str(target)).width() > 0 and not plot.message.isVisible()
    # a failure is said under the plot, as before
    monkeypatch.setattr(
        QFileDialog, "getSaveFileName", staticmethod(lambda *a, **k: (str(tmp_path / "nope" / "m.png"), ""))
    )
    QTest.mouseClick(plot.exportButton, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: plot.message.isVisible(), timeout=60_000)
    assert plot.message.text().startswith("export failed:") and plot.exportButton.isEnabled()
