"""A byte-level BPE model's tokens read as text in the window: the token table (raw token in the
tooltip), the heatmaps' axes and read-out, and Generate's status line."""

from __future__ import annotations

import pytest
from app_helpers import dispose, fresh_settings, shown_window  # noqa: F401  (fresh_settings: autouse fixture)
from pretrained_models import build_byte_level
from PySide6.QtCore import Qt

from attndesk.app.tabs.generate.presenter import GENERATE_TAB, GenerationTab
from tests.conftest import TIMEOUT_MS

TEXT = "When Mary went.\nJohn"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return build_byte_level("gpt2", tmp_path_factory.mktemp("bpe") / "gpt2")


@pytest.fixture
def window(qtbot, folder):
    w = shown_window(qtbot, (1400, 900), TIMEOUT_MS)
    with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS, check_params_cb=lambda s: s.layers is not None):
        w.state.text = TEXT
        assert w.pretrained.open_folder(folder)
    qtbot.waitUntil(lambda: not w.heatmapPanel.is_building(), timeout=TIMEOUT_MS)
    yield w
    dispose(w)


def test_the_token_table_and_axes_read_as_text(qtbot, window):
    table = window.tokensPanel.tokenTable.model()
    column = [table.index(row, 1) for row in range(table.rowCount())]
    shown = [table.data(i) for i in column]
    assert shown == ["When", "␣Mary", "␣went", ".", "⏎", "Jo", "hn"]
    assert table.data(column[1], Qt.ItemDataRole.ToolTipRole) == "the tokenizer's token: ĠMary"
    cell = window.heatmapPanel.canvas.active()[0]
    ticks = [i + 0.5 for i in range(len(shown))]
    assert cell.left.tickStrings(ticks, 1, 1) == shown
    assert 'query "␣Mary" (1)' in window.heatmapPanel.hover_cell(1, 0)


def test_generate_names_the_generated_token_as_read(qtbot, window):
    window.state.view.tab = GENERATE_TAB
    tab = window.tab_widget(GENERATE_TAB).findChild(GenerationTab)
    tab.view.countSpin.setValue(3)
    qtbot.mouseClick(tab.view.runButton, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not tab.is_running(), timeout=TIMEOUT_MS)
    tokens = [step.token for step in tab.view.steps()]
    assert len(tokens) == 3 and not [t for t in tokens if "Ġ" in t or "Ċ" in t]
