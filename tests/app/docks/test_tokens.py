"""The tokens panel: what it shows of the input text."""

from __future__ import annotations

import time

import numpy as np
import pytest
from app_helpers import dispose, fresh_settings, shown_window  # noqa: F401  (fresh_settings: autouse fixture)
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from attndesk.app.docks.tokens import PREVIEW_CHARS, TokensPanel
from attndesk.models import run_pretrained
from attndesk.session.state import PACKAGED, TOY, AppState
from tests.conftest import TIMEOUT_MS


def _cpu_of(fn) -> float:
    start = time.thread_time()
    fn()
    return time.thread_time() - start


@pytest.mark.perf
def test_a_text_without_spaces_or_a_huge_one_is_shown_as_a_preview(qtbot):
    """Soak (seed 303, action 492): File > Open text of a 200 kB file without a space (a deeply
    nested JSON) held the GUI thread 8.7 s while Qt broke its one line for the text box; 1 MiB of
    words took 0.6 s. Such texts run whole, and the box shows a read-only preview."""
    state = AppState()
    panel = TokensPanel(state)
    qtbot.addWidget(panel)
    panel.resize(340, 600)
    panel.show()
    qtbot.waitExposed(panel)
    box, note = panel.tokenInput, panel.tokenPreviewNote
    deep = '{"text": ' + "[" * 100_000 + "]" * 100_000 + "}"
    cpu = _cpu_of(lambda: (setattr(state, "text", deep), qtbot.wait(10)))
    assert cpu < 0.3, f"showing the text took {cpu * 1e3:.0f} ms of GUI-thread CPU"
    assert state.text == deep  # the whole text is what runs
    assert box.isReadOnly() and note.isVisible() and "200,010 characters" in note.label.text()
    shown = box.toPlainText()
    assert shown.replace("\n", "") == deep[:PREVIEW_CHARS] and max(map(len, shown.split())) <= 1000
    QTest.keyClick(box, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
    QTest.keyClick(box, Qt.Key.Key_Delete)  # a preview cannot be edited into the text
    assert state.text == deep
    # Clear empties the text; the box is editable again and typing writes the state
    QTest.mouseClick(note.clearButton, Qt.MouseButton.LeftButton)
    assert state.text == "" and not box.isReadOnly() and not note.isVisible()
    QTest.keyClicks(box, "the cat")
    assert state.text == "the cat"
    # an ordinary long text stays editable in the box
    ordinary = "the cat sat on the mat. " * 3000
    state.text = ordinary
    assert box.toPlainText() == ordinary and not box.isReadOnly() and not note.isVisible()
    # the key text box: a preview only shows its note while cross-attention is on
    state.key_text = deep
    assert panel.keyInput.isReadOnly() and not panel.keyPreviewNote.isVisible()
    state.cross = True
    assert panel.keyPreviewNote.isVisible()


def test_the_same_tokens_again_leave_the_table_as_it_is(qtbot):
    from attndesk.app.docks.tokens import TokenTableModel

    model = TokenTableModel()
    resets = []
    model.modelReset.connect(lambda: resets.append(1))
    model.set_tokens(["the", "cat", "[PAD]"], [5, 1, 0], [False, True, False])
    model.set_tokens(("the", "cat", "[PAD]"), np.array([5, 1, 0]), [False, True, False])  # another seed's run
    assert len(resets) == 1 and model.rowCount() == 3 and model.kind(1) == "unk"
    model.set_tokens(["the", "dog"], [5, 9], [False, False])
    assert len(resets) == 2 and model.rowCount() == 2 and model.kind(1) == "word"


def test_trained_weights_grey_the_texts_and_keep_them(qtbot):
    """Trained weights run on their task's probe input: the boxes are greyed and a line says so;
    the user's text stays, and acts again with Weights: Random or in another mode."""
    state = AppState()
    state.text = "my own sentence"
    panel = TokensPanel(state)
    qtbot.addWidget(panel)
    assert panel.tokenInput.isEnabled() and panel.probeNote.isHidden()
    state.set_config(weights_from="induction")
    assert not panel.tokenInput.isEnabled() and not panel.crossCheck.isEnabled()
    assert not panel.probeNote.isHidden() and "probe input" in panel.probeNote.text()
    assert panel.tokenInput.toPlainText() == "my own sentence" == state.text
    state.mode = PACKAGED  # a real model reads the text whatever the toy's weights
    assert panel.tokenInput.isEnabled() and panel.probeNote.isHidden()
    state.mode = TOY
    assert not panel.tokenInput.isEnabled()
    state.set_config(weights_from="random")
    assert panel.tokenInput.isEnabled() and panel.crossCheck.isEnabled() and panel.probeNote.isHidden()


def _column(model, col: int) -> list:
    return [model.data(model.index(r, col)) for r in range(model.rowCount())]


def test_an_images_tokens_say_what_each_is_in_place_of_an_id(qtbot, vision, image):
    """An image's tokens have no vocabulary ids: the table names the special tokens' roles and each
    patch's row and column on the grid, never the placeholder id -1; a text model's ids come back."""
    w = shown_window(qtbot, timeout_ms=TIMEOUT_MS)
    try:
        _model, _eager, folder = vision("deit")
        with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS):
            assert w.pretrained.open_folder(folder)
        run, table = w.displayed_result().layers, w.tokensPanel.queryModel
        rows, cols = run.grid
        assert table.headerData(2, Qt.Orientation.Horizontal) == "what" and table.rowCount() == 2 + rows * cols
        labels = _column(table, 2)
        assert labels[:2] == ["class token", "distillation token"] and "-1" not in map(str, labels)
        for k in range(rows * cols):  # patch k of the grid, row by row
            assert labels[2 + k] == f"row {k // cols}, col {k % cols}"
            assert _column(table, 1)[2 + k] == f"({k // cols},{k % cols})"
        widest = max(w.tokensPanel.tokenTable.fontMetrics().horizontalAdvance(t) for t in labels)
        assert w.tokensPanel.tokenTable.horizontalHeader().sectionSize(2) > widest  # never cut
        assert not any(table.kind(r) != "word" for r in range(table.rowCount()))  # no padding, no [UNK]
        assert w.tokensPanel.legend.isHidden()  # nor their colours' legend

        with qtbot.waitSignal(w.resultDisplayed, timeout=TIMEOUT_MS):
            w.state.mode = PACKAGED
        text = w.displayed_result().layers
        assert table.headerData(2, Qt.Orientation.Horizontal) == "id" and not w.tokensPanel.legend.isHidden()
        assert _column(table, 2)[0] == int(text.token_ids[0])
    finally:
        dispose(w)

    registers = run_pretrained(vision("dinov2_with_registers")[0], image)
    count = registers.specials - 1
    assert count > 0 and registers.token_labels()[: registers.specials] == ["class token"] + [
        f"register {i}" for i in range(count)
    ]
