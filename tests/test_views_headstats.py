"""The head-statistics table and scatter show head_statistics, sort, select a head and export CSV."""

from __future__ import annotations

import csv

import numpy as np
import pytest
from PySide6.QtCore import Qt

from attndesk.app.views.headstats import COLUMNS, HeadStatsView
from attndesk.core import AttentionConfig, run_attention
from attndesk.core.statistics import head_statistics
from attndesk.render import ExportError


@pytest.fixture
def view(qtbot):
    v = HeadStatsView()
    qtbot.addWidget(v)
    v.resize(900, 400)
    v.show()
    return v


def column(name: str) -> int:
    return [c[0] for c in COLUMNS].index(name)


def hand_made() -> np.ndarray:
    uniform = np.full((4, 4), 0.25)
    previous = np.zeros((4, 4))
    previous[0, 0] = 1
    previous[np.arange(1, 4), np.arange(3)] = 1
    return np.stack([uniform, np.eye(4), previous])


def test_table_shows_the_statistics(view):
    result = run_attention(AttentionConfig(num_heads=4, embed_dim=16), "the cat sat on the mat")
    view.set_result(result)
    stats = head_statistics(result.weights, special=result.keys)
    assert view.table.rowCount() == 4
    assert view.stats() == stats
    for row in range(4):
        head = int(view.table.item(row, column("head")).text())
        for name in ("entropy", "max_weight", "mean_distance", "self_share"):
            item = view.table.item(row, column(name))
            assert item.data(Qt.ItemDataRole.UserRole) == getattr(stats[head], name)
            assert item.text() == f"{getattr(stats[head], name):.3f}"
    assert view.table.isColumnHidden(column("layer"))


def test_sort_and_select_emits_the_right_head(view, qtbot):
    view.set_weights(hand_made())
    view.table.sortItems(column("entropy"), Qt.SortOrder.DescendingOrder)
    assert view.table.item(0, column("head")).text() == "0"  # uniform has the highest entropy
    view.table.sortItems(column("previous_share"), Qt.SortOrder.DescendingOrder)
    assert view.table.item(0, column("head")).text() == "2"
    with qtbot.waitSignal(view.headSelected) as blocker:
        view.table.selectRow(0)
    assert blocker.args == [2]
    with qtbot.waitSignal(view.layerHeadSelected) as blocker:
        view.select_head(1)
    assert blocker.args == [-1, 1]


def test_scatter_is_entropy_vs_distance(view):
    view.set_weights(hand_made())
    points = view.scatter_points()
    np.testing.assert_allclose(points, [[1.25, np.log(4)], [0.0, 0.0], [0.75, 0.0]], atol=1e-12)


def test_layers_and_csv_export(view, tmp_path):
    w = np.stack([hand_made(), hand_made()[::-1]])  # [2 layers, 3 heads, 4, 4]
    view.set_weights(w)
    assert view.table.rowCount() == 6 and not view.table.isColumnHidden(column("layer"))
    with pytest.raises(ExportError, match="missing"):
        view.export_csv(str(tmp_path / "missing" / "x.csv"))
    assert not (tmp_path / "missing").exists()
    path = tmp_path / "stats.csv"
    view.export_csv(str(path))
    rows = list(csv.DictReader(path.open()))
    assert len(rows) == 6
    assert rows[0]["layer"] == "0" and rows[3]["layer"] == "1"
    assert float(rows[1]["self_share"]) == 1.0  # layer 0 head 1 = identity
    assert float(rows[3]["self_share"]) == pytest.approx(0.25)  # layer 1 head 0 = previous-token
    assert float(rows[0]["entropy"]) == pytest.approx(np.log(4))


def test_rows_start_in_layer_head_order(view):
    w = np.stack([hand_made(), hand_made()[::-1]])
    view.set_weights(w)
    order = [(view.table.item(r, 0).text(), view.table.item(r, 1).text()) for r in range(6)]
    assert order == [(str(layer), str(head)) for layer in range(2) for head in range(3)]
    view.set_weights(hand_made())
    assert [view.table.item(r, 1).text() for r in range(3)] == ["0", "1", "2"]


def test_statistics_computed_elsewhere(view):
    from attndesk.core.statistics import layer_statistics

    stats = layer_statistics(np.stack([hand_made(), hand_made()]))
    view.set_statistics(stats, (4, 4))
    assert view.stats() == stats and view.table.rowCount() == 6
    assert "2 layers × 3 heads" in view.infoLabel.text()
